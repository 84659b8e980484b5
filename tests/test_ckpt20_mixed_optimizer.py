"""One optimizer over local and global variables together: global_clipnorm's scale (the norm
of every gradient, global ones included) reaches the local variable as a local value, the
steps equal the same optimizer over local copies, and the mix checkpoints and resumes."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.train import Checkpoint

keras = tw.keras
P2 = tw.placement("cpu", ranks=[0, 1])


def _variables(as_global):
    w0 = np.arange(8.0, dtype=np.float32).reshape(4, 2) / 8
    w = tw.Variable(w0, placement=P2, sbp=tw.sbp.split(0)) if as_global else tw.Variable(w0)
    return w, tw.Variable(np.array([1.0, -2.0], np.float32))


def _steps(opt, w, b, n):
    x = tw.constant(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))
    if getattr(w, "is_global", False):
        x = x.to_global(placement=P2, sbp=tw.sbp.broadcast)
    for _ in range(n):
        with tw.GradientTape() as tape:
            loss = tw.reduce_sum(tw.square(tw.matmul(x, w) + b))
        grads = tape.gradient(loss, [w, b])
        opt.apply_gradients(zip(grads, [w, b]))


@pytest.mark.parametrize("make", [lambda: keras.optimizers.SGD(0.05, momentum=0.9, global_clipnorm=1.0),
                                  lambda: keras.optimizers.Adam(0.05, global_clipnorm=0.5)], ids=["sgd", "adam"])
def test_global_clipnorm_over_local_and_global_variables(make):
    w, b = _variables(True)
    _steps(make(), w, b, 3)
    assert w.is_global and not getattr(b, "is_global", False)
    lw, lb = _variables(False)
    _steps(make(), lw, lb, 3)
    np.testing.assert_allclose(w.numpy(), lw.numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(b.numpy(), lb.numpy(), rtol=1e-6, atol=1e-7)


def test_a_mixed_optimizer_checkpoints_and_resumes_bit_exactly(tmp_path):
    def run(restore_from=None, n=2):
        w, b = _variables(True)
        opt = keras.optimizers.Adam(0.05, global_clipnorm=0.5)
        ckpt = Checkpoint(w=w, b=b, opt=opt)
        if restore_from is not None:
            ckpt.restore(restore_from)
        _steps(opt, w, b, n)
        return ckpt, w, b, opt
    ckpt, *_ = run()
    path = ckpt.save(str(tmp_path / "ckpt"))
    _, w, b, opt = run(path)                       # 2 + 2 steps
    _, rw, rb, ropt = run(n=4)
    assert np.array_equal(w.numpy(), rw.numpy()) and np.array_equal(b.numpy(), rb.numpy())
    assert int(opt.iterations.numpy()) == 4
    assert [v.is_global for v in opt.variables if hasattr(v, "is_global")] == \
        [v.is_global for v in ropt.variables if hasattr(v, "is_global")]
