"""Placements, the balanced splitter and the reference split/assemble maps (distribute/layout.py)."""
import itertools

import numpy as np
import pytest

from tensorweave.core.sbp import B, P, Partial, S
from tensorweave.distribute.layout import (Placement, assemble, balanced_bounds, local_shape,
                                           normalize_sbp, partial_identity, shard_slices, split_to_pieces)

MESHES = [Placement("cpu", [0, 1]), Placement("cpu", [0, 1, 2]), Placement("cpu", [[0, 1], [2, 3]]),
          Placement("cpu", [[3, 1, 0], [2, 5, 4]])]


def _sbps(rank):
    return [S(a) for a in range(rank)] + [B, P, Partial("max"), Partial("min"), Partial("prod")]


@pytest.mark.parametrize("n,parts", [(0, 2), (1, 3), (5, 3), (6, 3), (7, 4), (2, 5)])
def test_balanced_bounds_cover_in_order_and_first_ranks_get_more(n, parts):
    bounds = balanced_bounds(n, parts)
    assert len(bounds) == parts and bounds[0][0] == 0 and bounds[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    sizes = [hi - lo for lo, hi in bounds]
    assert sizes == sorted(sizes, reverse=True) and max(sizes) - min(sizes) <= 1
    assert sizes.count(n // parts + 1) == (n % parts if n % parts else 0) or n % parts == 0


def test_balanced_bounds_exact_values():
    assert balanced_bounds(7, 3) == [(0, 3), (3, 5), (5, 7)]
    assert balanced_bounds(2, 4) == [(0, 1), (1, 2), (2, 2), (2, 2)]


@pytest.mark.parametrize("mesh", MESHES, ids=repr)
@pytest.mark.parametrize("shape", [(5, 3), (2, 7), (1, 4), (6,)])
def test_split_then_assemble_is_identity_for_every_layout(mesh, shape):
    rng = np.random.default_rng(0)
    x = rng.integers(-5, 6, size=shape).astype(np.float64) + 0.5
    for nd in itertools.product(_sbps(len(shape)), repeat=mesh.ndim):
        pieces = split_to_pieces(x, mesh, nd)
        assert len(pieces) == mesh.size
        for i, p in enumerate(pieces):
            assert p.shape == local_shape(shape, mesh, nd, i)
        np.testing.assert_array_equal(assemble(pieces, shape, mesh, nd), x, err_msg=str(nd))


def test_split_pieces_are_the_balanced_slices_and_disjoint():
    mesh = Placement("cpu", [[0, 1], [2, 3]])
    x = np.arange(5 * 3).reshape(5, 3)
    pieces = split_to_pieces(x, mesh, (S(0), S(0)))         # axis 0 split twice: 5 -> (3, 2) -> (2,1),(1,1)
    assert [p.tolist() for p in pieces] == [x[0:2].tolist(), x[2:3].tolist(), x[3:4].tolist(), x[4:5].tolist()]
    pieces = split_to_pieces(x, mesh, (S(1), S(0)))
    assert [p.shape for p in pieces] == [(3, 2), (2, 2), (3, 1), (2, 1)]
    assert pieces[3].tolist() == x[3:5, 2:3].tolist()


def test_partial_pieces_hold_value_on_coordinate_zero_and_identity_elsewhere():
    mesh = Placement("cpu", [[0, 1], [2, 3]])
    x = np.array([[1, -2], [3, 4]], dtype=np.int32)
    pieces = split_to_pieces(x, mesh, (P, Partial("max")))
    assert (pieces[0] == x).all() and (pieces[1] == np.iinfo(np.int32).min).all()
    # mesh axis 1 lays out axis 0's pieces again: coordinate (1, 1) holds max's identity, not 0
    assert (pieces[2] == 0).all() and (pieces[3] == np.iinfo(np.int32).min).all()
    assert partial_identity("min", np.float32) == np.inf and partial_identity("prod", np.int64) == 1
    assert partial_identity("max", np.bool_) == False  # noqa: E712


def test_pieces_are_copies_not_views():
    x = np.ones((4, 2))
    pieces = split_to_pieces(x, Placement("cpu", [0, 1]), (B,))
    pieces[0][0, 0] = 7
    assert x[0, 0] == 1 and pieces[1][0, 0] == 1


def test_shard_slices_on_permuted_mesh_follow_mesh_order_not_rank_ids():
    mesh = Placement("cpu", [2, 0, 1])
    assert mesh.ranks == (2, 0, 1)
    assert [s[0] for s in shard_slices((3,), mesh, (S(0),))] == [slice(0, 1), slice(1, 2), slice(2, 3)]


def test_placement_validation_and_identity():
    a, b = Placement("CPU", [[0, 1], [2, 3]]), Placement("cpu", [[0, 1], [2, 3]])
    assert a == b and hash(a) == hash(b) and a.type == "cpu"
    assert a != Placement("cpu", [0, 1, 2, 3]) and a != Placement("cpu", [[0, 2], [1, 3]])
    assert Placement("cpu", 3).ranks == (3,)
    with pytest.raises(AttributeError):
        a.type = "gpu"
    with pytest.raises(ValueError, match="distinct"):
        Placement("cpu", [0, 0])
    with pytest.raises(ValueError, match="rectangular"):
        Placement("cpu", [[0, 1], [2]])
    with pytest.raises(ValueError, match="non-empty"):
        Placement("cpu", [])
    with pytest.raises(ValueError, match="device type"):
        Placement("", [0])


def test_normalize_sbp_errors_name_mesh_and_shape():
    mesh = Placement("cpu", [[0, 1], [2, 3]])
    assert normalize_sbp([S(0), B], mesh) == (S(0), B)
    assert normalize_sbp(B, Placement("cpu", [0, 1])) == (B,)
    with pytest.raises(ValueError, match=r"has 1 entries but the placement's mesh \[2, 2\] has 2 axes"):
        normalize_sbp(S(0), mesh)
    with pytest.raises(ValueError, match=r"splits axis 2 of a tensor of shape \[4, 3\]"):
        normalize_sbp((S(2), B), mesh, (4, 3))
    with pytest.raises(TypeError, match="sbp entries"):
        normalize_sbp(("S0", B), mesh)


def test_assemble_rejects_wrong_piece_count_and_shapes():
    mesh = Placement("cpu", [0, 1])
    with pytest.raises(ValueError, match="3 pieces for a placement of 2"):
        assemble([np.zeros(1)] * 3, (2,), mesh, (S(0),))
    with pytest.raises(ValueError, match=r"make shape \[3\], expected \[2\]"):
        assemble([np.zeros(2), np.zeros(1)], (2,), mesh, (S(0),))


def test_placements_and_sbps_rebuild_from_their_reduce():
    # Ray's transport (cloudpickle, in memory) rebuilds them through __reduce__, as deepcopy does;
    # the Ray tests send them to workers end to end. (No pickle is read from a file anywhere.)
    import copy
    from tensorweave.core.sbp import Partial as Pa
    mesh = Placement("cpu", [[0, 1], [2, 3]])
    assert copy.deepcopy(mesh) == mesh and copy.deepcopy(mesh) is not mesh
    for s in (S(1), B, P, Pa("max")):
        assert copy.deepcopy(s) == s


def test_combining_partial_bools_keeps_bool():
    from tensorweave.distribute.layout import combine_partial
    out = combine_partial("sum", [np.array([True, False]), np.array([True, False])])
    assert out.dtype == np.bool_ and out.tolist() == [True, False]
