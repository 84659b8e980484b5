"""OpInfos for gradient primitives of ``tw.nn`` that have no public ``tw.nn`` function:
``ReluGrad`` (``tensorweave.ops.nn_ops.relu_grad``, TF's ``gen_nn_ops.relu_grad``)."""
import numpy as np

from opinfo import FLOATS, OpInfo, Sample, arr, away_from, noncontig
from tensorweave.ops.nn_ops import relu_grad


def ref_relu_grad(g, y):
    with np.errstate(invalid="ignore"):  # nan > 0 is False
        return np.where(y > 0, g, np.zeros((), g.dtype))


def _relu_grad_samples(dtype, rng):
    def g(*s):
        return arr(rng, s, dtype)

    def y(*s):  # features away from the kink, so finite differences see a constant mask
        return away_from(arr(rng, s, dtype), (0,))
    return [Sample((g(3, 4), y(3, 4)), name="matrix"),
            Sample((g(2, 3, 2, 4), y(2, 3, 2, 4)), name="rank4"),
            Sample((g(), y()), name="scalar"),
            Sample((g(0, 3), y(0, 3)), name="empty"),
            Sample((noncontig(g(2, 5)), y(2, 5)), name="noncontig_gradients"),
            Sample((g(2, 5), noncontig(y(2, 5))), name="noncontig_features")]


def _relu_grad_edge_samples(dtype, rng):
    """Features at the kink (0 and -0 give 0), infinite and nan ones; an inf gradient at a dead
    unit gives 0 (a select, not a product)."""
    y = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0], dtype)
    g = np.array([1.0, 2.0, 3.0, np.inf, 5.0, np.nan], dtype)
    return [Sample((g, y), name="edges"), Sample((np.array([np.inf], dtype), np.array([-1.0], dtype)), name="inf_dead")]


OPS = [
    OpInfo("nn.relu_grad", relu_grad, ref_relu_grad, FLOATS, _relu_grad_samples, grad_order=2),
    # finite differences are meaningless at the kink: values only
    OpInfo("nn.relu_grad_edges", relu_grad, ref_relu_grad, FLOATS, _relu_grad_edge_samples, grad=False),
]
