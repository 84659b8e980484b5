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
     "last_preserved_timestamp": 1699990000.0,
     "pending_deletions": ["ckpt-1"]}

``pending_deletions`` (optional) names the checkpoints a manager is about to delete: it
is written before they are deleted, so a manager started after a kill in between deletes
them (instead of leaving orphans beyond ``max_to_keep``).

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

STATE_FILE = "checkpoint"
STATE_FORMAT = "tensorweave.checkpoint_state"
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

from tensorweave.saving import tensor_file  # noqa: E402 - one atomic writer, shared
from tensorweave.saving.atomic import CRASH_ENV, CRASH_EXIT_CODE, crash_point  # noqa: E402,F401 - re-exported
from tensorweave.saving.validation import open_regular, parse_json  # noqa: E402


def write_atomic(path, payload, stage_prefix=""):
    """Writes ``payload`` (bytes, or a list of bytes-like chunks) to ``path`` atomically and durably,
    with the crash hook's stages (``<stage_prefix>partial_write``/``written``/``renamed``)."""
    tensor_file.write_bytes_atomic(path, payload, stage_prefix)


# ---- the state file ----------------------------------------------------------------------------------
class CheckpointState:
    """The contents of a ``checkpoint`` state file (paths as written: relative or absolute)."""

    def __init__(self, model_checkpoint_path, all_model_checkpoint_paths, all_model_checkpoint_timestamps=None,
                 last_preserved_timestamp=0.0, pending_deletions=()):
        self.pending_deletions = list(pending_deletions)
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


def write_state(directory, model_checkpoint_path, all_paths, timestamps, last_preserved_timestamp,
                pending_deletions=()):
    """Writes the ``checkpoint`` state file of ``directory`` (stages ``index_*``)."""
    state = {"format": STATE_FORMAT, "version": 1,
             "model_checkpoint_path": _rel(directory, model_checkpoint_path),
             "all_model_checkpoint_paths": [_rel(directory, p) for p in all_paths],
             "all_model_checkpoint_timestamps": [float(t) for t in timestamps],
             "last_preserved_timestamp": float(last_preserved_timestamp)}
    if pending_deletions:
        state["pending_deletions"] = [_rel(directory, p) for p in pending_deletions]
    write_atomic(os.path.join(directory, STATE_FILE), json.dumps(state, indent=1).encode(), stage_prefix="index_")


def read_state(directory):
    """The :class:`CheckpointState` of ``directory`` with paths resolved against it, or None when
    there is no state file. A malformed file raises ``ValueError``."""
    path = os.path.join(os.fspath(directory), STATE_FILE)

    def bad(msg):
        return ValueError(f"{path}: invalid checkpoint state file: {msg}")
    try:
        # A regular file only: a FIFO or device named "checkpoint" would block the read forever.
        with open_regular(path, path, ValueError) as f:
            raw = f.read(MAX_STATE_BYTES + 1)
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise ValueError(f"{path} is a directory, not a checkpoint state file") from None
    except OSError as e:
        raise bad(f"cannot be read ({e.strerror or e})") from None
    except ValueError as e:
        if os.path.isdir(path):
            raise ValueError(f"{path} is a directory, not a checkpoint state file") from None
        raise bad(str(e).partition(": ")[2]) from None
    if len(raw) > MAX_STATE_BYTES:
        raise bad("larger than 64 MiB")
    try:
        data = parse_json(raw, STATE_FILE, MAX_STATE_BYTES)    # strict, depth-bounded (no RecursionError)
    except ValueError as e:
        raise bad(f"not JSON ({str(e).partition(': ')[2]})") from None
    keys = {"format", "version", "model_checkpoint_path", "all_model_checkpoint_paths",
            "all_model_checkpoint_timestamps", "last_preserved_timestamp"}
    if not isinstance(data, dict) or set(data) - {"pending_deletions"} != keys:
        raise bad(f"must be an object with exactly {sorted(keys)} (and optionally pending_deletions)")
    pending = data.get("pending_deletions", [])
    if not isinstance(pending, list) or not all(isinstance(p, str) and p and "\x00" not in p for p in pending):
        raise bad("pending_deletions must be a list of non-empty strings")
    if data["format"] != STATE_FORMAT or data["version"] != 1 or isinstance(data["version"], bool):
        raise bad("unknown format or version")
    paths, stamps = data["all_model_checkpoint_paths"], data["all_model_checkpoint_timestamps"]
    latest = data["model_checkpoint_path"]
    if not isinstance(latest, str) or not latest or "\x00" in latest:
        raise bad("model_checkpoint_path must be a non-empty string")
    if not isinstance(paths, list) or not all(isinstance(p, str) and p and "\x00" not in p for p in paths):
        raise bad("all_model_checkpoint_paths must be a list of non-empty strings")

    def is_time(t):
        # (an integer such as 10**400 is finite but has no float: math.isfinite would raise)
        return isinstance(t, (int, float)) and not isinstance(t, bool) and abs(t) <= 1e300 and math.isfinite(t)
    if not isinstance(stamps, list) or len(stamps) != len(paths) or not all(is_time(t) for t in stamps):
        raise bad("all_model_checkpoint_timestamps must be one finite number per path")
    if not is_time(data["last_preserved_timestamp"]):
        raise bad("last_preserved_timestamp must be a finite number")
    directory = os.fspath(directory)
    return CheckpointState(_resolve(directory, latest), [_resolve(directory, p) for p in paths],
                           [float(t) for t in stamps], data["last_preserved_timestamp"],
                           [_resolve(directory, p) for p in pending])
