"""Random ops: TensorFlow's four seed rules in eager mode, in graphs run by a Session and in
``tw.function``; distribution sanity with fixed seeds; shapes and dtypes; stateless ops,
Generator objects and dropout."""
import os
import subprocess
import sys

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core.context import disable_eager_execution, enable_eager_execution

R = tw.random
N = 100_000


@pytest.fixture(autouse=True)
def _clear_seed():
    R.set_seed(None)
    yield
    R.set_seed(None)


def np_(t):
    return np.asarray(t.numpy())


def run_graph(build, runs=2, seed=None):
    """Builds a fresh graph with ``build()`` (graph seed ``seed``), runs its fetches ``runs`` times."""
    g = tw.Graph()
    with g.as_default():
        if seed is not None:
            R.set_seed(seed)
        fetches = build()
    with tw.Session(graph=g) as sess:
        return [sess.run(fetches) for _ in range(runs)]


def same(a, b):
    return np.array_equal(np.asarray(a), np.asarray(b))


# ---- rule 1: no seeds ------------------------------------------------------------------------
def test_eager_no_seed_is_random_each_call():
    a, b = np_(R.uniform([50])), np_(R.uniform([50]))
    assert not same(a, b)


def test_graph_no_seed_differs_between_builds():
    (a1, _), = [run_graph(lambda: R.uniform([50]), runs=2)]
    (b1, _), = [run_graph(lambda: R.uniform([50]), runs=2)]
    assert not same(a1, b1)


def test_function_no_seed_differs_between_traces():
    def body():
        return R.normal([50])
    assert not same(np_(tw.function(body)()), np_(tw.function(body)()))


# ---- rule 2: global seed only ----------------------------------------------------------------
def test_eager_global_seed_replays_program():
    def program():
        return [np_(R.uniform([5])), np_(R.normal([5])), np_(R.uniform([5]))]
    R.set_seed(11)
    first = program()
    assert not same(first[0], first[2])          # derived op seeds differ per call
    R.set_seed(11)
    assert all(same(a, b) for a, b in zip(first, program()))
    R.set_seed(12)
    assert not same(first[0], program()[0])


def test_graph_global_seed_derives_op_seeds_from_graph():
    def build():
        return [R.uniform([5]), R.uniform([5])]
    runs = run_graph(build, runs=2, seed=3)
    assert not same(runs[0][0], runs[0][1])       # two ops, two derived seeds
    assert not same(runs[0][0], runs[1][0])       # each run moves the op's stream on
    again = run_graph(build, runs=2, seed=3)
    for r, s in zip(runs, again):
        assert all(same(a, b) for a, b in zip(r, s))
    other = run_graph(build, runs=1, seed=4)
    assert not same(runs[0][0], other[0][0])


def test_tf1_mode_set_seed_sets_default_graph_seed():
    tw.reset_default_graph()
    disable_eager_execution()
    try:
        outs = []
        for _ in range(2):
            tw.reset_default_graph()
            R.set_seed(42)
            assert tw.get_default_graph().seed == 42
            a = R.uniform([4])
            with tw.Session() as sess:
                outs.append([sess.run(a), sess.run(a)])
        assert same(outs[0][0], outs[1][0]) and same(outs[0][1], outs[1][1])
        assert not same(outs[0][0], outs[0][1])
    finally:
        enable_eager_execution()
        tw.reset_default_graph()


def test_function_global_seed_same_sequence_per_function():
    # TF's documented example: with only a global seed, each tw.function starts the same sequence.
    R.set_seed(1234)

    def body():
        return R.uniform([3]), R.uniform([3])
    f, g = tw.function(body), tw.function(body)
    fa, fb = map(np_, f())
    ga, gb = map(np_, g())
    assert same(fa, ga) and same(fb, gb) and not same(fa, fb)
    assert not same(np_(f()[0]), fa)              # new values each call


# ---- rule 3: op seed only --------------------------------------------------------------------
def test_eager_op_seed_continues_then_replays():
    a1, a2 = np_(R.uniform([4], seed=1)), np_(R.uniform([4], seed=1))
    assert not same(a1, a2)
    R.set_seed(None)                              # restarts the eager streams (like a re-run)
    assert same(np_(R.uniform([4], seed=1)), a1)
    assert same(np_(R.uniform([4], seed=1)), a2)
    assert not same(np_(R.uniform([4], seed=2)), a1)


def test_op_seed_uses_default_global_seed():
    assert R.get_seed(5) == (R.DEFAULT_GRAPH_SEED, 5)
    R.set_seed(R.DEFAULT_GRAPH_SEED)
    b = np_(R.uniform([4], seed=5))
    R.set_seed(None)
    assert same(np_(R.uniform([4], seed=5)), b)


def test_graph_op_seed_reproducible_and_same_seed_ops_agree():
    def build():
        return [R.uniform([4], seed=7), R.uniform([4], seed=7), R.uniform([4], seed=8)]
    runs = run_graph(build, runs=2)
    a, b, c = runs[0]
    assert same(a, b) and not same(a, c)          # equal seed pairs give equal values, as in TF
    assert not same(runs[0][0], runs[1][0])
    again = run_graph(build, runs=2)
    assert same(runs[1][0], again[1][0])


def test_function_op_seed_new_values_each_call_reproducible():
    def body():
        return R.normal([3], seed=9)
    f = tw.function(body)
    seq = [np_(f()) for _ in range(3)]
    assert not same(seq[0], seq[1]) and not same(seq[1], seq[2])
    g = tw.function(body)
    assert all(same(a, np_(g())) for a in seq)


# ---- rule 4: both seeds ----------------------------------------------------------------------
def test_both_seeds_determine_the_sequence():
    R.set_seed(1)
    a = np_(R.uniform([4], seed=2))
    R.set_seed(1)
    assert same(np_(R.uniform([4], seed=2)), a)
    R.set_seed(2)
    assert not same(np_(R.uniform([4], seed=2)), a)
    R.set_seed(1)
    assert not same(np_(R.uniform([4], seed=3)), a)


def test_eager_graph_and_function_agree_for_one_seed_pair():
    R.set_seed(5)
    eager = [np_(R.uniform([3], seed=1)) for _ in range(2)]
    graph = run_graph(lambda: R.uniform([3], seed=1), runs=2, seed=5)
    f = tw.function(lambda: R.uniform([3], seed=1))
    func = [np_(f()) for _ in range(2)]
    for e, g, h in zip(eager, graph, func):
        assert same(e, g) and same(e, h)


def test_set_seed_inside_function_trace_sets_its_graph_seed():
    def body():
        R.set_seed(77)
        return R.uniform([3])
    a, b = np_(tw.function(body)()), np_(tw.function(body)())
    assert same(a, b)
    assert R.get_seed(None) == (None, None)       # the eager global seed was not touched


def test_seeds_are_stable_across_processes():
    R.set_seed(3)
    here = np_(R.uniform([3], seed=4)).tolist()
    code = ("import tensorweave as tw; tw.random.set_seed(3); "
            "print(tw.random.uniform([3], seed=4).numpy().tolist())")
    env = dict(os.environ, PYTHONHASHSEED="123")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         cwd=os.path.dirname(__file__), timeout=60)
    assert out.returncode == 0, out.stderr
    assert eval(out.stdout.strip()) == here


def test_stream_survives_new_plans_in_one_session():
    g = tw.Graph()
    with g.as_default():
        a = R.uniform([3], seed=1)
        b = R.normal([3], seed=1)
    with tw.Session(graph=g) as sess:
        first = sess.run(a)
        second, _ = sess.run([a, b])               # a new plan; a's stream continues
    ref = run_graph(lambda: R.uniform([3], seed=1), runs=2)
    assert same(first, ref[0]) and same(second, ref[1])


# ---- shapes and dtypes -----------------------------------------------------------------------
@pytest.mark.parametrize("fn", [R.uniform, R.normal, R.truncated_normal])
@pytest.mark.parametrize("dtype", [tw.float16, tw.bfloat16, tw.float32, tw.float64])
def test_float_shapes_and_dtypes(fn, dtype):
    x = fn([2, 3], dtype=dtype, seed=1)
    assert x.shape == tw.TensorShape([2, 3]) and x.dtype is dtype
    assert fn([0, 4], dtype=dtype).shape == tw.TensorShape([0, 4])
    assert fn([], dtype=dtype).shape == tw.TensorShape([])


def test_static_and_dynamic_shapes_in_graph():
    g = tw.Graph()
    with g.as_default():
        s = tw.placeholder(tw.int32, [2])
        x = tw.placeholder(tw.float32, [None, 4])
        dyn = R.uniform(s)
        like = R.normal(tw.shape(x), seed=1)
        static = R.truncated_normal([2, 5], dtype=tw.float64)
        cat = R.categorical(tw.zeros([3, 4]), 6, dtype=tw.int32)
        assert dyn.shape.as_list() == [None, None]
        assert like.shape.rank == 2
        assert static.shape == tw.TensorShape([2, 5]) and static.dtype is tw.float64
        assert cat.shape == tw.TensorShape([3, 6]) and cat.dtype is tw.int32
    with tw.Session(graph=g) as sess:
        d, l = sess.run([dyn, like], {s: [3, 2], x: np.zeros((5, 4), np.float32)})
    assert d.shape == (3, 2) and l.shape == (5, 4)


def test_uniform_int():
    x = np_(R.uniform([N], minval=-3, maxval=4, dtype=tw.int32, seed=1))
    assert x.dtype == np.int32 and x.min() == -3 and x.max() == 3
    assert abs(x.mean()) < 0.05
    assert R.uniform([2], maxval=5, dtype=tw.int64).dtype is tw.int64
    with pytest.raises(ValueError, match="maxval"):
        R.uniform([2], dtype=tw.int32)
    with pytest.raises(ValueError, match="minval < maxval"):
        R.uniform([2], minval=5, maxval=5, dtype=tw.int32)


def test_bad_arguments_name_the_problem():
    with pytest.raises(TypeError, match="floating or integer"):
        R.uniform([2], dtype=tw.bool)
    with pytest.raises(TypeError, match="floating"):
        R.normal([2], dtype=tw.int32)
    with pytest.raises(ValueError, match="negative"):
        R.uniform([2, -1])
    g = tw.Graph()
    with g.as_default():
        with pytest.raises(ValueError, match="negative"):
            R.uniform([-2])
        with pytest.raises(ValueError, match="2-D"):
            R.categorical(tw.zeros([4]), 2)
    with pytest.raises(TypeError, match="seed"):
        R.uniform([2], seed=1.5)


# ---- distributions ---------------------------------------------------------------------------
def test_uniform_distribution():
    x = np_(R.uniform([N], seed=1)).astype(np.float64)
    assert x.min() >= 0 and x.max() < 1
    assert abs(x.mean() - 0.5) < 0.01 and abs(x.std() - np.sqrt(1 / 12)) < 0.01
    y = np_(R.uniform([N], minval=-2.0, maxval=6.0, seed=2)).astype(np.float64)
    assert y.min() >= -2 and y.max() < 6
    assert abs(y.mean() - 2) < 0.05 and abs(y.std() - 8 * np.sqrt(1 / 12)) < 0.05


@pytest.mark.parametrize("dtype", [tw.float16, tw.bfloat16])
def test_low_precision_uniform_stays_below_one(dtype):
    x = np_(R.uniform([N], dtype=dtype, seed=3)).astype(np.float64)
    assert x.min() >= 0 and x.max() < 1 and abs(x.mean() - 0.5) < 0.01


def test_normal_distribution():
    x = np_(R.normal([N], seed=1)).astype(np.float64)
    assert abs(x.mean()) < 0.02 and abs(x.std() - 1) < 0.02
    y = np_(R.normal([N], mean=3.0, stddev=2.0, dtype=tw.float64, seed=2))
    assert abs(y.mean() - 3) < 0.04 and abs(y.std() - 2) < 0.04


def test_truncated_normal_distribution():
    x = np_(R.truncated_normal([N], seed=1)).astype(np.float64)
    assert np.abs(x).max() <= 2.0
    # std of a standard normal truncated to [-2, 2]
    assert abs(x.mean()) < 0.02 and abs(x.std() - 0.8796) < 0.02
    y = np_(R.truncated_normal([N], mean=10.0, stddev=0.5, seed=2)).astype(np.float64)
    assert np.abs(y - 10).max() <= 1.0 + 1e-5 and abs(y.mean() - 10) < 0.01


def test_categorical_frequencies_match_softmax():
    logits = np.array([[1.0, 2.0, 0.5, -1.0, 0.0], [0.0, 0.0, 3.0, -np.inf, 1.0]], np.float32)
    s = np_(R.categorical(logits, N, seed=1))
    assert s.shape == (2, N) and s.dtype == np.int64
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    for row in range(2):
        counts = np.bincount(s[row], minlength=5)
        expected = p[row] * N
        nz = expected > 0
        assert counts[~nz].sum() == 0              # a -inf logit is never drawn
        chi2 = ((counts[nz] - expected[nz]) ** 2 / expected[nz]).sum()
        assert chi2 < 40, (row, counts, expected)  # 4 degrees of freedom: p < 1e-7


def test_multinomial_alias_and_num_samples_tensor():
    s = tw.random.multinomial(tw.zeros([2, 3]), tw.constant(4), output_dtype=tw.int32, seed=2)
    assert s.shape == tw.TensorShape([2, 4]) and s.dtype is tw.int32
    assert R.categorical(tw.zeros([0, 3]), 5).shape == tw.TensorShape([0, 5])


def test_shuffle_permutes_rows():
    x = np.arange(40, dtype=np.float32).reshape(20, 2)
    y = np_(R.shuffle(x, seed=1))
    assert not same(x, y)
    assert same(np.sort(y[:, 0]), x[:, 0]) and same(y[:, 1] - y[:, 0], np.ones(20))
    R.set_seed(None)
    assert same(np_(R.shuffle(x, seed=1)), y)
    assert same(np_(R.shuffle(tw.constant(3.0))), 3.0)


# ---- stateless -------------------------------------------------------------------------------
def test_stateless_is_a_function_of_the_seed():
    a = np_(R.stateless_uniform([5], seed=[1, 2]))
    assert same(a, np_(R.stateless_uniform([5], seed=[1, 2])))
    assert not same(a, np_(R.stateless_uniform([5], seed=[2, 1])))
    R.set_seed(9)                                 # the global seed plays no part
    assert same(a, np_(R.stateless_uniform([5], seed=[1, 2])))
    g = tw.Graph()
    with g.as_default():
        seed = tw.placeholder(tw.int64, [2])
        t = R.stateless_uniform([5], seed=seed)
    with tw.Session(graph=g) as sess:
        assert same(sess.run(t, {seed: [1, 2]}), a)
        assert same(sess.run(t, {seed: [1, 2]}), a)
        assert not same(sess.run(t, {seed: [1, 3]}), a)


def test_stateless_distributions_and_dtypes():
    x = np_(R.stateless_normal([N], seed=[3, 4], mean=1.0, stddev=2.0, dtype=tw.float64))
    assert abs(x.mean() - 1) < 0.04 and abs(x.std() - 2) < 0.04
    t = np_(R.stateless_truncated_normal([N], seed=[3, 4]))
    assert np.abs(t).max() <= 2.0
    i = np_(R.stateless_uniform([N], seed=[5, 6], minval=10, maxval=20, dtype=tw.int64))
    assert i.min() == 10 and i.max() == 19
    full = R.stateless_uniform([4], seed=[5, 6], minval=None, maxval=None, dtype=tw.int32)
    assert full.dtype is tw.int32
    c = np_(R.stateless_categorical(np.log([[0.2, 0.8]]), 1000, seed=[1, 1]))
    assert 700 < (c == 1).sum() < 900
    with pytest.raises(ValueError, match=r"seed must have shape \[2\]"):
        R.stateless_uniform([2], seed=[1, 2, 3])
    assert not tw.get_op("StatelessRandomUniform").stateful


# ---- Generator -------------------------------------------------------------------------------
def test_generator_from_seed_reproducible_and_global_seed_free():
    g = R.Generator.from_seed(5)
    a = [np_(g.normal([3])), np_(g.uniform([3], minval=1.0, maxval=2.0))]
    R.set_seed(1)
    h = R.Generator.from_seed(5)
    b = [np_(h.normal([3])), np_(h.uniform([3], minval=1.0, maxval=2.0))]
    assert all(same(x, y) for x, y in zip(a, b))
    assert 1 <= b[1].min() and b[1].max() < 2
    g.reset_from_seed(5)
    assert same(np_(g.normal([3])), a[0])
    assert g.uniform([3], maxval=9, dtype=tw.int64).dtype is tw.int64
    assert np.abs(np_(g.truncated_normal([1000]))).max() <= 2


def test_generator_stream_is_shared_by_eager_and_function_calls():
    g1, g2 = R.Generator.from_seed(8), R.Generator.from_seed(8)
    eager = [np_(g1.normal([4])) for _ in range(3)]
    f = tw.function(lambda: g2.normal([4]))
    mixed = [np_(f()), np_(g2.normal([4])), np_(f())]
    assert all(same(a, b) for a, b in zip(eager, mixed))


def test_generator_split_seeds_and_global_generator():
    g = R.Generator.from_seed(1)
    c1, c2 = g.split(2)
    assert not same(np_(c1.uniform([3])), np_(c2.uniform([3])))
    s = g.make_seeds(3)
    assert s.shape == tw.TensorShape([2, 3]) and s.dtype is tw.int64
    R.set_seed(4)
    a = np_(R.get_global_generator().normal([3]))
    R.set_seed(4)
    assert same(np_(R.get_global_generator().normal([3])), a)
    mine = R.Generator.from_seed(0)
    R.set_global_generator(mine)
    assert R.get_global_generator() is mine


# ---- statefulness and gradients --------------------------------------------------------------
def test_random_ops_are_stateful_and_not_differentiable():
    for name in ("RandomUniform", "RandomUniformInt", "RandomStandardNormal", "TruncatedNormal",
                 "Multinomial", "RandomShuffle"):
        assert tw.get_op(name).stateful, name
    x = tw.constant([1.0, 2.0, 3.0])
    with tw.GradientTape() as tape:
        tape.watch(x)
        y = tw.reduce_sum(R.shuffle(x, seed=1))
    assert tape.gradient(y, x) is None


def test_function_runs_random_op_whose_value_is_unused():
    g = R.Generator.from_seed(3)
    ref = R.Generator.from_seed(3)

    @tw.function
    def f():
        g.normal([2])                             # stateful: runs although nothing reads it
        return tw.constant(0.0)
    f()
    ref.normal([2])
    assert same(np_(g.normal([2])), np_(ref.normal([2])))


# ---- dropout ---------------------------------------------------------------------------------
def test_dropout_scales_kept_values():
    x = np.random.default_rng(0).uniform(1, 2, size=N).astype(np.float32)
    y = np_(tw.nn.dropout(x, rate=0.3, seed=1))
    kept = y != 0
    assert abs(kept.mean() - 0.7) < 0.01
    np.testing.assert_allclose(y[kept], x[kept] / 0.7, rtol=1e-6)


def test_dropout_rate_zero_is_identity():
    x = tw.constant([1.0, -2.0, 3.0])
    assert tw.nn.dropout(x, 0.0) is x
    assert same(np_(tw.nn.dropout(x, 0)), [1.0, -2.0, 3.0])
    g = tw.Graph()
    with g.as_default():
        p = tw.placeholder(tw.float32, [3])
        y = tw.nn.dropout(p, 0.0)
    with tw.Session(graph=g) as sess:
        assert same(sess.run(y, {p: [1.0, 2.0, 3.0]}), [1.0, 2.0, 3.0])


def test_dropout_gradient_is_the_mask_eager():
    x = tw.constant(np.random.default_rng(1).uniform(1, 2, size=(50, 4)).astype(np.float32))
    with tw.GradientTape() as tape:
        tape.watch(x)
        y = tw.nn.dropout(x, rate=0.5, seed=3)
    grad = np_(tape.gradient(y, x))
    mask = (np_(y) != 0) * 2.0
    assert same(grad, mask) and 0 < mask.mean() < 2


def test_dropout_gradient_is_the_mask_graph():
    g = tw.Graph()
    with g.as_default():
        x = tw.placeholder(tw.float64, [None, 3])
        y = tw.nn.dropout(x, rate=0.25)
        dx, = tw.gradients(tw.reduce_sum(y * 2.0), [x])
    xv = np.random.default_rng(2).uniform(1, 2, size=(40, 3))
    with tw.Session(graph=g) as sess:
        yv, gv = sess.run([y, dx], {x: xv})
    np.testing.assert_allclose(gv, (yv != 0) * 2.0 / 0.75, rtol=1e-12)
    np.testing.assert_allclose(yv[yv != 0], xv[yv != 0] / 0.75, rtol=1e-12)


def test_dropout_noise_shape_and_tensor_rate():
    x = tw.ones([200, 3])
    y = np_(tw.nn.dropout(x, 0.5, noise_shape=[200, 1], seed=4))
    assert (y == y[:, :1]).all() and set(np.unique(y)) == {0.0, 2.0}
    y2 = np_(tw.nn.dropout(x, 0.5, noise_shape=[None, 1], seed=4))
    assert y2.shape == (200, 3) and (y2 == y2[:, :1]).all()
    z = np_(tw.nn.dropout(tw.ones([N]), tw.constant(0.8), seed=5))
    kept = np.unique(z[z != 0])
    assert len(kept) == 1 and abs(kept[0] - 5) < 1e-5
    assert abs((z != 0).mean() - 0.2) < 0.01


def test_dropout_reproducible_with_seeds():
    R.set_seed(2)
    a = np_(tw.nn.dropout(tw.ones([64]), 0.5, seed=1))
    R.set_seed(2)
    assert same(np_(tw.nn.dropout(tw.ones([64]), 0.5, seed=1)), a)


@pytest.mark.parametrize("rate", [1.0, 1.5, -0.1, "0.5", True])
def test_dropout_rejects_bad_rate(rate):
    with pytest.raises(ValueError, match=r"rate must be a scalar tensor or a float in the range \[0, 1\)"):
        tw.nn.dropout(tw.ones([3]), rate)


def test_dropout_rejects_integer_input():
    with pytest.raises(ValueError, match="floating point"):
        tw.nn.dropout(tw.constant([1, 2]), 0.5)


def test_dropout_gradient_through_function_uses_the_forward_mask():
    f = tw.function(lambda x: tw.nn.dropout(x, 0.5))
    x = tw.ones([1000])
    with tw.GradientTape() as tape:
        tape.watch(x)
        y = f(x)
    assert same(np_(tape.gradient(y, x)), np_(y))
