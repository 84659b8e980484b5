"""Sharded checkpoints (saving/sharded.py): every layout restores into every other, bit for bit;
one writer per byte; a crash at any step leaves only complete checkpoints listed; async saves
snapshot; crafted indexes are refused."""
import json
import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from tensorweave.core.sbp import B, P, S
from tensorweave.distribute.layout import Placement, assemble, split_to_pieces
from tensorweave.saving import sharded
from tensorweave.saving.validation import LoadError

ONE, TWO, THREE, FOUR = (Placement("cpu", list(range(n))) for n in (1, 2, 3, 4))
MESH = Placement("cpu", [[0, 1], [2, 3]])
LAYOUTS = [(ONE, (B,)), (TWO, (S(0),)), (THREE, (S(1),)), (FOUR, (S(0),)), (FOUR, (B,)), (THREE, (S(0),)),
           (MESH, (S(0), S(1))), (MESH, (S(1), B)), (MESH, (B, S(0))), (MESH, (S(0), S(0)))]


def _value(x, placement, sbp):
    return sharded.ShardedValue(x.shape, x.dtype, placement, sbp, split_to_pieces(x, placement, sbp))


@pytest.mark.parametrize("src", LAYOUTS, ids=lambda l: f"{l[0].mesh.tolist()}-{l[1]}")
def test_every_layout_restores_into_every_other_bit_for_bit(tmp_path, src):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 3)).astype(np.float32)        # 5 rows, 3 cols: uneven on 2, 3 and 4 ranks
    ids = rng.integers(0, 9, size=(2, 7)).astype(np.int64)    # fewer rows than ranks: empty shards
    path = sharded.save(tmp_path / "ckpt-1", {"x": _value(x, *src), "ids": _value(ids, *src)}, {"step": 7})
    for dst_placement, dst_sbp in LAYOUTS + [(TWO, (P,))]:
        for name, want in (("x", x), ("ids", ids)):
            pieces = sharded.restore(path, name, dst_placement, dst_sbp)
            expected = split_to_pieces(want, dst_placement, dst_sbp)
            assert len(pieces) == len(expected)
            for got, exp in zip(pieces, expected):
                assert got.dtype == exp.dtype and got.shape == exp.shape
                np.testing.assert_array_equal(got, exp)
            np.testing.assert_array_equal(assemble(pieces, want.shape, dst_placement, dst_sbp), want)
    assert sharded.read_index(path)["metadata"] == {"step": "7"}


def test_each_byte_is_written_once(tmp_path):
    x = np.arange(24.0).reshape(4, 6)
    path = sharded.save(tmp_path / "c", {"b": _value(x, FOUR, (B,)), "sb": _value(x, MESH, (S(0), B)),
                                         "ss": _value(x, MESH, (S(0), S(1)))})
    shards = {n: v["shards"] for n, v in sharded.read_index(path)["variables"].items()}
    assert [s["file"] for s in shards["b"]] == ["shards-rank0.safetensors"]
    assert sorted(s["file"] for s in shards["sb"]) == ["shards-rank0.safetensors", "shards-rank2.safetensors"]
    assert len(shards["ss"]) == 4
    assert sorted(os.listdir(path)) == ["commit_success", "index.json"] + [
        f"shards-rank{r}.safetensors" for r in range(4)]


def test_dtypes_and_scalars(tmp_path):
    vals = {"bf": np.arange(6, dtype=ml_dtypes.bfloat16).reshape(3, 2), "flag": np.array([True, False, True]),
            "step": np.array(5, np.int64)}
    path = sharded.save(tmp_path / "c", {k: _value(v, TWO, (S(0),) if v.ndim else (B,)) for k, v in vals.items()})
    for k, v in vals.items():
        got = sharded.restore(path, k, ONE, (B,))[0]
        assert got.dtype == v.dtype
        np.testing.assert_array_equal(got, v)


def test_partial_values_are_refused_with_a_hint(tmp_path):
    x = np.ones((2, 2))
    with pytest.raises(ValueError, match=r"'g' has sbp \(P,\) with a partial value; reduce it first"):
        sharded.save(tmp_path / "c", {"g": _value(x, TWO, (P,))})
    assert list(tmp_path.iterdir()) == []


def test_read_region_reads_only_overlapping_shards(tmp_path, monkeypatch):
    x = np.arange(40.0).reshape(8, 5)
    path = sharded.save(tmp_path / "c", {"x": _value(x, FOUR, (S(0),))})
    seen = []
    real = sharded.tensor_file.read_slice
    monkeypatch.setattr(sharded.tensor_file, "read_slice", lambda f, k, i: seen.append(os.path.basename(f)) or real(f, k, i))
    mapped = sharded.tensor_file.map_tensor     # (a part of a shard: read through a checked memory map)
    monkeypatch.setattr(sharded.tensor_file, "map_tensor", lambda f, k: seen.append(os.path.basename(f)) or mapped(f, k))
    got = sharded.read_region(path, "x", (slice(2, 4), slice(1, 3)))
    np.testing.assert_array_equal(got, x[2:4, 1:3])
    assert seen == ["shards-rank1.safetensors"]


def test_async_save_snapshots_the_values(tmp_path):
    x = np.arange(6.0).reshape(3, 2)
    value = _value(x, TWO, (S(0),))
    handle = sharded.save_async(tmp_path / "c", {"x": value})
    for p in value.pieces.values():
        p[...] = -1                       # training goes on while the save runs
    path = handle.wait()
    assert handle.done()
    np.testing.assert_array_equal(sharded.restore(path, "x", ONE, (B,))[0], x)
    bad = sharded.save_async(tmp_path / "c", {"x": value})          # exists: the error comes from wait()
    with pytest.raises(FileExistsError, match="never overwritten"):
        bad.wait()


_CRASH_SCRIPT = r"""
import sys, numpy as np
from tensorweave.core.sbp import S
from tensorweave.distribute.layout import Placement, split_to_pieces
from tensorweave.saving import sharded
x = np.arange(12.0).reshape(4, 3)
p = Placement("cpu", [0, 1, 2])
sharded.save(sys.argv[1], {"x": sharded.ShardedValue(x.shape, x.dtype, p, (S(0),), split_to_pieces(x, p, (S(0),)))})
"""


@pytest.mark.parametrize("stage", ["sharded_rank_written", "sharded_rank_written:2", "sharded_index_written",
                                   "sharded_marker_written", "sharded_renamed"])
def test_a_crash_at_any_step_leaves_only_complete_checkpoints(tmp_path, stage):
    x = np.arange(12.0).reshape(4, 3) * 0
    first = sharded.save(tmp_path / "ckpt-1", {"x": _value(x, TWO, (S(0),))})
    env = dict(os.environ, TENSORWEAVE_CHECKPOINT_CRASH_AT=stage)
    out = subprocess.run([sys.executable, "-c", _CRASH_SCRIPT, str(tmp_path / "ckpt-2")], env=env,
                         capture_output=True, text=True, timeout=300)
    if stage == "sharded_renamed":
        assert out.returncode == 86
        assert sharded.list_checkpoints(str(tmp_path)) == [first, str(tmp_path / "ckpt-2")]
        return
    assert out.returncode == 86, out.stderr
    assert sharded.list_checkpoints(str(tmp_path)) == [first]
    assert not os.path.exists(tmp_path / "ckpt-2")
    np.testing.assert_array_equal(sharded.restore(first, "x", ONE, (B,))[0], x)
    assert [n for n in os.listdir(tmp_path) if n.startswith(".sharded-tmp-ckpt-2-")]    # the killed save's
    sharded.save(tmp_path / "ckpt-3", {"x": _value(x, TWO, (S(0),))})
    assert sorted(os.listdir(tmp_path)) == ["ckpt-1", "ckpt-3"]                     # ... removed by the next


def _tamper(path, fn):
    idx = json.loads(open(os.path.join(path, "index.json")).read())
    fn(idx["variables"]["x"])
    open(os.path.join(path, "index.json"), "w").write(json.dumps(idx))


@pytest.mark.parametrize("change,message", [
    (lambda v: v["shards"][1].update(start=[1, 0]), "overlap"),
    (lambda v: v["shards"].pop(), "shards cover 6 of the 12 elements"),
    (lambda v: v["shards"][0].update(file="../../etc/passwd"), "not a plain file name"),
    (lambda v: v.update(sbp=["P"]), "unknown SBP 'P'"),
    (lambda v: v["shards"][0].update(stop=[9, 3]), r"shard stop = 9 is outside \[0, 4\]"),
    (lambda v: v["shards"][0].update(start=[0]), "does not match the rank"),
    (lambda v: v.update(dtype="object"), "unknown dtype"),
])
def test_crafted_indexes_are_refused(tmp_path, change, message):
    path = sharded.save(tmp_path / "c", {"x": _value(np.zeros((4, 3)), TWO, (S(0),))})
    _tamper(path, change)
    with pytest.raises(LoadError, match=message):
        sharded.restore(path, "x", ONE, (B,))


def test_an_unfinished_directory_is_not_a_checkpoint(tmp_path):
    path = sharded.save(tmp_path / "c", {"x": _value(np.zeros((4, 3)), TWO, (S(0),))})
    os.remove(os.path.join(path, "commit_success"))
    with pytest.raises(LoadError, match="not a committed sharded checkpoint"):
        sharded.read_index(path)
    assert sharded.list_checkpoints(str(tmp_path)) == []


