"""OpInfos for linear algebra (ops/linalg_ops.py).

The einsum reference loops over every index combination (tiny sizes), so it shares no code
with the kernel's ``np.einsum``.
"""
import itertools

import numpy as np

import tensorweave as tw
from opinfo import FLOATS, OpInfo, Sample, arr, as_bf16_safe, noncontig

FI = FLOATS + (tw.int32, tw.int64)
HALF_TOL = {tw.float16: (2e-2, 5e-2), tw.bfloat16: (5e-2, 2e-1)}


def _ref_einsum(equation, *ops):
    wide = np.int64 if ops[0].dtype.kind in "iu" else np.float64
    xs = [np.asarray(o).astype(wide) for o in ops]
    lhs, out = equation.split("->") if "->" in equation else (equation, None)
    terms = lhs.split(",")
    n_ell = max([x.ndim - len(t.replace("...", "")) for t, x in zip(terms, xs) if "..." in t] or [0])
    ell = [chr(0x100 + i) for i in range(n_ell)]  # stand-in labels for '...' dims, right-aligned
    labels = []
    for t, x in zip(terms, xs):
        k = x.ndim - len(t.replace("...", ""))
        labels.append(list(t.replace("...", "#")) if "..." not in t else
                      list(t.split("...")[0]) + ell[n_ell - k:] + list(t.split("...")[1]))
    if out is None:
        flat = [c for t in terms for c in t.replace("...", "")]
        out_labels = ell + sorted(c for c in set(flat) if flat.count(c) == 1)
    else:
        out_labels = list(out.split("...")[0]) + (ell if "..." in out else []) + \
            (list(out.split("...")[1]) if "..." in out else [])
    size = {}
    for lab, x in zip(labels, xs):
        for c, d in zip(lab, x.shape):
            size[c] = max(size.get(c, 1), d) if c in ell else d
    summed = [c for c in dict.fromkeys(c for lab in labels for c in lab) if c not in out_labels]
    res = np.zeros([size[c] for c in out_labels], dtype=wide)
    for combo in itertools.product(*[range(size[c]) for c in out_labels + summed]):
        env = dict(zip(out_labels + summed, combo))
        v = 1
        for lab, x in zip(labels, xs):
            v = v * x[tuple(env[c] if x.shape[k] != 1 or c not in ell else 0 for k, c in enumerate(lab))]
        res[tuple(env[c] for c in out_labels)] += v
    return res.astype(ops[0].dtype)


_EQS = [("ij,jk->ik", [(2, 3), (3, 2)]), ("bij,bjk->bik", [(2, 2, 3), (2, 3, 2)]),
        ("...ij,...jk->...ik", [(1, 2, 3), (2, 3, 2)]), ("...ij,jk", [(2, 3), (3, 2)]),
        ("ij->ji", [(2, 3)]), ("ii->", [(3, 3)]), ("ii->i", [(3, 3)]), ("bii->b", [(2, 2, 2)]),
        ("iij->j", [(2, 2, 3)]), ("ij->", [(2, 3)]), ("ij->j", [(2, 3)]), ("i,i->", [(4,), (4,)]),
        ("i,j->ij", [(2,), (3,)]), ("ijk,jl,lk->i", [(2, 2, 3), (2, 2), (2, 3)]), ("ij,jk", [(2, 3), (3, 2)]),
        ("...i,...i->...", [(2, 3), (3,)]), ("...ij->ij", [(2, 2, 3)]), (",ij->ij", [(), (2, 2)]),
        ("ij,ij->ij", [(2, 3), (2, 3)]), ("ij,jk->ik", [(2, 0), (0, 3)]), ("ab...,b->a...", [(2, 3, 2), (3,)])]


def _einsum_samples(d, r):
    out = [Sample((eq,) + tuple(arr(r, s, d, -2, 2) for s in shapes), name=eq) for eq, shapes in _EQS]
    out.append(Sample(("ij,jk->ik", noncontig(arr(r, (2, 3), d)), arr(r, (3, 2), d)), name="noncontig"))
    return out


def _tensordot_samples(d, r):
    def a(*s):
        return arr(r, s, d, -2, 2)
    return [Sample((a(2, 3), a(3, 4), 1), name="matmul"), Sample((a(2, 3, 2), a(3, 2, 2), 2), name="two"),
            Sample((a(2, 3), a(2,), 0), name="outer"), Sample((a(2, 3, 4), a(4, 2, 3), [[1, 2], [2, 0]]), name="lists"),
            Sample((a(3, 2), a(2, 3), [[-1], [0]]), name="negative"), Sample((a(0, 3), a(3, 2), 1), name="empty")]


def _tensordot_ref(a, b, axes):
    if isinstance(axes, int):
        ax_a, ax_b = list(range(a.ndim - axes, a.ndim)), list(range(axes))
    else:
        ax_a, ax_b = [v % a.ndim for v in axes[0]], [v % b.ndim for v in axes[1]]
    la = [chr(97 + i) for i in range(a.ndim)]
    lb = [chr(97 + a.ndim + i) for i in range(b.ndim)]
    for i, j in zip(ax_a, ax_b):
        lb[j] = la[i]
    out = [c for k, c in enumerate(la) if k not in ax_a] + [c for k, c in enumerate(lb) if k not in ax_b]
    return _ref_einsum("".join(la) + "," + "".join(lb) + "->" + "".join(out), a, b)


def _norm_samples(d, r):
    def a(*s):
        v = arr(r, s, d, -2, 2)
        return np.where(np.abs(v.astype(np.float64)) < 0.2, 0.7, v).astype(d)  # |x| has a kink at 0
    return [Sample((a(3, 4),), name="all"), Sample((a(3, 4),), {"axis": 1}, name="rows"),
            Sample((a(3, 4),), {"axis": -1, "keepdims": True}, name="keep"),
            Sample((a(2, 3),), {"ord": 1, "axis": 0}, name="l1"), Sample((a(5),), {"ord": np.inf}, name="linf"),
            Sample((a(2, 3),), {"ord": 3, "axis": 1}, name="l3"), Sample((a(2, 3),), {"ord": 0.5}, name="l_half"),
            Sample((a(2, 3),), {"ord": 2}, name="l2_flat"),
            Sample((a(2, 3, 3),), {"ord": "fro", "axis": [1, 2]}, name="fro"),
            Sample((a(3, 2, 3),), {"ord": 1, "axis": [0, 2]}, name="mat_l1"),
            Sample((a(3, 4),), {"ord": np.inf, "axis": (-2, -1), "keepdims": True}, name="mat_linf"),
            Sample((a(3, 4),), {"ord": "euclidean", "axis": [1, 0]}, name="swapped"),
            Sample((noncontig(a(2, 3)),), {"axis": 0}, name="noncontig")]


def _norm_ref(x, ord="euclidean", axis=None, keepdims=False):
    xf = x.astype(np.float64)
    if axis is None:
        v = xf.reshape(-1)
        o = 2 if ord in ("euclidean", "fro") else ord
        res = np.linalg.norm(v, ord=o)
        res = np.reshape(res, (1,) * x.ndim) if keepdims else res
    elif np.ndim(axis) == 0 or len(axis) == 1:
        o = 2 if ord in ("euclidean", "fro") else ord
        res = np.linalg.norm(xf, ord=o, axis=int(np.ravel(axis)[0]), keepdims=keepdims)
    else:
        o = "fro" if ord in ("euclidean", "fro") else ord
        res = np.linalg.norm(xf, ord=o, axis=tuple(axis), keepdims=keepdims)
    return np.asarray(res).astype(x.dtype)


def _spectral_samples(d, r):
    return [Sample((arr(r, (3, 4), d),), {"ord": 2, "axis": [0, 1]}, name="matrix"),
            Sample((arr(r, (2, 3, 2), d),), {"ord": 2, "axis": [-1, 0], "keepdims": True}, name="batch")]


def _square(d, r, *batch, n=3):
    # Diagonally dominant, so inverse and determinant are well conditioned.
    a = arr(r, batch + (n, n), d, -1, 1).astype(np.float64) + 2.5 * np.eye(n)
    return a.astype(d)


def _inv_samples(d, r):
    return [Sample((_square(d, r),), name="3x3"), Sample((_square(d, r, 2, n=2),), name="batch"),
            Sample((_square(d, r, n=1),), name="1x1"), Sample((np.zeros((2, 0, 0), d),), name="empty")]


def _inv_ref(x):
    out = np.zeros(x.shape)
    for pos in np.ndindex(*x.shape[:-2]):
        m = x[pos].astype(np.float64)
        n = m.shape[0]
        aug = np.concatenate([m, np.eye(n)], axis=1)
        for c in range(n):  # Gauss-Jordan with partial pivoting
            p = c + int(np.argmax(np.abs(aug[c:, c])))
            aug[[c, p]] = aug[[p, c]]
            aug[c] /= aug[c, c]
            for rr in range(n):
                if rr != c:
                    aug[rr] -= aug[rr, c] * aug[c]
        out[pos] = aug[:, n:]
    return out.astype(x.dtype)


def _det_ref(x):
    def det(m):
        if m.shape[0] == 0:
            return 1.0
        return sum((-1) ** j * m[0, j] * det(np.delete(m[1:], j, axis=1)) for j in range(m.shape[0]))
    out = np.zeros(x.shape[:-2])
    for pos in np.ndindex(*x.shape[:-2]):
        out[pos] = det(x[pos].astype(np.float64))
    return out.astype(x.dtype)


def _diag_samples(d, r):
    return [Sample((arr(r, (3,), d),), name="vector"), Sample((arr(r, (2, 2), d),), name="batch"),
            Sample((arr(r, (0,), d),), name="empty"), Sample((noncontig(arr(r, (2, 3), d)),), name="noncontig")]


def _diag_ref(v):
    out = np.zeros(v.shape + (v.shape[-1],), v.dtype)
    for pos in np.ndindex(*v.shape):
        out[pos + (pos[-1],)] = v[pos]
    return out


def _mat_samples(d, r):
    return [Sample((arr(r, (3, 3), d),), name="square"), Sample((arr(r, (2, 3, 4), d),), name="wide_batch"),
            Sample((arr(r, (4, 2), d),), name="tall"), Sample((arr(r, (0, 2, 2), d),), name="empty"),
            Sample((noncontig(arr(r, (3, 3), d)),), name="noncontig")]


def _diag_part_ref(x):
    k = min(x.shape[-2:])
    out = np.zeros(x.shape[:-2] + (k,), x.dtype)
    for pos in np.ndindex(*out.shape):
        out[pos] = x[pos + (pos[-1],)]
    return out


def _set_diag_samples(d, r):
    return [Sample((arr(r, (3, 3), d), arr(r, (3,), d)), name="square"),
            Sample((arr(r, (2, 2, 3), d), arr(r, (2, 2), d)), name="wide_batch"),
            Sample((noncontig(arr(r, (3, 2), d)), arr(r, (2,), d)), name="tall_noncontig")]


def _set_diag_ref(x, dg):
    out = x.copy()
    for pos in np.ndindex(*dg.shape):
        out[pos + (pos[-1],)] = dg[pos]
    return out


def _cross_samples(d, r):
    return [Sample((arr(r, (3,), d), arr(r, (3,), d)), name="vector"),
            Sample((arr(r, (2, 3), d), arr(r, (2, 3), d)), name="batch"),
            Sample((arr(r, (0, 3), d), arr(r, (0, 3), d)), name="empty")]


def _cross_ref(a, b):
    w = np.int64 if a.dtype.kind in "iu" else np.float64
    a, b, dt = a.astype(w), b.astype(w), a.dtype
    return np.stack([a[..., 1] * b[..., 2] - a[..., 2] * b[..., 1], a[..., 2] * b[..., 0] - a[..., 0] * b[..., 2],
                     a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]], axis=-1).astype(dt)


def _trace_ref(x):
    return _diag_part_ref(x.astype(np.int64 if x.dtype.kind in "iu" else np.float64)).sum(-1).astype(x.dtype)


OPS = [
    OpInfo("einsum", tw.einsum, _ref_einsum, FI, _einsum_samples, grad_order=2, tol=HALF_TOL),
    OpInfo("tensordot", tw.tensordot, _tensordot_ref, FI, _tensordot_samples, grad_order=2, tol=HALF_TOL),
    OpInfo("norm", tw.norm, _norm_ref, FLOATS, _norm_samples, grad_order=2, tol=HALF_TOL),
    OpInfo("norm_spectral", tw.norm, as_bf16_safe(_norm_ref), FLOATS, _spectral_samples, tol=HALF_TOL),
    OpInfo("linalg_inv", tw.linalg.inv, _inv_ref, FLOATS, _inv_samples, grad_order=2, tol=HALF_TOL),
    OpInfo("linalg_det", tw.linalg.det, _det_ref, FLOATS, _inv_samples, grad_order=2,
           tol={tw.float16: (2e-2, 1e-1), tw.bfloat16: (5e-2, 5e-1)}),
    OpInfo("linalg_trace", tw.linalg.trace, _trace_ref, FI, _mat_samples, grad_order=2, tol=HALF_TOL),
    OpInfo("linalg_diag", tw.linalg.diag, _diag_ref, FI, _diag_samples, grad_order=2),
    OpInfo("linalg_diag_part", tw.linalg.diag_part, _diag_part_ref, FI, _mat_samples, grad_order=2),
    OpInfo("linalg_set_diag", tw.linalg.set_diag, _set_diag_ref, FI, _set_diag_samples, grad_order=2),
    OpInfo("linalg_matrix_transpose", tw.linalg.matrix_transpose, lambda x: np.array(np.swapaxes(x, -1, -2)), FI,
           _mat_samples, grad_order=2),
    OpInfo("linalg_cross", tw.linalg.cross, _cross_ref, FI, _cross_samples, grad_order=2, tol=HALF_TOL),
]
