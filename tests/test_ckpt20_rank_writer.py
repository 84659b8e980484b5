"""The pieces of a sharded save that a rank in another process runs, tested in this one:
write_rank on a rank's local disk + upload hook, the controller's file check before the
commit, the merge of the workers' descriptions, split_replica, and the CRC-32 backends."""
import os
import zlib

import numpy as np
import pytest

from tensorweave.core.sbp import B, S
from tensorweave.distribute.layout import Placement
from tensorweave.saving import checksum, sharded, tensor_file
from tensorweave.saving import sharded_workers as sw


def _replicas(size):
    a = np.arange(30, dtype=np.float32).reshape(10, 3)
    return a, [{"w": sw.split_replica(a, i, size), "n": sw.split_replica(np.int64(4), i, size)} for i in range(size)]


def test_split_replica_gives_each_worker_its_balanced_rows():
    a, parts = _replicas(4)
    assert [p["w"].pieces[i].shape[0] for i, p in enumerate(parts)] == [3, 3, 2, 2]
    assert parts[0]["w"].sbp == (S(0),) and parts[0]["n"].sbp == (B,)
    assert np.shares_memory(parts[1]["w"].pieces[1], a)              # a view: nothing copied
    assert [sharded.owned_region(p["n"], i) is not None for i, p in enumerate(parts)] == [True, False, False, False]


def test_ranks_write_locally_upload_and_the_controller_commits(tmp_path):
    a, parts = _replicas(3)
    staging = sharded.Staging(tmp_path / "ckpt-1")
    moved = []

    def upload(src, dst):
        moved.append((os.path.dirname(src) != os.path.dirname(dst), os.path.basename(dst)))
        tensor_file.copy_atomic(src, dst)
    results = []
    for rank, values in enumerate(parts):
        records = sharded.write_rank(staging.path, rank, values, tmp_path / "local" / f"r{rank}", upload)
        results.append((sharded.describe(values), records))
    assert moved == [(True, f"shards-rank{r}.safetensors") for r in range(3)]
    assert not any(files for _, _, files in os.walk(tmp_path / "local"))
    described, records = sw._merge(results)
    path = staging.finish(described, records)
    assert sharded.list_checkpoints(tmp_path) == [path]
    assert np.array_equal(sharded.restore(path, "w", Placement("cpu", [0]), (B,))[0], a)
    assert sharded.restore(path, "n", Placement("cpu", [0, 1]), (B,))[1] == 4


def test_a_rank_removes_the_local_copies_of_its_killed_saves(tmp_path):
    _, parts = _replicas(2)
    local = tmp_path / "local"
    left = local / f"{sharded.STAGING}ckpt-0-deadbeef"       # what a worker killed mid-save leaves
    left.mkdir(parents=True)
    (left / "shards-rank0.safetensors").write_bytes(b"torn")
    staging = sharded.Staging(tmp_path / "ckpt-1")
    sharded.write_rank(staging.path, 0, parts[0], local)
    assert os.listdir(local) == []
    staging.abort()


def test_read_region_assembles_a_box_across_shards(tmp_path):
    a = np.arange(60, dtype=np.float32).reshape(10, 6)
    four = Placement("cpu", [0, 1, 2, 3])
    from tensorweave.distribute.layout import split_to_pieces
    path = sharded.save(tmp_path / "c", {"a": sharded.ShardedValue(a.shape, a.dtype, four, (S(0),),
                                                                    split_to_pieces(a, four, (S(0),)))})
    box = (slice(2, 9), slice(1, 5))                  # rows 2..8 over the shards [0,3) [3,6) [6,8) [8,10)
    assert np.array_equal(sharded.read_region(path, "a", box), a[box])


def test_a_file_lost_by_the_upload_or_torn_fails_the_commit(tmp_path):
    _, parts = _replicas(2)
    staging = sharded.Staging(tmp_path / "ckpt-1")
    records = [r for rank, values in enumerate(parts)
               for r in sharded.write_rank(staging.path, rank, values, tmp_path / "l", lambda src, dst: None)]
    with pytest.raises(FileNotFoundError, match="shards-rank0.safetensors was reported written"):
        staging.finish(sharded.describe(parts[0]), records)
    assert os.listdir(tmp_path) == ["l"]                 # the staging directory is gone, nothing committed
    staging = sharded.Staging(tmp_path / "ckpt-1")
    records = [r for rank, values in enumerate(parts) for r in sharded.write_rank(staging.path, rank, values)]
    tensor_file.write_tensors(os.path.join(staging.path, "shards-rank1.safetensors"), {"w": np.zeros((4, 3))})
    with pytest.raises(ValueError, match=r"shards-rank1.safetensors lacks 'w' with shape \[5, 3\]"):
        staging.finish(sharded.describe(parts[0]), records)
    assert sharded.list_checkpoints(tmp_path) == []


def test_workers_must_describe_a_value_alike():
    _, parts = _replicas(2)
    other = dict(parts[1], n=sw.split_replica(np.int32(4), 1, 2))
    with pytest.raises(ValueError, match="workers 0 and 1 describe 'n' differently"):
        sw._merge([(sharded.describe(parts[0]), []), (sharded.describe(other), [])])


def test_replica_verifier_refuses_values_that_differ_from_the_drivers():
    a, parts = _replicas(2)
    records = [{"name": "w", "start": [0, 0], "stop": [5, 3], "crc32": sharded.piece_crc(a[:5])}]
    verify = sw.replica_verifier({"w": a, "n": np.int64(4)})
    verify(sharded.describe(parts[0]), records)
    with pytest.raises(sw.WorkerStateMismatch, match="'w' on the workers differs"):
        sw.replica_verifier({"w": a + 1, "n": np.int64(4)})(sharded.describe(parts[0]), records)
    with pytest.raises(sw.WorkerStateMismatch, match="float64"):
        sw.replica_verifier({"w": a.astype(np.float64), "n": np.int64(4)})(sharded.describe(parts[0]), records)
    with pytest.raises(sw.WorkerStateMismatch, match="differently from the driver"):
        sw.replica_verifier({"w": a})(sharded.describe(parts[0]), records)


@pytest.mark.parametrize("dtype", [np.float32, np.dtype(">f8"), np.int64, np.uint8])
def test_crc32_is_zlibs_on_the_stored_little_endian_bytes(dtype):
    a = np.arange(1000).astype(dtype)[::3]                     # big-endian and strided too
    want = zlib.crc32(a.astype(np.dtype(dtype).newbyteorder("<")).tobytes()) & 0xFFFFFFFF
    assert checksum.crc32(a) == want
    assert checksum.crc32(np.float32(2.5)) == zlib.crc32(np.float32(2.5).tobytes())


def test_the_fast_crc32_backend_agrees_with_zlib():
    if checksum._fast_crc32 is None:
        pytest.skip("isal (the fastcrc extra) is not installed")
    data = np.random.default_rng(0).integers(0, 256, 1 << 16, dtype=np.uint8)
    assert checksum.BACKEND == "isal"
    assert checksum._fast_crc32(data) == zlib.crc32(data) and checksum._fast_crc32(data, 7) == zlib.crc32(data, 7)
