"""``tw.data.Options``: TF's fields, type checks, merging (the later set value wins), and
``with_options``/``options()`` along a pipeline. Expected values are TF 2.x's on the same calls."""
import copy

import numpy as np
import pytest

import tensorweave as tw
import tensorweave.data  # noqa: F401

P = tw.data.experimental.AutoShardPolicy


def test_policy_values_and_defaults_are_tfs():
    assert {p.name: int(p) for p in P} == {"OFF": -1, "AUTO": 0, "FILE": 1, "DATA": 2, "HINT": 3}
    assert tw.data.experimental.SHARD_HINT == -1
    o = tw.data.Options()
    assert o.experimental_distribute.auto_shard_policy is None and o.deterministic is None
    assert o.experimental_deterministic is None and o.threading.private_threadpool_size is None
    assert o.experimental_optimization.map_parallelization is None and o.autotune.enabled is None
    assert o.experimental_threading is o.threading
    assert tw.data.Options() == tw.data.Options()
    assert tw.data.ThreadingOptions is type(o.threading)


def test_setting_checks_names_and_types():
    o = tw.data.Options()
    with pytest.raises(AttributeError, match="Cannot set the property foo on Options"):
        o.foo = 1
    with pytest.raises(TypeError, match="auto_shard_policy.*AutoShardPolicy, got: 5"):
        o.experimental_distribute.auto_shard_policy = 5
    with pytest.raises(TypeError, match="deterministic.*bool, got: 1"):
        o.deterministic = 1
    with pytest.raises(TypeError, match="private_threadpool_size.*int, got: True"):
        o.threading.private_threadpool_size = True
    with pytest.raises(TypeError, match="threading.*ThreadingOptions"):
        o.threading = 3
    o.experimental_deterministic = False                       # TF's alias
    o.experimental_optimization.map_and_batch_fusion = True
    o.threading.private_threadpool_size = 4
    o.experimental_distribute.auto_shard_policy = P.OFF
    assert o.deterministic is False and o.experimental_optimization.map_and_batch_fusion is True
    assert o.threading.private_threadpool_size == 4 and o != tw.data.Options()
    o.deterministic = None                                      # unset again
    assert o.deterministic is None


def test_merge_and_with_options_the_later_set_value_wins():
    a = tw.data.Options()
    a.deterministic = False
    a.experimental_distribute.auto_shard_policy = P.DATA
    b = tw.data.Options()
    b.deterministic = True
    b.threading.private_threadpool_size = 3
    m = a.merge(b)
    assert (m.deterministic, m.experimental_distribute.auto_shard_policy, m.threading.private_threadpool_size) == (
        True, P.DATA, 3)
    assert a.deterministic is False and b.experimental_distribute.auto_shard_policy is None   # inputs unchanged
    ds = tw.data.Dataset.range(5).with_options(a).map(lambda x: x * 2).with_options(b)
    assert ds.options() == m
    assert [int(v) for v in ds] == [0, 2, 4, 6, 8]
    assert int(ds.cardinality()) == 5 and [v.tolist() for v in ds.batch(2).as_numpy_iterator()] == [[0, 2], [4, 6], [8]]
    z = tw.data.Dataset.zip((tw.data.Dataset.range(2).with_options(a), tw.data.Dataset.range(2).with_options(b)))
    assert z.options().deterministic is True and z.options().experimental_distribute.auto_shard_policy == P.DATA
    assert tw.data.Dataset.range(2).options() == tw.data.Options()
    with pytest.raises(TypeError, match="with_options: options must be a tw.data.Options"):
        tw.data.Dataset.range(2).with_options({"deterministic": True})
    with pytest.raises(TypeError, match="all options must be Options"):
        a.merge(a.threading)


def test_options_travel_with_the_pipeline_and_keep_it_random_access():
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    o = tw.data.Options()
    o.experimental_distribute.auto_shard_policy = P.FILE
    ds = tw.data.Dataset.from_tensor_slices(x).with_options(o)
    assert ds._indexable() and np.array_equal(next(ds.batch(6).as_numpy_iterator()), x)
    back = copy.deepcopy(ds)        # Ray ships a pipeline to a worker by value
    assert back.options() == o and np.array_equal(np.stack(list(back.as_numpy_iterator())), x)


def test_list_files_is_sorted_and_shuffled_with_its_seed(tmp_path):
    for name in ("c.txt", "a.txt", "b.txt"):
        (tmp_path / name).write_text("1\n")
    names = [str(tmp_path / n) for n in ("a.txt", "b.txt", "c.txt")]
    assert [f.numpy() for f in tw.data.Dataset.list_files(str(tmp_path / "*.txt"), shuffle=False)] == names
    one = [f.numpy() for f in tw.data.Dataset.list_files(str(tmp_path / "*.txt"), seed=4)]
    two = [f.numpy() for f in tw.data.Dataset.list_files(str(tmp_path / "*.txt"), seed=4)]
    assert one == two and sorted(one) == names
    with pytest.raises(tw.errors.InvalidArgumentError, match="list_files: no files match"):
        tw.data.Dataset.list_files(str(tmp_path / "*.csv"))
