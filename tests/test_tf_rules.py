"""TensorFlow's rules where tensorweave used to give other answers silently (issue 19):
no implicit promotion (Python scalars included), kernel dtypes, bitwise ``~``, and gradients
that stay finite where a ``where`` discards a branch."""
import numpy as np
import pytest

import tensorweave as tw


def _grad(fn, *values):
    xs = [tw.constant(np.asarray(v, np.float32)) for v in values]
    with tw.GradientTape() as tape:
        for x in xs:
            tape.watch(x)
        y = fn(*xs)
    return [None if g is None else g.numpy() for g in tape.gradient(y, xs)]


# ---- no implicit promotion -----------------------------------------------------------------
@pytest.mark.parametrize("expr", [
    lambda x: x + 2.0, lambda x: 2.0 * x, lambda x: x // 2.0, lambda x: x ** 2.0, lambda x: x == 1.0,
    lambda x: tw.maximum(x, 1.0), lambda x: tw.where([True, False], x, 1.0), lambda x: x + [1.0, 2.0]])
def test_python_float_never_becomes_an_int(expr):
    with pytest.raises(tw.errors.InvalidArgumentError, match=r"Cannot convert .* to int32.*\n  Created at: .*test_tf_rules.py"):
        expr(tw.constant([1, 2]))


def test_python_float_to_int_constant_raises_like_tf():
    with pytest.raises(TypeError, match="Cannot convert 1.0 to int32"):
        tw.constant(1.0, dtype=tw.int32)
    with pytest.raises(TypeError, match="Cannot convert"):
        tw.convert_to_tensor([1.0, 2.0], dtype=tw.int32)
    assert tw.constant([], dtype=tw.int32).dtype is tw.int32          # empty lists are fine
    assert (tw.constant([1.0, 2.0]) + 2).dtype is tw.float32           # int scalars into floats are fine
    assert (tw.constant([1, 2]) + True).numpy().tolist() == [2, 3]      # as in TF


@pytest.mark.parametrize("op", [tw.sigmoid, tw.sqrt, tw.exp, tw.log, tw.tanh, tw.math.reciprocal, tw.rsqrt,
                                tw.nn.gelu, tw.nn.leaky_relu, tw.floor, tw.is_nan])
def test_float_only_ops_reject_ints(op):
    with pytest.raises(tw.errors.InvalidArgumentError, match="Unsupported dtype int32; expected one of: "
                                                            "float16, bfloat16, float32, float64"):
        op(tw.constant([1, 2]))


def test_float_only_ops_reject_ints_in_graphs():
    with tw.Graph().as_default():
        with pytest.raises(tw.errors.InvalidArgumentError, match="node 'Sigmoid'.*Unsupported|Unsupported.*node 'Sigmoid'"):
            tw.sigmoid(tw.placeholder(tw.int32, [2]))


def test_add_n_mixed_dtypes_raise():
    with pytest.raises(tw.errors.InvalidArgumentError, match="Mixed dtypes: input 0 is float32 but input 1 is float64"):
        tw.add_n([tw.constant(1.0), tw.constant(1.0, tw.float64)])
    with pytest.raises(ValueError, match="non-empty"):
        tw.add_n([])


@pytest.mark.parametrize("expr", [
    lambda: tw.constant([True, False]) + True, lambda: tw.constant([True]) < tw.constant([False]),
    lambda: tw.maximum(True, False), lambda: tw.square(tw.constant([True])),
    lambda: tw.logical_and(tw.constant([1]), tw.constant([1])),
    lambda: tw.negative(tw.constant([1], tw.uint8)), lambda: tw.abs(tw.constant([1], tw.uint8)),
    lambda: tw.matmul(tw.ones((2, 2), tw.int8), tw.ones((2, 2), tw.int8)),
    lambda: tw.matmul(tw.ones((2, 2), tw.bool), tw.ones((2, 2), tw.bool))])
def test_dtypes_without_tf_kernels_raise(expr):
    with pytest.raises(tw.errors.InvalidArgumentError, match="Unsupported dtype"):
        expr()


def test_matmul_rank_and_flags_like_tf():
    with pytest.raises(tw.errors.InvalidArgumentError, match="rank >= 2"):
        tw.matmul(tw.ones(2), tw.ones(2))
    with pytest.raises(ValueError, match="only one of `transpose_a` and `adjoint_a`"):
        tw.matmul(tw.ones((2, 2)), tw.ones((2, 2)), transpose_a=True, adjoint_a=True)


def test_equality_still_works_on_bool():
    assert (tw.constant([True, False]) == tw.constant([True, True])).numpy().tolist() == [True, False]


# ---- bitwise ------------------------------------------------------------------------------------
def test_invert_is_bitwise_on_integers_and_logical_on_bool():
    assert (~tw.constant([0, 5, -1])).numpy().tolist() == [-1, -6, 0]
    assert (~tw.constant([True, False])).numpy().tolist() == [False, True]
    x = tw.constant([1, 6])
    assert (x & tw.constant([3, 3])).numpy().tolist() == [1, 2]
    assert (x | 3).numpy().tolist() == [3, 7]
    assert (3 ^ x).numpy().tolist() == [2, 5]
    assert (tw.constant([True, False]) & True).numpy().tolist() == [True, False]


def test_bitwise_namespace():
    b = tw.bitwise
    x, y = tw.constant([12, -7], tw.int64), tw.constant([10, 3], tw.int64)
    assert b.bitwise_and(x, y).numpy().tolist() == [8, 1]
    assert b.bitwise_or(x, y).numpy().tolist() == [14, -5]
    assert b.bitwise_xor(x, y).numpy().tolist() == [6, -6]
    assert b.invert(tw.constant([0], tw.uint8)).numpy().tolist() == [255]
    assert b.left_shift(tw.constant([1, 3]), tw.constant([2, 1])).numpy().tolist() == [4, 6]
    assert b.right_shift(tw.constant([-8, 8]), tw.constant([1, 2])).numpy().tolist() == [-4, 2]
    with pytest.raises(tw.errors.InvalidArgumentError, match="Unsupported dtype float32"):
        b.bitwise_and(tw.constant([1.0]), tw.constant([1.0]))


# ---- gradients ------------------------------------------------------------------------------
@pytest.mark.parametrize("fn", [lambda x: tw.where(x > 0, tw.sqrt(x), 0.0),
                                lambda x: tw.where(x > 0, tw.math.rsqrt(x), 0.0),
                                lambda x: tw.where(x != 0, tw.math.reciprocal(x), 0.0)])
def test_unselected_branch_gradient_is_zero_not_nan(fn):
    g, = _grad(fn, [4.0, 0.0, -1.0])
    assert np.all(np.isfinite(g)) and g[1] == 0 and g[0] != 0


def test_division_gradient_zero_where_the_incoming_gradient_is_zero():
    gx, gy = _grad(lambda x, y: tw.where(y != 0, x / y, 0.0), [1.0, 2.0], [2.0, 0.0])
    np.testing.assert_allclose(gx, [0.5, 0.0])
    np.testing.assert_allclose(gy, [-0.25, 0.0])


def test_sqrt_gradient_at_zero_is_still_inf():
    assert _grad(tw.sqrt, [0.0])[0].tolist() == [np.inf]


@pytest.mark.parametrize("exclusive,reverse", [(False, False), (True, False), (False, True), (True, True)])
def test_cumprod_gradient_with_zeros_is_exact(exclusive, reverse):
    x = np.array([2.0, 0.0, 3.0, 4.0, 0.0, 5.0])
    g, = _grad(lambda t: tw.reduce_sum(tw.math.cumprod(t, exclusive=exclusive, reverse=reverse)
                                       * tw.constant([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])), x)

    def f(v):
        w = v[::-1] if reverse else v
        c = np.cumprod(np.concatenate([[1.0], w[:-1]]) if exclusive else w)
        return np.sum((c[::-1] if reverse else c) * np.arange(1, 7))
    want = [(f(x + e) - f(x - e)) / 2 for e in np.eye(6)]   # f is multilinear: central differences are exact
    np.testing.assert_allclose(g, want, rtol=1e-6)


def test_cumprod_gradient_issue_example():
    assert _grad(lambda t: tw.reduce_sum(tw.math.cumprod(t)), [2.0, 0.0, 3.0, 4.0])[0].tolist() == [1, 32, 0, 0]


@pytest.mark.parametrize("op", ["floor", "round", "ceil", "rint"])
def test_piecewise_constant_ops_have_no_gradient(op):
    assert _grad(getattr(tw.math, op), [1.5]) == [None]


# ---- accepted where TF raises / raising where TF returns -------------------------------------
def test_python_ints_out_of_int64_and_numbers_as_bools_raise():
    with pytest.raises(ValueError, match="out of the int64 range"):
        tw.constant(2 ** 63)
    assert tw.constant(2 ** 63, dtype=tw.uint64).dtype is tw.uint64
    with pytest.raises(tw.errors.InvalidArgumentError, match="Cannot convert 2 to bool"):
        tw.equal(tw.constant([True]), 2)
    assert (tw.constant([True]) == True).numpy().tolist() == [True]  # noqa: E712


def test_uint8_out_of_range_scalar_raises_instead_of_wrapping():
    # A deliberate difference (TF wraps to 45): docs/differences-from-tensorflow.md.
    with pytest.raises(tw.errors.InvalidArgumentError, match="Cannot convert 300 to uint8"):
        tw.constant([1], tw.uint8) + 300


def test_reshape_of_empty_tensor_resolves_minus_one_like_tf():
    assert tw.reshape(tw.zeros([0, 3]), [0, -1]).shape == [0, 3]
    with tw.Graph().as_default():
        assert tw.reshape(tw.zeros([0, 3]), [0, -1]).shape.as_list() == [0, 3]
    with pytest.raises(tw.errors.InvalidArgumentError, match="Cannot reshape"):
        tw.reshape(tw.zeros([0, 3]), [0, -1, 2])


def test_stack_of_nothing_is_an_empty_float_vector():
    out = tw.stack([])
    assert out.dtype is tw.float32 and out.shape == [0]


def test_equality_operators_of_unbroadcastable_shapes():
    assert (tw.ones([2]) == tw.ones([3])).numpy().item() is False
    assert (tw.ones([2]) != tw.ones([3])).numpy().item() is True
    with pytest.raises(tw.errors.InvalidArgumentError, match="Incompatible shapes"):
        tw.equal(tw.ones([2]), tw.ones([3]))


def test_moments_of_integers_are_integers():
    mean, var = tw.nn.moments(tw.constant([1, 2, 4]), [0])
    assert (mean.dtype, mean.numpy().item(), var.numpy().item()) == (tw.int32, 2, 1)


def test_new_tf_names_in_their_namespaces():
    for ns, names in {tw.math: ["divide_no_nan", "l2_normalize", "unsorted_segment_sum", "xlogy", "xdivy", "xlog1py",
                                "atan2", "rint", "reduce_euclidean_norm", "cumulative_logsumexp", "log_sigmoid",
                                "bincount", "segment_sum", "unsorted_segment_sqrt_n", "multiply_no_nan", "lgamma"],
                      tw.linalg: ["cholesky", "solve", "qr", "svd", "eigh", "slogdet", "triangular_solve",
                                  "band_part", "lstsq", "pinv", "logdet", "l2_normalize"],
                      tw: ["truncatediv", "truncatemod", "unique", "unique_with_counts", "strided_slice",
                           "tensor_scatter_nd_max", "tensor_scatter_nd_min", "atan2", "asinh"]}.items():
        assert [n for n in names if not callable(getattr(ns, n, None))] == []
