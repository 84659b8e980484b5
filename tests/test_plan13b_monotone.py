"""Partial max/min through monotone elementwise ops: relu/exp/tanh keep P(max)/P(min), neg and
erfc swap them; offered for floats only (ints overflow under neg) and not for ops undefined on
part of the reals; eager and planned results equal one device with the max reduced once."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core import dtypes
from tensorweave.core.registry import get_op
from tensorweave.core.sbp import B, Partial, S, SbpInput
from tensorweave.core.sbp_rules import monotone_signatures

PMAX, PMIN = Partial("max"), Partial("min")
P2 = tw.placement("cpu", ranks=[0, 1])
X = np.random.default_rng(5).standard_normal((5, 7)).astype(np.float32)


def _partial_sigs(op_type, dtype=dtypes.float32, attrs=None):
    sigs = get_op(op_type).sbp([SbpInput((4, 3), dtype, B)], attrs or {})
    return sorted(str(s) for s in sigs if any(isinstance(x, Partial) and x.kind != "sum" for x in s.inputs))


def test_which_ops_pass_which_partial_kind():
    assert _partial_sigs("Relu") == ["P(max) -> P(max)", "P(min) -> P(min)"]
    assert _partial_sigs("Exp") == ["P(max) -> P(max)", "P(min) -> P(min)"]
    assert _partial_sigs("Neg") == ["P(max) -> P(min)", "P(min) -> P(max)"]
    assert _partial_sigs("Erfc") == ["P(max) -> P(min)", "P(min) -> P(max)"]
    assert _partial_sigs("Neg", dtypes.int32) == []                # -INT_MIN overflows: not monotone
    assert _partial_sigs("Log") == [] and _partial_sigs("Sqrt") == []   # NaN for a negative share
    assert _partial_sigs("Square") == []                           # not monotone
    assert _partial_sigs("LeakyRelu", attrs={"alpha": 0.2}) == ["P(max) -> P(max)", "P(min) -> P(min)"]
    assert _partial_sigs("LeakyRelu", attrs={"alpha": -0.5}) == []
    assert monotone_signatures([SbpInput((2,), dtypes.float32, B)] * 2, "up") == []     # unary only
    assert monotone_signatures([SbpInput((2,), None, B)], "up") == []


@pytest.mark.parametrize("fn,kind", [(tw.nn.relu, PMAX), (tw.exp, PMAX), (tw.negative, PMIN),
                                     (lambda v: tw.tanh(tw.negative(v)), PMIN)])
def test_eager_partial_max_passes_through_without_a_collective(fn, kind):
    x = tw.constant(X).to_global(placement=P2, sbp=S(1))
    m = tw.reduce_max(x, axis=1)
    assert m.sbp == (PMAX,)
    y = fn(m)
    assert y.sbp == (kind,)                       # no all-reduce before the op
    np.testing.assert_allclose(y.numpy(), fn(tw.constant(X.max(axis=1))).numpy(), rtol=1e-6)


def test_planned_softmax_like_chain_reduces_the_max_once():
    @tw.function
    def f(x):
        return tw.nn.relu(tw.negative(tw.reduce_min(x, axis=1)))        # P(min) -> P(max) -> P(max)
    x = tw.constant(X).to_global(placement=P2, sbp=S(1))
    y = f(x)
    np.testing.assert_allclose(y.numpy(), np.maximum(-X.min(axis=1), 0), rtol=1e-6)
    d = tw.distribute.explain(f, x).to_dict()
    assert [o["outputs"] for o in d["ops"] if o["type"] in ("Neg", "Relu")] == [["(P(max),)"], ["(P(max),)"]]


def _binary_partial_sigs(op_type, dtype=dtypes.float32):
    sigs = get_op(op_type).sbp([SbpInput((4, 3), dtype, B), SbpInput((3,), dtype, B)], {})
    return sorted(str(s) for s in sigs if any(isinstance(x, Partial) and x.kind != "sum" for x in s.inputs))


def test_binary_ops_monotone_in_an_input_pass_partial_max_min():
    assert _binary_partial_sigs("AddV2") == ["B, P(max) -> P(max)", "B, P(min) -> P(min)",
                                             "P(max), B -> P(max)", "P(min), B -> P(min)"]
    assert _binary_partial_sigs("Sub") == ["B, P(max) -> P(min)", "B, P(min) -> P(max)",
                                           "P(max), B -> P(max)", "P(min), B -> P(min)"]
    assert "P(max), P(max) -> P(max)" in _binary_partial_sigs("Maximum")
    assert "P(min), P(min) -> P(min)" in _binary_partial_sigs("Minimum")
    assert "P(max), P(max) -> P(max)" not in _binary_partial_sigs("Minimum")
    assert _binary_partial_sigs("Maximum", dtypes.int32) == [] and _binary_partial_sigs("Mul") == []


def test_eager_max_minus_a_bias_then_relu_stays_partial():
    x = tw.constant(X).to_global(placement=P2, sbp=S(1))
    b = tw.constant(np.float32(0.3)).to_global(placement=P2, sbp=B)
    y = tw.nn.relu(tw.maximum(tw.reduce_max(x, axis=1) - b, tw.reduce_max(x * 0.5, axis=1)))
    assert y.sbp == (PMAX,)
    np.testing.assert_allclose(y.numpy(), np.maximum(np.maximum(X.max(1) - 0.3, (X * 0.5).max(1)), 0), rtol=1e-6)


def test_monotone_signatures_per_input_and_only_for_one_output():
    from tensorweave.core.sbp_rules import elementwise_rule
    x = SbpInput((2,), dtypes.float32, B)
    assert [str(s) for s in monotone_signatures([x, x], (None, "down"))] == ["B, P(max) -> P(min)",
                                                                           "B, P(min) -> P(max)"]
    assert monotone_signatures([x, x], ("up",)) == []                        # one direction per input
    two_outputs = elementwise_rule(monotone="up", n_outputs=2)([x], {})
    assert not [s for s in two_outputs if any(isinstance(o, Partial) for o in s.outputs)]
