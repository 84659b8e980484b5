"""The argument types the first steps' callers pass to kernels built ahead of time (issue 18, cold28).

numba's dispatcher runs a built loop only on an exact match of the arguments' types; on any other
match it compiles, silently (seconds of LLVM in a cold process). So a caller whose types drift from
``aot_kernels.KERNELS`` (an array returned, a read-only view, another layout) brings a cold compile
back. These tests run the real callers, record the types they pass, and require them in the table,
and where this checkout has a build, attached to the dispatcher.
"""
import numpy as np
import pytest
from numba.core import sigutils

import tensorweave as tw
from tensorweave.kernels.cpu import aot, aot_kernels, einsum_group_kernels, nn_loops, pool_tiled


def _listed(dispatcher):
    fn = dispatcher.py_func
    signatures = aot_kernels.KERNELS.get(fn.__module__, {}).get(fn.__qualname__, ())
    return {tuple(sigutils.normalize_signature(s)[0]) for s in signatures}


def _recording(monkeypatch, module, name):
    """Replaces ``module.name`` (a kernel) by a recorder of its calls' numba types; returns the
    dispatcher and the list the types go to."""
    real = getattr(module, name)
    dispatcher, seen = getattr(real, "dispatcher", real), []

    def record(*args):
        seen.append(tuple(dispatcher.typeof_pyval(a) for a in args))
        return real(*args)
    monkeypatch.setattr(module, name, record)
    return dispatcher, seen


def _assert_built(dispatcher, seen):
    assert seen, f"{dispatcher.py_func.__qualname__} was not called"
    missing = set(seen) - _listed(dispatcher)
    assert not missing, f"{dispatcher.py_func.__qualname__}: types not in aot_kernels.KERNELS: {missing}"
    if aot.library() is not None:         # this checkout has a build: the loops are in the dispatcher
        assert set(seen) <= set(dispatcher.aot_signatures)


@pytest.mark.parametrize("shape", [(2, 24, 24, 8), (1, 4, 6, 3)])
def test_max_pool_on_tiling_windows_passes_the_built_types(monkeypatch, shape):
    """The cnn's 2x2 pooling (its training batch in tiles over threads, and batch 1)."""
    dispatcher, seen = _recording(monkeypatch, pool_tiled, "max_tiled")
    x = np.random.default_rng(28).standard_normal(shape).astype(np.float32)
    y = tw.nn.max_pool2d(tw.constant(x), 2, 2, "VALID").numpy()
    _assert_built(dispatcher, seen)
    expected = x.reshape(shape[0], shape[1] // 2, 2, shape[2] // 2, 2, shape[3]).max(axis=(2, 4))
    np.testing.assert_array_equal(y, expected)


def test_the_grouped_projection_passes_its_read_only_bias_as_built(monkeypatch):
    """The encoder's inference: q, k and v projected in one product, their biases stacked into a
    read-only array (shared until a weight changes), whose rows ``bias_act`` adds."""
    dispatcher, seen = _recording(monkeypatch, nn_loops, "bias_act")
    rng = np.random.default_rng(28)
    a = rng.standard_normal((1, 5, 8)).astype(np.float32)
    ws = [rng.standard_normal((8, 6)).astype(np.float32) for _ in range(3)]
    bs = [rng.standard_normal(6).astype(np.float32) for _ in range(3)]
    outs = einsum_group_kernels.fused_einsum_group(a, *ws, *bs, equation="abc,cfd->abfd", count=3,
                                                   weight_axis=1, out_axis=2, bias=True, relu=True)
    assert any(not t[1].mutable for t in seen)                # the stacked bias is read-only
    _assert_built(dispatcher, seen)
    for out, w, b in zip(outs, ws, bs):
        expected = np.maximum(a @ w + b, 0)
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
