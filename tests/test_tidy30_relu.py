"""The Relu op's in-place variant by its kernel's vector loop, and the fused loops' Relu with NumPy's bits
(issue 18, session 26 tidy30).

The memory pass's in-place Relu ran the ``inplace`` trait's ``np.maximum`` (the ops layer cannot import a
kernel: 35 µs for 65,536 float32, no vector loop for it here); ``fused_loop_kernels.inplace_kernel`` now
takes the op's CPU kernel where that is marked as taking ``out=`` (``split_passes.relu``: the
``nn_loops.relu`` loop). The fused loops' Relu template was numba's ``np.maximum``, which keeps ``-0.0``
where NumPy's ``maximum(x, 0)`` gives ``0.0``."""
import numpy as np
import pytest

import tensorweave as tw

from tensorweave.kernels.cpu import fused_loop_kernels, split_passes
from tensorweave.runtime.passes import memory
from test_graph_passes import _plan, _run
from test_rows29_relu_rows import _same, _special

tf1 = tw.compat.v1


def _negatives_and_subnormals(dtype):
    """Subnormals of both signs (the smallest and one near the normal range) besides :func:`_special`'s."""
    tiny = np.finfo(dtype).smallest_subnormal
    return np.array([tiny, -tiny, tiny * 1000, -tiny * 1000, np.finfo(dtype).tiny, -np.finfo(dtype).tiny], dtype)


def _values(dtype, repeats):
    return np.concatenate([_special(dtype, repeats), _negatives_and_subnormals(dtype)])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("repeats", [1, 41])
def test_the_in_place_variant_gives_numpys_bits_into_its_input(dtype, repeats):
    x = _values(dtype, repeats)
    want = np.maximum(x, dtype(0))
    got = fused_loop_kernels.inplace_kernel("Relu", 0)(x)
    assert got is x and _same(x, want)


def test_the_in_place_variant_runs_the_kernels_loop(monkeypatch):
    calls = []
    loop = split_passes.nn_loops.relu
    monkeypatch.setattr(split_passes.nn_loops, "relu", lambda x, out: calls.append(x.size) or loop(x, out))
    x = np.linspace(-1, 1, 4096, dtype=np.float32).reshape(64, 64)
    fused_loop_kernels.inplace_kernel("Relu", 0)(x)
    assert sum(calls) == x.size and x.min() == 0


@pytest.mark.parametrize("x", [np.arange(-2, 3), np.linspace(-1, 1, 8, dtype=np.float16),
                               np.linspace(-1, 1, 16).reshape(4, 4)[:, :3], np.full((), -0.0)])
def test_the_in_place_variant_of_other_inputs_is_numpys(x):
    """Integers, float16, a view no flat view can stand for and a 0-d array: NumPy's ``maximum`` into the
    input itself."""
    want = np.maximum(x, np.zeros((), x.dtype))
    assert fused_loop_kernels.inplace_kernel("Relu", 0)(x) is x and _same(np.array(x, order="C"), np.asarray(want))


def test_another_output_array_is_numpys_maximum():
    x, out = np.array([-0.0, -1.0, 2.0]), np.full(3, 7.0)
    assert split_passes.relu(x, out=out) is out and _same(out, np.maximum(x, 0.0)) and x[0] == 0 and np.signbit(x[0])


def test_a_kernel_not_marked_for_out_keeps_the_trait(monkeypatch):
    from tensorweave.core.registry import _OPS
    monkeypatch.setitem(_OPS["Relu"].kernels, "CPU", lambda x: np.maximum(x, 0))
    seen = []
    monkeypatch.setitem(_OPS["Relu"].traits, "inplace", lambda x, out: seen.append(x) or np.maximum(x, 0, out=out))
    x = np.array([-1.0, 1.0])
    fused_loop_kernels.inplace_kernel("Relu", 0)(x)
    assert len(seen) == 1 and x.tolist() == [0.0, 1.0]


def test_a_plans_in_place_relu_runs_the_loop_with_numpys_bits(monkeypatch):
    calls = []
    loop = split_passes.nn_loops.relu
    monkeypatch.setattr(split_passes.nn_loops, "relu",
                        lambda x, out: calls.append(x.ctypes.data == out.ctypes.data) or loop(x, out))
    n = memory.INPLACE_MIN_BYTES // 4 * 2
    xv = np.resize(_values(np.float32, 3), n)
    g = tw.Graph()
    with g.as_default():
        x = tf1.placeholder(tw.float32, [n])
        y = tw.nn.relu(x * tw.constant(2.0, tw.float32))
    plan = _plan([y], [x], elementwise_fusion=False)
    assert [st.node.inplace for st in plan.steps if st.op is not None and st.op.type == "Relu"] == [0]
    assert _same(_run(plan, [xv])[0], np.maximum(xv * np.float32(2.0), np.float32(0)))
    assert calls and all(calls)         # the loop, on the product's own buffer


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("inplace", [-1, 0])
@pytest.mark.parametrize("program, kinds, extra", [
    ((("Relu", ("a0",)),), (True,), ()),
    ((("Mul", ("a0", "a1")), ("Relu", ("v0",))), (True, False), (1.0,)),    # Relu of a computed value
    ((("Relu", ("a1",)), ("AddV2", ("a0", "v0"))), (True, False), (-0.0,)),  # of a scalar input: -0.0 + 0.0
])
def test_the_fused_loops_relu_gives_numpys_bits(dtype, inplace, program, kinds, extra):
    np_dtype = np.dtype(dtype).type
    x = _values(np_dtype, 41)
    scalars = [np_dtype(e) for e in extra]
    want = x.copy()
    for op, args in program:
        vals = [x if a == "a0" else scalars[0] if a == "a1" else want for a in args]
        want = (np.maximum(vals[0], np_dtype(0)) if op == "Relu" else
                np.multiply(*vals) if op == "Mul" else np.add(*vals))
    kernel = fused_loop_kernels.fused_elementwise(program, kinds, x.shape, dtype, ("n",) * len(program), inplace)
    got = kernel(x.copy() if inplace < 0 else x, *scalars)
    assert _same(np.asarray(got), want)
    if program[0][0] == "Relu" and len(program) == 1:
        assert not np.signbit(got[0]) and got[0] == 0        # -0.0 gives 0.0, as NumPy's
