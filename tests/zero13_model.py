"""A small MLP trained by a planned tw.function, for the ZeRO-1 tests (tests/test_zero13_*.py)."""
import numpy as np

import tensorweave as tw

SHAPES = ((7, 5), (5,), (5, 3))      # rows 7 and 5: uneven on 2 and 3 ranks
OPTIMIZERS = {
    "adam": lambda: tw.keras.optimizers.Adam(0.05),
    "sgd_momentum": lambda: tw.keras.optimizers.SGD(0.05, momentum=0.9),
    "rmsprop": lambda: tw.keras.optimizers.RMSprop(0.01),
    "adagrad": lambda: tw.keras.optimizers.Adagrad(0.1),
    "sgd": lambda: tw.keras.optimizers.SGD(0.05),
}


def model(placement, optimizer, shapes=SHAPES, batch=12, seed=0, dtype=np.float32):
    """``(step, variables, optimizer, x)``: ``step(x)`` one training step (a tw.function) of a
    two-layer MLP in ``dtype``; global (weights ``B``, batch ``S(0)``) on ``placement``, local when None."""
    rng = np.random.default_rng(seed)
    values = [rng.standard_normal(s).astype(dtype) for s in shapes]
    x = rng.standard_normal((batch, shapes[0][0])).astype(dtype)
    if placement is None:
        vs = [tw.Variable(v) for v in values]
        x = tw.constant(x)
    else:
        vs = [tw.Variable(v, placement=placement, sbp=tw.sbp.broadcast) for v in values]
        x = tw.constant(x).to_global(placement=placement, sbp=tw.sbp.split(0))
    opt = OPTIMIZERS[optimizer]() if isinstance(optimizer, str) else optimizer

    @tw.function
    def step(x):
        with tw.GradientTape() as tape:
            h = tw.nn.relu(tw.matmul(x, vs[0]) + vs[1])
            loss = tw.reduce_mean(tw.matmul(h, vs[2]) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, vs), vs))
        return loss
    return step, vs, opt, x


def train(placement, optimizer, steps=10, **kwargs):
    """The variables' values and the optimizer's slots (by variable) after ``steps`` steps."""
    step, vs, opt, x = model(placement, optimizer, **kwargs)
    for _ in range(steps):
        step(x)
    return [v.numpy() for v in vs], opt, vs, step, x


def slots_of(opt, v):
    """The optimizer's slot variables of ``v`` (name -> variable)."""
    return {name: s for (ref, name), s in opt._slots.items() if ref == id(v)}
