"""The MLP training step the data-parallel and nogil-segment tests build (``test_dp2*``, ``test_nogil24_*``,
``test_seg26_*``, ``test_seg27_*``), and the stand-ins they share.

:func:`mlp_step` is the benchmark MLP's step (``bench_distribute.py``: ReLU between the layers, mean sparse
softmax cross-entropy, SGD) at the sizes a test asks for, in a ``tw.function``, on one device or on
in-process ranks (batch ``S(0)``, weights ``B``); :func:`run` trains it; :func:`plans` gives its bound
plans. Every value comes from ``np.random.default_rng(seed)``: the same arguments, the same bits.

>>> step, params = mlp_step((6, 4, 3), on=2, batch=4)
>>> losses, weights = run(step, params, steps=2)
>>> [w.shape for w in weights], len(plans(step)), bool(losses[1] < losses[0])
([(6, 4), (4,), (4, 3), (3,)], 2, True)
"""
import numpy as np

import tensorweave as tw
from tensorweave.kernels.cpu import jit


def mlp_step(sizes, on=None, batch=32, seed=0, lr=0.05, momentum=0.0, optimizer=None):
    """``(step, params)``: a ``tw.function`` of no arguments making one training step of the MLP of
    layer ``sizes`` (returns the loss), and its variables ``[w, b, w, b, ...]``. ``on``: None (one
    device), a rank count or a placement. Drawn in this order: the inputs, the labels, then per
    layer its weight (He's scale) and its bias (N(0, 0.1)). ``optimizer()`` makes the optimizer
    (default ``SGD(lr, momentum)``)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, sizes[0])).astype(np.float32)
    y = rng.integers(0, sizes[-1], batch).astype(np.int32)
    p = tw.placement("cpu", ranks=list(range(on))) if isinstance(on, int) else on
    params = []
    for a, b in zip(sizes, sizes[1:]):
        for value in ((rng.standard_normal((a, b)) * np.sqrt(2.0 / a)).astype(np.float32),
                      rng.standard_normal(b).astype(np.float32) * 0.1):
            params.append(tw.Variable(value) if p is None else tw.Variable(value, placement=p, sbp=tw.sbp.broadcast))
    x, y = tw.constant(x), tw.constant(y)
    if p is not None:
        x, y = (t.to_global(placement=p, sbp=tw.sbp.split(0)) for t in (x, y))
    opt = optimizer() if optimizer else tw.keras.optimizers.SGD(lr, momentum=momentum)

    @tw.function
    def step():
        with tw.GradientTape() as tape:
            h = x
            for i in range(0, len(params), 2):
                h = tw.matmul(h, params[i]) + params[i + 1]
                if i + 2 < len(params):
                    h = tw.nn.relu(h)
            loss = tw.reduce_mean(tw.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=h))
        opt.apply_gradients(zip(tape.gradient(loss, params), params))
        return loss
    return step, params


def run(step, params, steps=5, between=None):
    """``(losses, weights)``: the losses of ``steps`` calls of ``step`` and copies of ``params`` after
    them; ``between(i)`` before call ``i``. After the second call the background compiles are awaited:
    the later calls run the plans' compiled nogil segments (recorded by the second)."""
    losses = []
    for i in range(steps):
        if between is not None:
            between(i)
        losses.append(step().numpy())
        if i == 1:
            jit.wait_for_compiles()
    return losses, [np.array(p.numpy()) for p in params]


def plans(step):
    """The bound plans of ``step``'s last traced call: one device's, or each rank's (rank order)."""
    cf = list(step._cache.values())[-1]
    return [cf._plan] if cf._global is None else list(cf._global.bound)


def same(a, b):
    """Whether the arrays of ``a`` and ``b`` are the same bits, pair by pair."""
    return len(a) == len(b) and all(np.asarray(x).tobytes() == np.asarray(y).tobytes() for x, y in zip(a, b))


class FakeLib:
    """A per-thread BLAS library (as threadpoolctl's MKL controller is to ``rank_threads``) that records
    every change of its count."""

    internal_api = "mkl"

    def __init__(self, n):
        self.num_threads, self.calls = n, []

    def set_num_threads(self, n):
        self.calls.append(n)
        self.num_threads = n
