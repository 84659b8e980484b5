"""Where each rank's piece of a global tensor comes from: placements, the balanced splitter,
and the two reference maps between a logical value and its per-rank pieces.

A :class:`Placement` is a device type and an N-D mesh of rank ids. A global tensor has one
SBP per mesh axis (``core/sbp.py``). Mesh axes apply in order: axis 0 lays the logical
value out over its coordinates, axis 1 lays each of those pieces out again, and so on
(OneFlow's hierarchical layout); two mesh axes splitting the same tensor axis split it
twice. Splits follow OneFlow's balanced splitter: of ``n`` elements over ``k`` ranks the
first ``n % k`` ranks get one more (so a dimension smaller than ``k`` leaves empty shards).

:func:`split_to_pieces` and :func:`assemble` are the definition of a layout; boxing moves
data with collectives instead, and is tested against them.

>>> import numpy as np
>>> from tensorweave.core.sbp import S, B, P
>>> mesh = Placement("cpu", [[0, 1], [2, 3]])
>>> x = np.arange(12.0).reshape(3, 4)
>>> [p.shape for p in split_to_pieces(x, mesh, (S(0), S(1)))]
[(2, 2), (2, 2), (1, 2), (1, 2)]
>>> pieces = split_to_pieces(x, mesh, (B, P))
>>> [float(p.sum()) for p in pieces]
[66.0, 0.0, 66.0, 0.0]
>>> bool((assemble(pieces, x.shape, mesh, (B, P)) == x).all())
True
"""
import itertools

import numpy as np

from tensorweave.core.sbp import SBP, Broadcast, Partial, Split


class Placement:
    """A device type and a mesh of ranks: ``Placement("cpu", [0, 1, 2, 3])`` (1-D) or
    ``Placement("cpu", [[0, 1], [2, 3]])`` (a 2×2 mesh). Immutable and hashable.

    >>> Placement("cpu", [[0, 1], [2, 3]])
    placement(type="cpu", ranks=[[0, 1], [2, 3]])
    >>> Placement("cpu", [[0, 1], [2, 3]]).mesh_shape, Placement("cpu", range(3)).ranks
    ((2, 2), (0, 1, 2))
    """

    __slots__ = ("type", "_mesh")

    def __init__(self, type="cpu", ranks=(0,)):  # noqa: A002 - OneFlow's and DTensor's name
        if not isinstance(type, str) or not type:
            raise ValueError(f"placement: device type must be a non-empty string such as 'cpu', got {type!r}")
        try:
            mesh = np.array(list(ranks) if isinstance(ranks, range) else ranks)
        except ValueError as e:
            raise ValueError(f"placement: ranks must be a rectangular nest of ints, got {ranks!r}") from e
        if mesh.ndim == 0:
            mesh = mesh.reshape(1)
        if mesh.size == 0 or mesh.dtype.kind not in "iu":
            raise ValueError(f"placement: ranks must be a non-empty rectangular nest of ints, got {ranks!r}")
        if (mesh < 0).any() or len(np.unique(mesh)) != mesh.size:
            raise ValueError(f"placement: ranks must be distinct non-negative ints, got {mesh.tolist()}")
        mesh = mesh.astype(np.int64)
        mesh.flags.writeable = False
        object.__setattr__(self, "type", type.lower())
        object.__setattr__(self, "_mesh", mesh)

    def __setattr__(self, name, value):
        raise AttributeError("placement is immutable")

    @property
    def mesh(self):
        """The rank ids as a read-only N-D array."""
        return self._mesh

    @property
    def mesh_shape(self):
        return self._mesh.shape

    @property
    def ndim(self):
        return self._mesh.ndim

    @property
    def ranks(self):
        """The rank ids in mesh (row-major) order: the order of per-rank pieces everywhere."""
        return tuple(int(r) for r in self._mesh.ravel())

    @property
    def size(self):
        return self._mesh.size

    def coords(self, index):
        """The mesh coordinates of the ``index``-th rank in mesh order."""
        return tuple(int(c) for c in np.unravel_index(index, self._mesh.shape))

    def __eq__(self, other):
        return (isinstance(other, Placement) and other.type == self.type
                and other._mesh.shape == self._mesh.shape and bool((other._mesh == self._mesh).all()))

    def __hash__(self):
        return hash((self.type, self._mesh.shape, self._mesh.tobytes()))

    def __reduce__(self):     # (pickling sets slots through __setattr__, which refuses)
        return Placement, (self.type, self._mesh.tolist())

    def __repr__(self):
        return f'placement(type="{self.type}", ranks={self._mesh.tolist()})'


def balanced_bounds(n, parts):
    """``[(start, stop), ...]`` of ``n`` elements over ``parts`` ranks; the first
    ``n % parts`` get one more.

    >>> balanced_bounds(5, 3), balanced_bounds(1, 3)
    ([(0, 2), (2, 4), (4, 5)], [(0, 1), (1, 1), (1, 1)])
    """
    base, extra = divmod(n, parts)
    bounds, start = [], 0
    for i in range(parts):
        stop = start + base + (1 if i < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def normalize_sbp(sbp, placement, shape=None, what="tensor"):
    """``sbp`` as a tuple with one SBP per mesh axis (a single SBP is accepted for a 1-D
    mesh); checks split axes against ``shape``'s rank when given."""
    nd = tuple(sbp) if isinstance(sbp, (tuple, list)) else (sbp,)
    if len(nd) != placement.ndim:
        raise ValueError(f"{what}: sbp {_fmt(nd)} has {len(nd)} entries but the placement's mesh "
                         f"{list(placement.mesh_shape)} has {placement.ndim} axes (one SBP per mesh axis)")
    for s in nd:
        if not isinstance(s, SBP):
            raise TypeError(f"{what}: sbp entries must be tw.sbp.split(axis), tw.sbp.broadcast or "
                            f"tw.sbp.partial_sum, got {s!r}")
        if shape is not None and isinstance(s, Split) and s.axis >= len(shape):
            raise ValueError(f"{what}: sbp {_fmt(nd)} splits axis {s.axis} of a tensor of shape "
                             f"{list(shape)} (rank {len(shape)}); hint: split an axis in [0, {len(shape)})")
    return nd


def _fmt(nd):
    return "(" + ", ".join(map(repr, nd)) + ")"


def shard_slices(shape, placement, nd_sbp):
    """Per rank (mesh order), the tuple of slices of the logical value its piece covers
    (``P`` and ``B`` entries cover everything)."""
    out = []
    for index in range(placement.size):
        coords = placement.coords(index)
        bounds = [(0, n) for n in shape]
        for mesh_axis, s in enumerate(nd_sbp):
            if isinstance(s, Split):
                lo, hi = bounds[s.axis]
                start, stop = balanced_bounds(hi - lo, placement.mesh_shape[mesh_axis])[coords[mesh_axis]]
                bounds[s.axis] = (lo + start, lo + stop)
        out.append(tuple(slice(lo, hi) for lo, hi in bounds))
    return out


def local_shape(shape, placement, nd_sbp, index):
    """The shape of the ``index``-th rank's piece."""
    return tuple(s.stop - s.start for s in shard_slices(shape, placement, nd_sbp)[index])


def partial_identity(kind, dtype):
    """The value a rank without a share of a ``P(kind)`` tensor holds (0, 1, or the
    dtype's lowest/highest value for max/min)."""
    dtype = np.dtype(dtype)
    if kind == "sum":
        return dtype.type(0)
    if kind == "prod":
        return dtype.type(1)
    if dtype.kind == "f":
        return dtype.type(-np.inf if kind == "max" else np.inf)
    if dtype.kind == "b":
        return np.bool_(kind == "min")
    info = np.iinfo(dtype)
    return dtype.type(info.min if kind == "max" else info.max)


_COMBINE = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}


def combine_partial(kind, values):
    """The logical value of partial values ``values`` of kind ``kind``."""
    return _COMBINE[kind].reduce(np.stack(values), axis=0) if len(values) > 1 else np.array(values[0])


def split_to_pieces(value, placement, nd_sbp):
    """The per-rank pieces (mesh order) of logical ``value`` laid out as ``nd_sbp``: each
    rank's slice for ``S``, the whole for ``B``, and for ``P`` the value on coordinate 0 of
    that mesh axis and the kind's identity elsewhere. Pieces are fresh arrays."""
    value = np.asarray(value)
    nd_sbp = normalize_sbp(nd_sbp, placement, value.shape)
    slices = shard_slices(value.shape, placement, nd_sbp)
    pieces = []
    for index, sl in enumerate(slices):
        coords = placement.coords(index)
        piece = np.array(value[sl])
        for mesh_axis, s in enumerate(nd_sbp):
            if isinstance(s, Partial) and coords[mesh_axis] != 0:
                piece[...] = partial_identity(s.kind, value.dtype)
        pieces.append(piece)
    return pieces


def assemble(pieces, shape, placement, nd_sbp):
    """The logical value of per-rank ``pieces`` (mesh order) laid out as ``nd_sbp``: the
    inverse of :func:`split_to_pieces`, combining the last mesh axis first."""
    nd_sbp = normalize_sbp(nd_sbp, placement, shape)
    if len(pieces) != placement.size:
        raise ValueError(f"assemble: {len(pieces)} pieces for a placement of {placement.size} ranks")
    grid = np.empty(placement.mesh_shape, dtype=object)
    for index, piece in enumerate(pieces):
        grid[placement.coords(index)] = np.asarray(piece)
    for mesh_axis in reversed(range(placement.ndim)):
        s = nd_sbp[mesh_axis]
        reduced = np.empty(grid.shape[:-1], dtype=object)
        for outer in itertools.product(*map(range, grid.shape[:-1])):
            row = [grid[outer + (i,)] for i in range(grid.shape[-1])]
            if isinstance(s, Split):
                reduced[outer] = np.concatenate(row, axis=s.axis)
            elif isinstance(s, Broadcast):
                reduced[outer] = row[0]
            else:
                reduced[outer] = combine_partial(s.kind, row)
        grid = reduced
    value = grid[()]
    if tuple(value.shape) != tuple(shape):
        raise ValueError(f"assemble: pieces make shape {list(value.shape)}, expected {list(shape)}")
    return value
