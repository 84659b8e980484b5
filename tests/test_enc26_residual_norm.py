"""A residual add folded into the layer norm after it (``runtime/passes/residual_norm.py``,
``layer_norm_kernels.add_layer_norm``, ``layer_norm_loops.forward`` with ``add``): the loop with
its twin bit for bit, the fused step with the two steps' bits (eager add then layer norm), against
a float64 reference, the pass's matches and non-matches, and the kernel's checks. Also the shared
attention block loop (``attention_kernels.over_pairs``, the training forward's probabilities)."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.kernels.cpu import attention_kernels, attention_train, jit
from tensorweave.kernels.cpu import layer_norm_kernels as lnk
from tensorweave.kernels.cpu import layer_norm_loops as loops
from tensorweave.ops.layer_norm_ops import layer_norm
from tensorweave.runtime.passes import plan_stats, residual_norm

RNG = np.random.default_rng(2622)


def _floats(*shape, dtype=np.float32):
    return (RNG.standard_normal(shape) * 3 + 1).astype(dtype)


@pytest.mark.parametrize("rms", [False, True])
@pytest.mark.parametrize("rows,n", [(3, 5), (4, 19)])
def test_the_adding_loop_matches_its_twin_bit_for_bit(rows, n, rms):
    x, r, gamma, beta = _floats(rows, n), _floats(rows, n), _floats(n), _floats(n)
    got = []
    for fn in (jit.compile_now(loops.forward, x, r, True, gamma, beta, np.float64(1e-3), rms,
                               np.empty_like(x), np.empty(rows, np.float32), np.empty(rows, np.float32)),
               loops.forward.twin):
        y, mean, inv = np.empty_like(x), np.empty(rows, np.float32), np.empty(rows, np.float32)
        fn(x, r, True, gamma, beta, np.float64(1e-3), rms, y, mean, inv)
        got.append((y, mean, inv))
    for a, b in zip(*got):
        assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rms", [False, True])
def test_the_fused_step_has_the_two_steps_bits_and_the_reference_values(dtype, rms):
    x, r = _floats(2, 6, 24, dtype=dtype), _floats(2, 6, 24, dtype=dtype)
    gamma, beta = _floats(24, dtype=dtype), _floats(24, dtype=dtype)
    got = lnk.add_layer_norm(x, r, gamma, beta, 1e-3, -1, rms)
    apart = lnk._layer_norm(x + r, gamma, beta, 1e-3, -1, rms)
    for a, b in zip(got, apart):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    v = x.astype(np.float64) + r
    mean = v.mean(-1, keepdims=True)
    inv = 1 / np.sqrt(((v - mean) ** 2).mean(-1, keepdims=True) + 1e-3)
    ref = (v - (0 if rms else mean)) * inv * gamma + beta
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got[0], ref, rtol=0, atol=tol * np.abs(ref).max())
    np.testing.assert_allclose(got[1], mean[..., 0], rtol=tol)
    np.testing.assert_allclose(got[2], inv[..., 0], rtol=tol)


def test_leading_axes_normalized_together_add_first():
    x, r = _floats(3, 4, 5), _floats(3, 4, 5)
    gamma, beta = _floats(4, 5), _floats(4, 5)
    got = lnk.add_layer_norm(x, r, gamma, beta, 1e-3, 1, False)
    apart = lnk._layer_norm(x + r, gamma, beta, 1e-3, 1, False)
    assert got[1].shape == (3,) and all(a.tobytes() == b.tobytes() for a, b in zip(got, apart))


@pytest.mark.parametrize("res", [np.ones((2, 3), np.float64), np.ones((2, 4), np.float32),
                                 np.ones((2, 3), np.float16)])
def test_the_kernel_refuses_a_residual_unlike_its_input(res):
    x = np.ones((2, 3), res.dtype if res.dtype == np.float16 else np.float32)
    with pytest.raises(ValueError, match=r"AddLayerNorm: the residual .* must have the input's shape and dtype"):
        lnk.add_layer_norm(x, res, np.ones(3, x.dtype), np.zeros(3, x.dtype), 1e-3, -1, False)


@pytest.mark.parametrize("shape,begin,rms", [((4, 16), -1, False), ((4, 16), -1, True), ((2, 3, 8), 1, False)])
def test_the_plan_fuses_the_add_and_equals_eager_bit_for_bit(shape, begin, rms):
    x, r = _floats(*shape), _floats(*shape)
    gamma, beta = _floats(*shape[begin:]), _floats(*shape[begin:])

    def block(x, r):
        return layer_norm(x + r, gamma, beta, epsilon=0.25, begin_norm_axis=begin, rms=rms)
    f = tw.function(block)
    got = f(x, r)
    assert plan_stats(f).get("residual_norm") == 1
    for a, b in zip(got, block(tw.constant(x), tw.constant(r))):     # y, mean and inv
        assert a.numpy().tobytes() == b.numpy().tobytes()


@pytest.mark.parametrize("case", ["sum_read_twice", "broadcast", "fetched_sum", "switched_off", "float16",
                                  "unknown_shape"])
def test_left_apart_where_it_does_not_match(case, monkeypatch):
    x, r, gamma, beta = _floats(4, 16), _floats(4, 16), _floats(16), _floats(16)
    if case == "sum_read_twice":
        def fn(x, r):
            s = x + r
            return layer_norm(s, gamma, beta)[0] + s
    elif case == "broadcast":
        r = _floats(16)

        def fn(x, r):
            return layer_norm(x + r, gamma, beta)[0]
    elif case == "fetched_sum":
        def fn(x, r):
            s = x + r
            return layer_norm(s, gamma, beta)[0], s
    elif case == "float16":     # (the layer norm computes in float32: the two steps stay)
        x, r = x.astype(np.float16), r.astype(np.float16)

        def fn(x, r):
            return layer_norm(x + r, gamma, beta)[0]
    else:
        if case == "switched_off":
            monkeypatch.setattr(residual_norm, "ENABLED", False)

        def fn(x, r):
            return layer_norm(x + r, gamma, beta)[0]
    spec = [tw.TensorSpec([None, 16], tw.float32)] * 2 if case == "unknown_shape" else None
    f = tw.function(fn, input_signature=spec)
    got = f(x, r)
    assert plan_stats(f).get("residual_norm") is None
    want = fn(tw.constant(x), tw.constant(r))
    for a, b in zip(tw.nest.flatten(got), tw.nest.flatten(want)):
        assert a.numpy().tobytes() == b.numpy().tobytes()


def test_a_training_step_keeps_the_add_for_the_gradient():
    x, r, gamma, beta = _floats(4, 16), _floats(4, 16), _floats(16), _floats(16)
    w = tw.Variable(x)

    @tw.function
    def step():
        with tw.GradientTape() as tape:
            loss = tw.reduce_sum(layer_norm(w + r, gamma, beta)[0] ** 2)
        return tape.gradient(loss, w)
    step()
    assert plan_stats(step).get("residual_norm") is None


def _attention_operands(b=2, t=5, s=7, h=3, d=4, dv=6):
    y = RNG.standard_normal((b, max(t, s), 2, h, d)).astype(np.float32)
    return y[:, :s, 0], y[:, :t, 1], RNG.standard_normal((b, s, h, dv)).astype(np.float32)


@pytest.mark.parametrize("parts", [1, 2])
def test_the_training_forward_is_the_inference_loop_with_its_tiles_kept(parts, monkeypatch):
    """The same blocks and products; float32 exponentials in vector lanes (``softmax_loops.exp_in_place``,
    issue 18 session 25) where inference keeps NumPy's ``exp``: float32 tolerance, not the bits."""
    k, q, v = _attention_operands()
    how = attention_kernels._fusable(k, q, v)
    if how is None:
        pytest.skip("no MKL with a per-thread setting")
    monkeypatch.setattr(attention_kernels, "TILE_BLOCK_BYTES", 5 * 7 * 4 * 2)     # two pairs a block
    out, probs = attention_train.fused_forward(k, q, v, *how, parts)
    inference = attention_kernels._fused(k, q, v, *how, parts, np.empty_like(out))
    np.testing.assert_allclose(out, inference, rtol=0, atol=1e-6 * np.abs(inference).max())
    s = np.einsum("bshd,bthd->bhts", k.astype(np.float64), q)
    p = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(probs, p / p.sum(-1, keepdims=True), rtol=0, atol=1e-6)


@pytest.mark.parametrize("pairs,tile,parts,want", [(6, 1 << 17, 1, [(0, 2), (2, 4), (4, 6)]),
                                                    (6, 1 << 17, 2, [(0, 2), (2, 4), (4, 6)]),
                                                    (6, 1 << 10, 2, [(0, 3), (3, 6)]),
                                                    (5, 1 << 10, 2, [(0, 3), (3, 5)]),
                                                    (3, 1 << 20, 1, [(0, 1), (1, 2), (2, 3)])])
def test_over_pairs_blocks_cover_every_pair_once(pairs, tile, parts, want):
    got = []
    attention_kernels.over_pairs(pairs, tile, parts, lambda p0, p1: got.append((p0, p1)))
    assert sorted(got) == want


@pytest.mark.parametrize("pairs,threads,inside,want", [(1, 2, False, 1), (4, 2, False, 2), (4, 1, False, 1),
                                                        (4, 2, True, 1)])
def test_pair_parts_is_the_threads_at_most_one_per_pair(pairs, threads, inside, want, monkeypatch):
    monkeypatch.setattr(attention_kernels.gemm, "split_parts", lambda: threads)
    monkeypatch.setattr(attention_kernels.gemm, "inside_blocks_here", lambda: inside)
    assert attention_kernels.pair_parts(pairs) == want
