"""Products of one input against same-shaped weights as one stacked product (``FusedEinsumGroup``:
runtime/passes/einsum_group.py, kernels/cpu/einsum_group_kernels.py; issue 18 session 19, enc23):
a float64 NumPy reference's values, the ungrouped plan's and eager's within float32 rounding, the
stacked weights renewed when a weight changes, and no group where a member's output is read
before the group's place or where the plan writes a variable."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core import derived
from tensorweave.kernels.cpu import einsum_group_kernels
from tensorweave.runtime.passes import einsum_group, plan_stats

RNG = np.random.default_rng(23)


def _weights(n=3, bias=True, dtype=np.float32):
    ws = [tw.Variable(RNG.normal(size=(6, 2, 3)).astype(dtype)) for _ in range(n)]
    bs = [tw.Variable(RNG.normal(size=(2, 3)).astype(dtype)) for _ in range(n)] if bias else [None] * n
    return ws, bs


def _projections(ws, bs, relu=False):
    """Attention's Q/K/V projections of one input (``abc,cde->abde`` plus a ``[heads, size]`` bias)."""
    def f(x):
        outs = []
        for w, b in zip(ws, bs):
            y = tw.einsum("abc,cde->abde", x, w)
            y = y if b is None else y + b
            outs.append(tw.nn.relu(y) if relu else y)
        return outs
    return f


def _reference(x, ws, bs, relu=False):
    out = []
    for w, b in zip(ws, bs):
        y = np.einsum("abc,cde->abde", x.astype(np.float64), w.numpy().astype(np.float64))
        y = y if b is None else y + b.numpy()
        out.append(np.maximum(y, 0) if relu else y)
    return out


def _grouped_and_apart(fn, x):
    """The outputs of ``fn``'s plan with the groups, without them (``ENABLED`` off when built), and
    eagerly; and the grouped plan's statistics."""
    on = tw.function(fn)
    got = [r.numpy() for r in on(x)]
    stats = plan_stats(on)
    einsum_group.ENABLED = False
    try:
        apart = [r.numpy() for r in tw.function(fn)(x)]
    finally:
        einsum_group.ENABLED = True
    return got, apart, [r.numpy() for r in fn(x)], stats


@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_three_projections_become_one_group_with_the_reference_values(relu, dtype):
    ws, bs = _weights(dtype=dtype)
    x = RNG.normal(size=(2, 5, 6)).astype(dtype)
    got, apart, eager, stats = _grouped_and_apart(_projections(ws, bs, relu), tw.constant(x))
    assert stats.get("einsum_group") == 1
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for g, a, e, want in zip(got, apart, eager, _reference(x, ws, bs, relu)):
        assert g.shape == want.shape and g.dtype == dtype
        np.testing.assert_allclose(g, want, rtol=tol, atol=tol)
        np.testing.assert_allclose(g, a, rtol=tol, atol=tol)
        np.testing.assert_allclose(g, e, rtol=tol, atol=tol)


def test_products_without_bias_and_a_dense_layout_are_grouped():
    ws = [tw.Variable(RNG.normal(size=(6, 4)).astype(np.float32)) for _ in range(2)]
    x = RNG.normal(size=(1, 3, 6)).astype(np.float32)
    got, _, _, stats = _grouped_and_apart(lambda t: [tw.einsum("abc,cd->abd", t, w) for w in ws], tw.constant(x))
    assert stats.get("einsum_group") == 1
    for g, w in zip(got, ws):
        np.testing.assert_allclose(g, np.einsum("abc,cd->abd", x.astype(np.float64), w.numpy()), rtol=1e-5, atol=1e-5)


def test_a_weight_assigned_or_updated_between_calls_is_used_by_the_next_call():
    ws, bs = _weights()
    f = tw.function(_projections(ws, bs))
    x = RNG.normal(size=(1, 4, 6)).astype(np.float32)
    f(tw.constant(x))
    ws[1].assign(RNG.normal(size=(6, 2, 3)).astype(np.float32))     # a new array
    bs[2].assign_add(np.ones((2, 3), np.float32))                     # in place
    ws[0].assign_sub(np.full((6, 2, 3), 0.5, np.float32))
    for g, want in zip(f(tw.constant(x)), _reference(x, ws, bs)):
        np.testing.assert_allclose(g.numpy(), want, rtol=1e-5, atol=1e-5)
    assert plan_stats(f).get("einsum_group") == 1


def test_no_group_where_a_member_is_read_before_the_last_member():
    ws, bs = _weights(2)

    def f(x):
        q = tw.einsum("abc,cde->abde", x, ws[0]) + bs[0]
        early = tw.reduce_sum(q)                 # read before the second projection's place
        k = tw.einsum("abc,cde->abde", x, ws[1]) + bs[1]
        return early, k
    g = tw.function(f)
    x = tw.constant(RNG.normal(size=(1, 2, 6)).astype(np.float32))
    got = g(x)
    assert "einsum_group" not in plan_stats(g)
    for a, b in zip(got, f(x)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-5)


def test_no_group_in_a_plan_that_writes_a_variable():
    ws, bs = _weights(2)
    counter = tw.Variable(0.0)

    def f(x):
        counter.assign_add(1.0)
        return _projections(ws, bs)(x)
    g = tw.function(f)
    g(tw.constant(RNG.normal(size=(1, 2, 6)).astype(np.float32)))
    assert "einsum_group" not in plan_stats(g)


def test_stacked_equations():
    assert einsum_group.stacked("abc,cde->abde") == ("abc,cfde->abfde", 1, 2)
    assert einsum_group.stacked("xyz,zw->xyw") == ("xyz,zaw->xyaw", 1, 2)
    assert einsum_group.stacked("acbe,aecd->abcd") == ("acbe,aecfd->abcfd", 3, 3)   # batch letters too
    for eq in ("abc,ced->abde", "abc,cde->abed", "ab,bc", "a...,ab->b"):
        assert einsum_group.stacked(eq) is None


def test_kernel_says_what_it_expected():
    with pytest.raises(ValueError, match=r"FusedEinsumGroup \(abc,cfd->abfd\): 2 weights and biases expected"):
        einsum_group_kernels.fused_einsum_group(np.ones((1, 1, 2)), np.ones((2, 2)), equation="abc,cfd->abfd",
                                                count=2, weight_axis=1, out_axis=2, bias=True, relu=False)


def test_stack_of_several_arrays_is_kept_until_one_changes_and_never_confused_by_a_reused_id():
    a, b = np.ones(3), np.zeros(3)
    derived.track(a)
    derived.track(b)
    calls = []

    def stack(*xs):
        calls.append(1)
        return np.stack(xs)
    first = derived.get_many((a, b), "t", stack)
    assert derived.get_many((a, b), "t", stack) is first and len(calls) == 1
    b[0] = 2.0
    derived.modified(b)
    assert derived.get_many((a, b), "t", stack)[1, 0] == 2.0 and len(calls) == 2
    before = derived.generation(b)
    del b
    c = np.full(3, 7.0)          # may reuse the freed array's id: a new generation all the same
    derived.track(c)
    assert derived.generation(c) != before
    assert derived.get_many((a, c), "t", stack)[1, 0] == 7.0
    untracked = np.full(3, 5.0)
    assert derived.get_many((a, untracked), "t", stack)[1, 0] == 5.0
    assert derived.generation(untracked) is None


def test_keras_self_attention_predict_groups_query_key_and_value_of_each_block():
    """Two blocks after an embedding's lookup (a variable read, as at inference): the second
    group's input is computed after the first group's outputs (the plan's rewrite clones it)."""
    keras = tw.keras
    keras.utils.set_random_seed(5)
    ids = keras.Input((4,), dtype="int32")
    h = keras.layers.Embedding(20, 8)(ids)
    for _ in range(2):
        att = keras.layers.MultiHeadAttention(2, 4)
        h = keras.layers.LayerNormalization()(keras.layers.Add()([h, att(h, h)]))
    model = keras.Model(ids, h)
    x = RNG.integers(0, 20, (1, 4)).astype(np.int32)
    got = np.asarray(model.predict_on_batch(x))
    assert plan_stats(model.make_predict_function()).get("einsum_group") == 2
    np.testing.assert_allclose(got, np.asarray(model(x)), rtol=1e-5, atol=1e-6)


def _plan_types(fn):
    cf = list(fn._cache.values())[-1]
    return [st.op.type for st in cf._plan.steps if st.op is not None]


@pytest.mark.parametrize("scale_first", [False, True])
def test_a_scalar_scale_after_one_member_joins_the_group_with_the_same_bits(scale_first):
    ws, bs = _weights()
    x = RNG.normal(size=(1, 4, 6)).astype(np.float32)

    def f(t):
        q, k, v = _projections(ws, bs)(t)
        c = tw.constant(np.float32(0.3))
        return (c * q if scale_first else q * c), k, v, q * np.ones((2, 3), np.float32)   # (the last: not a scalar)
    on = tw.function(lambda t: f(t)[:3])
    got = [r.numpy() for r in on(tw.constant(x))]
    assert "Mul" not in _plan_types(on) and plan_stats(on).get("einsum_group") == 1
    einsum_group.ENABLED = False
    try:
        apart = [r.numpy() for r in tw.function(lambda t: f(t)[:3])(tw.constant(x))]
    finally:
        einsum_group.ENABLED = True
    want = _reference(x, ws, bs)
    want[0] = want[0] * np.float32(0.3)
    for g, a, w in zip(got, apart, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(g, a, rtol=1e-6, atol=1e-6)
    two = tw.function(f)             # q read twice: no scale joins, both Muls stay
    out = [r.numpy() for r in two(tw.constant(x))]
    assert _plan_types(two).count("Mul") == 2
    np.testing.assert_allclose(out[0], want[0], rtol=1e-5, atol=1e-5)


def test_no_group_for_a_bias_of_fewer_axes_nor_a_scale_that_is_not_a_scalar():
    ws = [tw.Variable(RNG.normal(size=(6, 2, 3)).astype(np.float32)) for _ in range(2)]
    bs = [tw.Variable(RNG.normal(size=3).astype(np.float32)) for _ in range(2)]    # [size] only: broadcast over heads
    x = RNG.normal(size=(1, 4, 6)).astype(np.float32)
    f = tw.function(_projections(ws, bs))
    for g, want in zip(f(tw.constant(x)), _reference(x, ws, bs)):
        np.testing.assert_allclose(g.numpy(), want, rtol=1e-5, atol=1e-5)
    assert "einsum_group" not in plan_stats(f)
    ws, bs = _weights(2)
    scale = np.full((2, 3), 0.5, np.float32)
    g = tw.function(lambda t: (lambda q, k: [q * tw.constant(scale), k])(*_projections(ws, bs)(t)))
    got = g(tw.constant(x))
    assert plan_stats(g).get("einsum_group") == 1 and "Mul" in _plan_types(g)
    np.testing.assert_allclose(got[0].numpy(), _reference(x, ws, bs)[0] * scale, rtol=1e-5, atol=1e-5)
