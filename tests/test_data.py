"""tw.data.Dataset: semantics checked against plain-Python expectations."""
import collections
import gc
import random
import threading
import time

import numpy as np
import pytest

import tensorweave as tw
import tensorweave.data  # noqa: F401 - registers tw.data until tensorweave/__init__ imports it
from tensorweave.core.tensor import EagerTensor
from tensorweave.data import transforms
from tensorweave.data.iterators import ListIter

D = tw.data.Dataset


def values(ds):
    """Elements as plain Python values (nested structure kept)."""
    def conv(v):
        if isinstance(v, dict):
            return {k: conv(x) for k, x in v.items()}
        if isinstance(v, tuple):
            return tuple(conv(x) for x in v)
        return np.asarray(v).tolist()
    return [conv(e) for e in ds.as_numpy_iterator()]


def opaque(ds):
    """The same elements through a map, which is not random access: exercises the element path."""
    return ds.map(lambda *x: x if len(x) > 1 else x[0])


@pytest.fixture(autouse=True)
def _no_global_seed():
    tw.random.set_seed(None)
    yield
    tw.random.set_seed(None)


# ---- sources and structure ------------------------------------------------------------------------
def test_from_tensor_slices_structures_and_dtypes():
    P = collections.namedtuple("P", "a b")
    ds = D.from_tensor_slices(P(np.arange(3), {"z": np.ones((3, 2)), "y": ["u", "v", "w"]}))
    spec = ds.element_spec
    assert isinstance(spec, P) and list(spec.b) == ["z", "y"]
    assert spec.a.dtype is tw.int64 and spec.b["z"].shape.as_list() == [2] and spec.b["y"].dtype is tw.string
    first = next(iter(ds))
    assert isinstance(first, P) and isinstance(first.a, EagerTensor) and list(first.b) == ["z", "y"]
    assert values(ds)[2] == P(2, {"z": [1.0, 1.0], "y": "w"})
    # Python lists are values (TF's rule) with TF's default dtypes
    ds = D.from_tensor_slices(([1, 2], [[1.5], [2.5]]))
    assert [s.dtype for s in ds.element_spec] == [tw.int32, tw.float32]
    assert values(ds) == [(1, [1.5]), (2, [2.5])]
    # tensors work as input, and so does a list of tensors (stacked)
    assert values(D.from_tensor_slices(tw.constant([[1, 2], [3, 4]]))) == [[1, 2], [3, 4]]
    assert values(D.from_tensor_slices([tw.constant(1.0), tw.constant(2.0)])) == [1.0, 2.0]


def test_from_tensor_slices_errors():
    with pytest.raises(ValueError, match="Dimensions 3 and 4 are not compatible"):
        D.from_tensor_slices((np.zeros(3), np.zeros((4, 2))))
    with pytest.raises(ValueError, match="component 0 is a scalar"):
        D.from_tensor_slices(1.0)


def test_from_tensors_and_range():
    assert values(D.from_tensors(([1, 2], "s"))) == [([1, 2], "s")]
    assert values(D.range(5)) == list(range(5))
    assert values(D.range(2, 9, 3)) == [2, 5, 8]
    assert values(D.range(5, 0, -2)) == [5, 3, 1]
    assert values(D.range(3, 3)) == []
    assert D.range(3).element_spec.dtype is tw.int64
    assert D.range(3, output_type=tw.int32).element_spec.dtype is tw.int32
    with pytest.raises(ValueError, match="step must not be 0"):
        D.range(0, 5, 0)


def test_iteration_yields_eager_tensors_and_iterator_api():
    it = iter(D.range(2))
    a = next(it)
    assert isinstance(a, EagerTensor) and a.dtype is tw.int64 and a.shape.as_list() == []
    assert int(it.get_next()) == 1
    with pytest.raises(tw.errors.OutOfRangeError):
        it.get_next()
    with pytest.raises(StopIteration):
        next(it)
    assert it.element_spec == D.range(2).element_spec


def test_as_numpy_iterator_values():
    out = list(D.from_tensor_slices({"a": np.array([1.0, 2.0], np.float32)}).as_numpy_iterator())
    assert out == [{"a": np.float32(1.0)}, {"a": np.float32(2.0)}]
    assert type(out[0]["a"]) is np.float32


# ---- batch ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n,b,drop", [(10, 3, False), (10, 3, True), (9, 3, False), (2, 5, False), (2, 5, True),
                                      (0, 2, False)])
def test_batch_remainder(n, b, drop):
    expected = [list(range(i, min(i + b, n))) for i in range(0, n, b)]
    if drop:
        expected = [e for e in expected if len(e) == b]
    for ds in (D.range(n), opaque(D.range(n))):
        got = values(ds.batch(b, drop_remainder=drop))
        assert got == expected
        assert int(ds.batch(b, drop).cardinality()) == len(expected)
    spec = D.range(n).batch(b, drop).element_spec
    assert spec.shape.as_list() == [b if drop else None]


def test_batch_nested_and_shape_error():
    x, y = np.arange(12.0).reshape(6, 2), np.arange(6)
    got = list(D.from_tensor_slices({"x": x, "y": y}).batch(4))
    assert got[0]["x"].shape.as_list() == [4, 2] and got[1]["y"].numpy().tolist() == [4, 5]
    ds = D.range(1, 4).map(lambda n: tw.fill([n], n)).batch(2)
    with pytest.raises(ValueError, match=r"different shapes in component 0. First element had shape \[1\] "
                                         r"and element 1 had shape \[2\]"):
        list(ds)
    with pytest.raises(ValueError, match="batch_size must be greater than zero"):
        D.range(3).batch(0)


def test_batch_fast_path_is_used_for_slices_shuffle_batch():
    x = np.zeros((50, 4), np.float32)
    ds = D.from_tensor_slices((x, np.arange(50))).shuffle(50, seed=1).batch(8)
    it = ds._make_iter()
    assert it._in.bulk           # the batch reads whole index runs, not elements one by one
    it = D.from_tensor_slices(x).repeat(2).take(70).batch(8)._make_iter()
    assert it._in.bulk


def test_batch_across_repeat_boundary():
    assert values(D.range(5).repeat(2).batch(4)) == [[0, 1, 2, 3], [4, 0, 1, 2], [3, 4]]
    assert values(opaque(D.range(5)).repeat(2).batch(4)) == [[0, 1, 2, 3], [4, 0, 1, 2], [3, 4]]


def test_padded_batch():
    ds = D.range(1, 5).map(lambda n: tw.fill([n], n))
    assert values(ds.padded_batch(3)) == [[[1, 0, 0], [2, 2, 0], [3, 3, 3]], [[4, 4, 4, 4]]]
    assert values(ds.padded_batch(2, padded_shapes=[5], padding_values=tw.constant(-1, tw.int64))) == [
        [[1, -1, -1, -1, -1], [2, 2, -1, -1, -1]], [[3, 3, 3, -1, -1], [4, 4, 4, 4, -1]]]
    assert values(ds.padded_batch(2, padded_shapes=[-1], drop_remainder=True)) == [
        [[1, 0], [2, 2]], [[3, 3, 3, 0], [4, 4, 4, 4]]]
    spec = ds.padded_batch(2, padded_shapes=[5], drop_remainder=True).element_spec
    assert spec.shape.as_list() == [2, 5]
    # a tuple: one scalar padding value pads every component; strings pad with ""
    pairs = D.from_generator(lambda: iter([([1], ["a"]), ([1, 2], ["b", "c"])]),
                             output_signature=(tw.TensorSpec([None], tw.int32), tw.TensorSpec([None], tw.string)))
    assert values(pairs.padded_batch(2)) == [([[1, 0], [1, 2]], [["a", ""], ["b", "c"]])]
    assert values(pairs.padded_batch(2, padding_values=(7, "?"))) == [([[1, 7], [1, 2]], [["a", "?"], ["b", "c"]])]
    with pytest.raises(ValueError, match="Attempted to pad to a smaller size"):
        list(ds.padded_batch(4, padded_shapes=[3]))
    with pytest.raises(ValueError, match="not compatible with the shape"):
        D.range(3).map(lambda n: tw.fill([2], n)).padded_batch(2, padded_shapes=[2, 2]).element_spec


def test_unbatch():
    assert values(D.from_tensor_slices([[1, 2], [3, 4]]).unbatch()) == [1, 2, 3, 4]
    assert values(D.range(7).batch(3).unbatch().batch(2)) == [[0, 1], [2, 3], [4, 5], [6]]
    assert values(opaque(D.range(7).batch(3)).unbatch()) == list(range(7))
    assert int(D.range(6).batch(2, drop_remainder=True).unbatch().cardinality()) == 6
    assert int(D.range(6).batch(2).unbatch().cardinality()) == tw.data.UNKNOWN_CARDINALITY
    with pytest.raises(ValueError, match="scalar"):
        list(D.range(3).unbatch())


# ---- shuffle ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("n,size", [(10, 3), (10, 9), (10, 10), (10, 11), (1000, 7), (700, 256), (5, 1), (1, 1)])
def test_shuffle_index_path_equals_element_path(n, size):
    # The vectorised order for random-access inputs must be exactly what the buffer gives.
    r1 = np.random.Generator(np.random.Philox(11))
    r2 = np.random.Generator(np.random.Philox(11))
    fast = transforms.reservoir_order(n, size, r1).tolist()
    it = transforms._ShuffleIter(ListIter([(i,) for i in range(n)]), size, r2)
    slow = []
    while True:
        try:
            slow.append(it.next()[0])
        except StopIteration:
            break
    assert fast == slow and sorted(fast) == list(range(n))
    a = values(D.range(n).shuffle(size, seed=5))
    b = values(opaque(D.range(n)).shuffle(size, seed=5))
    assert a == b


def test_shuffle_buffer_semantics():
    # buffer_size=1 keeps the order; a small buffer only moves elements forward a little
    assert values(D.range(20).shuffle(1, seed=3)) == list(range(20))
    out = values(D.range(200).shuffle(4, seed=3))
    assert sorted(out) == list(range(200))
    assert all(v <= i + 4 for i, v in enumerate(out))   # element v cannot come out before input v-4 arrives
    with pytest.raises(ValueError, match="buffer_size must be greater than zero"):
        D.range(3).shuffle(0)


def test_shuffle_seeds_and_reshuffle():
    ds = D.range(30).shuffle(30, seed=7)
    e1, e2 = values(ds), values(ds)
    assert sorted(e1) == list(range(30)) and e1 != e2          # reshuffled each pass
    assert values(D.range(30).shuffle(30, seed=7)) == e1        # op seed fixes the sequence of passes
    fixed = D.range(30).shuffle(30, seed=7, reshuffle_each_iteration=False)
    assert values(fixed) == values(fixed)
    # repeat counts as passes: every epoch a new order, and the same orders on a rebuild
    rep = values(D.range(10).shuffle(10, seed=2).repeat(3))
    epochs = [rep[i:i + 10] for i in range(0, 30, 10)]
    assert all(sorted(e) == list(range(10)) for e in epochs) and len({tuple(e) for e in epochs}) == 3
    assert values(D.range(10).shuffle(10, seed=2).repeat(3)) == rep
    assert values(D.range(10).shuffle(10, seed=2, reshuffle_each_iteration=False).repeat(2))[:10] == \
        values(D.range(10).shuffle(10, seed=2, reshuffle_each_iteration=False).repeat(2))[10:]


def test_shuffle_global_seed():
    tw.random.set_seed(123)
    a = values(D.range(50).shuffle(50)), values(D.range(50).shuffle(16))
    tw.random.set_seed(123)
    b = values(D.range(50).shuffle(50)), values(D.range(50).shuffle(16))
    assert a == b and a[0] != a[1]
    tw.random.set_seed(None)
    c = values(D.range(50).shuffle(50)), values(D.range(50).shuffle(50))
    assert c[0] != c[1]      # no seeds: fresh entropy (equal with probability 1/50!)


def test_shuffle_peek_for_element_spec_does_not_use_an_epoch():
    # map(...numpy()) cannot be traced, so its spec comes from a peek at the first element
    ds = D.range(10).shuffle(10, seed=4).map(lambda x: x.numpy() * 1)
    ref = D.range(10).shuffle(10, seed=4)
    assert ds.element_spec.dtype is tw.int64
    assert values(ds) == values(ref)


# ---- map, filter ------------------------------------------------------------------------------------
def test_map_argument_conventions():
    P = collections.namedtuple("P", "a b")
    assert values(D.from_tensor_slices(([1, 2], [3, 4])).map(lambda a, b: a + b)) == [4, 6]
    assert values(D.from_tensor_slices({"a": [1, 2]}).map(lambda d: d["a"] * 2)) == [2, 4]
    assert values(D.from_tensor_slices(P([1, 2], [3, 4])).map(lambda p: p.a - p.b)) == [-2, -2]
    seen = []
    list(D.range(2).map(lambda x: seen.append(type(x)) or x))
    assert EagerTensor in seen
    out = D.range(2).map(lambda x: [x, {"sq": x * x}])          # lists become tuples
    assert values(out) == [(0, {"sq": 0}), (1, {"sq": 1})]
    assert isinstance(out.element_spec, tuple)


def test_map_element_spec_traced_or_peeked():
    ds = D.from_tensor_slices(np.zeros((4, 3), np.float32)).map(lambda x: tw.reshape(x, [3, 1]))
    assert ds.element_spec.shape.as_list() == [3, 1] and ds.element_spec.dtype is tw.float32
    # not traceable: spec from the first element, dimensions unknown
    ds = D.from_tensor_slices(np.zeros((4, 3), np.float32)).map(lambda x: x.numpy().astype(np.float64))
    assert ds.element_spec.shape.as_list() == [None] and ds.element_spec.dtype is tw.float64
    assert len(values(ds)) == 4


def test_map_inconsistent_outputs_raise():
    ds = D.range(3).map(lambda x: x.numpy() * 1.0 if int(x) == 1 else x.numpy())
    with pytest.raises(TypeError, match="component 0 of an element is float64"):
        list(ds)


@pytest.mark.parametrize("npc", [2, 8, tw.data.AUTOTUNE])
def test_parallel_map_keeps_order(npc):
    def slow(x):
        time.sleep(random.random() * 0.003)
        return x * 2
    assert values(D.range(60).map(slow, num_parallel_calls=npc)) == [2 * i for i in range(60)]
    got = values(D.range(60).map(slow, num_parallel_calls=npc, deterministic=False))
    assert sorted(got) == [2 * i for i in range(60)]


def test_parallel_map_runs_concurrently_and_raises_in_order():
    active, peak = [0], [0]
    lock = threading.Lock()

    def work(x):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.01)
        with lock:
            active[0] -= 1
        return x
    list(D.range(16).map(work, num_parallel_calls=4))
    assert peak[0] > 1

    def bad(x):
        if int(x) == 3:
            raise ValueError("boom at 3")
        return x
    got = []
    with pytest.raises(ValueError, match="boom at 3"):
        for v in D.range(6).map(bad, num_parallel_calls=3):
            got.append(int(v))
    assert got == [0, 1, 2]
    with pytest.raises(ValueError, match="num_parallel_calls"):
        D.range(3).map(lambda x: x, num_parallel_calls=0)


def test_filter():
    assert values(D.range(10).filter(lambda x: x % 3 == 0)) == [0, 3, 6, 9]
    assert values(D.from_tensor_slices(([1, 2, 3], [4, 5, 6])).filter(lambda a, b: a + b > 6)) == [(2, 5), (3, 6)]
    assert values(D.range(4).filter(lambda x: True)) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="scalar boolean"):
        list(D.range(3).filter(lambda x: tw.stack([x > 0, x > 1])))


# ---- prefetch ---------------------------------------------------------------------------------------
def _thread_count():
    gc.collect()
    for _ in range(50):
        names = [t.name for t in threading.enumerate() if t.name.startswith("tw-data")]
        if not names:
            return 0
        time.sleep(0.02)
    return len(names)


def test_prefetch_runs_ahead_and_preserves_order():
    produced = []

    def gen():
        for i in range(10):
            produced.append(i)
            yield i
    ds = D.from_generator(gen, output_signature=tw.TensorSpec([], tw.int64)).prefetch(4)
    it = iter(ds)
    assert int(next(it)) == 0
    for _ in range(100):
        if len(produced) >= 5:
            break
        time.sleep(0.01)
    assert len(produced) >= 5          # 1 consumed + 4 buffered, made on the background thread
    assert [int(v) for v in it] == list(range(1, 10))
    assert values(D.range(5).prefetch(0)) == values(D.range(5).prefetch(tw.data.AUTOTUNE)) == list(range(5))


def test_background_threads_stop_when_iterators_are_dropped():
    assert _thread_count() == 0
    for _ in range(3):
        for _v in D.range(10_000).map(lambda x: x, num_parallel_calls=3).prefetch(2):
            break
    assert _thread_count() == 0
    with pytest.raises(ZeroDivisionError):
        list(D.range(5).map(lambda x: 1 // (int(x) - 2)).prefetch(2))
    assert _thread_count() == 0


# ---- repeat, take, skip, shard --------------------------------------------------------------------
COMBOS = [
    ("take", lambda d: d.take(4), lambda l: l[:4]),
    ("take_all", lambda d: d.take(-1), lambda l: l),
    ("take_more", lambda d: d.take(100), lambda l: l),
    ("skip", lambda d: d.skip(3), lambda l: l[3:]),
    ("skip_all", lambda d: d.skip(-1), lambda l: []),
    ("shard", lambda d: d.shard(3, 2), lambda l: l[2::3]),
    ("repeat", lambda d: d.repeat(2), lambda l: l * 2),
    ("repeat0", lambda d: d.repeat(0), lambda l: []),
    ("repeat_take", lambda d: d.repeat().take(23), lambda l: (l * 3)[:23]),
    ("skip_take_shard", lambda d: d.skip(2).take(7).shard(2, 1), lambda l: l[2:9][1::2]),
    ("shard_repeat_skip", lambda d: d.shard(2, 0).repeat(3).skip(4), lambda l: (l[0::2] * 3)[4:]),
    ("take_repeat_batch", lambda d: d.take(3).repeat(3).batch(4), None),
    ("enumerate_shard", lambda d: d.enumerate(10).shard(4, 3), lambda l: list(enumerate(l, 10))[3::4]),
]


@pytest.mark.parametrize("name,build,expect", COMBOS, ids=[c[0] for c in COMBOS])
def test_repeat_take_skip_shard_combinations(name, build, expect):
    base = list(range(10))
    for src in (D.range(10), opaque(D.range(10))):
        ds = build(src)
        got = values(ds)
        if expect is not None:
            want = [tuple(x) if isinstance(x, tuple) else x for x in expect(base)]
            assert got == want
        else:
            assert got == [[0, 1, 2, 0], [1, 2, 0, 1], [2]]
        card = int(ds.cardinality())
        if card >= 0:
            assert card == len(got)


def test_shard_and_take_argument_errors():
    with pytest.raises(ValueError, match="index must be between 0 and 2"):
        D.range(3).shard(3, 3)
    with pytest.raises(ValueError, match="num_shards must be greater than zero"):
        D.range(3).shard(0, 0)


def test_repeat_of_empty_dataset_ends():
    assert values(D.range(0).repeat()) == []
    assert values(D.range(5).filter(lambda x: x > 10).repeat()) == []


# ---- cache -----------------------------------------------------------------------------------------
def test_cache_in_memory():
    calls = []

    def f(x):
        calls.append(int(x))
        return x * 10
    ds = D.range(5).map(lambda x: tw.py_function(f, [x], tw.int64)).cache()
    it = iter(ds)
    next(it), next(it)                 # a partial pass caches nothing
    del it
    assert values(ds) == [0, 10, 20, 30, 40]
    n = len(calls)
    assert values(ds) == [0, 10, 20, 30, 40] and len(calls) == n
    assert ds._indexable()             # uniform shapes: stacked, so shuffle/batch over it are bulk
    assert sorted(values(ds.shuffle(5, seed=1))) == [0, 10, 20, 30, 40]


def test_cache_file_round_trip(tmp_path):
    prefix = str(tmp_path / "cache")
    ragged = D.from_generator(lambda: iter([("a", [1.5]), ("bé", [2.0, 3.0]), ("", [])]),
                              output_signature=(tw.TensorSpec([], tw.string), tw.TensorSpec([None], tw.float32)))
    first = values(ragged.cache(prefix))
    assert first == [("a", [1.5]), ("bé", [2.0, 3.0]), ("", [])]
    assert (tmp_path / "cache.npz").exists()
    # a new pipeline with the same file reads it instead of its (here: empty) input
    empty = D.from_generator(lambda: iter([]), output_signature=ragged.element_spec)
    assert values(empty.cache(prefix)) == first
    bf = D.from_tensor_slices(np.arange(4, dtype=np.float32).astype(tw.bfloat16.np_dtype).reshape(2, 2))
    prefix2 = str(tmp_path / "bf")
    values(bf.cache(prefix2))
    back = list(D.range(0).map(lambda x: tw.cast(tw.fill([2], x), tw.bfloat16)).cache(prefix2))
    assert back[1].dtype is tw.bfloat16 and back[1].numpy().astype(np.float32).tolist() == [2.0, 3.0]


# ---- generator, zip, concatenate, flat_map, interleave ----------------------------------------------
def test_from_generator_signature_checks():
    calls = []

    def gen():
        calls.append(1)
        yield 1, [1.0]
        yield 2, [2.0, 3.0]
    spec = (tw.TensorSpec([], tw.int32), tw.TensorSpec([None], tw.float32))
    ds = D.from_generator(gen, output_signature=spec)
    assert values(ds) == [(1, [1.0]), (2, [2.0, 3.0])] and values(ds) == values(ds)
    assert len(calls) == 3             # the generator is called anew for each pass
    assert int(ds.cardinality()) == tw.data.UNKNOWN_CARDINALITY
    with pytest.raises(ValueError, match=r"yielded an element of shape \[3\] where an element of shape \[2\]"):
        list(D.from_generator(lambda: iter([[1, 2, 3]]), output_signature=tw.TensorSpec([2], tw.int32)))
    with pytest.raises(TypeError, match="expected type was int32, but the yielded element was 1.5"):
        list(D.from_generator(lambda: iter([1.5]), output_signature=tw.TensorSpec([], tw.int32)))
    with pytest.raises(TypeError, match="did not match the expected structure"):
        list(D.from_generator(lambda: iter([1]), output_signature=spec))
    with pytest.raises(TypeError, match="output_signature"):
        D.from_generator(gen)
    legacy = D.from_generator(lambda: iter([(1, 2.0)]), output_types=(tw.int64, tw.float32),
                              output_shapes=((), ()))
    assert values(legacy) == [(1, 2.0)] and legacy.element_spec[0].shape.as_list() == []
    with_args = D.from_generator(lambda n: iter(range(n)), output_signature=tw.TensorSpec([], tw.int64), args=(3,))
    assert values(with_args) == [0, 1, 2]


def test_zip_enumerate_concatenate():
    a, b = D.range(3), D.from_tensor_slices(["x", "y"])
    assert values(D.zip(a, b)) == [(0, "x"), (1, "y")]
    assert values(D.zip((a, (b, a)))) == [(0, ("x", 0)), (1, ("y", 1))]
    assert values(D.zip({"n": a, "s": b})) == [{"n": 0, "s": "x"}, {"n": 1, "s": "y"}]
    assert int(D.zip(a, b).cardinality()) == 2
    assert int(D.zip(a, a.repeat()).cardinality()) == 3
    assert values(b.enumerate()) == [(0, "x"), (1, "y")]
    assert values(a.concatenate(D.range(7, 9))) == [0, 1, 2, 7, 8]
    assert int(a.concatenate(a.filter(lambda x: True)).cardinality()) == tw.data.UNKNOWN_CARDINALITY
    mixed = D.range(2).map(lambda x: tw.fill([x], x)).concatenate(D.from_tensors(tf_fill3()))
    assert mixed.element_spec.shape.as_list() == [None]
    with pytest.raises(TypeError, match="incompatible dataset elements"):
        a.concatenate(b)
    with pytest.raises(TypeError, match="structures differ"):
        a.concatenate(D.zip(a, a))


def tf_fill3():
    return np.array([5, 5, 5], np.int64)


def test_flat_map_and_interleave():
    assert values(D.range(1, 4).flat_map(lambda n: D.range(n))) == [0, 0, 1, 0, 1, 2]
    # TF's documented example
    ds = D.range(1, 6).interleave(lambda x: D.from_tensors(x).repeat(6), cycle_length=2, block_length=4)
    assert values(ds) == [1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 3, 3, 4, 4,
                          5, 5, 5, 5, 5, 5]
    ds = D.from_tensor_slices([[1, 2, 3], [4, 5, 6]]).interleave(D.from_tensor_slices, cycle_length=2)
    assert values(ds) == [1, 4, 2, 5, 3, 6]
    with pytest.raises(TypeError, match="must return a Dataset"):
        list(D.range(2).flat_map(lambda x: x))


# ---- cardinality, len, reduce, misc ---------------------------------------------------------------
def test_cardinality_rules():
    INF, UNK = tw.data.INFINITE_CARDINALITY, tw.data.UNKNOWN_CARDINALITY
    r = D.range(10)
    cases = [
        (r, 10), (r.batch(3), 4), (r.batch(3, True), 3), (r.repeat(), INF), (r.repeat(3), 30),
        (r.repeat().take(5), 5), (r.repeat().skip(5), INF), (r.filter(lambda x: True), UNK),
        (r.filter(lambda x: True).repeat(2), UNK), (r.take(20), 10), (r.skip(20), 0), (r.shard(3, 0), 4),
        (r.shard(3, 2), 3), (r.shuffle(4).map(lambda x: x).prefetch(1).cache(), 10),
        (r.enumerate(), 10), (D.range(0).repeat(), 0), (r.repeat(0), 0),
        (r.flat_map(lambda x: D.range(x)), UNK),
    ]
    for ds, want in cases:
        c = ds.cardinality()
        assert c.dtype is tw.int64 and int(c) == want, (ds, want)
    assert tw.data.experimental.cardinality(r) .numpy() == 10
    assert tw.data.experimental.AUTOTUNE == tw.data.AUTOTUNE == -1
    assert len(r.batch(4)) == 3
    with pytest.raises(TypeError, match="infinite"):
        len(r.repeat())
    with pytest.raises(TypeError, match="unknown"):
        len(r.filter(lambda x: True))
    assert bool(r.repeat())


def test_reduce_and_single_element():
    assert int(D.range(5).reduce(np.int64(0), lambda s, x: s + x)) == 10
    total, count = D.from_tensor_slices(np.array([1.0, 2.0, 3.0], np.float32)).reduce(
        (tw.constant(0.0), tw.constant(0)), lambda s, x: (s[0] + x, s[1] + 1))
    assert float(total) == 6.0 and int(count) == 3
    assert int(D.range(3).skip(2).get_single_element()) == 2
    with pytest.raises(ValueError, match="more than one"):
        D.range(2).get_single_element()


def test_datasets_run_eagerly_in_tf1_mode(graph_mode):
    ds = D.from_tensor_slices(np.arange(4.0, dtype=np.float32)).map(lambda x: x * 2.0).batch(2)
    out = [b for b in ds]
    assert isinstance(out[0], EagerTensor) and out[1].numpy().tolist() == [4.0, 6.0]
    assert len(tw.get_default_graph().get_operations()) == 0


def test_map_is_not_recorded_by_an_outer_tape():
    v = tw.Variable(2.0)
    with tw.GradientTape() as tape:
        out = list(D.range(2).map(lambda x: tw.cast(x, tw.float32) * v))
        y = out[1] * v
    assert float(tape.gradient(y, v)) == 2.0      # only the outer product is recorded


def test_text_line_dataset(tmp_path):
    import gzip
    (tmp_path / "a.txt").write_text("one\ntwo \r\n\nlast", encoding="utf-8")
    with gzip.open(tmp_path / "b.gz", "wt", encoding="utf-8") as f:
        f.write("zé\n")
    ds = tw.data.TextLineDataset([str(tmp_path / "a.txt")])
    assert values(ds) == ["one", "two ", "", "last"] and ds.element_spec.dtype is tw.string
    assert values(tw.data.TextLineDataset(str(tmp_path / "b.gz"), compression_type="GZIP")) == ["zé"]
    both = tw.data.TextLineDataset([str(tmp_path / "a.txt"), str(tmp_path / "a.txt")]).take(5)
    assert values(both) == ["one", "two ", "", "last", "one"]


def test_repr_and_bool():
    r = repr(D.range(3).batch(2))
    assert "BatchDataset" in r and "int64" in r


def test_numpy_str_arrays_are_string_elements():
    # from_tensor_slices of a NumPy '<U' array used to fail at the first element ("<U5 but element_spec
    # says string"), so Keras text programs could not batch raw sentences
    ds = tw.data.Dataset.from_tensor_slices((np.array(["a b", "c d e"]), np.array([0, 1]))).batch(2)
    (x, y), = list(ds)
    assert x.dtype == tw.string and [str(s) for s in x.numpy()] == ["a b", "c d e"]
    (x2, _), = list(ds.map(lambda a, b: (a, b)))
    assert x2.dtype == tw.string
