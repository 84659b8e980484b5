"""The SBP rule form (core/sbp.py) and the generated rules (core/sbp_rules.py).

Each candidate signature a rule offers is checked by brute force on simulated ranks: the
inputs are laid out as the signature says (uneven splits included), the op runs on each
rank's pieces, and the pieces combined by the output SBP equal the single-device result.
"""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core.registry import get_op, register_op, registered_ops
from tensorweave.core.sbp import B, BOXES_TO_B, P, Partial, S, SbpInput, Signature, Split
from tensorweave.core.sbp_rules import einsum_rule, matmul_equation, rule_for

_IDENTITY = {"sum": 0.0, "max": -np.inf, "min": np.inf, "prod": 1.0}
_COMBINE = {"sum": np.add.reduce, "max": np.maximum.reduce, "min": np.minimum.reduce, "prod": np.multiply.reduce}


def _shard(x, sbp, n):
    if sbp == B:
        return [x] * n
    if isinstance(sbp, Split):
        return np.array_split(x, n, axis=sbp.axis)        # balanced: the first dim % n ranks get one more
    return [x] + [np.full_like(x, _IDENTITY[sbp.kind]) for _ in range(n - 1)]


def _combine(pieces, sbp):
    if sbp == B:
        for p in pieces[1:]:
            np.testing.assert_allclose(p, pieces[0], rtol=1e-12)
        return pieces[0]
    if isinstance(sbp, Split):
        return np.concatenate(pieces, axis=sbp.axis)
    return _COMBINE[sbp.kind](np.stack(pieces), axis=0)


def _check_all(op_type, fn, args, attrs=None):
    """Every signature of the op's rule, on 2 and 3 ranks, against the single-device result."""
    attrs = attrs or {}
    rule = rule_for(get_op(op_type))
    sigs = rule([SbpInput(a.shape, tw.float64) for a in args], attrs)
    assert sigs[0] == Signature([B] * len(args), [B])
    full = np.asarray(fn(*args))
    for sig in sigs:
        for n in (2, 3):
            per_rank = [_shard(a, s, n) for a, s in zip(args, sig.inputs)]
            outs = [np.asarray(fn(*[p[r] for p in per_rank])) for r in range(n)]
            np.testing.assert_allclose(_combine(outs, sig.outputs[0]), full, rtol=1e-10, atol=1e-12,
                                       err_msg=f"{op_type} {sig} on {n} ranks")
    return {str(s) for s in sigs}


def _rng():
    return np.random.default_rng(12)


def test_values_print_short_and_are_immutable():
    assert [repr(v) for v in (S(1), B, P, Partial("max"))] == ["S(1)", "B", "P", "P(max)"]
    assert S(0) == S(0) and S(0) != S(1) and len({S(0), S(0), B, P}) == 3
    with pytest.raises(AttributeError):
        S(0).axis = 1
    with pytest.raises(ValueError, match="non-negative"):
        S(-1)
    with pytest.raises(ValueError, match="partial kind"):
        Partial("mean")


def test_matmul_rule_is_the_einsum_rule_and_correct():
    rng = _rng()
    a, w = rng.normal(size=(7, 5)), rng.normal(size=(5, 4))
    sigs = _check_all("MatMul", lambda x, y: tw.matmul(x, y).numpy(), [a, w])
    # the seed example I(N, C1) x W(C1, C2): data parallel, model parallel, split contraction
    assert {"S(0), B -> S(0)", "B, S(1) -> S(1)", "S(1), S(0) -> P", "P, B -> P", "B, P -> P"} <= sigs
    assert "S(0), S(0) -> S(0)" not in sigs and not any(s.startswith("S(0), S(0)") for s in sigs)
    at = np.ascontiguousarray(a.T)
    sigs_t = _check_all("MatMul", lambda x, y: tw.matmul(x, y, transpose_a=True).numpy(), [at, w],
                        {"transpose_a": True})
    assert "S(1), B -> S(0)" in sigs_t and "S(0), S(0) -> P" in sigs_t
    assert matmul_equation(3, 3) == "amk,akn->amn" and matmul_equation(2, 1) is None
    assert matmul_equation(3, 2) == "amk,kn->amn"         # a dense layer on [batch, time, features]
    x3 = rng.normal(size=(3, 6, 5))
    sigs3 = _check_all("MatMul", lambda x, y: tw.matmul(x, y).numpy(), [x3, w])
    assert {"S(0), B -> S(0)", "S(1), B -> S(1)", "B, S(1) -> S(2)", "S(2), S(0) -> P"} <= sigs3


def test_einsum_rule_from_the_equation():
    rng = _rng()
    x, y = rng.normal(size=(3, 4, 5)), rng.normal(size=(3, 5, 2))
    sigs = _check_all("Einsum", lambda p, q: tw.einsum("bij,bjk->bik", p, q).numpy(), [x, y],
                      {"equation": "bij,bjk->bik"})
    assert {"S(0), S(0) -> S(0)", "S(2), S(1) -> P"} <= sigs
    assert [str(s) for s in einsum_rule("ij,jk")([SbpInput((2, 3)), SbpInput((3, 4))], {})] == \
        ["B, B -> B"]            # an implicit output is not generated: only all-B is claimed
    a, b = rng.normal(size=(2, 3, 4, 5)), rng.normal(size=(3, 5, 2))      # '...' broadcast from the right
    sigs = _check_all("Einsum", lambda p, q: tw.einsum("...ij,...jk->...ik", p, q).numpy(), [a, b],
                      {"equation": "...ij,...jk->...ik"})
    assert {"S(0), B -> S(0)", "S(1), S(0) -> S(1)", "S(3), S(1) -> P"} <= sigs


@pytest.mark.parametrize("op_type, fn, shapes", [
    ("AddV2", lambda x, y: tw.add(x, y).numpy(), [(6, 4), (4,)]),
    ("Sub", lambda x, y: tw.subtract(x, y).numpy(), [(6, 1), (6, 4)]),
    ("Mul", lambda x, y: tw.multiply(x, y).numpy(), [(6, 4), (6, 4)]),
    ("RealDiv", lambda x, y: tw.math.divide(x, y).numpy(), [(6, 4), (4,)]),
    ("Exp", lambda x: tw.exp(x).numpy(), [(6, 4)]),
    ("Neg", lambda x: tw.negative(x).numpy(), [(5,)]),
])
def test_elementwise_rules_from_traits(op_type, fn, shapes):
    rng = _rng()
    args = [rng.uniform(0.5, 2.0, size=s) for s in shapes]
    sigs = _check_all(op_type, fn, args)
    linear = get_op(op_type).traits.get("linear")
    # a partial sum through linear ops only (P(max)/P(min) pass monotone ones: test_plan13b_monotone.py)
    assert any("P" in s.replace("P(max)", "").replace("P(min)", "") for s in sigs) == (linear is not None)
    if op_type == "AddV2":
        assert {s for s in sigs if "P(" not in s} == {"B, B -> B", "S(0), B -> S(0)", "S(1), S(0) -> S(1)", "P, P -> P"}
    if op_type == "Mul":
        assert {"P, B -> P", "B, P -> P"} <= sigs and "P, P -> P" not in sigs    # P x P is not P


@pytest.mark.parametrize("op_type, fn, kind", [
    ("Sum", tw.reduce_sum, "sum"), ("Max", tw.reduce_max, "max"), ("Min", tw.reduce_min, "min"),
    ("Prod", tw.reduce_prod, "prod")])
@pytest.mark.parametrize("axis, keepdims", [(1, False), (0, True), (None, False)])
def test_reduction_rules_from_traits(op_type, fn, kind, axis, keepdims):
    x = _rng().uniform(0.5, 1.5, size=(6, 5))
    sigs = _check_all(op_type, lambda t: fn(t, axis=axis, keepdims=keepdims).numpy(), [x],
                      {"axis": axis, "keepdims": keepdims})
    p = str(Partial(kind))
    assert f"{p} -> {p}" in sigs
    if axis == 1 and not keepdims:
        assert sigs == {"B -> B", f"{p} -> {p}", "S(0) -> S(0)", f"S(1) -> {p}"}


def test_rule_slot_on_register_op_and_boxes_to_b():
    name = "ArchTestSbpSlot"
    if name not in registered_ops():
        register_op(name, infer=lambda i, a: (i[0].shape, i[0].dtype), sbp=BOXES_TO_B)
        register_op(name + "Own", infer=lambda i, a: (i[0].shape, i[0].dtype),
                    sbp=lambda inputs, attrs: [Signature([S(0)], [S(0)])])
    assert rule_for(get_op(name)) is None                     # explicit: inputs are boxed to B
    own = rule_for(get_op(name + "Own"))
    assert own([SbpInput((4,))], {}) == [Signature([S(0)], [S(0)])]
    assert rule_for(get_op("Where")) is None                  # data-dependent shape: boxes to B
