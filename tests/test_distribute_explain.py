"""tw.distribute.explain: the chosen signatures with source lines, the collectives with their
bytes, peak memory per rank; as text and as a dict."""
import json

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core.sbp import B, S

P2 = tw.placement("cpu", ranks=[0, 1])
P3 = tw.placement("cpu", ranks=[0, 1, 2])


def _g(shape, placement, sbp):
    return tw.constant(np.ones(shape, np.float32)).to_global(placement=placement, sbp=sbp)


def test_data_parallel_matmul_has_no_collective():
    e = tw.distribute.explain(lambda x, w: tw.matmul(x, w), _g((6, 4), P2, S(0)), _g((4, 3), P2, B))
    d = e.to_dict()
    assert d["collectives"] == [] and d["bytes_moved"] == 0
    (op,) = d["ops"]
    assert (op["type"], op["signature"], op["inputs"], op["outputs"]) == ("MatMul", "S(0), B -> S(0)",
                                                                         ["(S(0),)", "(B,)"], ["(S(0),)"])
    assert op["line"] == f"{__file__}:{test_data_parallel_matmul_has_no_collective.__code__.co_firstlineno + 1}"
    assert [m["rank"] for m in d["memory"]] == [0, 1]
    json.dumps(d)       # plain data


def test_contracted_split_shows_an_all_reduce_of_the_right_bytes():
    # (5, 4) S(1) @ (4, 3) S(0) -> P on 3 ranks (uneven: 2, 1, 1 columns); to B: all-reduce of a
    # (5, 3) float32 partial on each rank: 2 (n - 1) / n x 60 bytes per rank, 3 ranks
    e = tw.distribute.explain(lambda a, b: tw.matmul(a, b).to_global(sbp=B), _g((5, 4), P3, S(1)),
                              _g((4, 3), P3, S(0)))
    d = e.to_dict()
    assert [o["signature"] for o in d["ops"] if o["type"] == "MatMul"] == ["S(1), S(0) -> P"]
    (c,) = d["collectives"]
    assert (c["kind"], c["before"], c["after"], c["shape"], c["dtype"]) == ("all_reduce", "(P,)", "(B,)", [5, 3],
                                                                              "float32")
    assert c["bytes"] == 3 * (2 * 60 * 2 // 3) == d["bytes_moved"]
    text = str(e)
    assert "all_reduce" in text and "S(1), S(0) -> P" in text and "test_distribute_explain.py" in text
    assert "rank 2: peak" in text


def test_peak_memory_follows_the_layout():
    def f(x):
        return tw.reduce_sum(tw.tanh(x) * 2.0 + x)
    split = tw.distribute.explain(f, _g((1000, 8), P2, S(0))).to_dict()["memory"]
    whole = tw.distribute.explain(f, _g((1000, 8), P2, B)).to_dict()["memory"]
    assert all(s["peak_bytes"] < w["peak_bytes"] for s, w in zip(split, whole))
    # the input, tanh, the product and the sum live at once at most: x + 2 temporaries
    assert whole[0]["peak_bytes"] >= 2 * 1000 * 8 * 4


def test_variables_and_optimizer_state_are_counted_per_rank():
    v = tw.Variable(np.ones((10, 4), np.float32), placement=P2, sbp=S(0))

    def f(x):
        v.assign_add(x)
        return tw.reduce_sum(v.read_value())
    m = tw.distribute.explain(f, _g((10, 4), P2, S(0))).to_dict()["memory"]
    assert [r["variable_bytes"] for r in m] == [5 * 4 * 4, 5 * 4 * 4]


def test_explain_without_global_tensors_says_so():
    with pytest.raises(tw.errors.InvalidArgumentError, match="no global tensor reaches"):
        tw.distribute.explain(lambda x: x * 2.0, tw.constant([1.0]))


def test_a_sum_of_a_split_tensor_reduces_its_pieces_without_padding_them():
    # Sum's rule offers P -> P too, and S -> P boxing (a local pad) moves no bytes: between equal
    # costs the signature re-laying out fewer inputs wins (no padded full-size buffer per rank)
    (op,) = tw.distribute.explain(lambda x: tw.reduce_sum(x), _g((6, 4), P2, S(0))).to_dict()["ops"]
    assert (op["signature"], op["inputs"], op["outputs"]) == ("S(0) -> P", ["(S(0),)"], ["(P,)"])
