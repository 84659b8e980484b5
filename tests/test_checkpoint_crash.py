"""A writer killed at every stage of a save leaves the previous checkpoint loadable.

The writer is a subprocess; ``TENSORWEAVE_CHECKPOINT_CRASH_AT=<stage>`` makes it exit on the
spot (``os._exit``: no cleanup, no flush, as a kill) when the save reaches that stage
(``tensorweave.train._io.STAGES``). After each crash the test checks that
``latest_checkpoint`` names a complete checkpoint (older or newer, never torn), that every
checkpoint the state file lists loads, and that the next save by a new process works as if
nothing had happened (leftover temporary files neither confuse it nor stay).
"""
import os
import subprocess
import sys

import numpy as np

import tensorweave as tw
from tensorweave.train import Checkpoint, CheckpointManager, get_checkpoint_state, latest_checkpoint
from tensorweave.train import _io
from tensorweave.train.checkpoint import SUFFIX

N = 50_000      # floats per checkpoint: large enough that a torn write is a real partial file

WRITER = r"""
import os, sys
import numpy as np
import tensorweave as tw
from tensorweave.train import Checkpoint, CheckpointManager

mode, directory, stop = sys.argv[1], sys.argv[2], int(sys.argv[3])
v = tw.Variable(np.zeros(%d, np.float32))
step = tw.Variable(0, dtype=tw.int64)
ckpt = Checkpoint(v=v, step=step)
if mode == "manager":
    manager = CheckpointManager(ckpt, directory, max_to_keep=2)
    manager.restore_or_initialize()
    while int(step.numpy()) < stop:
        step.assign_add(1)
        v.assign(np.full(v.shape, float(step.numpy()), np.float32))
        manager.save()
else:   # "write": overwrite one fixed prefix
    step.assign(stop)
    v.assign(np.full(v.shape, float(stop), np.float32))
    ckpt.write(os.path.join(directory, "fixed"))
""" % N


def _start(tmp_path, mode, directory, stop, stage):
    script = tmp_path / "writer.py"
    if not script.exists():
        script.write_text(WRITER)
    env = dict(os.environ)
    env.pop(_io.CRASH_ENV, None)
    if stage:
        env[_io.CRASH_ENV] = stage
    return subprocess.Popen([sys.executable, str(script), mode, str(directory), str(stop)], env=env)


def _load(prefix):
    """(step, status) of a checkpoint, checking that it is complete and self-consistent."""
    v = tw.Variable(np.zeros(N, np.float32))
    step = tw.Variable(0, dtype=tw.int64)
    status = Checkpoint(v=v, step=step).restore(prefix)
    status.assert_consumed()
    s = int(step.numpy())
    assert np.all(v.numpy() == s), f"{prefix}: torn or mixed checkpoint"
    return s


def _manager_run(directory, stop):
    v = tw.Variable(np.zeros(N, np.float32))
    step = tw.Variable(0, dtype=tw.int64)
    manager = CheckpointManager(Checkpoint(v=v, step=step), str(directory), max_to_keep=2)
    manager.restore_or_initialize()
    while int(step.numpy()) < stop:
        step.assign_add(1)
        v.assign(np.full(N, float(step.numpy()), np.float32))
        manager.save()
    return manager


# The save of step 3 is the one killed; from "index_renamed" on, the state file already names it.
NEW_FROM = _io.STAGES.index("index_renamed")


def test_crash_at_every_stage_of_a_managed_save(tmp_path):
    procs = {}
    for stage in _io.STAGES:
        d = tmp_path / stage
        _manager_run(d, 2)                     # ckpt-1, ckpt-2, written normally
        procs[stage] = _start(tmp_path, "manager", d, 3, stage)
    for stage, proc in procs.items():
        assert proc.wait(timeout=120) == _io.CRASH_EXIT_CODE, f"the writer did not reach stage {stage}"
    for i, stage in enumerate(_io.STAGES):
        d = tmp_path / stage
        latest = latest_checkpoint(str(d))
        assert latest is not None
        assert _load(latest) == (3 if i >= NEW_FROM else 2), stage
        for prefix in get_checkpoint_state(str(d)).all_model_checkpoint_paths:
            _load(prefix)                      # everything listed is complete
        if i < NEW_FROM and stage != "before_write":
            assert any(n.startswith(".tmp-") for n in os.listdir(d)) or stage == "renamed"
        # A new process resumes and keeps saving; the leftovers change nothing.
        manager = _manager_run(d, 5)
        assert [os.path.basename(p) for p in manager.checkpoints] == ["ckpt-4", "ckpt-5"], stage
        assert _load(latest_checkpoint(str(d))) == 5
        assert not [n for n in os.listdir(d) if n.startswith(".tmp-")], stage
        on_disk = sorted(n for n in os.listdir(d) if n.endswith(SUFFIX))
        # at most a checkpoint the crash left unlisted (deleted by nobody: it was not managed yet)
        assert {"ckpt-4" + SUFFIX, "ckpt-5" + SUFFIX} <= set(on_disk) <= \
            {"ckpt-1" + SUFFIX, "ckpt-2" + SUFFIX, "ckpt-3" + SUFFIX, "ckpt-4" + SUFFIX, "ckpt-5" + SUFFIX}


def test_crash_while_overwriting_one_prefix(tmp_path):
    stages = ["before_write", "partial_write", "written", "renamed"]
    for stage in stages:
        (tmp_path / stage).mkdir()
    firsts = [_start(tmp_path, "write", tmp_path / stage, 1, None) for stage in stages]
    assert [p.wait(timeout=120) for p in firsts] == [0] * len(stages)
    crashed = [_start(tmp_path, "write", tmp_path / stage, 2, stage) for stage in stages]
    assert [p.wait(timeout=120) for p in crashed] == [_io.CRASH_EXIT_CODE] * len(stages)
    for stage in stages:
        # the old content until the rename, the new one after it: never a mix
        assert _load(str(tmp_path / stage / "fixed")) == (2 if stage == "renamed" else 1), stage


def test_crash_hook_is_inert_without_the_variable(tmp_path, monkeypatch):
    monkeypatch.delenv(_io.CRASH_ENV, raising=False)
    for stage in _io.STAGES:
        _io.crash_point(stage)           # returns: nothing asked for a crash
    monkeypatch.setenv(_io.CRASH_ENV, "written:3")
    _io.crash_point("written")           # only the third time would exit
    _io.crash_point("written")
    _io.crash_point("renamed")


def test_fsync_then_rename_then_directory_fsync(tmp_path, monkeypatch):
    """The data reaches the disk before the rename makes it visible, and the rename itself is
    made durable after: fsync(file) -> rename -> fsync(directory), for both atomic writers."""
    import stat
    from tensorweave.saving import tensor_file
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append("fsync-dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync-file")
        return real_fsync(fd)

    def replace(src, dst):
        events.append("rename")
        return real_replace(src, dst)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.delenv(_io.CRASH_ENV, raising=False)
    for write in (_io.write_atomic, tensor_file.write_bytes_atomic):
        events.clear()
        write(str(tmp_path / "f"), b"payload")
        assert events == ["fsync-file", "rename", "fsync-dir"], (write.__name__, events)
        assert (tmp_path / "f").read_bytes() == b"payload"
