"""The ReLU-gradient selects of ``nn_loops`` and ``fused_loop_kernels``' ``MulNoNan``: the select's bits with
NaN (of any payload), infinities and signed zeros on both sides, and, on an x86-64 CPU with AVX2, LLVM's
vector code for them. On such a CPU they vectorise through masked loads (the load of ``g`` sits inside the
select's branch); the loads-first form was measured slower there (issue 18, vec27: BENCHMARKS.md), so the
guard here is that they stay vectorised, whatever form they take."""
import platform
import re

import llvmlite.binding as ll
import numpy as np
import pytest

from tensorweave.kernels.cpu import fused_loop_kernels as fused, jit, nn_loops, nn_loops_twins
from tensorweave.ops.math_ops import mul_no_nan_into

RNG = np.random.default_rng(27)
SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 2.5]


def _pair(shape, dtype):
    """``(g, y)``: normal values, every special of ``g`` meeting every special of ``y``, and a NaN
    of another payload in ``g``."""
    g, y = (RNG.standard_normal(shape).astype(dtype) for _ in range(2))
    n = len(SPECIAL) ** 2
    g.reshape(-1)[:n], y.reshape(-1)[:n] = np.repeat(SPECIAL, len(SPECIAL)), np.tile(SPECIAL, len(SPECIAL))
    bits = g.reshape(-1).view(np.uint32 if dtype == np.float32 else np.uint64)
    bits[n] = 0x7fc00123 if dtype == np.float32 else 0x7ff8000000000123
    return g, y


def _same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(37, 19), (3, 130)])
def test_relu_gradient_loops_give_the_selects_bits(dtype, shape):
    g, y = _pair(shape, dtype)
    want = np.where(y > 0, g, np.zeros((), dtype))
    flat = [g.reshape(-1), y.reshape(-1), np.full(g.size, 7, dtype)]
    jit.compile_now(nn_loops.relu_grad, *flat)(*flat)
    assert _same(flat[2].reshape(shape), want)
    for kernel, twin, args, out in ((nn_loops.relu_grad_column_sums, nn_loops_twins.relu_grad_column_sums,
                                     lambda: (g, y, np.full_like(g, 7), np.full(shape[1], 0.5)), 2),
                                    (nn_loops.relu_mask_column_sums, nn_loops_twins.relu_mask_column_sums,
                                     lambda: (g.copy(), y, np.full(shape[1], 0.5)), 0)):
        loop, ref = args(), args()
        jit.compile_now(kernel, *loop)(*loop)
        twin(*ref)
        assert _same(loop[out], want) and _same(ref[out], want) and _same(loop[-1], ref[-1])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_fused_mul_no_nan_keeps_its_rule_out_of_place_and_into_either_input(dtype):
    x, y = _pair((9, 23), np.dtype(dtype).type)
    two = np.dtype(dtype).type(2)
    with np.errstate(all="ignore"):
        want = mul_no_nan_into(x, y) * two
    kernel = fused.fused_elementwise((("MulNoNan", ("a0", "a1")), ("Mul", ("v0", "a2"))), (True, True, False),
                                     (9, 23), dtype, ["m"])
    assert _same(kernel(x, y, two), want)
    for k in (0, 1):
        args = [x.copy(), y.copy(), two]
        assert kernel(*args, inplace=k) is args[k] and _same(args[k], want)


def _avx2_host():
    return platform.machine() in ("x86_64", "AMD64") and "+avx2" in ll.get_host_cpu_features().flatten()


def _vectorised(kernel, *args):
    """Whether LLVM's optimised code for ``kernel`` on ``args``' types compares vectors of floats."""
    signature = tuple(kernel.typeof_pyval(a) for a in args)
    kernel.compile(signature)
    return re.search(r"fcmp \w+ <\d+ x float>", kernel.inspect_llvm(signature)) is not None


@pytest.mark.skipif(not _avx2_host(), reason="LLVM's vector code is checked on x86-64 CPUs with AVX2")
def test_the_selects_stay_vectorised():
    g, y = _pair((64, 40), np.float32)
    a, b = g.reshape(-1), y.reshape(-1)
    assert _vectorised(nn_loops.relu_grad, a, b, np.empty_like(a))
    assert _vectorised(nn_loops.relu_grad_column_sums.dispatcher, g, y, np.empty_like(g), np.zeros(40))
    assert _vectorised(nn_loops.relu_mask_column_sums.dispatcher, g, y, np.zeros(40))
    lines, root = fused.program_lines((("MulNoNan", ("a0", "a1")),), (True, True))
    assert _vectorised(fused._compile(fused._source(lines, root, 2), "float32"), np.empty_like(a), a, b)
