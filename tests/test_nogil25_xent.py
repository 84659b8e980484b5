"""The sparse softmax cross-entropy as a segment opcode (``nogil_ops.XENT``, NumPy's own float32
``exp`` loop through ``ufunc_loops``) and Mean's scalar in a segment: the kernel's bits, and the
MLP train step's with and without segments (``docs/design/nogil-steps.md``)."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.kernels.cpu import fused_kernels, jit, nogil_ops as N, ufunc_loops
from tensorweave.runtime import nogil_segments
from test_nogil24_segments import _segments, _train, one_thread, switch  # noqa: F401 - fixtures

RNG = np.random.default_rng(25)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_exp_loop_gives_numpys_bits_in_place_and_out(dtype):
    fn, data = ufunc_loops.unary_loop(np.exp, dtype)
    x = (RNG.standard_normal(1003) * 30).astype(dtype)
    x[:4] = [np.nan, -np.inf, np.inf, -0.0]
    out, inplace = np.empty_like(x), x.copy()
    ufunc_loops.apply_unary(fn, data, x, out)
    ufunc_loops.apply_unary(fn, data, inplace, inplace)
    with np.errstate(all="ignore"):
        want = np.exp(x).tobytes()
    assert out.tobytes() == want and inplace.tobytes() == want


def _xent(x, labels, scale):
    """The XENT opcode alone: (return code, losses, gradient)."""
    rows, cols = x.shape
    loss, grad = np.full(rows, 7, np.float32), np.full((rows, cols), 7, np.float32)
    s = np.zeros(1, np.float32) if scale is None else scale
    addrs = np.array([x.ctypes.data, labels.ctypes.data, grad.ctypes.data, loss.ctypes.data, s.ctypes.data,
                      *N.exp_loop()], np.int64)
    prog = np.zeros((1, N.WIDTH), np.int64)
    prog[0, :4] = [N.XENT, 0, 1, 2]
    prog[0, 4:11] = [rows, cols, labels.dtype.itemsize * 8, 0 if scale is None else scale.size, 0, 4, 3]
    prog[0, 12:] = [5, 6]
    return jit.compile_now(N.run_program, prog, addrs)(prog, addrs), loss, grad


@pytest.mark.parametrize("label_dtype,scale_shape", [(np.int32, (37, 1)), (np.int64, (1,)), (np.int32, None)])
def test_xent_opcode_gives_the_kernels_bits(label_dtype, scale_shape):
    x = (RNG.standard_normal((37, 10)) * 8).astype(np.float32)
    x[3, 0], x[5], x[6, 2] = np.nan, -np.inf, np.inf
    labels = RNG.integers(0, 10, 37).astype(label_dtype)
    scale = None if scale_shape is None else (RNG.random(scale_shape) + 0.5).astype(np.float32)
    rc, loss, grad = _xent(x, labels, scale)
    consts = () if scale is None else (scale,)
    want_loss, want_grad = fused_kernels.sparse_xent_tail(x, labels, *consts, scaled=scale is not None,
                                                          scale_first=True)
    assert rc == 0
    assert loss.tobytes() == want_loss.tobytes() and grad.tobytes() == want_grad.tobytes()
    # NumPy reference in float64 on the finite rows
    ok = np.isfinite(x).all(axis=1)
    z = x[ok].astype(np.float64)
    logp = z - z.max(1, keepdims=True) - np.log(np.exp(z - z.max(1, keepdims=True)).sum(1, keepdims=True))
    ref_grad = np.exp(logp)
    ref_grad[np.arange(ok.sum()), labels[ok]] -= 1
    if scale is not None:
        ref_grad *= scale[ok] if scale.size > 1 else scale[0]
    np.testing.assert_allclose(loss[ok], -logp[np.arange(ok.sum()), labels[ok]], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grad[ok], ref_grad, rtol=1e-4, atol=1e-6)


def test_xent_opcode_reports_the_row_of_a_bad_label():
    x, labels = RNG.standard_normal((5, 4)).astype(np.float32), np.array([0, 1, 4, 2, 3], np.int32)
    assert _xent(x, labels, None)[0] == 1        # row 0 of the program + 1


def test_mlp_step_on_three_ranks_same_bits_with_the_loss_in_segments(one_thread, switch):  # noqa: F811
    placement = tw.placement("cpu", ranks=[0, 1, 2])
    off_losses, off_params, _ = _train(switch, False, placement, steps=4)
    on_losses, on_params, on_segs = _train(switch, True, placement, steps=4)
    assert [a.tobytes() for a in on_losses] == [a.tobytes() for a in off_losses]
    assert all(a.tobytes() == b.tobytes() for a, b in zip(on_params, off_params))
    for segs in on_segs:           # the loss and its gradient join the forward segment, run compiled
        ops = [op for seg in segs for op in seg.program[:, 0]]
        assert N.XENT in ops and all(seg.runs["compiled"] >= 2 for seg in segs)


def test_one_device_step_is_one_segment_with_its_mean_and_a_bad_label_names_the_node(one_thread, switch):  # noqa: F811
    switch(True)
    rng = np.random.default_rng(0)
    w = tw.Variable(rng.standard_normal((8, 5)).astype(np.float32))
    b = tw.Variable(np.zeros(5, np.float32))
    opt = tw.keras.optimizers.SGD(0.1)

    @tw.function
    def step(x, y):
        with tw.GradientTape() as tape:
            logits = tw.matmul(x, w) + b
            loss = tw.reduce_mean(tw.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        opt.apply_gradients(zip(tape.gradient(loss, [w, b]), [w, b]))
        return loss
    x = tw.constant(rng.standard_normal((16, 8)).astype(np.float32))
    y = tw.constant(rng.integers(0, 5, 16).astype(np.int32))
    losses = [step(x, y).numpy() for _ in range(2)]
    jit.wait_for_compiles()
    losses += [step(x, y).numpy() for _ in range(2)]
    segs = _segments(step)[0]
    ops = [op for seg in segs for op in seg.program[:, 0]]
    assert N.XENT in ops and N.MEAN in ops and segs[0].runs["compiled"] >= 2
    assert len({(type(v), np.asarray(v).dtype, np.shape(v)) for v in losses}) == 1      # (the Python way's)
    w_before = w.numpy().copy()
    named = r"(?s)label value of 9.*node SparseSoftmaxCrossEntropyWithLogits"
    with pytest.raises(tw.errors.InvalidArgumentError, match=named):
        step(x, tw.constant(np.full(16, 9, np.int32)))
    assert segs[0].runs["why"] == "bad input"       # (found by the compiled row, raised by the kernel)
    assert w.numpy().tobytes() == w_before.tobytes()
