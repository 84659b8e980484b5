"""Saves killed at every step, and readers at every step of a save: a SavedModel path always
holds one whole export (the old or the new, never a mix, never nothing), and the next save
(or manager start) removes what killed saves left behind."""
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import tensorweave as tw
import tensorweave.saved_model as sm
from tensorweave.saving import atomic
from tensorweave.saving import saved_model as sm_impl
from tensorweave.train import Checkpoint, CheckpointManager

WRITER = r"""
import os, sys
import numpy as np
import tensorweave as tw
import tensorweave.saved_model as sm
from tensorweave import keras
from tensorweave.saving import atomic
from tensorweave.train import Checkpoint, CheckpointManager

kind, path, value = sys.argv[1], sys.argv[2], float(sys.argv[3])
if kind == "saved_model_fallback":
    atomic.exchange = lambda a, b: False      # as on a system without renameat2
if kind.startswith("saved_model"):
    w = tw.Variable(np.float32(value), name="w")
    @tw.function(input_signature=[tw.TensorSpec([None], tw.float32, name="x")])
    def f(x):
        return {"y": x * w + value}
    sm.save(f, path)
elif kind == "keras":
    model = keras.Sequential([keras.Input(shape=(2,)), keras.layers.Dense(1)])
    model.save(path)
else:   # manager: three saves, max_to_keep=1
    manager = CheckpointManager(Checkpoint(v=tw.Variable(value)), path, max_to_keep=1)
    for _ in range(3):
        manager.save()
"""


def _model(path, value):
    w = tw.Variable(np.float32(value), name="w")

    @tw.function(input_signature=[tw.TensorSpec([None], tw.float32, name="x")])
    def f(x):
        return {"y": x * w + value}
    sm.save(f, path)


def _version(path):
    """The value of the (whole, consistent) export at ``path``: y(x) = x * v + v for one v."""
    y = sm.load(path).signatures["serving_default"](x=np.array([0.0, 1.0], np.float32))["y"].numpy()
    v = float(y[0])
    assert y[1] == 2 * v, f"a mix of two exports: {y}"
    return v


def _leftovers(parent, name):
    return sorted(n for n in os.listdir(parent) if n.startswith((f".{name}.", f".tmp-{name}")))


def _spawn(tmp_path, kind, path, value, stage):
    script = tmp_path / "writer.py"
    if not script.exists():
        script.write_text(WRITER)
    env = dict(os.environ, **{atomic.CRASH_ENV: stage})
    return subprocess.Popen([sys.executable, str(script), kind, str(path), str(value)], env=env)


SAVED_MODEL_KILLS = [("saved_model", "saved_model_written"), ("saved_model", "saved_model_swapped"),
                     ("saved_model_fallback", "saved_model_written"),
                     ("saved_model_fallback", "saved_model_old_aside"),
                     ("saved_model_fallback", "saved_model_swapped")]


def test_kills_at_every_step_of_a_save(tmp_path):
    runs = []
    for i, (kind, stage) in enumerate(SAVED_MODEL_KILLS):
        parent = tmp_path / f"sm{i}"
        parent.mkdir()
        _model(str(parent / "m"), 1.0)
        runs.append((kind, stage, parent, _spawn(tmp_path, kind, parent / "m", 2.0, stage)))
    kparent = tmp_path / "k"
    kparent.mkdir()
    keras_run = _spawn(tmp_path, "keras", kparent / "m.keras", 0.0, "keras_written")
    mdir = tmp_path / "mgr"
    manager_run = _spawn(tmp_path, "manager", mdir, 1.0, "index_renamed:3")
    for kind, stage, parent, proc in runs:
        assert proc.wait(timeout=300) == atomic.CRASH_EXIT_CODE, f"{kind} did not reach {stage}"
        path = str(parent / "m")
        # The path holds a whole export at once: the old one, or (after the swap) the new one.
        expected = 2.0 if stage == "saved_model_swapped" else 1.0
        assert _version(path) == expected, (kind, stage)
        # The next save cleans up what the killed one left, and works.
        _model(path, 3.0)
        assert _version(path) == 3.0 and _leftovers(str(parent), "m") == [], (kind, stage)

    assert keras_run.wait(timeout=300) == atomic.CRASH_EXIT_CODE
    assert [n for n in os.listdir(kparent) if n.startswith(".tmp-m.keras-")], "the kill left no temporary"
    from tensorweave import keras
    keras.Sequential([keras.Input(shape=(2,)), keras.layers.Dense(1)]).save(str(kparent / "m.keras"))
    assert os.listdir(kparent) == ["m.keras"]

    assert manager_run.wait(timeout=300) == atomic.CRASH_EXIT_CODE
    files = sorted(n for n in os.listdir(mdir) if n.endswith(".safetensors"))
    assert files == ["ckpt-2.safetensors", "ckpt-3.safetensors"], files     # ckpt-2: about to be deleted
    manager = CheckpointManager(Checkpoint(v=tw.Variable(0.0)), str(mdir), max_to_keep=1)
    assert sorted(n for n in os.listdir(mdir) if n.endswith(".safetensors")) == ["ckpt-3.safetensors"]
    assert [os.path.basename(p) for p in manager.checkpoints] == ["ckpt-3"]


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "fallback"])
def test_a_reader_at_every_step_of_a_save(tmp_path, monkeypatch, exchange):
    """A reader that runs at each step of a save (the crash points) sees one whole export."""
    path = str(tmp_path / "m")
    _model(path, 1.0)
    if not exchange:
        monkeypatch.setattr(atomic, "exchange", lambda a, b: False)
    seen = {}

    def reader(stage):
        seen[stage] = _version(path)
    monkeypatch.setattr(atomic, "crash_point", reader)
    _model(path, 2.0)
    expected = {"saved_model_written": 1.0, "saved_model_swapped": 2.0}
    if not exchange:
        expected["saved_model_old_aside"] = 1.0       # the path is empty: readers use the copy aside
    assert seen == expected
    assert _leftovers(str(tmp_path), "m") == []


def test_a_load_that_spans_a_replacement_reads_again(tmp_path, monkeypatch):
    """A save replacing the export while a load reads it: the load notices and reads again,
    so it never returns the JSON of one export with the weights of the other."""
    from tensorweave.saving import tensor_file
    path = str(tmp_path / "m")
    _model(path, 1.0)
    real = tensor_file.read_tensors
    calls = []

    def read_tensors(p, names=None):
        calls.append(p)
        if len(calls) == 1:
            _model(path, 2.0)          # replaced after the JSON (version 1) was read
        return real(p, names)
    monkeypatch.setattr(tensor_file, "read_tensors", read_tensors)
    assert _version(path) == 2.0 and len(calls) == 2


def test_concurrent_reader_and_writer_threads(tmp_path):
    path = str(tmp_path / "m")
    _model(path, 0.0)
    done, errors, versions = threading.Event(), [], []

    def read():
        while not done.is_set():
            try:
                versions.append(_version(path))
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)
                return
    t = threading.Thread(target=read)
    t.start()
    try:
        for v in range(1, 5):
            _model(path, float(v))
    finally:
        done.set()
        t.join()
    assert errors == [] and versions and set(versions) <= {0.0, 1.0, 2.0, 3.0, 4.0}
    assert _leftovers(str(tmp_path), "m") == []


def test_leftovers_of_a_live_save_are_not_removed(tmp_path):
    """Temporaries are removed only when no writer holds them (the lock died with a killed one)."""
    live = tmp_path / ".m.tmp-live"
    live.mkdir()
    fd = atomic.lock_temporary(str(live))
    dead = tmp_path / ".m.tmp-dead"
    dead.mkdir()
    try:
        _model(str(tmp_path / "m"), 1.0)
        assert live.exists() and not dead.exists()
    finally:
        atomic.unlock(fd)
    _model(str(tmp_path / "m"), 2.0)
    assert not live.exists()


def test_manager_start_deletes_what_a_killed_save_was_deleting(tmp_path):
    """The state file lists the checkpoints a save is about to delete; a kill before they are
    gone leaves them there, and the next manager deletes them (only its own files)."""
    from tensorweave.train import _io
    manager = CheckpointManager(Checkpoint(v=tw.Variable(1.0)), str(tmp_path), max_to_keep=1)
    for _ in range(2):
        manager.save()
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "ckpt-2.safetensors"]
    (tmp_path / "ckpt-1.safetensors").write_bytes(b"orphan")       # as a kill before the deletion leaves it
    (tmp_path / "other-1.safetensors").write_bytes(b"not the manager's")
    _io.write_state(str(tmp_path), str(tmp_path / "ckpt-2"), [str(tmp_path / "ckpt-2")], [1.0], 0.0,
                    [str(tmp_path / "ckpt-1"), str(tmp_path / "other-1")])
    state = _io.read_state(str(tmp_path))
    assert [os.path.basename(p) for p in state.pending_deletions] == ["ckpt-1", "other-1"]
    CheckpointManager(Checkpoint(v=tw.Variable(0.0)), str(tmp_path), max_to_keep=1)
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "ckpt-2.safetensors", "other-1.safetensors"]
    manager.save()                    # lists only what it deleted itself (ckpt-2), which is gone
    assert [os.path.basename(p) for p in _io.read_state(str(tmp_path)).pending_deletions] == ["ckpt-2"]
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "ckpt-3.safetensors", "other-1.safetensors"]


class _Replacing:
    """A read of a plain directory that a save replaces (a new inode) while the read runs."""

    def __init__(self, tmp_path, replace_on, fail_on=()):
        self.path, self.calls = str(tmp_path / "m"), 0
        self.replace_on, self.fail_on = replace_on, fail_on
        os.mkdir(self.path)

    def __call__(self, directory):
        self.calls += 1
        if self.calls in self.replace_on:
            new = self.path + f".tmp-{self.calls}"
            os.mkdir(new)
            atomic.replace_dir(new, self.path)
        if self.calls in self.fail_on:
            raise ValueError(f"torn read {self.calls}")
        return self.calls


def test_read_consistently_reads_again_after_a_replacement(tmp_path):
    read = _Replacing(tmp_path, replace_on={1})
    assert sm_impl.read_consistently(read.path, read) == 2


def test_read_consistently_reads_again_after_a_failure_during_a_replacement(tmp_path):
    read = _Replacing(tmp_path, replace_on={1}, fail_on={1})
    assert sm_impl.read_consistently(read.path, read) == 2


def test_read_consistently_raises_a_failure_without_a_replacement_at_once(tmp_path):
    read = _Replacing(tmp_path, replace_on=(), fail_on={1})
    with pytest.raises(ValueError, match="torn read 1"):
        sm_impl.read_consistently(read.path, read)
    assert read.calls == 1


def test_read_consistently_gives_up_after_three_attempts(tmp_path):
    read = _Replacing(tmp_path, replace_on={1, 2, 3, 4})
    with pytest.raises(ValueError, match=r"replaced by other saves while it was being read \(3 times\)"):
        sm_impl.read_consistently(read.path, read)
    assert read.calls == 3
    (tmp_path / "f").mkdir()
    failing = _Replacing(tmp_path / "f", replace_on={1, 2, 3, 4}, fail_on={1, 2, 3, 4})
    with pytest.raises(ValueError, match="torn read 3"):       # the last failure is the one raised
        sm_impl.read_consistently(failing.path, failing)
    assert failing.calls == 3
