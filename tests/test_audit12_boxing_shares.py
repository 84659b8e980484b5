"""Boxing from partial layouts with every rank contributing (audit, session 12).

``tests/test_distribute_boxing.py`` lays a partial value out as ``layout.split_to_pieces`` does:
the value on coordinate 0 and the reduction's identity elsewhere. A boxing that ignored the other
ranks' pieces (or reduced with the wrong kind: max of a value and zeros is the value) passes that.
Here each partial value is made of random *shares* that combine to it — sums of random integers,
maxima/minima where a random rank holds each element exactly and the others less/more, products
with signs flipped in pairs — and every partial source is boxed to every layout on 2 and 3 ranks
(uneven and empty shards), on a 2x2 mesh (partial along either mesh axis) and onto another
placement, against the logical value; and every pair of S(0), S(1), B, P, P(max) on a 2x2 mesh
with empty shards (the pair tests' 2x2 shape, (5, 3), leaves none empty)."""
import itertools

import numpy as np
import pytest

from tensorweave.core.sbp import B, P, Partial, S
from tensorweave.distribute.boxing import box, plan_boxing
from tensorweave.distribute.layout import Placement, assemble, local_shape, split_to_pieces
from tensorweave.distribute.ranks import World

PARTIALS = [P, Partial("max"), Partial("min"), Partial("prod")]
KINDS = [S(0), S(1), B] + PARTIALS


@pytest.fixture(scope="module")
def world():
    w = World(timeout=30.0)
    yield w
    w.shutdown()


def shares(value, n, kind, rng):
    """``n`` arrays that combine by ``kind`` ("sum", "max", "min", "prod") to ``value``."""
    if kind == "sum":
        parts = [rng.integers(-5, 6, size=value.shape).astype(value.dtype) for _ in range(n - 1)]
        return parts + [value - sum(parts, np.zeros_like(value))]
    if kind in ("max", "min"):
        holder = rng.integers(0, n, size=value.shape)           # who holds each element exactly
        sign = -1 if kind == "max" else 1
        return [np.where(holder == i, value, value + sign * rng.integers(1, 4, size=value.shape)).astype(value.dtype)
                for i in range(n)]
    holder = rng.integers(0, n, size=value.shape)               # prod: value on one rank, 1 elsewhere,
    parts = [np.where(holder == i, value, 1).astype(value.dtype) for i in range(n)]
    if n > 1:                                                    # then -1 on two ranks where they differ
        flip = rng.random(value.shape) < 0.5
        a, b = rng.permutation(n)[:2]
        parts[a], parts[b] = np.where(flip, -parts[a], parts[a]), np.where(flip, -parts[b], parts[b])
    return parts


def partial_pieces(value, placement, sbp, rng):
    """Pieces of ``value`` laid out as ``sbp`` with random shares along every partial mesh axis:
    the reference layout's pieces, then, per partial mesh axis, each group of ranks along it
    re-shares the value its coordinate 0 holds."""
    pieces = split_to_pieces(value, placement, sbp)
    mesh = placement.mesh
    rank_index = {r: i for i, r in enumerate(mesh.reshape(-1).tolist())}
    for axis, s in enumerate(sbp):
        if not isinstance(s, Partial):
            continue
        for line in np.moveaxis(mesh, axis, -1).reshape(-1, mesh.shape[axis]):
            idx = [rank_index[r] for r in line.tolist()]
            for i, share in zip(idx, shares(pieces[idx[0]], len(idx), s.kind, rng)):
                pieces[i] = share
    return pieces


def _check(world, value, src_p, src, dst_p, dst, rng):
    pieces = partial_pieces(value, src_p, src, rng)
    assert np.array_equal(assemble(pieces, value.shape, src_p, src), value)    # the shares are right
    out = box(pieces, plan_boxing(value.shape, value.dtype, src_p, src, dst, dst_p), world)
    for i, piece in enumerate(out):
        assert piece.shape == local_shape(value.shape, dst_p, dst, i), (src, dst, i)
    np.testing.assert_array_equal(assemble(out, value.shape, dst_p, dst), value, err_msg=f"{src} -> {dst}")


def _value(shape, seed):
    return np.random.default_rng(seed).integers(1, 4, size=shape).astype(np.float64)


@pytest.mark.parametrize("ranks,shape", [(2, (5, 3)), (3, (4, 7)), (3, (2, 1))])
def test_every_partial_source_with_shares_on_every_rank_1d(world, ranks, shape):
    p = Placement("cpu", list(range(ranks)))
    rng = np.random.default_rng(ranks)
    value = _value(shape, ranks)
    for src, dst in itertools.product(PARTIALS, KINDS):
        _check(world, value, p, (src,), p, (dst,), rng)


def test_partial_sources_with_shares_on_a_2x2_mesh(world):
    mesh = Placement("cpu", [[0, 1], [2, 3]])
    rng = np.random.default_rng(4)
    value = _value((5, 3), 4)
    srcs = [nd for nd in itertools.product(KINDS[:5], repeat=2) if set(nd) & set(PARTIALS)]
    dsts = [(B, B), (S(0), S(1)), (S(1), B), (B, P), (P, S(0))]
    for src, dst in itertools.product(srcs, dsts):
        _check(world, value, mesh, src, mesh, dst, rng)


@pytest.mark.parametrize("src_ranks,dst_ranks", [([0, 1], [2, 3, 4]), ([0, 1, 2], [[3, 0], [1, 2]])])
def test_partial_sources_with_shares_onto_another_placement(world, src_ranks, dst_ranks):
    sp, dp = Placement("cpu", src_ranks), Placement("cpu", dst_ranks)
    rng = np.random.default_rng(5)
    value = _value((5, 3), 5)
    for src in PARTIALS[:2]:
        for dst in itertools.product([S(0), B, P], repeat=dp.ndim):
            _check(world, value, sp, (src,), dp, dst, rng)


def test_every_pair_on_a_2x2_mesh_with_empty_shards(world):
    # one row and two columns over a 2x2 mesh: S(0) on both mesh axes leaves three ranks empty,
    # S(1) on both two; partial sources get shares on every rank
    mesh = Placement("cpu", [[0, 1], [2, 3]])
    rng = np.random.default_rng(6)
    value = _value((1, 2), 6)
    nds = list(itertools.product(KINDS[:5], repeat=2))
    for src, dst in itertools.product(nds, repeat=2):
        _check(world, value, mesh, src, mesh, dst, rng)
