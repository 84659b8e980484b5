"""``keras.ops``: every op against NumPy (eager and inside ``tw.function``), float64 gradients against
finite differences for the differentiable ones, Keras 3's result dtypes (recorded from Keras), the
symbolic path (ops on ``keras.Input``), control flow and error messages."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave import keras
from tests.keras_tests.keras_ops_dtypes import CASES as DTYPE_CASES

ops = keras.ops
RNG = np.random.default_rng(0)


def _u(shape, lo=-2.0, hi=2.0):
    return RNG.uniform(lo, hi, size=shape)


def _away(a, points=(0.0,), margin=0.15):
    a = np.array(a)
    for p in points:
        close = np.abs(a - p) < margin
        a[close] = p + 2 * margin * np.where(a[close] >= p, 1, -1)
    return a


M34 = _u((3, 4))
POS = _u((3, 4), 0.2, 3.0)
UNIT = _u((3, 4), -0.9, 0.9)
B34 = _u((3, 4))
SQ = _u((3, 3)) + 3 * np.eye(3)

# (name, op, numpy reference, inputs, differentiable)
CASES = [
    ("exp", ops.exp, np.exp, [M34], True),
    ("exp2", ops.exp2, np.exp2, [M34], True),
    ("expm1", ops.expm1, np.expm1, [M34], True),
    ("log", ops.log, np.log, [POS], True),
    ("log1p", ops.log1p, np.log1p, [POS], True),
    ("log2", ops.log2, np.log2, [POS], True),
    ("log10", ops.log10, np.log10, [POS], True),
    ("sqrt", ops.sqrt, np.sqrt, [POS], True),
    ("cbrt", ops.cbrt, np.cbrt, [_away(M34)], True),
    ("sin", ops.sin, np.sin, [M34], True),
    ("cos", ops.cos, np.cos, [M34], True),
    ("tan", ops.tan, np.tan, [UNIT], True),
    ("arcsin", ops.arcsin, np.arcsin, [UNIT], True),
    ("arccos", ops.arccos, np.arccos, [UNIT], True),
    ("arctan", ops.arctan, np.arctan, [M34], True),
    ("sinh", ops.sinh, np.sinh, [M34], True),
    ("cosh", ops.cosh, np.cosh, [M34], True),
    ("tanh", ops.tanh, np.tanh, [M34], True),
    ("arcsinh", ops.arcsinh, np.arcsinh, [M34], True),
    ("arccosh", ops.arccosh, np.arccosh, [POS + 1.2], True),
    ("arctanh", ops.arctanh, np.arctanh, [UNIT], True),
    ("deg2rad", ops.deg2rad, np.deg2rad, [M34], True),
    ("rad2deg", ops.rad2deg, np.rad2deg, [M34], True),
    ("sinc", ops.sinc, np.sinc, [np.array([0.0, 0.3, -1.7, 2.5])], True),
    ("reciprocal", ops.reciprocal, np.reciprocal, [POS], True),
    ("abs", ops.abs, np.abs, [_away(M34)], True),
    ("fabs", ops.fabs, np.fabs, [_away(M34)], True),
    ("negative", ops.negative, np.negative, [M34], True),
    ("square", ops.square, np.square, [M34], True),
    ("sign", ops.sign, np.sign, [_away(M34)], False),
    ("floor", ops.floor, np.floor, [M34], False),
    ("ceil", ops.ceil, np.ceil, [M34], False),
    ("trunc", ops.trunc, np.trunc, [M34], False),
    ("round", ops.round, np.round, [_away(M34, (-1.5, -0.5, 0.5, 1.5))], False),
    ("round_decimals", lambda x: ops.round(x, 1), lambda x: np.round(x, 1), [_away(M34 * 10, (-5, 5)) / 10], False),
    ("signbit", ops.signbit, np.signbit, [np.array([-1.0, -0.0, 0.0, 2.0])], False),
    ("nan_to_num", ops.nan_to_num, np.nan_to_num, [np.array([np.nan, np.inf, -np.inf, 1.5])], False),
    ("isfinite", ops.isfinite, np.isfinite, [np.array([np.nan, np.inf, 1.0])], False),
    ("isposinf", ops.isposinf, np.isposinf, [np.array([np.nan, np.inf, -np.inf])], False),
    ("isneginf", ops.isneginf, np.isneginf, [np.array([np.nan, np.inf, -np.inf])], False),
    ("add", ops.add, np.add, [M34, B34[0]], True),
    ("subtract", ops.subtract, np.subtract, [M34, B34], True),
    ("multiply", ops.multiply, np.multiply, [M34, B34[:, :1]], True),
    ("divide", ops.divide, np.divide, [M34, _away(B34)], True),
    ("divide_no_nan", ops.divide_no_nan, lambda a, b: np.where(b == 0, 0, a / np.where(b == 0, 1, b)),
     [M34, np.where(B34 > 1, 0.0, _away(B34))], False),
    ("power", ops.power, np.power, [POS, B34], True),
    ("maximum", ops.maximum, np.maximum, [M34, B34], True),
    ("minimum", ops.minimum, np.minimum, [M34, B34], True),
    ("fmax", ops.fmax, np.fmax, [np.array([np.nan, 1.0, 2.0]), np.array([0.5, np.nan, 3.0])], False),
    ("fmin", ops.fmin, np.fmin, [np.array([np.nan, 1.0, 2.0]), np.array([0.5, np.nan, 3.0])], False),
    ("mod", ops.mod, np.mod, [M34 * 3, _away(B34)], False),
    ("fmod", ops.fmod, np.fmod, [M34 * 3, _away(B34)], False),
    ("floor_divide", ops.floor_divide, np.floor_divide, [M34 * 3, _away(B34)], False),
    ("arctan2", ops.arctan2, np.arctan2, [_away(M34), _away(B34)], True),
    ("arctan2_axes", ops.arctan2, np.arctan2, [np.array([0.0, 1.0, -1.0, 0.0, -0.0]),
                                               np.array([-1.0, 0.0, 0.0, 0.0, -1.0])], False),
    ("hypot", ops.hypot, np.hypot, [M34, B34], True),
    ("logaddexp", ops.logaddexp, np.logaddexp, [M34, B34], True),
    ("logaddexp2", ops.logaddexp2, np.logaddexp2, [M34, B34], True),
    ("heaviside", ops.heaviside, np.heaviside, [np.array([-1.0, 0.0, 2.0]), np.array([0.5, 0.5, 0.5])], False),
    ("ldexp", ops.ldexp, np.ldexp, [M34, np.arange(12).reshape(3, 4) % 4 - 1], False),
    ("isclose", ops.isclose, np.isclose, [M34, M34 + np.where(B34 > 0, 1e-9, 1e-3)], False),
    ("clip", lambda x: ops.clip(x, -0.5, 0.7), lambda x: np.clip(x, -0.5, 0.7), [_away(M34, (-0.5, 0.7))], True),
    ("where", ops.where, np.where, [M34 > 0, B34, B34[0] * 2], True),
    ("sum", lambda x: ops.sum(x, axis=1), lambda x: np.sum(x, axis=1), [M34], True),
    ("sum_all", ops.sum, np.sum, [M34], True),
    ("prod", lambda x: ops.prod(x, axis=0, keepdims=True), lambda x: np.prod(x, axis=0, keepdims=True), [M34], True),
    ("mean", lambda x: ops.mean(x, axis=(0, 1)), lambda x: np.mean(x, axis=(0, 1)), [M34], True),
    ("var", lambda x: ops.var(x, axis=1), lambda x: np.var(x, axis=1), [M34], True),
    ("std", lambda x: ops.std(x, axis=0), lambda x: np.std(x, axis=0), [M34], True),
    ("max", lambda x: ops.max(x, axis=1), lambda x: np.max(x, axis=1), [M34], True),
    ("min", lambda x: ops.min(x, axis=0), lambda x: np.min(x, axis=0), [M34], True),
    ("max_initial", lambda x: ops.max(x, initial=1.5), lambda x: np.max(x, initial=1.5), [M34 / 2], False),
    ("ptp", lambda x: ops.ptp(x, axis=1), lambda x: np.ptp(x, axis=1), [M34], False),
    ("argmax", lambda x: ops.argmax(x, axis=1), lambda x: np.argmax(x, axis=1), [M34], False),
    ("argmin_flat", ops.argmin, np.argmin, [M34], False),
    ("count_nonzero", lambda x: ops.count_nonzero(x, axis=0), lambda x: np.count_nonzero(x, axis=0),
     [np.where(M34 > 0, M34, 0.0)], False),
    ("all", lambda x: ops.all(x > -1.5, axis=1), lambda x: np.all(x > -1.5, axis=1), [M34], False),
    ("any", lambda x: ops.any(x > 1.5), lambda x: np.any(x > 1.5), [M34], False),
    ("average", lambda x, w: ops.average(x, axis=1, weights=w), lambda x, w: np.average(x, axis=1, weights=w),
     [M34, POS[0]], True),
    ("cumsum", lambda x: ops.cumsum(x, axis=1), lambda x: np.cumsum(x, axis=1), [M34], True),
    ("cumprod", lambda x: ops.cumprod(x, axis=0), lambda x: np.cumprod(x, axis=0), [M34], True),
    ("median", lambda x: ops.median(x, axis=1), lambda x: np.median(x, axis=1), [M34], True),
    ("quantile", lambda x: ops.quantile(x, 0.3), lambda x: np.quantile(x, 0.3), [M34], True),
    ("percentile_axis", lambda x: ops.percentile(x, 80, axis=0, keepdims=True),
     lambda x: np.percentile(x, 80, axis=0, keepdims=True), [M34], True),
    ("quantile_nearest", lambda x: ops.quantile(x, 0.4, axis=1, method="nearest"),
     lambda x: np.quantile(x, 0.4, axis=1, method="nearest"), [M34], False),
    ("nansum", ops.nansum, np.nansum, [np.array([1.0, np.nan, 2.0])], False),
    ("nanmean", lambda x: ops.nanmean(x, axis=1), lambda x: np.nanmean(x, axis=1),
     [np.array([[1.0, np.nan, 2.0], [3.0, 4.0, np.nan]])], False),
    ("nanvar", ops.nanvar, np.nanvar, [np.array([1.0, np.nan, 2.0, 5.0])], False),
    ("nanmax", ops.nanmax, np.nanmax, [np.array([1.0, np.nan, 2.0])], False),
    ("nanargmin", ops.nanargmin, np.nanargmin, [np.array([1.0, np.nan, -2.0])], False),
    ("reshape", lambda x: ops.reshape(x, (4, -1)), lambda x: np.reshape(x, (4, -1)), [M34], True),
    ("ravel", ops.ravel, np.ravel, [M34], True),
    ("transpose", ops.transpose, np.transpose, [M34], True),
    ("swapaxes", lambda x: ops.swapaxes(x, 0, 2), lambda x: np.swapaxes(x, 0, 2), [_u((2, 3, 4))], True),
    ("moveaxis", lambda x: ops.moveaxis(x, [0, 1], [2, 0]), lambda x: np.moveaxis(x, [0, 1], [2, 0]),
     [_u((2, 3, 4))], True),
    ("expand_dims", lambda x: ops.expand_dims(x, (0, 3)), lambda x: np.expand_dims(x, (0, 3)), [M34], True),
    ("squeeze", ops.squeeze, np.squeeze, [_u((1, 3, 1))], True),
    ("broadcast_to", lambda x: ops.broadcast_to(x, (2, 3, 4)), lambda x: np.broadcast_to(x, (2, 3, 4)), [M34], True),
    ("concatenate", lambda a, b: ops.concatenate([a, b], axis=1), lambda a, b: np.concatenate([a, b], 1),
     [M34, B34], True),
    ("append", ops.append, np.append, [M34, B34], True),
    ("stack", lambda a, b: ops.stack([a, b], axis=1), lambda a, b: np.stack([a, b], 1), [M34, B34], True),
    ("hstack", lambda a, b: ops.hstack([a, b]), lambda a, b: np.hstack([a, b]), [M34, B34], True),
    ("vstack", lambda a, b: ops.vstack([a, b]), lambda a, b: np.vstack([a, b]), [M34[0], B34[1]], True),
    ("dstack", lambda a, b: ops.dstack([a, b]), lambda a, b: np.dstack([a, b]), [M34, B34], True),
    ("split", lambda x: ops.split(x, 2, axis=1)[1], lambda x: np.split(x, 2, axis=1)[1], [M34], True),
    ("split_indices", lambda x: ops.split(x, [1, 3], axis=1)[1], lambda x: np.split(x, [1, 3], axis=1)[1],
     [M34], True),
    ("array_split", lambda x: ops.array_split(x, 3, axis=1)[0], lambda x: np.array_split(x, 3, axis=1)[0],
     [M34], True),
    ("tile", lambda x: ops.tile(x, (2, 1, 2)), lambda x: np.tile(x, (2, 1, 2)), [M34], True),
    ("repeat", lambda x: ops.repeat(x, 2, axis=1), lambda x: np.repeat(x, 2, axis=1), [M34], True),
    ("repeat_flat", lambda x: ops.repeat(x, 2), lambda x: np.repeat(x, 2), [M34], True),
    ("flip", lambda x: ops.flip(x, 1), lambda x: np.flip(x, 1), [M34], True),
    ("flip_all", ops.flip, np.flip, [M34], True),
    ("roll", lambda x: ops.roll(x, 2, axis=1), lambda x: np.roll(x, 2, axis=1), [M34], True),
    ("roll_flat", lambda x: ops.roll(x, -5), lambda x: np.roll(x, -5), [M34], True),
    ("rot90", lambda x: ops.rot90(x, 1), lambda x: np.rot90(x, 1), [M34], True),
    ("rot90_3", lambda x: ops.rot90(x, 3, axes=(1, 0)), lambda x: np.rot90(x, 3, axes=(1, 0)), [M34], True),
    ("pad", lambda x: ops.pad(x, ((1, 0), (2, 1))), lambda x: np.pad(x, ((1, 0), (2, 1))), [M34], True),
    ("pad_reflect", lambda x: ops.pad(x, 1, mode="reflect"), lambda x: np.pad(x, 1, mode="reflect"), [M34], True),
    ("pad_symmetric", lambda x: ops.pad(x, ((1, 1), (2, 0)), mode="symmetric"),
     lambda x: np.pad(x, ((1, 1), (2, 0)), mode="symmetric"), [M34], True),
    ("tril", lambda x: ops.tril(x, -1), lambda x: np.tril(x, -1), [M34], True),
    ("triu", lambda x: ops.triu(x, 1), lambda x: np.triu(x, 1), [M34], True),
    ("diag", ops.diag, np.diag, [M34[0]], True),
    ("diag_k", lambda x: ops.diag(x, -1), lambda x: np.diag(x, -1), [M34[0]], True),
    ("diag_of_matrix", lambda x: ops.diag(x, 1), lambda x: np.diag(x, 1), [M34], True),
    ("diagonal", lambda x: ops.diagonal(x, 1, 0, 2), lambda x: np.diagonal(x, 1, 0, 2), [_u((3, 2, 4))], True),
    ("diagflat", ops.diagflat, np.diagflat, [M34[:2, :2]], True),
    ("trace", ops.trace, np.trace, [M34], True),
    ("take", lambda x: ops.take(x, np.array([[2, 0], [-1, 1]]), axis=1),
     lambda x: np.take(x, np.array([[2, 0], [-1, 1]]), axis=1), [M34], True),
    ("take_flat", lambda x: ops.take(x, np.array([5, 0])), lambda x: np.take(x, np.array([5, 0])), [M34], True),
    ("take_along_axis", lambda x: ops.take_along_axis(x, np.argsort(M34, axis=1)[:, :2], axis=1),
     lambda x: np.take_along_axis(x, np.argsort(M34, axis=1)[:, :2], axis=1), [M34], True),
    ("get_item", lambda x: ops.get_item(x, (slice(None, None, -1), 1)), lambda x: x[::-1, 1], [M34], True),
    ("sort", lambda x: ops.sort(x, axis=0), lambda x: np.sort(x, axis=0), [M34], True),
    ("argsort", ops.argsort, lambda x: np.argsort(x, kind="stable"), [M34], False),
    ("matmul", ops.matmul, np.matmul, [_u((2, 3, 4)), _u((4, 5))], True),
    ("matmul_vec", ops.matmul, np.matmul, [M34, B34[0]], True),
    ("dot", ops.dot, np.dot, [M34, _u((4, 2))], True),
    ("dot_nd", ops.dot, np.dot, [_u((2, 3)), _u((4, 3, 2))], True),
    ("vdot", ops.vdot, np.vdot, [M34, B34], True),
    ("inner", ops.inner, np.inner, [M34, B34], True),
    ("outer", ops.outer, np.outer, [M34[0], B34[1]], True),
    ("tensordot", lambda a, b: ops.tensordot(a, b, axes=([1], [0])), lambda a, b: np.tensordot(a, b, ([1], [0])),
     [M34, _u((4, 2))], True),
    ("einsum", lambda a, b: ops.einsum("ij,kj->ik", a, b), lambda a, b: np.einsum("ij,kj->ik", a, b), [M34, B34],
     True),
    ("kron", ops.kron, np.kron, [_u((2, 3)), _u((2, 2))], True),
    ("cross", ops.cross, np.cross, [_u((4, 3)), _u((4, 3))], True),
    ("cross_2d", ops.cross, lambda a, b: np.cross(np.pad(a, ((0, 0), (0, 1))), b), [_u((4, 2)), _u((4, 3))], True),
    ("correlate", ops.correlate, np.correlate, [_u((6,)), _u((3,))], True),
    ("diff", lambda x: ops.diff(x, 2, axis=1), lambda x: np.diff(x, 2, axis=1), [M34], True),
    ("trapezoid", ops.trapezoid, np.trapezoid, [M34], True),
    ("trapezoid_x", lambda y, x: ops.trapezoid(y, x), lambda y, x: np.trapezoid(y, x), [M34, np.cumsum(POS[0])],
     True),
    ("corrcoef", ops.corrcoef, np.corrcoef, [M34], True),
    ("searchsorted", lambda s, v: ops.searchsorted(s, v), lambda s, v: np.searchsorted(s, v),
     [np.array([0.0, 1.0, 1.0, 3.0]), np.array([[-1.0, 1.0], [2.0, 5.0]])], False),
    ("searchsorted_right", lambda s, v: ops.searchsorted(s, v, side="right"),
     lambda s, v: np.searchsorted(s, v, side="right"), [np.array([0.0, 1.0, 1.0, 3.0]), np.array([1.0, 3.0])],
     False),
    ("digitize", lambda x: ops.digitize(x, [0.0, 0.5, 1.0]), lambda x: np.digitize(x, [0.0, 0.5, 1.0]), [M34],
     False),
    ("isin", lambda a: ops.isin(a, np.array([1.0, 3.0])), lambda a: np.isin(a, np.array([1.0, 3.0])),
     [np.array([[1.0, 2.0], [3.0, 4.0]])], False),
    ("vander", ops.vander, np.vander, [M34[0]], True),
    ("i0", ops.i0, np.i0, [M34 * 2], False),
    ("det", ops.det, np.linalg.det, [SQ], True),
    ("inv", ops.inv, np.linalg.inv, [SQ], True),
    ("solve", ops.solve, np.linalg.solve, [SQ, _u((3, 2))], True),
    ("solve_triangular", lambda a, b: ops.solve_triangular(a, b, lower=True),
     lambda a, b: np.linalg.solve(np.tril(a), b), [SQ, _u((3, 2))], True),
    ("slogdet", lambda a: ops.slogdet(a)[1], lambda a: np.linalg.slogdet(a)[1], [SQ], True),
    ("norm", ops.norm, np.linalg.norm, [M34], True),
    ("norm_ord1_axis", lambda x: ops.norm(x, ord=1, axis=1), lambda x: np.linalg.norm(x, ord=1, axis=1), [M34],
     False),
    ("norm_matrix_inf", lambda x: ops.norm(x, ord=np.inf, axis=(0, 1)),
     lambda x: np.linalg.norm(x, ord=np.inf, axis=(0, 1)), [M34], False),
    ("norm_fro", lambda x: ops.norm(x, ord="fro", axis=(0, 1), keepdims=True),
     lambda x: np.linalg.norm(x, ord="fro", axis=(0, 1), keepdims=True), [M34], True),
    ("norm_p3", lambda x: ops.norm(x, ord=3, axis=0), lambda x: np.linalg.norm(x, ord=3, axis=0), [_away(M34)], True),
    ("cholesky", lambda a: ops.cholesky(a @ a.T if isinstance(a, np.ndarray) else ops.matmul(a, ops.transpose(a))),
     lambda a: np.linalg.cholesky(a @ a.T), [SQ], True),
    ("cholesky_upper", lambda a: ops.cholesky(a, upper=True), lambda a: np.linalg.cholesky(a).T, [SQ @ SQ.T], False),
    ("cholesky_inverse", ops.cholesky_inverse, lambda l: np.linalg.inv(l @ l.T), [np.linalg.cholesky(SQ @ SQ.T)],
     True),
    ("eigh_values", lambda a: ops.eigh(a)[0], lambda a: np.linalg.eigh(a)[0], [SQ + SQ.T], True),
    ("eigh_vectors", lambda a: ops.square(ops.eigh(a)[1]), lambda a: np.linalg.eigh(a)[1] ** 2, [SQ + SQ.T], True),
    ("qr", lambda a: ops.qr(a)[0], lambda a: np.linalg.qr(a)[0], [_u((4, 3))], True),
    ("qr_complete", lambda a: ops.qr(a, mode="complete")[1], lambda a: np.linalg.qr(a, mode="complete")[1],
     [_u((4, 3))], False),
    ("svd_values", lambda a: ops.svd(a, compute_uv=False), lambda a: np.linalg.svd(a, compute_uv=False),
     [_u((4, 3))], True),
    ("svd_u", lambda a: ops.abs(ops.svd(a, full_matrices=False)[0]),
     lambda a: np.abs(np.linalg.svd(a, full_matrices=False)[0]), [_u((4, 3))], True),
    ("pinv", ops.pinv, np.linalg.pinv, [_u((4, 3))], False),
    ("lstsq", ops.lstsq, lambda a, b: np.linalg.lstsq(a, b, rcond=None)[0], [_u((5, 3)), _u((5, 2))], False),
    ("matrix_rank", ops.matrix_rank, np.linalg.matrix_rank, [np.outer(M34[0], M34[1])], False),
    ("logsumexp", lambda x: ops.logsumexp(x, axis=1), lambda x: np.log(np.sum(np.exp(x), 1)), [M34], True),
    ("erfc", ops.erfc, lambda x: 1 - np.vectorize(__import__("math").erf)(x), [M34], True),
]


def _np(t):
    return np.asarray(t.numpy() if hasattr(t, "numpy") else t)


def _check(got, want, name, rtol=1e-9, atol=1e-9):
    got, want = _np(got), np.asarray(want)
    assert got.shape == want.shape, f"{name}: shape {got.shape} != NumPy {want.shape}"
    if want.dtype == bool:
        assert got.dtype == bool and (got == want).all(), f"{name}: {got} != {want}"
    else:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol,
                                   err_msg=name)


@pytest.mark.parametrize("name,op,ref,inputs,diff", CASES, ids=[c[0] for c in CASES])
def test_against_numpy(name, op, ref, inputs, diff):
    want = ref(*inputs)
    _check(op(*inputs), want, name)
    traced = tw.function(lambda *a: op(*a))(*[tw.constant(a) for a in inputs])
    _check(traced, want, name + " in tw.function")
    low = [a.astype(np.float32) if a.dtype == np.float64 else a for a in inputs]
    if np.asarray(want).dtype.kind == "f":
        f32 = op(*low)
        assert _np(f32).dtype == np.float32, f"{name}: float32 inputs give {_np(f32).dtype}"
        _check(f32, ref(*low), name + " float32", rtol=1e-4, atol=1e-4)
    if diff:
        _check_grad(name, op, inputs)


def _check_grad(name, op, inputs, eps=1e-6):
    rng = np.random.default_rng(1)
    xs = [tw.constant(a) for a in inputs]
    proj = rng.standard_normal(np.shape(_np(op(*inputs))))
    with tw.GradientTape() as tape:
        for x in xs:
            tape.watch(x)
        loss = tw.reduce_sum(op(*xs) * proj)
    grads = tape.gradient(loss, xs)
    for i, (a, g) in enumerate(zip(inputs, grads)):
        if a.dtype.kind != "f":
            continue
        assert g is not None, f"{name}: no gradient for input {i}"
        g = _np(tw.convert_to_tensor(g))
        for k in rng.choice(a.size, size=min(4, a.size), replace=False):
            idx = np.unravel_index(k, a.shape)
            plus, minus = a.copy(), a.copy()
            plus[idx] += eps
            minus[idx] -= eps
            args_p = [plus if j == i else b for j, b in enumerate(inputs)]
            args_m = [minus if j == i else b for j, b in enumerate(inputs)]
            fd = (np.sum(_np(op(*args_p)) * proj) - np.sum(_np(op(*args_m)) * proj)) / (2 * eps)
            assert abs(fd - g[idx]) <= 1e-5 * max(1.0, abs(fd)), \
                f"{name}: gradient of input {i} at {idx} is {g[idx]}, finite differences give {fd}"


# ---- dtypes ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,expr,dtype", DTYPE_CASES, ids=[c[0] for c in DTYPE_CASES])
def test_result_dtype_matches_keras(name, expr, dtype):
    x = np.array([1, 2], "int32")  # noqa: F841 - used by the recorded expressions
    out = eval(expr, {"ops": ops, "np": np, "x": x})
    assert tw.as_dtype(out.dtype).name == dtype, f"{expr}: {out.dtype}, Keras gives {dtype}"


# Keras 3.15 backend.result_type over these dtypes (rows and columns in this order)
_DTYPES = ["bool", "uint8", "uint16", "uint32", "int8", "int16", "int32", "int64", "bfloat16", "float16", "float32",
           "float64"]
_LATTICE = """
bool     uint8    uint16   uint32   int8     int16    int32    int64    bfloat16 float16  float32  float64
uint8    uint8    uint16   uint32   int16    int16    int32    int64    bfloat16 float16  float32  float64
uint16   uint16   uint16   uint32   int32    int32    int32    int64    bfloat16 float16  float32  float64
uint32   uint32   uint32   uint32   int64    int64    int64    int64    bfloat16 float16  float32  float64
int8     int16    int32    int64    int8     int16    int32    int64    bfloat16 float16  float32  float64
int16    int16    int32    int64    int16    int16    int32    int64    bfloat16 float16  float32  float64
int32    int32    int32    int64    int32    int32    int32    int64    bfloat16 float16  float32  float64
int64    int64    int64    int64    int64    int64    int64    int64    bfloat16 float16  float32  float64
bfloat16 bfloat16 bfloat16 bfloat16 bfloat16 bfloat16 bfloat16 bfloat16 bfloat16 float32  float32  float64
float16  float16  float16  float16  float16  float16  float16  float16  float32  float16  float32  float64
float32  float32  float32  float32  float32  float32  float32  float32  float32  float32  float32  float64
float64  float64  float64  float64  float64  float64  float64  float64  float64  float64  float64  float64
"""


def test_promotion_lattice_matches_keras():
    from tensorweave.keras.ops._dtypes import result_type
    rows = [r.split() for r in _LATTICE.strip().splitlines()]
    for a, row in zip(_DTYPES, rows):
        for b, want in zip(_DTYPES, row):
            assert result_type(a, b) == want, f"result_type({a}, {b}) = {result_type(a, b)}, Keras: {want}"
    # weak Python scalars (Keras: int32+float -> float32, int8+int -> int8, float16+float -> float16)
    assert result_type("int32", float) == "float32"
    assert result_type("int8", int) == "int8"
    assert result_type("float16", float) == "float16"
    assert result_type("bool", int) == "int32"
    assert result_type(1, 2.0) == "float32"


def test_mixed_dtype_ops_compute_in_the_promoted_dtype():
    out = ops.add(np.array([100], "int8"), np.array([200], "uint8"))
    assert out.dtype == tw.int16 and out.numpy().tolist() == [300]
    out = ops.multiply(np.array([3], "int32"), np.array([0.5], "float16"))
    assert out.dtype == tw.float16 and out.numpy().tolist() == [1.5]
    assert ops.add(np.array([1], "int8"), 1).dtype == tw.int8


# ---- creation -------------------------------------------------------------------------------------------
def test_creation_ops_match_numpy():
    _check(ops.arange(1, 7, 2), np.arange(1, 7, 2), "arange")
    _check(ops.arange(0.0, 1.0, 0.25), np.arange(0.0, 1.0, 0.25), "arange float")
    assert ops.arange(3).dtype == tw.int32 and ops.arange(3.0).dtype == tw.float32
    _check(ops.linspace(0, 1, 5), np.linspace(0, 1, 5), "linspace", 1e-6, 1e-6)
    _check(ops.linspace(0, 1, 4, endpoint=False), np.linspace(0, 1, 4, endpoint=False), "linspace", 1e-6, 1e-6)
    _check(ops.linspace([0.0, 1.0], [1.0, 3.0], 3, axis=1), np.linspace([0.0, 1.0], [1.0, 3.0], 3, axis=1),
           "linspace vector", 1e-6, 1e-6)
    _check(ops.logspace(0, 2, 3), np.logspace(0, 2, 3), "logspace", 1e-5, 1e-5)
    _check(ops.geomspace(1, 8, 4), np.geomspace(1, 8, 4), "geomspace", 1e-5, 1e-5)
    _check(ops.eye(3, 4, k=1), np.eye(3, 4, k=1), "eye")
    _check(ops.identity(2), np.identity(2), "identity")
    _check(ops.tri(3, 2, -1), np.tri(3, 2, -1), "tri")
    _check(ops.full((2, 2), 7), np.full((2, 2), 7.0), "full")
    _check(ops.full_like(np.zeros(3, "int32"), 4), np.full(3, 4), "full_like")
    _check(ops.zeros_like(np.ones(2)), np.zeros(2), "zeros_like")
    _check(ops.ones((2, 3)), np.ones((2, 3)), "ones")
    _check(ops.hamming(5), np.hamming(5), "hamming", 1e-6, 1e-6)
    _check(ops.kaiser(5, 3.0), np.kaiser(5, 3.0), "kaiser", 1e-6, 1e-6)
    a, b = ops.meshgrid(np.arange(3.0), np.arange(2.0))
    _check(a, np.meshgrid(np.arange(3.0), np.arange(2.0))[0], "meshgrid")
    _check(ops.array([[1, 2]]), np.array([[1, 2]]), "array")


def test_integer_and_set_ops():
    x = np.array([3, 1, 3, 7, 1, 1])
    _check(ops.bincount(x), np.bincount(x), "bincount")
    _check(ops.bincount(x, weights=np.arange(6.0), minlength=9), np.bincount(x, np.arange(6.0), 9), "bincount w")
    vals, counts = ops.unique(x, return_counts=True)
    _check(vals, [1, 3, 7], "unique")
    _check(counts, [3, 2, 1], "unique counts")
    _check(ops.nonzero(np.array([[0, 2], [3, 0]]))[1], np.nonzero(np.array([[0, 2], [3, 0]]))[1], "nonzero")
    a, b = np.array([12, -18, 7, 0], "int32"), np.array([8, 12, -21, 5], "int32")
    _check(ops.gcd(a, b), np.gcd(a, b), "gcd")
    _check(ops.lcm(a, b), np.lcm(a, b), "lcm")
    _check(tw.function(ops.gcd)(tw.constant(a), tw.constant(b)), np.gcd(a, b), "gcd graph")
    for op, ref in ((ops.bitwise_and, np.bitwise_and), (ops.bitwise_or, np.bitwise_or),
                    (ops.bitwise_xor, np.bitwise_xor)):
        _check(op(a, b), ref(a, b), op.__name__)
        _check(tw.function(op)(tw.constant(a), tw.constant(b)), ref(a, b), op.__name__ + " graph")
    _check(ops.bitwise_invert(a), np.invert(a), "invert")
    _check(ops.left_shift(a, 2), np.left_shift(a, 2), "left_shift")
    _check(ops.right_shift(np.abs(a), 1), np.right_shift(np.abs(a), 1), "right_shift")
    _check(ops.unravel_index(np.array([5, 7]), (3, 4))[0], np.unravel_index([5, 7], (3, 4))[0], "unravel_index")
    counts, edges = ops.histogram(np.array([1.0, 2.0, 2.0, 3.5]), bins=3)
    want_c, want_e = np.histogram([1.0, 2.0, 2.0, 3.5], bins=3)
    _check(counts, want_c, "histogram")
    _check(edges, want_e, "histogram edges")


# ---- nn ---------------------------------------------------------------------------------------------
def _sig(x):
    return 1 / (1 + np.exp(-x))


NN_CASES = [
    ("relu", ops.relu, lambda x: np.maximum(x, 0)),
    ("relu6", ops.relu6, lambda x: np.clip(x, 0, 6)),
    ("sigmoid", ops.sigmoid, _sig),
    ("softplus", ops.softplus, lambda x: np.log1p(np.exp(x))),
    ("softsign", ops.softsign, lambda x: x / (1 + np.abs(x))),
    ("silu", ops.silu, lambda x: x * _sig(x)),
    ("log_sigmoid", ops.log_sigmoid, lambda x: np.log(_sig(x))),
    ("leaky_relu", lambda x: ops.leaky_relu(x, 0.1), lambda x: np.where(x > 0, x, 0.1 * x)),
    ("hard_sigmoid", ops.hard_sigmoid, lambda x: np.clip(x / 6 + 0.5, 0, 1)),
    ("hard_silu", ops.hard_silu, lambda x: x * np.clip(x / 6 + 0.5, 0, 1)),
    ("elu", lambda x: ops.elu(x, 0.5), lambda x: np.where(x > 0, x, 0.5 * np.expm1(x))),
    ("celu", lambda x: ops.celu(x, 2.0), lambda x: np.maximum(x, 0) + 2 * np.expm1(np.minimum(x, 0) / 2)),
    ("glu", ops.glu, lambda x: x[..., :2] * _sig(x[..., 2:])),
    ("hard_tanh", ops.hard_tanh, lambda x: np.clip(x, -1, 1)),
    ("hard_shrink", ops.hard_shrink, lambda x: np.where(np.abs(x) > 0.5, x, 0)),
    ("soft_shrink", ops.soft_shrink, lambda x: np.sign(x) * np.maximum(np.abs(x) - 0.5, 0)),
    ("tanh_shrink", ops.tanh_shrink, lambda x: x - np.tanh(x)),
    ("squareplus", ops.squareplus, lambda x: (x + np.sqrt(x * x + 4)) / 2),
    ("sparse_plus", ops.sparse_plus, lambda x: np.where(x <= -1, 0, np.where(x < 1, (x + 1) ** 2 / 4, x))),
    ("sparse_sigmoid", ops.sparse_sigmoid, lambda x: np.clip((x + 1) / 2, 0, 1)),
    ("threshold", lambda x: ops.threshold(x, 0.3, -1.0), lambda x: np.where(x > 0.3, x, -1.0)),
    ("softmax", ops.softmax, lambda x: np.exp(x) / np.exp(x).sum(-1, keepdims=True)),
    ("softmax_axes", lambda x: ops.softmax(x, axis=(0, 1)), lambda x: np.exp(x) / np.exp(x).sum()),
    ("log_softmax", lambda x: ops.log_softmax(x, 0), lambda x: x - np.log(np.exp(x).sum(0, keepdims=True))),
    ("normalize", ops.normalize, lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)),
    ("rms_normalization", ops.rms_normalization, lambda x: x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-7)),
]
NN_X = _away(M34, (-1.0, -0.5, 0.0, 0.3, 0.5, 1.0, -3.0, 3.0))


@pytest.mark.parametrize("name,op,ref", NN_CASES, ids=[c[0] for c in NN_CASES])
def test_nn_activations(name, op, ref):
    _check(op(NN_X), ref(NN_X), name, 1e-6, 1e-7)
    _check(tw.function(op)(tw.constant(NN_X)), ref(NN_X), name + " graph", 1e-6, 1e-7)
    _check_grad(name, op, [NN_X])
    assert op(NN_X.astype(np.float32)).dtype == tw.float32


def test_nn_convolutions_and_pooling_match_numpy():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 6, 6, 3))
    k = rng.standard_normal((3, 3, 3, 4))

    def conv_ref(x, k, stride=1):
        kh, kw = k.shape[:2]
        oh, ow = (x.shape[1] - kh) // stride + 1, (x.shape[2] - kw) // stride + 1
        out = np.zeros((x.shape[0], oh, ow, k.shape[3]))
        for i in range(oh):
            for j in range(ow):
                patch = x[:, i * stride:i * stride + kh, j * stride:j * stride + kw, :]
                out[:, i, j] = np.tensordot(patch, k, axes=([1, 2, 3], [0, 1, 2]))
        return out
    _check(ops.conv(x, k), conv_ref(x, k), "conv", 1e-9, 1e-9)
    _check(ops.conv(x, k, strides=2), conv_ref(x, k, 2), "conv strided", 1e-9, 1e-9)
    _check(ops.conv(np.transpose(x, (0, 3, 1, 2)), k, data_format="channels_first"),
           np.transpose(conv_ref(x, k), (0, 3, 1, 2)), "conv channels_first", 1e-9, 1e-9)
    dk = rng.standard_normal((3, 3, 3, 2))
    want = np.concatenate([conv_ref(x[..., c:c + 1], dk[:, :, c:c + 1, :]) for c in range(3)], -1)
    _check(ops.depthwise_conv(x, dk), want, "depthwise_conv", 1e-9, 1e-9)
    pk = rng.standard_normal((1, 1, 6, 5))
    _check(ops.separable_conv(x, dk, pk), conv_ref(want, pk), "separable_conv", 1e-9, 1e-9)
    mp = x.reshape(2, 3, 2, 3, 2, 3).max(axis=(2, 4))
    _check(ops.max_pool(x, 2), mp, "max_pool")
    _check(ops.average_pool(x, 2), x.reshape(2, 3, 2, 3, 2, 3).mean(axis=(2, 4)), "average_pool")
    assert ops.max_pool(x, 3, strides=2, padding="same").shape == (2, 3, 3, 3)
    x1 = rng.standard_normal((2, 7, 3))
    k1 = rng.standard_normal((3, 3, 2))
    want1 = np.stack([np.tensordot(x1[:, i:i + 3], k1, axes=([1, 2], [0, 1])) for i in range(5)], 1)
    _check(ops.conv(x1, k1), want1, "conv1d", 1e-9, 1e-9)
    _check_grad("conv", lambda a, b: ops.conv(a, b, padding="same"), [x[:1, :4, :4], k[:, :, :, :2]])


def test_nn_encodings_losses_and_normalization():
    _check(ops.one_hot(np.array([1, 0, 2]), 3), np.eye(3)[[1, 0, 2]], "one_hot")
    _check(ops.one_hot(np.array([1, 0]), 3, axis=0), np.eye(3)[[1, 0]].T, "one_hot axis 0")
    _check(ops.multi_hot(np.array([[0, 2], [1, 1]]), 3), [[1, 0, 1], [0, 1, 0]], "multi_hot")
    t, p = np.array([[0.0, 1.0, 0.0]]), np.array([[0.2, 0.5, 0.3]])
    _check(ops.categorical_crossentropy(t, p), [-np.log(0.5)], "cce", 1e-6, 1e-6)
    logits = np.array([[1.0, 2.0, 0.5]])
    lsm = logits - np.log(np.exp(logits).sum())
    _check(ops.categorical_crossentropy(t, logits, from_logits=True), [-lsm[0, 1]], "cce logits", 1e-6, 1e-6)
    _check(ops.sparse_categorical_crossentropy(np.array([1]), logits, from_logits=True), [-lsm[0, 1]], "scce",
           1e-6, 1e-6)
    z = np.array([0.5, -1.0])
    _check(ops.binary_crossentropy(np.array([1.0, 0.0]), z, from_logits=True),
           [-np.log(_sig(0.5)), -np.log(1 - _sig(-1.0))], "bce logits", 1e-6, 1e-6)
    m, v = ops.moments(M34, axes=[0])
    _check(m, M34.mean(0), "moments mean")
    _check(v, M34.var(0), "moments var")
    _check(ops.layer_normalization(M34, epsilon=1e-5),
           (M34 - M34.mean(-1, keepdims=True)) / np.sqrt(M34.var(-1, keepdims=True) + 1e-5), "layer_norm", 1e-6, 1e-6)
    _check(ops.batch_normalization(M34, M34.mean(0), M34.var(0), axis=1, epsilon=1e-3),
           (M34 - M34.mean(0)) / np.sqrt(M34.var(0) + 1e-3), "batch_normalization", 1e-6, 1e-6)
    x = np.arange(32.0).reshape(1, 2, 2, 8)
    _check(ops.space_to_depth(ops.depth_to_space(x, 2), 2), x, "depth_to_space round trip")


def test_dot_product_attention_matches_numpy():
    rng = np.random.default_rng(5)
    q, k, v = rng.standard_normal((2, 3, 2, 4)), rng.standard_normal((2, 5, 2, 4)), rng.standard_normal((2, 5, 2, 4))
    logits = np.einsum("btnh,bsnh->bnts", q, k) / 2.0
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    _check(ops.dot_product_attention(q, k, v), np.einsum("bnts,bsnh->btnh", p, v), "attention", 1e-9, 1e-9)
    _check_grad("attention", ops.dot_product_attention, [q[:1], k[:1], v[:1]])


# ---- core ---------------------------------------------------------------------------------------------
def test_control_flow_eager_and_in_function():
    def run(fn, *args):
        return _np(fn(*args)), _np(tw.function(fn)(*args))

    def fori(n):
        return ops.fori_loop(0, n, lambda i, s: s + ops.cast(i, "float32") * 2.0, ops.zeros(()))
    for got in run(fori, tw.constant(4)):
        assert got == 12.0

    def wl(x):
        return ops.while_loop(lambda i, v: i < 5, lambda i, v: (i + 1, v * 2.0), (0, x))[1]
    for got in run(wl, tw.constant(1.5)):
        assert got == 48.0

    def cnd(x):
        return ops.cond(ops.sum(x) > 0, lambda: x * 2.0, lambda: -x)
    for got in run(cnd, tw.constant([1.0, -3.0])):
        assert got.tolist() == [-1.0, 3.0]

    def sw(i, x):
        return ops.switch(i, [lambda a: a + 1.0, lambda a: a * 10.0], x)
    for got in run(sw, tw.constant(1), tw.constant(2.0)):
        assert got == 20.0

    def sc(xs):
        return ops.scan(lambda c, x: (c + x, c * x), ops.zeros(()), xs)[1]
    for got in run(sc, tw.constant([1.0, 2.0, 3.0])):
        assert got.tolist() == [0.0, 2.0, 9.0]
    rev = ops.scan(lambda c, x: (c + x, c), 0.0, np.array([1.0, 2.0, 3.0], "float32"), reverse=True)
    assert float(rev[0]) == 6.0 and _np(rev[1]).tolist() == [5.0, 3.0, 0.0]
    _check(ops.associative_scan(lambda a, b: a + b, np.arange(1.0, 5.0)), np.cumsum(np.arange(1.0, 5.0)), "assoc")
    _check(ops.associative_scan(lambda a, b: a * b, np.arange(1.0, 5.0), reverse=True),
           np.cumprod(np.arange(1.0, 5.0)[::-1])[::-1], "assoc reverse")
    _check(ops.map(lambda r: ops.sum(r), M34), M34.sum(1), "map")
    _check(ops.vectorized_map(lambda r: r * 2, M34), M34 * 2, "vectorized_map")


def test_gradient_through_loops():
    x = tw.constant(1.3, dtype=tw.float64)
    with tw.GradientTape() as tape:
        tape.watch(x)
        y = ops.fori_loop(0, 3, lambda i, v: v * x, tw.constant(1.0, dtype=tw.float64))
    assert abs(float(tape.gradient(y, x)) - 3 * 1.3 ** 2) < 1e-9
    with tw.GradientTape() as tape:
        tape.watch(x)
        c, ys = ops.scan(lambda c, e: (c * x + e, c), tw.constant(0.0, tw.float64),
                         tw.constant([1.0, 2.0], tw.float64))
    assert abs(float(tape.gradient(c, x)) - 1.0) < 1e-9  # c = x * 1 + 2


def test_slices_scatters_and_conversion():
    x = np.arange(12.0).reshape(3, 4)
    _check(ops.slice(x, (1, 1), (2, 2)), x[1:3, 1:3], "slice")
    want = x.copy()
    want[0:2, 2:4] = -1
    _check(ops.slice_update(x, (0, 2), -np.ones((2, 2))), want, "slice_update")
    _check(ops.scatter(np.array([[0], [2], [0]]), np.array([1.0, 2.0, 3.0]), (4,)), [4.0, 0.0, 2.0, 0.0], "scatter")
    want = x.copy()
    want[1, 2] = 100
    _check(ops.scatter_update(x, np.array([[1, 2]]), np.array([100.0])), want, "scatter_update")
    assert ops.shape(x) == (3, 4) and ops.ndim(x) == 2 and ops.size(x) == 12
    assert ops.convert_to_tensor(np.array([1, 2])).dtype == tw.int64
    assert ops.convert_to_tensor([1, 2.5]).dtype == tw.float32
    assert ops.convert_to_tensor(1).dtype == tw.int32
    assert ops.convert_to_tensor([1, 2], dtype="float16").dtype == tw.float16
    assert isinstance(ops.convert_to_numpy(ops.ones(2)), np.ndarray)
    assert ops.is_tensor(ops.ones(2)) and not ops.is_tensor(np.ones(2))
    assert ops.dtype(ops.ones(2, dtype="int8")) == "int8"
    assert ops.cast(np.array([1.7, -1.7]), "int32").numpy().tolist() == [1, -1]
    assert ops.saturate_cast(np.array([300.0, -5.0]), "uint8").numpy().tolist() == [255, 0]
    v = tw.Variable([1.0, 2.0])
    with tw.GradientTape() as tape:
        y = ops.sum(ops.stop_gradient(v) * v)
    assert tape.gradient(y, v).numpy().tolist() == [1.0, 2.0]
    a, b = ops.unstack(x, axis=1)[:2]
    _check(b, x[:, 1], "unstack")

    @ops.custom_gradient
    def clipped(t):
        def grad(*args, upstream=None):
            upstream = args[0] if upstream is None else upstream
            return upstream * 0.5
        return t * 3.0, grad
    t = tw.constant([1.0, 2.0])
    with tw.GradientTape() as tape:
        tape.watch(t)
        y = ops.sum(clipped(t))
    assert tape.gradient(y, t).numpy().tolist() == [0.5, 0.5]


def test_math_segments_topk_and_erfinv():
    data = np.array([1.0, 5.0, 2.0, 7.0, -1.0])
    ids = np.array([0, 0, 2, 2, 1])
    _check(ops.segment_sum(data, ids), [6.0, -1.0, 9.0], "segment_sum")
    _check(ops.segment_max(data, ids, num_segments=3), [5.0, -1.0, 7.0], "segment_max")
    _check(ops.segment_min(data, ids), [1.0, -1.0, 2.0], "segment_min")
    _check(ops.segment_prod(data, ids), [5.0, -1.0, 14.0], "segment_prod")
    vals, idx = ops.top_k(np.array([1.0, 5.0, 3.0]), 2)
    assert vals.numpy().tolist() == [5.0, 3.0] and idx.numpy().tolist() == [1, 2]
    y = np.array([-0.99, -0.3, 0.0, 0.45, 0.999])
    _check(ops.erf(ops.erfinv(y)), y, "erf(erfinv)", 1e-9, 1e-9)
    _check(ops.extract_sequences(np.arange(8.0), 3, 2), [[0, 1, 2], [2, 3, 4], [4, 5, 6]], "extract_sequences")


# ---- symbolic use in functional models ---------------------------------------------------------------------
def test_ops_on_keras_inputs_build_a_functional_model():
    inp = keras.Input(shape=(4,))
    h = keras.layers.Dense(3)(inp)
    out = ops.concatenate([ops.relu(h), ops.mean(inp, axis=1, keepdims=True)], axis=-1)
    out = ops.expand_dims(ops.sum(out, axis=-1), -1)
    assert out.shape == (None, 1)
    model = keras.Model(inp, out)
    x = np.random.default_rng(0).standard_normal((5, 4)).astype("float32")
    w, b = model.layers[1].get_weights()
    want = (np.maximum(x @ w + b, 0).sum(1) + x.mean(1))[:, None]
    np.testing.assert_allclose(model.predict(x, verbose=0), want, rtol=1e-5, atol=1e-6)
    model.compile(optimizer="sgd", loss="mse")
    hist = model.fit(x, np.ones((5, 1)), epochs=2, verbose=0)
    assert len(hist.history["loss"]) == 2


# ---- errors -----------------------------------------------------------------------------------------------
def test_errors_are_clear():
    with pytest.raises(ValueError, match="does not split into 3 equal sections"):
        ops.split(np.zeros((4,)), 3)
    with pytest.raises(ValueError, match="mode must be 'constant', 'reflect' or 'symmetric'"):
        ops.pad(np.zeros((2,)), 1, mode="edge")
    with pytest.raises(ValueError, match="side must be 'left' or 'right'"):
        ops.searchsorted(np.arange(3.0), 1.0, side="middle")
    with pytest.raises(TypeError, match="bitwise ops need integer or bool tensors, got float32"):
        ops.bitwise_and(np.ones(2, "float32"), np.ones(2, "float32"))
    with pytest.raises(ValueError, match="quantile: method must be one of"):
        ops.quantile(np.arange(3.0), 0.5, method="cubic")
    with pytest.raises(ValueError, match="padding must be 'valid' or 'same'"):
        ops.conv(np.zeros((1, 4, 4, 1)), np.zeros((2, 2, 1, 1)), padding="full")


# ---- spectral, patches, rearrange, jvp, cdist ------------------------------------------------------------
def test_fft_family_matches_numpy():
    rng = np.random.default_rng(7)
    x, y = rng.standard_normal((2, 8)), rng.standard_normal((2, 8))
    re, im = ops.fft((x, y))
    _check(re, np.fft.fft(x + 1j * y).real, "fft re")
    _check(im, np.fft.fft(x + 1j * y).imag, "fft im")
    z = rng.standard_normal((3, 4, 5))
    re, im = ops.fft2((z, z * 0))
    _check(re, np.fft.fft2(z).real, "fft2")
    back = ops.ifft2((re, im))
    _check(back[0], z, "ifft2")
    re, im = ops.rfft(x[:, :7], fft_length=10)
    _check(re, np.fft.rfft(x[:, :7], 10).real, "rfft")
    _check(im, np.fft.rfft(x[:, :7], 10).imag, "rfft im")
    _check(ops.irfft((re, im), 10), np.fft.irfft(np.fft.rfft(x[:, :7], 10), 10), "irfft")
    sig = rng.standard_normal(64)
    re, im = ops.stft(sig, 12, 5, 16, window="hamming", center=False)
    win = np.pad(0.54 - 0.46 * np.cos(2 * np.pi * np.arange(12) / 12), (2, 2))
    frames = np.stack([sig[i * 5:i * 5 + 16] * win for i in range(1 + (64 - 16) // 5)])
    _check(re, np.fft.rfft(frames).real, "stft")
    _check(im, np.fft.rfft(frames).imag, "stft im")
    _check(ops.istft(ops.stft(sig, 16, 4, 16), 16, 4, 16, length=64), sig, "istft inverts stft")
    _check_grad("rfft", lambda a: ops.rfft(a)[1], [x])


def test_unfold_fold_match_pytorch():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(8).standard_normal((2, 3, 5, 4))
    cols = ops.unfold(x, (2, 3), padding=1, stride=2)
    want = torch.nn.functional.unfold(torch.tensor(x), (2, 3), padding=1, stride=2).numpy()
    _check(cols, want, "unfold")
    _check(ops.fold(want, (5, 4), (2, 3), padding=1, stride=2),
           torch.nn.functional.fold(torch.tensor(want), (5, 4), (2, 3), padding=1, stride=2).numpy(), "fold")
    _check_grad("unfold", lambda a: ops.unfold(a, 2), [x[:1, :2]])


def test_rearrange_jvp_cdist():
    y = np.arange(24).reshape(2, 3, 4)
    _check(ops.rearrange(y, "a b c -> c (a b)"), y.transpose(2, 0, 1).reshape(4, 6), "rearrange merge")
    _check(ops.rearrange(np.arange(30).reshape(6, 5), "(a b) c -> b a c", a=2),
           np.arange(30).reshape(2, 3, 5).transpose(1, 0, 2), "rearrange split")
    with pytest.raises(ValueError, match="must name the same axes"):
        ops.rearrange(y, "a b c -> a b")
    a = np.array([0.5, 1.0])
    out, jv = ops.jvp(lambda t: ops.sin(t) * t, (a,), (np.array([1.0, 2.0]),))
    _check(jv, (np.cos(a) * a + np.sin(a)) * [1.0, 2.0], "jvp")
    p, q = np.random.default_rng(9).standard_normal((2, 4, 3)), np.random.default_rng(10).standard_normal((2, 5, 3))
    want = np.sqrt(((p[:, :, None] - q[:, None]) ** 2).sum(-1))
    _check(ops.cdist(p, q), want, "cdist")
    _check(ops.cdist(p, q, p=1), np.abs(p[:, :, None] - q[:, None]).sum(-1), "cdist p=1")
    _check_grad("cdist", ops.cdist, [p[0], q[0]])


def test_ctc_loss_and_greedy_decode_match_keras():
    rng = np.random.default_rng(0)
    out = rng.standard_normal((2, 6, 4)).astype("float32")
    tgt, tl, ol = np.array([[1, 2, 2], [3, 1, 0]]), np.array([3, 2]), np.array([6, 5])
    keras_loss = [7.656311988830566, 3.3683886528015137]   # recorded from Keras 3.15.1 (TF backend)
    _check(ops.ctc_loss(tgt, out, tl, ol), keras_loss, "ctc_loss", 1e-5, 1e-5)
    _check(tw.function(ops.ctc_loss)(tgt, tw.constant(out), tl, ol), keras_loss, "ctc_loss graph", 1e-5, 1e-5)
    _check_grad("ctc_loss", lambda o: ops.ctc_loss(tgt, o, tl, ol), [out.astype(np.float64)])
    decoded, scores = ops.ctc_decode(out, ol)
    assert decoded.numpy().tolist() == [[[2, 3, 1, 3, 1, -1], [1, 3, 1, -1, -1, -1]]]
    _check(scores, [[-4.175933837890625], [-4.671865940093994]], "ctc_decode scores", 1e-5, 1e-5)
    decoded, _ = ops.ctc_decode(out, ol, mask_index=3, merge_repeated=False)
    assert decoded.numpy().tolist() == [[[2, 2, 1, 1, -1, -1], [0, 1, 1, 1, -1, -1]]]


def test_nan_quantiles_match_numpy_eagerly_and_in_function():
    x = np.array([[1.0, np.nan, 4.0, 2.0, 8.0], [np.nan, np.nan, np.nan, np.nan, np.nan], [3.0, 1.0, 2.0, 0.0, 9.0]])
    for method in ("linear", "lower", "higher", "nearest", "midpoint"):
        want = np.nanquantile(x[[0, 2]], [0.25, 0.7], axis=1, method=method)
        _check(ops.nanquantile(x[[0, 2]], [0.25, 0.7], axis=1, method=method), want, f"nanquantile {method}")
    with np.errstate(all="ignore"), pytest.warns(RuntimeWarning):
        want = np.nanmedian(x, axis=1, keepdims=True)
    _check(tw.function(lambda t: ops.nanmedian(t, axis=1, keepdims=True))(tw.constant(x)), want, "nanmedian graph")
    _check(ops.nanpercentile(x[0], 40), np.nanpercentile(x[0], 40), "nanpercentile")
    _check(ops.quantile(x[2], [0.1, 0.9], method="midpoint"), np.quantile(x[2], [0.1, 0.9], method="midpoint"),
           "quantile midpoint")
