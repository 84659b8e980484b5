"""Auto-sharding (``tw.data.sharding``) without Ray: what each of ``n`` workers gets from a
pipeline under each ``AutoShardPolicy``. The expected pieces are TF 2.x's on the same
pipelines (``input_ops.auto_shard_dataset`` after ``rebatch(batch_sizes_for_worker(...))``, as
``experimental_distribute_dataset`` does for one replica per worker)."""
import numpy as np
import pytest

import tensorweave as tw
import tensorweave.data  # noqa: F401
from tensorweave.data import sharding
from tensorweave.distribute.ray.multi_worker_data import DistributedDataset

P = tw.data.experimental.AutoShardPolicy


@pytest.fixture
def files(tmp_path):
    """3 text files holding 0..4, 5..9, 10..14."""
    out = []
    for i in range(3):
        p = tmp_path / f"f{i}.txt"
        p.write_text("".join(f"{v}\n" for v in range(5 * i, 5 * i + 5)))
        out.append(str(p))
    return out


def _with(ds, policy):
    o = tw.data.Options()
    o.experimental_distribute.auto_shard_policy = policy
    return ds.with_options(o)


def _per_worker(ds, n, policy):
    return [[p.tolist() for p in sharding.worker_stream(_with(ds, policy), n, i)] for i in range(n)]


def _lines(files):
    return tw.data.TextLineDataset(files).map(lambda s: tw.strings.to_number(s, tw.int64))


def test_text_files_under_each_policy_as_tf(files):
    ds = _lines(files).batch(4)
    file_pieces = [[[0, 1], [2, 3], [4, 10], [11, 12], [13, 14]], [[5, 6], [7, 8], [9]]]
    assert _per_worker(ds, 2, P.FILE) == file_pieces
    assert _per_worker(ds, 2, P.AUTO) == file_pieces
    assert _per_worker(ds, 2, P.DATA) == [[[0, 1], [4, 5], [8, 9], [12, 13]], [[2, 3], [6, 7], [10, 11], [14]]]
    everything = [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11], [12, 13], [14]]
    assert _per_worker(ds, 2, P.OFF) == [everything, everything]


def test_list_files_interleave_is_sharded_by_file_as_tf(files, tmp_path):
    def lf():
        return (tw.data.Dataset.list_files(str(tmp_path / "f*.txt"), shuffle=False)
                .interleave(tw.data.TextLineDataset, cycle_length=1)
                .map(lambda s: tw.strings.to_number(s, tw.int64)).batch(4))
    assert _per_worker(lf(), 2, P.FILE) == [[[0, 1], [2, 3], [4, 10], [11, 12], [13, 14]], [[5, 6], [7, 8], [9]]]
    assert _per_worker(lf(), 3, P.AUTO) == [[[0, 1], [2], [3], [4]], [[5], [6], [7, 8], [9]],
                                            [[10], [11, 12], [13], [14]]]


def test_sources_without_files_as_tf():
    ds = tw.data.Dataset.range(10).batch(4)
    data = [[[0, 1], [4, 5], [8]], [[2, 3], [6, 7], [9]]]
    assert _per_worker(ds, 2, P.DATA) == data and _per_worker(ds, 2, P.AUTO) == data
    assert _per_worker(ds, 2, P.OFF) == [[[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]] * 2
    five = tw.data.Dataset.range(10).batch(5)
    assert _per_worker(five, 3, P.DATA) == [[[0, 1], [5, 6]], [[2, 3], [7, 8]], [[4], [9]]]
    assert _per_worker(five, 3, P.OFF) == [[[0, 1], [2, 3], [4], [5, 6], [7, 8], [9]],
                                           [[0, 1], [2], [3, 4], [5, 6], [7], [8, 9]],
                                           [[0], [1, 2], [3, 4], [5], [6, 7], [8, 9]]]
    hint = tw.data.Dataset.range(10).shard(tw.data.experimental.SHARD_HINT, tw.data.experimental.SHARD_HINT)
    assert _per_worker(hint.batch(4), 2, P.HINT) == [[[0, 2], [4, 6], [8]], [[1, 3], [5, 7], [9]]]
    assert _per_worker(ds, 2, P.HINT) == _per_worker(ds, 2, P.OFF)
    with pytest.raises(tw.errors.InvalidArgumentError, match="SHARD_HINT.*placeholder"):
        list(hint)


def test_file_sharding_errors_as_tf(files):
    with pytest.raises(tw.errors.NotFoundError, match="unshardable source dataset: RangeDataset"):
        _per_worker(tw.data.Dataset.range(10).batch(4), 2, P.FILE)
    for policy in (P.FILE, P.AUTO):             # TF: too few files is an error under AUTO too
        with pytest.raises(tw.errors.InvalidArgumentError, match="only has 3 file.*4 workers"):
            _per_worker(_lines(files).batch(4), 4, policy)
    # a pipeline that reads files and something else: FILE cannot, AUTO slices (DATA)
    mixed = tw.data.Dataset.zip((_lines(files), tw.data.Dataset.range(15))).batch(4)
    with pytest.raises(tw.errors.NotFoundError, match="RangeDataset"):
        _per_worker(mixed, 2, P.FILE)
    assert sharding.resolve_policy(_with(mixed, P.AUTO), 2) == P.DATA
    assert sharding.resolve_policy(_lines(files), 3) == P.FILE          # unset: AUTO


def test_element_sharding_matches_dataset_shard(files):
    ds = _lines(files)
    for n in (1, 2, 3):
        got = [[int(v) for v in sharding.auto_shard_dataset(_with(ds, P.FILE), n, i)] for i in range(n)]
        want = [[int(v) for v in _lines(files[i::n])] for i in range(n)]
        assert got == want
        data = [[int(v) for v in sharding.auto_shard_dataset(_with(ds, P.DATA), n, i)] for i in range(n)]
        assert data == [list(range(15))[i::n] for i in range(n)]
    assert [int(v) for v in sharding.auto_shard_dataset(_with(ds, P.OFF), 2, 1)] == list(range(15))
    with pytest.raises(tw.errors.InvalidArgumentError, match="index must be in"):
        sharding.auto_shard_dataset(ds, 2, 2)


def test_tfrecord_and_fixed_length_files_shard_by_file(tmp_path):
    paths = []
    for i in range(4):
        p = str(tmp_path / f"r{i}.tfrecord")
        with tw.io.TFRecordWriter(p) as w:
            for j in range(i + 1):
                w.write(f"{i}-{j}".encode())
        paths.append(p)
    ds = tw.data.TFRecordDataset(paths)
    got = [[r.decode() for r in sharding.auto_shard_dataset(ds, 2, i).as_numpy_iterator()] for i in range(2)]
    assert got == [["0-0", "2-0", "2-1", "2-2"], ["1-0", "1-1", "3-0", "3-1", "3-2", "3-3"]]
    fixed = []
    for i in range(3):
        p = tmp_path / f"b{i}.bin"
        p.write_bytes(bytes([i]) * 4)
        fixed.append(str(p))
    fl = tw.data.FixedLengthRecordDataset(fixed, 2)
    assert [r for r in sharding.auto_shard_dataset(fl, 2, 1).as_numpy_iterator()] == [b"\x01\x01"] * 2


def test_the_workers_files_cover_the_data_once(tmp_path):
    # random file sizes (some empty), worker counts and batch sizes: the union of the
    # workers' rows is every row once, each worker's rows are those of its files
    rng = np.random.default_rng(7)
    for trial in range(6):
        sizes = rng.integers(0, 6, size=rng.integers(3, 7))
        files, start = [], 0
        for k, s in enumerate(sizes):
            p = tmp_path / f"t{trial}-{k}.txt"
            p.write_text("".join(f"{v}\n" for v in range(start, start + s)))
            files.append(str(p))
            start += s
        n = int(rng.integers(1, len(files) + 1))
        b = int(rng.integers(1, 6))
        per = _per_worker(_lines(files).batch(b), n, P.FILE)
        for i, pieces in enumerate(per):
            assert sum(pieces, []) == [int(v) for v in _lines(files[i::n])]
            want = sharding.batch_sizes_for_worker(b, n, i)
            assert [len(p) for p in pieces[:-1]] == [want[k % n] for k in range(len(pieces) - 1)]
        assert sorted(sum(sum(per, []), [])) == list(range(start))


def test_batch_sizes_and_rebatch_as_tf():
    assert sharding.batch_sizes_for_worker(7, 2, 0) == [4, 3]
    assert sharding.batch_sizes_for_worker(7, 2, 1) == [3, 4]
    assert sharding.batch_sizes_for_worker(8, 3, 2) == [2, 3, 3]
    assert sharding.batch_sizes_for_worker(2, 3, 0) == [1, 1, 0]
    assert [p.tolist() for p in sharding.rebatch(tw.data.Dataset.range(10).batch(3).as_numpy_iterator(), [2, 2])] \
        == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]
    assert [p.tolist() for p in sharding.rebatch(tw.data.Dataset.range(10).batch(3).as_numpy_iterator(), [4, 1])] \
        == [[0, 1, 2, 3], [4], [5, 6, 7, 8], [9]]
    # a zero size is an empty piece while rows remain, never after the end
    assert [p.tolist() for p in sharding.rebatch([np.arange(3)], [0, 2])] == [[], [0, 1], [], [2]]
    # unknown global batch size: each batch in n balanced pieces, all kept (TF's legacy rebatch)
    assert [p.tolist() for p in sharding.rebatch([np.arange(5), np.arange(5, 7)], (), 2)] == \
        [[0, 1, 2], [3, 4], [5], [6]]
    nested = [({"a": np.arange(4)}, np.arange(4) * 10, None)]
    (x0, y0, s0), (x1, y1, _) = sharding.rebatch(nested, [3, 1])
    assert x0["a"].tolist() == [0, 1, 2] and y1.tolist() == [30] and s0 is None


def test_global_batch_size_through_elementwise_steps():
    ds = tw.data.Dataset.range(20)
    assert sharding.global_batch_size(ds.batch(6).map(lambda x: x + 1).prefetch(2)) == 6
    assert sharding.global_batch_size(ds.padded_batch(4).repeat(2)) == 4
    assert sharding.global_batch_size(ds.batch(6).unbatch()) is None
    assert sharding.global_batch_size(ds) is None
    # unknown: the legacy split of each batch
    pieces = [p.tolist() for p in sharding.worker_stream(_with(ds.batch(5).unbatch().batch(3).unbatch().batch(4), P.OFF),
                                                         2, 0)]
    assert pieces[:3] == [[0, 1], [2, 3], [4, 5]]


def test_file_names_from_string_slices_shard_where_they_enter_the_interleave(files):
    names = tw.data.Dataset.from_tensor_slices(files)
    ds = names.interleave(tw.data.TextLineDataset, cycle_length=1).map(lambda s: tw.strings.to_number(s, tw.int64))
    got = [[int(v) for v in sharding.auto_shard_dataset(_with(ds, P.FILE), 2, i)] for i in range(2)]
    assert got == [[0, 1, 2, 3, 4, 10, 11, 12, 13, 14], [5, 6, 7, 8, 9]]
    as_array = tw.data.Dataset.from_tensor_slices(np.array(files)).interleave(tw.data.TextLineDataset, cycle_length=1)
    assert [str(v) for v in sharding.auto_shard_dataset(as_array, 3, 2).as_numpy_iterator()] == \
        [str(v) for v in range(10, 15)]
    flat = names.flat_map(tw.data.TextLineDataset)
    assert sharding.resolve_policy(flat, 3) == P.FILE
    assert [str(v) for v in sharding.auto_shard_dataset(flat, 3, 1).as_numpy_iterator()] == list("56789")


def test_a_zip_of_file_pipelines_shards_each(files):
    ds = tw.data.Dataset.zip((_lines(files), {"ten": _lines(files).map(lambda v: v * 10)}))
    got = [(int(a), int(b["ten"])) for a, b in sharding.auto_shard_dataset(ds, 2, 1)]
    assert got == [(v, 10 * v) for v in range(5, 10)]


def test_a_sharded_clone_leaves_the_pipeline_and_its_cache_alone(files):
    ds = _lines(files).cache().batch(4)
    assert sum((b.tolist() for b in ds.as_numpy_iterator()), []) == list(range(15))     # the cache is full
    mine = sharding.auto_shard_dataset(_with(ds, P.FILE), 3, 2)
    assert [b.tolist() for b in mine.as_numpy_iterator()] == [[10, 11, 12, 13], [14]]
    assert sum((b.tolist() for b in ds.as_numpy_iterator()), []) == list(range(15))
    assert [b.tolist() for b in mine.as_numpy_iterator()] == [[10, 11, 12, 13], [14]]


def test_distributed_dataset_steps_end_when_every_worker_ran_out(files):
    steps = list(DistributedDataset(_lines(files).batch(4), 2))
    assert [[v.tolist() for v in s.values] for s in steps] == [
        [[0, 1], [5, 6]], [[2, 3], [7, 8]], [[4, 10], [9]], [[11, 12], []], [[13, 14], []]]
    with pytest.raises(TypeError, match="expected a tw.data.Dataset"):
        DistributedDataset(np.zeros(3), 2)
    with pytest.raises(tw.errors.NotFoundError):
        DistributedDataset(_with(tw.data.Dataset.range(4).batch(2), P.FILE), 2)


def test_a_shuffle_moves_on_each_epoch_and_the_global_batches_stay_whole(files):
    tw.random.set_seed(5)
    try:
        data = _with(tw.data.Dataset.range(12).shuffle(12).batch(4), P.DATA)
        dd = DistributedDataset(data, 2)
        epochs = [[np.concatenate(s.values).tolist() for s in dd] for _ in range(2)]
        for e in epochs:                                    # each step's slices make one global batch
            assert sorted(sum(e, [])) == list(range(12))
        assert epochs[0] != epochs[1]                       # reshuffled
        files_ds = _with(_lines(files).shuffle(15).batch(4), P.FILE)
        dd = DistributedDataset(files_ds, 2)
        per_epoch = [sum((s.values[0].tolist() for s in dd), []) for _ in range(3)]
        for e in per_epoch:                                 # worker 0: files 0 and 2
            assert sorted(e) == [0, 1, 2, 3, 4, 10, 11, 12, 13, 14]
        assert len({tuple(e) for e in per_epoch}) > 1       # the rebuilt pipeline's shuffle moved on
    finally:
        tw.random.set_seed(None)
