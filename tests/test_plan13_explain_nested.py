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
    # the S(1) weight does not change in the loop: gathered once before it (3 x 3 float32 less each rank's own
    # columns), not inside the body every iteration (plan_control._hoist)
    assert body["collectives"] == []
    assert [(c["kind"], c["before"], c["after"], c["op"], c["input"], c["bytes"]) for c in d["collectives"]
            if c["kind"] == "all_gather"] == [("all_gather", "(S(1),)", "(B,)", loop["name"], 2, 36)]
    branches = _entry(d["ops"], "If")["bodies"]
    assert [(b["body"], b["per"], [o["type"] for o in b["ops"]]) for b in branches] == [
        ("then branch", "call", ["Mul"]), ("else branch", "call", ["Relu", "Sub"])]
    assert d["nested_collectives"] == 1 and len(d["collectives"]) == 2       # the top level: the gather, the If's predicate
    text = str(e)
    assert "(and 1 inside control-flow bodies, listed under their op)" in text
    assert re.search(r"\n  all_gather +mesh axis 0  \(S\(1\),\) -> \(B,\) +36 B  float32\[3, 3\] for input 2 of 'while'", text)
    assert re.search(r"\n      loop body: 5 ops, 0 collectives moving 0 B per iteration\n", text)
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


def _captured_loop(x, w, glob):
    with tw.GradientTape() as tape:
        tape.watch(w)
        _, z = tw.while_loop(lambda i, z: i < 4, lambda i, z: (i + 1, tw.tanh(tw.matmul(z, w)) + z), (0, x))
        loss = tw.reduce_sum(tw.square(z))
    return loss, tape.gradient(loss, w)


def test_a_hoisted_gather_keeps_the_loop_and_its_gradient_equal_to_one_device():
    """The captured S(1) tensor gathered once before the loop: 4 iterations and the loop's gradient
    with respect to it (the gradient body reads the forward's capture) equal one device."""
    loss, grad = tw.function(lambda x, w: _captured_loop(x, w, True))(*_args())
    want_loss, want_grad = _captured_loop(tw.constant(X), tw.constant(W), False)
    np.testing.assert_allclose(loss.numpy(), want_loss.numpy(), rtol=2e-5)
    np.testing.assert_allclose(grad.numpy(), want_grad.numpy(), rtol=2e-5, atol=1e-6)
    d = tw.distribute.explain(lambda x, w: _captured_loop(x, w, True), *_args()).to_dict()
    loop, grad = _entry(d["ops"], "While"), _entry(d["ops"], "WhileGrad")
    assert [(b["body"], b["collectives"]) for b in loop["bodies"] + grad["bodies"]] == [
        ("loop condition", []), ("loop body", []), ("loop gradient body", [])]
    # one gather before the loop, shared by the loop and its gradient (a tensor is boxed once per layout)
    assert [(c["kind"], c["op"]) for c in d["collectives"] if c["kind"] == "all_gather"] == [("all_gather", loop["name"])]


def test_a_capture_read_in_two_layouts_is_not_hoisted():
    """w is read as it is (S(1) times an S(1) loop variable) and gathered (the matmul): moving the
    gather out would not remove it from the body, so the loop is planned as before, == one device."""
    def f(x, w, v):
        _, z, u = tw.while_loop(lambda i, z, u: i < 3,
                                lambda i, z, u: (i + 1, tw.tanh(tw.matmul(z, w)) + z, u * w), (0, x, v))
        return tw.reduce_sum(z) + tw.reduce_sum(u)
    v = (RNG.standard_normal((3, 3)) * 0.5).astype(np.float32)
    args = _args() + (tw.constant(v).to_global(placement=P2, sbp=S(1)),)
    np.testing.assert_allclose(tw.function(f)(*args).numpy(), f(tw.constant(X), tw.constant(W), tw.constant(v)).numpy(),
                               rtol=2e-5)
    body = _entry(tw.distribute.explain(f, *args).to_dict()["ops"], "While")["bodies"][1]
    assert [(c["kind"], c["op"]) for c in body["collectives"]] == [("all_gather", "MatMul")]


def _two_captures(x, w, u):
    with tw.GradientTape() as tape:
        tape.watch([w, u])
        _, z = tw.while_loop(lambda i, z: i < 3,
                             lambda i, z: (i + 1, tw.matmul(tw.tanh(tw.matmul(z, w)), u) * 0.5 + z), (0, x))
        loss = tw.reduce_sum(tw.square(z))
    return (loss,) + tuple(tape.gradient(loss, [w, u]))


def test_two_captured_weights_are_both_hoisted_out_of_the_loop_and_its_gradient():
    u = (RNG.standard_normal((3, 3)) * 0.4).astype(np.float32)
    args = _args() + (tw.constant(u).to_global(placement=P2, sbp=S(1)),)
    got = tw.function(_two_captures)(*args)
    want = _two_captures(tw.constant(X), tw.constant(W), tw.constant(u))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=2e-5, atol=1e-5)
    d = tw.distribute.explain(_two_captures, *args).to_dict()
    loop, grad = _entry(d["ops"], "While"), _entry(d["ops"], "WhileGrad")
    assert [b["collectives"] for b in loop["bodies"] + grad["bodies"]] == [[], [], []]
    assert sorted((c["op"], c["input"]) for c in d["collectives"] if c["kind"] == "all_gather") == [
        (loop["name"], 2), (loop["name"], 3)]
