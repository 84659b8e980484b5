"""Durable file writes for checkpoints, the ``checkpoint`` state file, and the crash hook.

Every file is written to a hidden temporary name in its directory, flushed and fsynced,
renamed over its final name (atomic on POSIX and Windows), and the directory is fsynced so
the rename itself survives a power cut. Readers therefore see the old file or the new one,
never a mix; a crash leaves at most a ``.tmp-*`` file, which no reader looks at.

The state file ``checkpoint`` (TensorFlow's name) is JSON::

    {"format": "tensorweave.checkpoint_state", "version": 1,
     "model_checkpoint_path": "ckpt-3",
     "all_model_checkpoint_paths": ["ckpt-2", "ckpt-3"],
     "all_model_checkpoint_timestamps": [1700000000.0, 1700000100.0],
     "last_preserved_timestamp": 1699990000.0}

Paths are relative to the directory when the checkpoints are inside it (the folder can then
be moved). It is written after the checkpoint file it points to, so it never names a
checkpoint that is not complete.

**Crash hook (tests only).** ``TENSORWEAVE_CHECKPOINT_CRASH_AT=<stage>[:<n>]`` makes the
process exit at once (``os._exit(86)``, no cleanup, like a kill) the ``n``-th time (default 1)
it reaches ``<stage>``; :data:`STAGES` lists them in the order a save reaches them.
"""
import json
import math
import os
import tempfile

STATE_FILE = "checkpoint"
STATE_FORMAT = "tensorweave.checkpoint_state"
CRASH_ENV = "TENSORWEAVE_CHECKPOINT_CRASH_AT"
CRASH_EXIT_CODE = 86
MAX_STATE_BYTES = 64 << 20

STAGES = (
    "before_write",      # nothing written yet
    "partial_write",     # half of the checkpoint's bytes are in the temporary file
    "written",           # the temporary file is complete and fsynced, not renamed
    "renamed",           # the checkpoint file is in place, the state file still names the previous one
    "index_partial_write",   # half of the new state file is in its temporary file
    "index_written",     # the new state file is complete under its temporary name
    "index_renamed",     # the state file names the new checkpoint; old ones not yet deleted
    "during_delete",     # (CheckpointManager) one old checkpoint deleted, others not yet
)

_crash_counts = {}


def crash_point(stage):
    """Exits the process here when the crash hook names this stage (see the module docstring)."""
    spec = os.environ.get(CRASH_ENV)
    if not spec:
        return
    name, _, nth = spec.partition(":")
    if name != stage:
        return
    _crash_counts[stage] = _crash_counts.get(stage, 0) + 1
    if _crash_counts[stage] == (int(nth) if nth else 1):
        os._exit(CRASH_EXIT_CODE)


from tensorweave.saving.tensor_file import fsync_dir  # noqa: E402 - one implementation, shared


def write_atomic(path, payload, stage_prefix=""):
    """Writes ``payload`` (bytes, or a list of bytes-like chunks) to ``path`` atomically and durably."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    chunks = [payload] if isinstance(payload, (bytes, bytearray, memoryview)) else list(payload)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-" + os.path.basename(path) + "-")
    try:
        with os.fdopen(fd, "wb") as f:
            if os.environ.get(CRASH_ENV, "").partition(":")[0] == stage_prefix + "partial_write":
                # The crash hook wants a torn write: half the bytes reach the disk, then the process dies.
                data = b"".join(bytes(memoryview(c).cast("B")) for c in chunks)
                f.write(data[:len(data) // 2])
                f.flush()
                os.fsync(f.fileno())
                crash_point(stage_prefix + "partial_write")
                f.seek(0)
                f.truncate()
            for c in chunks:
                f.write(c)
            f.flush()
            os.fsync(f.fileno())
        crash_point(stage_prefix + "written")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    fsync_dir(directory)
    crash_point(stage_prefix + "renamed")


# ---- the state file ----------------------------------------------------------------------------------
class CheckpointState:
    """The contents of a ``checkpoint`` state file (paths as written: relative or absolute)."""

    def __init__(self, model_checkpoint_path, all_model_checkpoint_paths, all_model_checkpoint_timestamps=None,
                 last_preserved_timestamp=0.0):
        self.model_checkpoint_path = model_checkpoint_path
        self.all_model_checkpoint_paths = list(all_model_checkpoint_paths)
        self.all_model_checkpoint_timestamps = list(all_model_checkpoint_timestamps or
                                                    [0.0] * len(self.all_model_checkpoint_paths))
        self.last_preserved_timestamp = float(last_preserved_timestamp)

    def __repr__(self):
        return (f"CheckpointState(model_checkpoint_path={self.model_checkpoint_path!r}, "
                f"all_model_checkpoint_paths={self.all_model_checkpoint_paths!r})")


def _rel(directory, path):
    path = os.fspath(path)
    if os.path.abspath(os.path.dirname(path) or ".") == os.path.abspath(directory):
        return os.path.basename(path)
    return path


def _resolve(directory, path):
    return path if os.path.isabs(path) else os.path.join(directory, path)


def write_state(directory, model_checkpoint_path, all_paths, timestamps, last_preserved_timestamp):
    """Writes the ``checkpoint`` state file of ``directory`` (stages ``index_*``)."""
    state = {"format": STATE_FORMAT, "version": 1,
             "model_checkpoint_path": _rel(directory, model_checkpoint_path),
             "all_model_checkpoint_paths": [_rel(directory, p) for p in all_paths],
             "all_model_checkpoint_timestamps": [float(t) for t in timestamps],
             "last_preserved_timestamp": float(last_preserved_timestamp)}
    write_atomic(os.path.join(directory, STATE_FILE), json.dumps(state, indent=1).encode(), stage_prefix="index_")


def read_state(directory):
    """The :class:`CheckpointState` of ``directory`` with paths resolved against it, or None when
    there is no state file. A malformed file raises ``ValueError``."""
    path = os.path.join(os.fspath(directory), STATE_FILE)
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_STATE_BYTES + 1)
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise ValueError(f"{path} is a directory, not a checkpoint state file") from None

    def bad(msg):
        return ValueError(f"{path}: invalid checkpoint state file: {msg}")
    if len(raw) > MAX_STATE_BYTES:
        raise bad("larger than 64 MiB")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise bad(f"not JSON ({e})") from None
    keys = {"format", "version", "model_checkpoint_path", "all_model_checkpoint_paths",
            "all_model_checkpoint_timestamps", "last_preserved_timestamp"}
    if not isinstance(data, dict) or set(data) != keys:
        raise bad(f"must be an object with exactly {sorted(keys)}")
    if data["format"] != STATE_FORMAT or data["version"] != 1 or isinstance(data["version"], bool):
        raise bad("unknown format or version")
    paths, stamps = data["all_model_checkpoint_paths"], data["all_model_checkpoint_timestamps"]
    latest = data["model_checkpoint_path"]
    if not isinstance(latest, str) or not latest or "\x00" in latest:
        raise bad("model_checkpoint_path must be a non-empty string")
    if not isinstance(paths, list) or not all(isinstance(p, str) and p and "\x00" not in p for p in paths):
        raise bad("all_model_checkpoint_paths must be a list of non-empty strings")

    def is_time(t):
        return isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t)
    if not isinstance(stamps, list) or len(stamps) != len(paths) or not all(is_time(t) for t in stamps):
        raise bad("all_model_checkpoint_timestamps must be one finite number per path")
    if not is_time(data["last_preserved_timestamp"]):
        raise bad("last_preserved_timestamp must be a finite number")
    directory = os.fspath(directory)
    return CheckpointState(_resolve(directory, latest), [_resolve(directory, p) for p in paths],
                           [float(t) for t in stamps], data["last_preserved_timestamp"])
