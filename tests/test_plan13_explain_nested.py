"""tw.distribute.explain of control-flow ops planned on split layouts (plan_control.py): each
body's ops, signatures and the collectives of its nested rank plan, nested under the op in the
dict and in the text; the plan explained is the one that runs (== one device)."""
import re

import numpy as np

import tensorweave as tw
from tensorweave.core.sbp import B, S

P2 = tw.placement("cpu", ranks=[0, 1])
RNG = np.random.default_rng(31)
X = RNG.standard_normal((7, 3)).astype(np.float32)
W = (RNG.standard_normal((3, 3)) * 0.4).astype(np.float32)


def _loop(x, w):
    _, z = tw.while_loop(lambda i, z: tw.logical_and(i < 5, tw.reduce_sum(tw.square(z)) < 400.0),
                         lambda i, z: (i + 1, tw.tanh(tw.matmul(z, w)) * 1.5 + z), (0, x))
    return tw.cond(tw.reduce_sum(z) > 0.0, lambda: z * 2.0, lambda: tw.nn.relu(z) - 1.0)


def _args():
    return (tw.constant(X).to_global(placement=P2, sbp=S(0)), tw.constant(W).to_global(placement=P2, sbp=S(1)))


def _entry(ops, op_type):
    return next(o for o in ops if o["type"] == op_type)


def test_loop_and_branch_bodies_with_their_collectives_nested_under_the_op():
    f = tw.function(_loop)
    np.testing.assert_allclose(f(*_args()).numpy(), tw.function(_loop)(tw.constant(X), tw.constant(W)).numpy(),
                               rtol=2e-5, atol=1e-6)
    e = tw.distribute.explain(f, *_args())
    d = e.to_dict()
    loop = _entry(d["ops"], "While")
    assert [b["body"] for b in loop["bodies"]] == ["loop condition", "loop body"]
    cond, body = loop["bodies"]
    assert cond["per"] == body["per"] == "iteration"
    assert _entry(cond["ops"], "Sum")["signature"] == "S(0) -> P"            # the rows' partial sums ...
    assert [(c["kind"], c["before"], c["after"], c["bytes"]) for c in cond["collectives"]] == [
        ("all_reduce", "(P,)", "(B,)", 8)]                                      # ... all-reduced to decide the loop
    assert _entry(body["ops"], "MatMul")["signature"] == "S(0), B -> S(0)"
    # the S(1) weight is gathered inside the body, every iteration: 3 x 3 float32 less each rank's own columns
    assert [(c["kind"], c["before"], c["op"], c["bytes"]) for c in body["collectives"]] == [
        ("all_gather", "(S(1),)", "MatMul", 36)]
    branches = _entry(d["ops"], "If")["bodies"]
    assert [(b["body"], b["per"], [o["type"] for o in b["ops"]]) for b in branches] == [
        ("then branch", "call", ["Mul"]), ("else branch", "call", ["Relu", "Sub"])]
    assert d["nested_collectives"] == 2 and len(d["collectives"]) == 1       # the top level: the If's predicate
    text = str(e)
    assert "(and 2 inside control-flow bodies, listed under their op)" in text
    assert re.search(r"\n      loop condition: 5 ops, 1 collectives moving 8 B per iteration\n", text)
    assert re.search(r"\n        all_reduce +mesh axis 0  \(P,\) -> \(B,\) +8 B  float32\[\] for input 0 of 'Less_1'",
                     text)
    assert re.search(r"\n        MatMul +MatMul +S\(0\), B -> S\(0\)", text)


def test_the_loop_gradient_body_is_explained_too():
    w = tw.Variable(W, placement=P2, sbp=B)

    def step(x):
        with tw.GradientTape() as tape:
            _, z = tw.while_loop(lambda i, z: i < 3, lambda i, z: (i + 1, tw.tanh(tw.matmul(z, w)) + z), (0, x))
            loss = tw.reduce_sum(z)
        return tape.gradient(loss, w)
    x = tw.constant(X).to_global(placement=P2, sbp=S(0))
    d = tw.distribute.explain(step, x).to_dict()
    grad = _entry(d["ops"], "WhileGrad")
    (body,) = grad["bodies"]
    assert body["body"] == "loop gradient body" and body["per"] == "iteration"
    types = {o["type"] for o in body["ops"]}
    assert {"MatMul", "Mul", "Sub"} <= types
    # the weight's gradient per iteration: S(0) rows x S(0) rows -> P, summed over iterations without a collective
    assert any(o["type"] == "MatMul" and o["signature"] == "S(0), S(0) -> P" for o in body["ops"])
