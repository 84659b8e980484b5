"""Gradients through boxing and global ops (distribute/autodiff.py) against one-device gradients."""
import itertools

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core.sbp import B, P, Partial, S
from tensorweave.distribute.autodiff import dual_sbp

KINDS = [S(0), S(1), B, P, Partial("max")]
RNG = np.random.default_rng(3)


def test_dual_layouts():
    assert dual_sbp((B, S(1), P, Partial("max"))) == (P, S(1), B, B)


@pytest.mark.parametrize("ranks", [[0, 1], [0, 1, 2], [[0, 1], [2, 3]]])
def test_every_boxing_pair_has_the_identity_gradient_in_the_dual_layout(ranks):
    placement = tw.placement("cpu", ranks=ranks)
    v = RNG.standard_normal((5, 3)).astype(np.float32)
    c = RNG.standard_normal((5, 3)).astype(np.float32)
    nds = list(itertools.product(KINDS, repeat=placement.ndim))
    if placement.ndim == 2:
        nds = nds[::3]                                      # a spread of the 25 x 25 pairs
    cg = tw.constant(c).to_global(placement=placement, sbp=(B,) * placement.ndim)
    for src, dst in itertools.product(nds, repeat=2):
        x = tw.constant(v)
        with tw.GradientTape(persistent=True) as tape:
            tape.watch(x)
            xg = x.to_global(placement=placement, sbp=src)
            tape.watch(xg)
            y = xg.to_global(sbp=dst)
            loss = tw.reduce_sum(y * cg)
        gx, gxg = tape.gradient(loss, [x, xg])
        assert not gx.is_global
        np.testing.assert_allclose(gx.numpy(), c, rtol=1e-6, err_msg=f"{src} -> {dst}")
        if src != dst:                                      # boxed: the gradient takes the dual layout
            assert gxg.sbp == dual_sbp(src), (src, dst, gxg.sbp)
        np.testing.assert_allclose(gxg.numpy(), c, rtol=1e-6, err_msg=f"{src} -> {dst}")


def test_gradients_between_placements():
    a, b = tw.placement("cpu", ranks=[0, 1]), tw.placement("cpu", ranks=[2, 3, 4])
    v = RNG.standard_normal((4, 3)).astype(np.float32)
    xg = tw.constant(v).to_global(placement=a, sbp=S(0))
    with tw.GradientTape() as tape:
        tape.watch(xg)
        loss = tw.reduce_sum(tw.square(xg.to_global(placement=b, sbp=S(1))))
    g = tape.gradient(loss, xg)
    assert g.placement == a and g.sbp == (S(0),)
    np.testing.assert_allclose(g.numpy(), 2 * v, rtol=1e-6)


def _local_and_global_grads(fn, values, placement, sbps):
    local = [tw.constant(v) for v in values]
    with tw.GradientTape() as tape:
        tape.watch(local)
        want_out = fn(*local)
    want = tape.gradient(want_out, local)
    glob = [tw.constant(v).to_global(placement=placement, sbp=s) for v, s in zip(values, sbps)]
    with tw.GradientTape() as tape:
        tape.watch(glob)
        out = fn(*glob)
    got = tape.gradient(out, glob)
    np.testing.assert_allclose(out.numpy(), want_out.numpy(), rtol=1e-5, atol=1e-6)
    for g, w, s in zip(got, want, sbps):
        assert g.is_global
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-6, err_msg=str(s))
    return got


@pytest.mark.parametrize("sbps,grad_sbps", [((S(0), B), ((S(0),), (P,))), ((B, S(1)), ((P,), (S(1),))),
                                            ((S(1), S(0)), ((S(1),), (S(0),)))])
def test_matmul_gradients_in_three_layouts(sbps, grad_sbps):
    p = tw.placement("cpu", ranks=[0, 1, 2])
    i, w = RNG.standard_normal((5, 4)).astype(np.float32), RNG.standard_normal((4, 7)).astype(np.float32)
    got = _local_and_global_grads(lambda a, b: tw.reduce_sum(tw.tanh(tw.matmul(a, b))), [i, w], p, sbps)
    assert tuple(g.sbp for g in got) == grad_sbps


@pytest.mark.parametrize("ranks", [[0, 1], [[0, 1], [2, 3]]])
def test_a_few_op_gradients_match_one_device(ranks):
    p = tw.placement("cpu", ranks=ranks)
    nd = lambda s: (s,) * p.ndim  # noqa: E731
    v = RNG.standard_normal((6, 5)).astype(np.float32)
    u = RNG.standard_normal((6, 5)).astype(np.float32)
    _local_and_global_grads(lambda a, b: tw.reduce_sum(tw.nn.relu(a) * b + tw.exp(a * 0.1)), [v, u], p,
                            [nd(S(0)), nd(B)])
    _local_and_global_grads(lambda a: tw.reduce_max(a, axis=1), [v], p, [nd(S(1))])
    _local_and_global_grads(lambda a: tw.reduce_sum(tw.nn.softmax(a) * np.arange(5, dtype=np.float32)), [v], p,
                            [nd(S(0))])
    _local_and_global_grads(lambda a, b: tw.reduce_mean(tw.square(a - b)), [v, u], p, [nd(P), nd(S(1))])
