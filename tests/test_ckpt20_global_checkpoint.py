"""tw.train.Checkpoint / CheckpointManager of global variables: each rank writes its own
pieces (nothing gathered), restore reshards onto the variables' current layout bit for bit
(optimizer slots with their variables), async saves write the snapshot of save time, mixed
local/global checkpoints, and a failure at any step of a save never lists a partial one."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import keras
from tensorweave.distribute.layout import split_to_pieces
from tensorweave.saving import sharded
from tensorweave.train import Checkpoint, CheckpointManager, latest_checkpoint

ONE, TWO, THREE, FOUR = (tw.placement("cpu", ranks=list(range(n))) for n in (1, 2, 3, 4))
MESH = tw.placement("cpu", ranks=[[0, 1], [2, 3]])
S0, S1, B = tw.sbp.split(0), tw.sbp.split(1), tw.sbp.broadcast
TARGETS = [(TWO, (S0,)), (THREE, (S0,)), (THREE, (S1,)), (MESH, (S0, S1)), (FOUR, (B,)), (ONE, (B,)), (None, None)]
RNG = np.random.default_rng(0)
W = RNG.standard_normal((5, 3)).astype(np.float32)      # 5 rows: uneven on 2, 3 and 4 ranks
G = RNG.standard_normal((5, 3)).astype(np.float32)


def _var(value, placement, sbp):
    if placement is None:
        return tw.Variable(value)
    return tw.Variable(value, placement=placement, sbp=sbp)


def _trained(placement, sbp):
    """A global weight after one Adam step (so its slots exist), a local bias, a step counter."""
    w = _var(W, placement, sbp)
    opt = keras.optimizers.Adam(0.1)
    grad = tw.constant(G)
    if placement is not None:
        grad = grad.to_global(placement=placement, sbp=sbp)
    opt.apply_gradients([(grad, w)])
    return w, opt, tw.Variable(np.arange(3.0, dtype=np.float32)), tw.Variable(7, dtype=tw.int64)


def _pieces_of(var):
    return [t.numpy() for t in var.to_local()] if getattr(var, "is_global", False) else [var.numpy()]


def _assert_layout(var, want, placement, sbp):
    got = _pieces_of(var)
    expected = [want] if placement is None else split_to_pieces(want, placement, sbp)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_array_equal(g, e)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    w, opt, bias, step = _trained(FOUR, (S0,))
    prefix = Checkpoint(w=w, opt=opt, bias=bias, step=step).save(str(tmp_path_factory.mktemp("g") / "ckpt"))
    slots = {name: opt._slots[(id(w), name)].numpy() for name in ("momentum", "velocity")}
    return prefix, w.numpy(), slots, int(opt.iterations.numpy())


def test_the_save_is_sharded_per_rank_without_a_gather(saved, monkeypatch):
    prefix, _, _, _ = saved
    directory = prefix + ".sharded"
    assert sorted(os.listdir(directory)) == ["commit_success", "index.json"] + [
        f"shards-rank{r}.safetensors" for r in range(4)]
    index = sharded.read_index(directory)
    shards = index["variables"]["w"]["shards"]
    assert sorted((s["file"], s["start"][0], s["stop"][0]) for s in shards) == [
        ("shards-rank0.safetensors", 0, 2), ("shards-rank1.safetensors", 2, 3), ("shards-rank2.safetensors", 3, 4),
        ("shards-rank3.safetensors", 4, 5)]
    assert index["variables"]["w"]["sbp"] == ["S(0)"]
    # nothing gathers a global variable's value while saving
    w, opt, bias, step = _trained(FOUR, (S0,))
    from tensorweave.distribute.global_tensor import GlobalTensor

    def no_gather(self):
        raise AssertionError("gathered")
    monkeypatch.setattr(GlobalTensor, "numpy", no_gather)
    Checkpoint(w=w, opt=opt).write(os.path.join(os.path.dirname(prefix), "nogather"))


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: "local" if t[0] is None else f"{t[0].mesh.tolist()}-{t[1]}")
def test_restore_reshards_variables_and_slots_bit_for_bit(saved, target):
    prefix, w_saved, slots, iterations = saved
    placement, sbp = target
    w = _var(np.zeros((5, 3), np.float32), placement, sbp)
    opt, bias, step = keras.optimizers.Adam(0.1), tw.Variable(np.zeros(3, np.float32)), tw.Variable(0, dtype=tw.int64)
    status = Checkpoint(w=w, opt=opt, bias=bias, step=step).restore(prefix)
    assert sorted(status.deferred) == ["w/.OPTIMIZER_SLOT/opt/momentum", "w/.OPTIMIZER_SLOT/opt/velocity"]
    _assert_layout(w, w_saved, placement, sbp)
    opt.build([w])                                       # the slots are made with w's layout, then restored
    status.assert_consumed()
    for name, want in slots.items():
        _assert_layout(opt._slots[(id(w), name)], want, placement, sbp)
    assert int(opt.iterations.numpy()) == iterations and int(step.numpy()) == 7
    np.testing.assert_array_equal(bias.numpy(), np.arange(3.0, dtype=np.float32))


SOURCES = [(TWO, (S1,)), (THREE, (S0,)), (MESH, (S0, S1)), (MESH, (B, S0)), (FOUR, (B,)), (ONE, (B,))]


@pytest.mark.parametrize("src", SOURCES, ids=lambda t: f"{t[0].mesh.tolist()}-{t[1]}")
def test_every_saved_layout_restores_into_every_layout(tmp_path, src):
    ids = RNG.integers(0, 9, size=(2, 7)).astype(np.int64)       # fewer rows than ranks: empty shards
    prefix = Checkpoint(w=_var(W, *src), ids=_var(ids, *src)).write(str(tmp_path / "c"))
    for placement, sbp in TARGETS:
        w, i = _var(np.zeros_like(W), placement, sbp), _var(np.zeros_like(ids), placement, sbp)
        Checkpoint(w=w, ids=i).read(prefix).assert_consumed()
        _assert_layout(w, W, placement, sbp)
        _assert_layout(i, ids, placement, sbp)


def test_a_single_file_checkpoint_loads_into_global_variables(tmp_path):
    w, opt, bias, step = _trained(None, None)
    prefix = Checkpoint(w=w, opt=opt).write(str(tmp_path / "local"))
    assert os.path.isfile(prefix + ".safetensors")
    g = _var(np.zeros((5, 3), np.float32), MESH, (S0, S1))
    opt2 = keras.optimizers.Adam(0.1)
    opt2.build([g])
    Checkpoint(w=g, opt=opt2).read(prefix).assert_consumed()
    _assert_layout(g, w.numpy(), MESH, (S0, S1))
    _assert_layout(opt2._slots[(id(g), "velocity")], opt._slots[(id(w), "velocity")].numpy(), MESH, (S0, S1))


def test_partial_variables_are_saved_reduced(tmp_path):
    v = tw.Variable(W, placement=TWO, sbp=tw.sbp.partial_sum)
    prefix = Checkpoint(v=v).write(str(tmp_path / "p"))
    assert sharded.read_index(prefix + ".sharded")["variables"]["v"]["sbp"] == ["B"]
    back = _var(np.zeros((5, 3), np.float32), THREE, (S1,))
    Checkpoint(v=back).read(prefix).assert_consumed()
    _assert_layout(back, W, THREE, (S1,))


def test_list_and_load_variable_read_sharded_checkpoints(saved):
    prefix, w_saved, _, _ = saved
    names = dict(tw.train.list_variables(prefix))
    assert names["w"] == [5, 3] and names["step"] == []
    np.testing.assert_array_equal(tw.train.load_variable(prefix, "w"), w_saved)
    np.testing.assert_array_equal(tw.train.load_variable(prefix, "bias"), np.arange(3.0, dtype=np.float32))
    assert int(tw.train.load_variable(prefix, "step")) == 7
    reader = tw.train.load_checkpoint(prefix)
    assert reader.get_variable_to_shape_map()["w"] == [5, 3]
    np.testing.assert_array_equal(reader.get_tensor("w"), w_saved)


def test_write_replaces_a_checkpoint_of_the_other_format(tmp_path):
    prefix = str(tmp_path / "c")
    local = tw.Variable(np.ones(3, np.float32))
    Checkpoint(v=local).write(prefix)
    glob = _var(np.full(3, 2.0, np.float32), TWO, (S0,))
    Checkpoint(v=glob).write(prefix)
    assert sorted(os.listdir(tmp_path)) == ["c.sharded"]
    Checkpoint(v=glob).write(prefix)                     # overwriting a sharded one: swapped atomically
    Checkpoint(v=local).read(prefix)
    np.testing.assert_array_equal(local.numpy(), np.full(3, 2.0, np.float32))
    Checkpoint(v=local).write(prefix)
    assert sorted(os.listdir(tmp_path)) == ["c.safetensors"]


# ---- CheckpointManager, async ----------------------------------------------------------------------------
def test_async_save_writes_the_values_of_save_time(tmp_path):
    w, opt, bias, step = _trained(FOUR, (S0,))
    manager = CheckpointManager(Checkpoint(w=w, opt=opt, bias=bias, step=step), str(tmp_path), max_to_keep=2,
                                async_save=True)
    want = {"w": w.numpy(), "m": opt._slots[(id(w), "momentum")].numpy(), "bias": bias.numpy()}
    path = manager.save()
    # training goes on at once: in-place optimizer updates, assignments
    grad = tw.constant(G).to_global(placement=FOUR, sbp=(S0,))
    for _ in range(2):
        opt.apply_gradients([(grad, w)])
    bias.assign_add(np.ones(3, np.float32))
    step.assign(99)
    manager.wait_until_finished()
    assert manager.latest_checkpoint == path == latest_checkpoint(str(tmp_path))
    w2 = _var(np.zeros((5, 3), np.float32), TWO, (S1,))
    opt2, bias2, step2 = keras.optimizers.Adam(0.1), tw.Variable(np.zeros(3, np.float32)), tw.Variable(0, dtype=tw.int64)
    opt2.build([w2])
    Checkpoint(w=w2, opt=opt2, bias=bias2, step=step2).restore(path).assert_consumed()
    np.testing.assert_array_equal(w2.numpy(), want["w"])
    np.testing.assert_array_equal(opt2._slots[(id(w2), "momentum")].numpy(), want["m"])
    np.testing.assert_array_equal(bias2.numpy(), want["bias"])
    assert int(step2.numpy()) == 7


def test_async_saves_queue_and_max_to_keep_deletes_committed_ones(tmp_path):
    w = _var(W, THREE, (S0,))
    step = tw.Variable(0, dtype=tw.int64)
    manager = CheckpointManager(Checkpoint(w=w, step=step), str(tmp_path), max_to_keep=2, async_save=True)
    for i in range(4):
        step.assign(i)
        w.assign(np.full((5, 3), float(i), np.float32))
        manager.save()                                   # waits for the previous save first
    manager.wait_until_finished()
    assert [os.path.basename(p) for p in manager.checkpoints] == ["ckpt-3", "ckpt-4"]
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "ckpt-3.sharded", "ckpt-4.sharded"]
    resumed = tw.Variable(np.zeros((5, 3), np.float32))
    r_step = tw.Variable(0, dtype=tw.int64)
    again = CheckpointManager(Checkpoint(w=resumed, step=r_step), str(tmp_path), max_to_keep=2)
    assert os.path.basename(again.restore_or_initialize()) == "ckpt-4"
    np.testing.assert_array_equal(resumed.numpy(), np.full((5, 3), 3.0, np.float32))


def test_a_rank_failing_during_a_save_leaves_the_previous_checkpoint_current(tmp_path, monkeypatch):
    w = _var(W, FOUR, (S0,))
    step = tw.Variable(1, dtype=tw.int64)
    for async_save in (False, True):
        directory = tmp_path / str(async_save)
        manager = CheckpointManager(Checkpoint(w=w, step=step), str(directory), async_save=async_save)
        first = manager.save()
        manager.wait_until_finished()
        real = sharded.write_rank

        def failing(staging, rank, values):
            if rank == 2:
                raise OSError("disk full on rank 2")
            return real(staging, rank, values)
        monkeypatch.setattr(sharded, "write_rank", failing)
        with pytest.raises(OSError, match="disk full on rank 2"):
            manager.save()
            manager.wait_until_finished()
        monkeypatch.setattr(sharded, "write_rank", real)
        assert manager.latest_checkpoint == first == latest_checkpoint(str(directory))
        assert sorted(os.listdir(directory)) == ["checkpoint", "ckpt-1.sharded"]


_WRITER = r"""
import sys
import numpy as np
import tensorweave as tw
from tensorweave.train import Checkpoint, CheckpointManager


def run(directory, stop, async_save=False):
    three = tw.placement("cpu", ranks=[0, 1, 2])
    w = tw.Variable(np.zeros((7, 4), np.float32), placement=three, sbp=tw.sbp.split(0))
    step = tw.Variable(0, dtype=tw.int64)
    manager = CheckpointManager(Checkpoint(w=w, step=step), directory, max_to_keep=2, async_save=async_save)
    manager.restore_or_initialize()
    while int(step.numpy()) < stop:
        step.assign_add(1)
        w.assign(np.full((7, 4), float(step.numpy()), np.float32))
        manager.save()
    manager.wait_until_finished()


if __name__ == "__main__":
    run(sys.argv[1], int(sys.argv[2]), sys.argv[3] == "async")
"""

# Each boundary of the API-level save (the sharded stages alone are killed one by one in
# test_sharded_checkpoint.py, the state-file stages in test_checkpoint_crash.py).
STAGES = ["before_write", "sharded_rank_written:3", "sharded_marker_written", "sharded_renamed", "index_written",
          "during_delete"]


def _restored_step(prefix):
    w = tw.Variable(np.ones((7, 4), np.float32), placement=TWO, sbp=tw.sbp.split(1))
    step = tw.Variable(-1, dtype=tw.int64)
    Checkpoint(w=w, step=step).restore(prefix).assert_consumed()
    s = int(step.numpy())
    assert np.all(w.numpy() == s), f"{prefix}: torn checkpoint"
    return s


@pytest.mark.parametrize("stage,mode", [(s, "sync") for s in STAGES] + [
    (s, "async") for s in ("sharded_rank_written:2", "index_renamed")])
def test_a_kill_at_any_stage_never_lists_a_partial_checkpoint(tmp_path, stage, mode):
    script = tmp_path / "writer.py"
    script.write_text(_WRITER)
    namespace = {}
    exec(compile(_WRITER, str(script), "exec"), namespace)
    directory = tmp_path / "run"
    namespace["run"](str(directory), 3)
    env = {k: v for k, v in os.environ.items() if k != "TENSORWEAVE_CHECKPOINT_CRASH_AT"}
    out = subprocess.run([sys.executable, str(script), str(directory), "5", mode], timeout=300, capture_output=True,
                         text=True, env=dict(env, TENSORWEAVE_CHECKPOINT_CRASH_AT=stage))
    assert out.returncode == 86, out.stderr
    latest = latest_checkpoint(str(directory))
    assert _restored_step(latest) in (3, 4)
    state = tw.train.get_checkpoint_state(str(directory))
    for p in state.all_model_checkpoint_paths:
        if os.path.exists(p + ".sharded"):
            _restored_step(p)
    # the next run resumes from the latest complete checkpoint and leaves no debris
    namespace["run"](str(directory), 6)
    assert _restored_step(latest_checkpoint(str(directory))) == 6
    assert sorted(os.listdir(directory)) == ["checkpoint", "ckpt-5.sharded", "ckpt-6.sharded"]


def test_checkpoint_options_async_saves_in_the_background(tmp_path):
    w = _var(W, TWO, (S0,))
    ckpt = Checkpoint(w=w)
    options = tw.train.CheckpointOptions(experimental_enable_async_checkpoint=True)
    path = ckpt.save(str(tmp_path / "ckpt"), options=options)
    w.assign(np.zeros((5, 3), np.float32))
    ckpt.sync()
    assert latest_checkpoint(str(tmp_path)) == path
    ckpt.restore(path)
    np.testing.assert_array_equal(w.numpy(), W)


def test_corrupt_or_mismatched_sharded_checkpoints_are_refused(tmp_path):
    from tensorweave.saving.validation import LoadError
    w = _var(W, TWO, (S0,))
    prefix = Checkpoint(w=w).write(str(tmp_path / "c"))
    shard = os.path.join(prefix + ".sharded", "shards-rank1.safetensors")
    data = bytearray(open(shard, "rb").read())
    data[-1] ^= 0xFF                                      # one bit of rank 1's last value
    open(shard, "wb").write(bytes(data))
    back = _var(np.zeros_like(W), TWO, (S0,))
    with pytest.raises(LoadError, match="shards-rank1.safetensors fails its CRC-32 check"):
        Checkpoint(w=back).read(prefix)
    # a Saver's sharded directory is not a Checkpoint's
    import tensorweave.compat.v1 as tf1
    saver_dir = tf1.train.Saver([w]).save(None, str(tmp_path / "saver"))
    with pytest.raises(ValueError, match="not of a tw.train.Checkpoint"):
        Checkpoint(w=back).read(saver_dir)
    # an index whose shards do not match the object graph's checksums (files mixed from two saves)
    prefix = Checkpoint(w=w).write(str(tmp_path / "d"))
    index_path = os.path.join(prefix + ".sharded", "index.json")
    index = json.loads(open(index_path).read())
    index["variables"]["w"]["shards"][0]["crc32"] ^= 1
    open(index_path, "w").write(json.dumps(index))
    with pytest.raises(ValueError, match="do not match the object graph's checksum"):
        Checkpoint(w=back).read(prefix)
    # an index holding a variable the object graph does not name
    index["variables"]["w"]["shards"][0]["crc32"] ^= 1
    index["variables"]["stray"] = index["variables"]["w"]
    open(index_path, "w").write(json.dumps(index))
    with pytest.raises(ValueError, match=r"the index's variables do not match the object graph \(\['stray'\]\)"):
        Checkpoint(w=back).read(prefix)
    # an index whose dtype for a tensor is not the object graph's
    del index["variables"]["stray"]
    index["variables"]["w"]["dtype"] = "float64"
    open(index_path, "w").write(json.dumps(index))
    with pytest.raises(ValueError, match=r"tensor 'w' is float64\[5, 3\] in the index, the object graph says float32"):
        Checkpoint(w=back).read(prefix)
