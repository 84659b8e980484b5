"""Boxing between every pair of SBPs (distribute/boxing.py), checked against the reference
layout maps ``layout.split_to_pieces``/``assemble``: 2 and 3 ranks, a 2x2 mesh, uneven and
empty shards, and between placements."""
import itertools

import numpy as np
import pytest

from tensorweave.core.sbp import B, P, Partial, S
from tensorweave.distribute.boxing import box, boxing_cost, plan_boxing
from tensorweave.distribute.layout import Placement, assemble, local_shape, split_to_pieces
from tensorweave.distribute.ranks import World

KINDS = [S(0), S(1), B, P, Partial("max"), Partial("min"), Partial("prod")]


@pytest.fixture(scope="module")
def world():
    w = World(timeout=30.0)
    yield w
    w.shutdown()


def _value(shape, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(1, 4, size=shape).astype(np.float64)   # prod/sum exact; no zeros


def _check(world, x, src_p, src, dst_p, dst):
    plan = plan_boxing(x.shape, x.dtype, src_p, src, dst, dst_p)
    out = box(split_to_pieces(x, src_p, src), plan, world)
    assert len(out) == dst_p.size
    for i, piece in enumerate(out):
        assert piece.shape == local_shape(x.shape, dst_p, dst, i), (src, dst, i)
        assert piece.dtype == x.dtype
    np.testing.assert_array_equal(assemble(out, x.shape, dst_p, dst), x, err_msg=f"{src} -> {dst}")
    if not any(isinstance(s, Partial) for s in dst):
        for got, want in zip(out, split_to_pieces(x, dst_p, dst)):
            np.testing.assert_array_equal(got, want)
    return plan


@pytest.mark.parametrize("ranks,shape", [(2, (5, 3)), (3, (4, 7)), (3, (2, 1)), (3, (0, 4))])
def test_every_pair_1d(world, ranks, shape):
    p = Placement("cpu", list(range(ranks)))
    x = _value(shape)
    for src, dst in itertools.product(KINDS, repeat=2):
        _check(world, x, p, (src,), p, (dst,))


def test_every_pair_on_a_2x2_mesh(world):
    mesh = Placement("cpu", [[0, 1], [2, 3]])
    x = _value((5, 3))
    nds = list(itertools.product(KINDS[:5], repeat=2))
    for src, dst in itertools.product(nds, repeat=2):
        _check(world, x, mesh, src, mesh, dst)


def test_min_and_prod_partials_on_a_2x2_mesh(world):
    mesh = Placement("cpu", [[0, 1], [2, 3]])
    x = _value((3, 5))
    odd = [nd for nd in itertools.product(KINDS, repeat=2) if set(nd) & {Partial("min"), Partial("prod")}]
    some = [(B, B), (S(0), S(1)), (S(1), S(1)), (P, Partial("max")), (Partial("prod"), S(0))]
    for a, b in itertools.product(odd, some):
        _check(world, x, mesh, a, mesh, b)
        _check(world, x, mesh, b, mesh, a)


@pytest.mark.parametrize("src_ranks,dst_ranks", [([0, 1], [0, 1, 2, 3]), ([0, 1], [2, 3, 4]),
                                                 ([0, 1, 2], [[3, 0], [1, 2]]), ([[0, 1], [2, 3]], [1])])
def test_between_placements(world, src_ranks, dst_ranks):
    sp, dp = Placement("cpu", src_ranks), Placement("cpu", dst_ranks)
    x = _value((5, 3), seed=1)
    kinds = [S(0), S(1), B, P, Partial("max")]
    for src in itertools.product(kinds, repeat=sp.ndim):
        for dst in itertools.product(kinds, repeat=dp.ndim):
            _check(world, x, sp, src, dp, dst)


def test_scalars_and_integer_dtypes(world):
    p = Placement("cpu", [0, 1, 2])
    for x in (np.array(3.0), np.arange(7, dtype=np.int32), np.array([True, False, True])):
        kinds = [B, P, Partial("max"), Partial("min")] + ([S(0)] if x.ndim else [])
        if x.dtype == bool:
            kinds = [B, Partial("max"), Partial("min")] + [S(0)]
        for src, dst in itertools.product(kinds, repeat=2):
            _check(world, x, p, (src,), p, (dst,))


def test_plans_are_data_with_the_collective_kinds_and_bytes():
    p = Placement("cpu", [0, 1])
    f32 = np.float32
    assert [s.kind for s in plan_boxing((4, 6), f32, p, (P,), (B,)).steps] == ["all_reduce"]
    assert [s.kind for s in plan_boxing((4, 6), f32, p, (P,), (S(0),)).steps] == ["reduce_scatter"]
    assert [s.kind for s in plan_boxing((4, 6), f32, p, (S(0),), (B,)).steps] == ["all_gather"]
    assert [s.kind for s in plan_boxing((4, 6), f32, p, (S(0),), (S(1),)).steps] == ["all_to_all"]
    assert [s.kind for s in plan_boxing((4, 6), f32, p, (B,), (S(1),)).steps] == ["slice"]
    assert [s.kind for s in plan_boxing((4, 6), f32, p, (B,), (P,)).steps] == ["fill"]
    assert [s.kind for s in plan_boxing((4, 6), f32, p, (S(1),), (P,)).steps] == ["pad"]
    assert [s.kind for s in plan_boxing((4, 6), f32, p, (P,), (Partial("max"),)).steps] == ["all_reduce", "fill"]
    # bytes: 96-byte tensor on 2 ranks
    assert boxing_cost((4, 6), f32, p, (P,), (B,)) == 2 * 96           # ring all-reduce: 2(n-1)/n per rank
    assert boxing_cost((4, 6), f32, p, (P,), (S(0),)) == 96            # each rank receives its half
    assert boxing_cost((4, 6), f32, p, (S(0),), (B,)) == 96            # each rank receives the other half
    assert boxing_cost((4, 6), f32, p, (S(0),), (S(1),)) == 48         # a quarter each way
    assert boxing_cost((4, 6), f32, p, (B,), (S(0),)) == 0
    d = plan_boxing((4, 6), f32, p, (P,), (B,)).to_dict()
    assert d["steps"] == [{"kind": "all_reduce", "mesh_axis": 0, "before": ["P"], "after": ["B"], "bytes": 192}]
    cross = plan_boxing((4, 6), f32, p, (S(0),), (B,), Placement("cpu", [2, 3]))
    assert [s.kind for s in cross.steps] == ["transfer"] and cross.bytes == 2 * 96
    partial = plan_boxing((4, 6), f32, p, (P,), (S(0),), Placement("cpu", [2, 3]))
    assert [s.kind for s in partial.steps] == ["reduce_scatter", "transfer"] and partial.bytes == 96 + 96


def test_nd_plans_change_one_mesh_axis_at_a_time():
    mesh = Placement("cpu", [[0, 1], [2, 3]])
    plan = plan_boxing((4, 4), np.float32, mesh, (P, S(1)), (B, S(1)))
    assert [(s.kind, s.mesh_axis) for s in plan.steps] == [("all_reduce", 0)]   # commutes with S(1) inside
    plan = plan_boxing((4, 4), np.float32, mesh, (S(0), S(0)), (B, S(0)))
    assert all(s.mesh_axis in (0, 1) for s in plan.steps) and len(plan.steps) == 3  # via B: gather, gather, slice


def test_plans_round_trip_through_their_dict_form():
    import json
    from tensorweave.distribute.boxing import BoxingPlan, parse_sbp
    mesh = Placement("cpu", [[0, 1], [2, 3]])
    for plan in (plan_boxing((5, 3), np.float32, mesh, (S(0), P), (B, Partial("max"))),
                 plan_boxing((5, 3), np.int32, Placement("cpu", [0, 1]), (S(0),), (P,), Placement("cpu", [2, 3, 4]))):
        back = BoxingPlan.from_dict(json.loads(json.dumps(plan.to_dict())))
        assert back.to_dict() == plan.to_dict() and repr(back) == repr(plan)
    with pytest.raises(ValueError, match="not an SBP"):
        parse_sbp("S(x)")
