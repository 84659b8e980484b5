"""The fusing passes' shared steps (``runtime/passes/ir.py``; session 26 tidy30): a node's ``fused`` names
(:func:`ir.fused_names`), a node put in place of the steps it computes (``Work.fuse``) and a pass's count
(``Work.tally``), which ``attention``, ``head_attention``, ``einsum_pair`` and ``block_tail`` each wrote out."""
import types

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.runtime.passes import ir, plan_stats
from scripted_tuner import ways_asked
from test_graph_passes import options

tf1 = tw.compat.v1


def _work(n=3):
    g = tw.Graph()
    with g.as_default():
        x = tf1.placeholder(tw.float32, [4])
        ys = [x]
        for _ in range(n - 1):
            ys.append(tw.exp(ys[-1]))
    ops = [t.op for t in ys]
    return ir.Work(ops, [ys[-1]], [], [x], {}), ops


def test_fused_names_take_a_fused_nodes_names_and_an_ops_own_in_order():
    a, b, c = (types.SimpleNamespace(name=n, fused=f) for n, f in (("a", None), ("b", ["b1", "b2"]), ("c", [])))
    assert ir.fused_names((a, b, c)) == ["a", "b1", "b2", "c"]
    assert ir.fused_names(()) == []


def test_fuse_puts_the_node_where_the_last_step_stood_and_drops_the_others():
    work, ops = _work(3)
    node = ir.Node(ops[2], ops[2].opdef, ops[0].outputs, {}, [(o.shape, o.dtype) for o in ops[2].outputs],
                   type_="Exp", name="n")
    assert work.fuse(node, (ops[1], ops[2])) is node
    assert work.node_rep == {id(ops[2]): node, id(ops[1]): None}
    work.commit()
    assert [op.name for op in work.ops] == [ops[0].name, "n"] and work.fetches == [node.outputs[0]]


def test_tally_adds_to_a_pass_count_and_writes_no_zero():
    work, _ = _work(2)
    assert work.tally("p", 0) == 0 and "p" not in work.stats
    assert work.tally("p", 2) == 2 and work.tally("p", 3) == 3 and work.stats["p"] == 5


def _steps(f):
    """The plan steps' nodes of a traced ``tw.function``."""
    return [st.op for st in list(f._cache.values())[-1]._plan.steps if st.op is not None]


def test_a_fused_attention_counts_once_names_its_steps_and_leaves_none_of_them():
    """An inference plan's softmax(q k) v as one ``FusedAttention`` node, built without pruning (which
    would hide a step ``Work.fuse`` left behind)."""
    rng = np.random.default_rng(26)
    q, k, v = (tw.constant(rng.standard_normal((1, 6, 2, 4)).astype(np.float32)) for _ in range(3))

    @tw.function
    def f(q, k, v):
        s = tw.einsum("aecd,abcd->acbe", k, q)
        return tw.einsum("acbe,aecd->abcd", tw.nn.softmax(s), v)
    with options(pruning=False):
        f(q, k, v)
    nodes = _steps(f)
    types = [op.type for op in nodes]
    assert plan_stats(f).get("attention") == 1 and not {"Einsum", "Softmax"} & set(types), types
    node, = [op for op in nodes if op.type == "FusedAttention"]
    assert len(node.fused) == 3 and node.fused[1] == "Softmax"


@pytest.mark.parametrize("product, fused, gone", [("einsum", "FusedEinsum", {"Einsum", "AddV2", "BiasAdd", "Relu"}),
                                                  ("matmul", "FusedMatMul", {"MatMul", "BiasAdd", "Relu"})])
def test_without_pruning_a_fused_product_leaves_none_of_its_steps(product, fused, gone):
    rng = np.random.default_rng(27)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    w, b = tw.Variable(rng.standard_normal((8, 6)).astype(np.float32)), tw.Variable(np.ones(6, np.float32))

    @tw.function
    def f(x):
        y = tw.einsum("ab,bc->ac", x, w) if product == "einsum" else tw.matmul(x, w)
        return tw.nn.relu(tw.nn.bias_add(y, b))
    with options(pruning=False):
        got = f(x).numpy()
    np.testing.assert_allclose(got, np.maximum(x @ w.numpy() + 1, 0), rtol=1e-5, atol=1e-6)
    types = [op.type for op in _steps(f)]
    assert fused in types and not gone & set(types), types


def test_ways_asked_collects_each_timings_ways(monkeypatch):
    from tensorweave.kernels.cpu import gemm
    asked = ways_asked(monkeypatch, lambda: [gemm.timed_choice("c", {"a": None, "b": None}, "a", None),
                                             gemm.timed_choice("d", {"x": None}, "x", None)])
    assert asked == [{"a", "b"}, {"x"}]
