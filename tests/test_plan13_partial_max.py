"""P(max)/P(min) through x * b and x / b by a b of known sign (kept for b > 0, swapped for b < 0,
boxed when unknown), clip_by_value (maximum/minimum with B bounds), Cast to floats and
Select: the brute-force checker's random shares on 2 and 3 ranks and a 2x2 mesh, eager and
planned results equal to one device with no collective before the max is needed."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core import dtypes
from tensorweave.core.registry import get_op
from tensorweave.core.sbp import B, Partial, S, SbpInput, Signature
from tensorweave.core.sbp_rules import value_sign, with_signs
from test_sbp_checker import _call, _fails, check_call

PMAX, PMIN = Partial("max"), Partial("min")
P2 = tw.placement("cpu", ranks=[0, 1])
RNG = np.random.default_rng(17)
X = RNG.standard_normal((5, 7))
POS, NEG, MIXED = RNG.uniform(0.5, 2, 7), -RNG.uniform(0.5, 2, 7), np.linspace(-1, 1, 7)


def _signed(op_type, signs):
    rule = get_op(op_type).sbp
    return lambda inputs, attrs: rule(inputs, {**attrs, "_signs": signs})


M1 = {"_mesh_shape": (2,)}


def _partial(sigs):
    return sorted(str(s) for s in sigs if any(isinstance(x, Partial) and x.kind != "sum" for x in s.inputs))


def test_signs_decide_the_partial_kind_of_mul_and_div():
    f32 = [SbpInput((5, 7), dtypes.float32, B), SbpInput((7,), dtypes.float32, B)]
    mul, div = get_op("Mul").sbp, get_op("RealDiv").sbp
    assert _partial(mul(f32, {"_signs": (0, 1), **M1})) == ["P(max), B -> P(max)", "P(min), B -> P(min)"]
    assert _partial(mul(f32, {"_signs": (-1, 0), **M1})) == ["B, P(max) -> P(min)", "B, P(min) -> P(max)"]
    assert _partial(mul(f32, {"_signs": (0, 0), **M1})) == [] and _partial(mul(f32, M1)) == []   # unknown: boxed
    assert _partial(div(f32, {"_signs": (0, -1), **M1})) == ["P(max), B -> P(min)", "P(min), B -> P(max)"]
    assert _partial(div(f32, {"_signs": (1, 0), **M1})) == []                            # b / x: not monotone
    i32 = [SbpInput((5, 7), dtypes.int32, B)] * 2
    assert _partial(mul(i32, {"_signs": (0, 1), **M1})) == []                            # ints wrap
    # on a 2-D mesh b (the signed operand) may be partial on no mesh axis: B, P -> P is not offered then
    m2 = {"_signs": (0, 1), "_mesh_shape": (2, 2)}
    assert _partial(mul(f32, m2)) == ["P(max), B -> P(max)", "P(min), B -> P(min)"]
    assert "B, P -> P" not in map(str, mul(f32, m2)) and "P, B -> P" in map(str, mul(f32, m2))
    assert "B, P -> P" in map(str, mul(f32, {**m2, "_signs": (0, 0)}))              # no sign relied on: offered
    assert _partial(mul(f32, {"_signs": (1, -1), "_mesh_shape": (2, 2)})) == []     # both signed: neither partial
    assert _partial(mul(f32, {"_signs": (1, -1), **M1})) == ["B, P(max) -> P(max)", "B, P(min) -> P(min)",
                                                             "P(max), B -> P(min)", "P(min), B -> P(max)"]
    assert _partial(mul(f32, {"_signs": (0, 1)})) == []


def test_value_sign_and_when_signs_are_added():
    assert [value_sign(v) for v in (POS, NEG, MIXED, np.array([1.0, np.inf]), np.zeros(0), np.array(3))] == \
        [1, -1, 0, 0, 0, 1]
    values = {1: POS}
    attrs = with_signs("Mul", [(PMAX,), (B,)], values.get, {"T": 1})
    assert attrs == {"T": 1, "_signs": (0, 1)}
    assert with_signs("Mul", [(S(0),), (B,)], values.get, {}) == {}          # no partial max/min: not read
    assert with_signs("AddV2", [(PMAX,), (B,)], values.get, {}) == {}


@pytest.mark.parametrize("b,signs", [(POS, (0, 1)), (NEG, (0, -1))])
def test_checker_mul_and_div_by_a_signed_b(b, signs):
    for op_type in ("Mul", "RealDiv"):
        assert check_call(_call(op_type, X, b), rule=_signed(op_type, signs)) > 0
    check_call(_call("Mul", b, X), rule=_signed("Mul", signs[::-1]))
    # the kind kept for a negative b (or swapped for a positive one) is caught
    wrong = PMAX if signs[1] < 0 else PMIN
    assert _fails(_call("Mul", X, b), [Signature([PMAX, B], [wrong])])
    assert _fails(_call("Mul", X, MIXED), [Signature([PMAX, B], [PMAX])])   # unknown sign: neither kind


def test_checker_cast_select_and_clip():
    for dst in (tw.float32, tw.float64):
        call = _call("Cast", X, DstT=dst)
        assert "P(max) -> P(max)" in [str(s) for s in get_op("Cast").sbp(
            [SbpInput(X.shape, dtypes.float64, B)], call.attrs)]
        check_call(call)
    ints = np.arange(-6, 6).reshape(3, 4).astype(np.int32)
    check_call(_call("Cast", ints, DstT=tw.float32))
    assert _partial(get_op("Cast").sbp([SbpInput((3,), dtypes.float32, B)], {"DstT": dtypes.int32})) == []
    cond = RNG.random((5, 7)) < 0.5
    sel = _call("SelectV2", cond, X, X * 0.5 + 1)
    assert {"B, P(max), P(max) -> P(max)", "B, P(min), B -> P(min)", "B, B, P(max) -> P(max)"} <= set(
        _partial(get_op("SelectV2").sbp([SbpInput(a.shape, dtypes.float64, B) for a in sel.inputs], {})))
    check_call(sel)
    assert _fails(sel, [Signature([PMAX, PMAX, PMAX], [PMAX])])     # a split-up condition is not the condition
    for op_type in ("Maximum", "Minimum"):                           # clip_by_value is minimum(maximum(x, lo), hi)
        check_call(_call(op_type, X, np.float64(0.25)))


@pytest.mark.parametrize("fn,kind", [
    (lambda m: m * 2.0, PMAX), (lambda m: -0.5 * m, PMIN), (lambda m: m / -4.0, PMIN),
    (lambda m: tw.cast(m, tw.float64), PMAX), (lambda m: tw.clip_by_value(m, -0.5, 0.5), PMAX),
    (lambda m: tw.where(tw.constant(np.arange(5) % 2 == 0), m, m * 0.5), PMAX),
])
def test_eager_and_planned_partial_max_passes_through(fn, kind):
    x = tw.constant(X.astype(np.float32)).to_global(placement=P2, sbp=S(1))
    want = fn(tw.constant(X.astype(np.float32).max(axis=1))).numpy()
    y = fn(tw.reduce_max(x, axis=1))
    assert y.sbp == (kind,)                              # no all-reduce before the op
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-6)
    f = tw.function(lambda x: fn(tw.reduce_max(x, axis=1)))
    assert f(x).sbp == (kind,)
    np.testing.assert_allclose(f(x).numpy(), want, rtol=1e-6)
    assert tw.distribute.explain(f, x).to_dict()["collectives"] == []


def test_a_factor_of_unknown_or_mixed_sign_reduces_first():
    x = tw.constant(X.astype(np.float32)).to_global(placement=P2, sbp=S(1))
    b = tw.constant(MIXED[:5].astype(np.float32))
    y = tw.reduce_max(x, axis=1) * b
    assert y.sbp not in ((PMAX,), (PMIN,))
    np.testing.assert_allclose(y.numpy(), X.astype(np.float32).max(1) * MIXED[:5].astype(np.float32), rtol=1e-6)
    f = tw.function(lambda x, b: tw.reduce_max(x, axis=1) * b)      # b an argument: its sign is unknown
    y = f(x, tw.constant(POS[:5].astype(np.float32)))
    assert y.sbp not in ((PMAX,), (PMIN,))
    np.testing.assert_allclose(y.numpy(), X.astype(np.float32).max(1) * POS[:5].astype(np.float32), rtol=1e-6)


def test_the_two_d_guard_is_needed():
    """Offered on the 2x2 mesh as on a 1-D one (b may be partial on the other mesh axis), x * b by
    a positive b fails the checker: a partial sum's shares of b have any sign."""
    rule = get_op("Mul").sbp
    unguarded = lambda inputs, attrs: rule(inputs, {**attrs, "_signs": (0, 1), "_mesh_shape": (2,)})  # noqa: E731
    with pytest.raises(AssertionError, match=r"mesh \[2, 2\]"):
        check_call(_call("Mul", X, POS), rule=unguarded, pairs=64)


@pytest.mark.parametrize("b,signs", [(POS, (0, 1)), (NEG, (0, -1))])
def test_checker_every_pair_of_signatures_on_the_2x2_mesh(b, signs):
    """The N-D rule (the signed operand partial on no mesh axis): every pair of per-axis
    signatures on the 2x2 mesh, with the partial max/min kinds on either axis, equals one device."""
    for op_type, call in (("Mul", _call("Mul", X, b)), ("RealDiv", _call("RealDiv", X, b)),
                          ("Mul", _call("Mul", b, X))):
        s = signs if call.inputs[1] is b else signs[::-1]
        sigs = _signed(op_type, s)([SbpInput(a.shape, dtypes.float64, B) for a in call.inputs],
                                   {"_mesh_shape": (2, 2)})
        assert _partial(sigs)                             # the partial max/min signatures are offered ...
        assert check_call(call, rule=_signed(op_type, s), pairs=len(sigs) ** 2) >= len(sigs) ** 2   # ... all pairs


M22 = tw.placement("cpu", ranks=[[0, 1], [2, 3]])


@pytest.mark.parametrize("sbp,kind_axis", [((S(1), S(0)), 0), ((S(0), S(1)), 1), ((S(1), S(1)), None)])
@pytest.mark.parametrize("scale,kind", [(2.0, PMAX), (-0.5, PMIN)])
def test_eager_and_planned_on_a_2x2_mesh(sbp, kind_axis, scale, kind):
    x = tw.constant(X.astype(np.float32)).to_global(placement=M22, sbp=sbp)
    want = X.astype(np.float32).max(axis=1) * np.float32(scale)

    def fn(x):
        return tw.reduce_max(x, axis=1) * scale
    f = tw.function(fn)
    for y in (fn(x), f(x)):
        np.testing.assert_allclose(y.numpy(), want, rtol=1e-6)
        if kind_axis is not None:
            assert y.sbp[kind_axis] == kind                # the max passes through on its mesh axis ...
        else:
            assert y.sbp == (kind, kind)
    assert tw.distribute.explain(f, x).to_dict()["collectives"] == []   # ... no reduction before it is needed


def test_a_signed_factor_partial_on_the_other_mesh_axis():
    x = tw.constant(X.astype(np.float32)).to_global(placement=M22, sbp=(S(1), B))
    b = tw.constant(POS[:5].astype(np.float32)).to_global(placement=M22, sbp=(B, tw.sbp.partial_sum))
    y = tw.reduce_max(x, axis=1) * b                     # eager: b's sign from its value; b is not used partial
    np.testing.assert_allclose(y.numpy(), X.astype(np.float32).max(1) * POS[:5].astype(np.float32), rtol=1e-6)
