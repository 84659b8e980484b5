"""``ReluGrad`` with a gradient that is not contiguous (issue 18, session 15, net19).

The global average pool's gradient reaches the ResNet's last ReLU as a broadcast view (zero
strides over the positions); the kernel copies it into a contiguous temporary and runs its
compiled select instead of ``np.where``. Checked: the kernel == ``np.where``'s select bit for bit
on broadcast, transposed and sliced gradients (NaN and negative zero kept, an inf gradient at a
dead unit gives 0, the inputs not written); the gradient of ``mean(relu(x))`` over the positions
== NumPy's, eager == graph, and == float64 finite differences."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core import registry

RNG = np.random.default_rng(1915)


def _kernel():
    return registry.get_op("ReluGrad").kernels["CPU"]


def _select(g, f):
    return np.where(f > 0, g, np.zeros((), g.dtype))


def _layouts(dtype):
    """(name, gradient view, features) of shape [3, 4, 5, 6]: none of the views is contiguous."""
    f = RNG.standard_normal((3, 4, 5, 6)).astype(dtype)
    f[0, 0, 0, :2] = (np.nan, -0.0)
    per_image = RNG.standard_normal((3, 1, 1, 6)).astype(dtype)
    per_image[0, 0, 0, 3] = np.inf
    f[0, 0, 0, 3] = -1.0                     # a dead unit under an inf gradient
    per_image[1, 0, 0, 4] = -0.0
    wide = RNG.standard_normal((3, 4, 5, 12)).astype(dtype)
    return [("broadcast", np.broadcast_to(per_image, f.shape), f),
            ("transposed", np.ascontiguousarray(RNG.standard_normal((6, 5, 4, 3)).astype(dtype)).T, f),
            ("sliced", wide[..., ::2], f)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_relu_grad_of_a_strided_gradient_is_the_select_bit_for_bit(dtype):
    for name, g, f in _layouts(dtype):
        assert not g.flags.c_contiguous, name
        g_before, f_before = g.copy(), f.copy()
        got = _kernel()(g, f)
        want = _select(g, f)
        assert got.dtype == want.dtype and got.shape == want.shape, name
        assert got.tobytes() == want.tobytes(), name          # NaN, -0.0 and the dead inf unit too
        assert got.flags.c_contiguous, name
        assert np.array_equal(g, g_before) and f.tobytes() == f_before.tobytes(), name
        assert not np.shares_memory(got, f), name


def test_relu_grad_names_itself_and_the_operands_on_a_mismatch():
    f = np.zeros((2, 3), np.float32)
    with pytest.raises(TypeError, match=r"ReluGrad: gradients float64\[2, 3\] and features float32\[2, 3\] must have the same dtype"):
        _kernel()(np.zeros((2, 3)), f)
    with pytest.raises(ValueError, match=r"ReluGrad: gradients float32\[3, 2\] and features float32\[2, 3\] must have the same shape"):
        _kernel()(np.zeros((3, 2), np.float32), f)


def test_relu_grad_of_a_contiguous_gradient_is_unchanged():
    g, f = RNG.standard_normal((2, 7)).astype(np.float32), RNG.standard_normal((2, 7)).astype(np.float32)
    assert _kernel()(g, f).tobytes() == _select(g, f).tobytes()


def _pooled_relu(x):
    return tw.reduce_mean(tw.nn.relu(x), axis=[1, 2])


def test_gradient_through_the_average_pool_eager_graph_numpy_and_finite_differences():
    x = RNG.standard_normal((2, 3, 3, 4))
    w = RNG.standard_normal((2, 4))                       # weights of the pooled outputs
    want = np.where(x > 0, np.broadcast_to(w[:, None, None, :] / 9.0, x.shape), 0.0)

    xe = tw.constant(x)
    with tw.GradientTape() as tape:
        tape.watch(xe)
        loss = tw.reduce_sum(_pooled_relu(xe) * w)
    eager = tape.gradient(loss, xe).numpy()

    g = tw.Graph()
    with g.as_default():
        xp = tw.placeholder(tw.float64, x.shape)
        (dx,) = tw.gradients(tw.reduce_sum(_pooled_relu(xp) * w), [xp])
    with tw.Session(graph=g) as sess:
        graph = sess.run(dx, {xp: x})

    assert eager.tobytes() == graph.tobytes()
    np.testing.assert_allclose(eager, want, rtol=1e-12, atol=1e-15)

    def loss_of(v):
        return float(np.sum(np.maximum(v, 0).mean(axis=(1, 2)) * w))
    eps = 1e-6
    fd = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[i] += eps
        down[i] -= eps
        fd[i] = (loss_of(up) - loss_of(down)) / (2 * eps)
    np.testing.assert_allclose(eager, fd, rtol=1e-6, atol=1e-8)
