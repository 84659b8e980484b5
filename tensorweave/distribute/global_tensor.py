"""Global tensors: a logical tensor laid out over a placement's ranks by an N-D SBP.

A :class:`GlobalTensor` holds one NumPy piece per rank (mesh order), its placement, its
SBP (one entry per mesh axis), its logical shape and dtype. The single controller sees
every rank: ``x.to_local()`` gives the per-rank pieces, ``x.numpy()`` the logical value
(gathered), ``x.to_global(placement=, sbp=)`` boxes (``boxing.py``). Ops on global tensors
go to the global interpreter (``interpreter.py``).

>>> import numpy as np, tensorweave as tw
>>> p = tw.placement("cpu", ranks=[0, 1])
>>> x = tw.constant(np.arange(6.0).reshape(3, 2)).to_global(placement=p, sbp=tw.sbp.split(0))
>>> x.shape, x.sbp, [t.shape for t in x.to_local()]
(TensorShape([3, 2]), (S(0),), [TensorShape([2, 2]), TensorShape([1, 2])])
>>> y = x.to_global(sbp=tw.sbp.broadcast)
>>> y.sbp, y.to_local()[1].numpy().tolist()
((B,), [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]])
"""
import numpy as np

from tensorweave.core import errors
from tensorweave.core.sbp import Split
from tensorweave.core.shape import TensorShape
from tensorweave.core.graph import SymbolicTensor
from tensorweave.core.tensor import EagerTensor, Tensor
from tensorweave.distribute import plan_ops  # noqa: F401 - registers the ops planned graphs hold
from tensorweave.distribute.boxing import box, plan_boxing
from tensorweave.distribute.layout import Placement, assemble, local_shape, normalize_sbp, split_to_pieces
from tensorweave.distribute.ray import pieces as ray_pieces
from tensorweave.distribute.ray.pieces import RemotePiece, cluster_for, is_remote, local_pieces, place


def _fmt(nd):
    return "(" + ", ".join(map(repr, nd)) + ("," if len(nd) == 1 else "") + ")"


class GlobalTensor(Tensor):
    """A tensor with a placement and an SBP layout; see the module docstring."""

    __slots__ = ("_pieces", "_placement", "_sbp", "_shape", "_dtype", "_keras_mask", "__weakref__")
    is_global = True

    def __init__(self, pieces, placement, sbp, shape, dtype):
        self._pieces = list(pieces)
        self._placement = placement
        self._sbp = tuple(sbp)
        self._shape = tuple(int(d) for d in shape)
        self._dtype = dtype
        _activate()

    # ---- what a user reads ---------------------------------------------------------------
    @property
    def placement(self):
        return self._placement

    @property
    def sbp(self):
        return self._sbp

    @property
    def shape(self):
        return TensorShape(self._shape)

    @property
    def dtype(self):
        return self._dtype

    @property
    def device(self):
        return repr(self._placement)

    @property
    def _value(self):
        # code written for eager tensors (float(x), constant_value) sees the logical value
        return self.numpy()

    def numpy(self):
        """The logical value (gathered from the ranks' pieces)."""
        v = assemble(local_pieces(self._pieces), self._shape, self._placement, self._sbp)
        return v if v.ndim else v[()]

    def to_local(self):
        """The per-rank local tensors, in rank (mesh) order."""
        return [EagerTensor(p, self._dtype) for p in local_pieces(self._pieces)]

    def to_global(self, placement=None, sbp=None):
        """This tensor boxed to ``placement`` (default: its own) and ``sbp`` (default: its own)."""
        placement = self._placement if placement is None else placement
        nd = self._sbp if sbp is None else normalize_sbp(sbp, placement, self._shape, "to_global")
        return box_tensor(self, placement, nd)

    def _traced_as(self, placeholder):
        """tw.function traced this argument as ``placeholder``: it carries this layout."""
        from tensorweave.distribute.plan_function import mark_global_input
        mark_global_input(placeholder.op.graph, placeholder, self._placement, self._sbp)

    def __array__(self, dtype=None, copy=None):
        v = np.asarray(self.numpy())
        return v.astype(dtype) if dtype is not None and v.dtype != dtype else v

    def __len__(self):
        if not self._shape:
            raise TypeError("len() of a 0-d tensor")
        return self._shape[0]

    def __bool__(self):
        return bool(self.numpy())

    def __float__(self):
        return float(self.numpy())

    def __int__(self):
        return int(self.numpy())

    def __index__(self):
        return int(self.numpy())

    def __format__(self, spec):
        return format(self.numpy(), spec) if not self._shape else format(str(self), spec)

    def __repr__(self):
        v = np.asarray(self.numpy())
        shown = repr(v) if v.ndim else repr(v.item())
        return (f"<tw.Tensor: shape={self._shape}, dtype={self._dtype.name}, placement={self._placement!r}, "
                f"sbp={_fmt(self._sbp)}, numpy={chr(10) if v.ndim else ''}{shown}>")

    def __str__(self):
        return (f"tw.Tensor({np.asarray(self.numpy())}, shape={self._shape}, dtype={self._dtype.name}, "
                f"placement={self._placement!r}, sbp={_fmt(self._sbp)})")

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        # (a piece on a Ray worker is never written in place: the copy can share it)
        return GlobalTensor([p if isinstance(p, RemotePiece) else np.array(p) for p in self._pieces],
                            self._placement, self._sbp, self._shape, self._dtype)


def _activate():
    from tensorweave.core import dispatch
    if dispatch._global_interpreter is None:
        from tensorweave.distribute.interpreter import GLOBAL
        dispatch.set_global_interpreter(GLOBAL)


def box_tensor(x, placement, nd_sbp, record=True):
    """``x`` (global) moved to ``placement`` and ``nd_sbp``; recorded on active tapes with
    its gradient (see ``autodiff``)."""
    if placement == x._placement and nd_sbp == x._sbp:
        return x
    plan = plan_boxing(x._shape, x._dtype.np_dtype, x._placement, x._sbp, nd_sbp, placement)
    cluster = cluster_for(placement)
    if cluster is not None:
        pieces = ray_pieces.box(cluster, x._pieces, plan)     # worker to worker
    else:
        pieces = box(local_pieces(x._pieces) if is_remote(x._pieces) else x._pieces, plan)
    out = GlobalTensor(pieces, placement, nd_sbp, x._shape, x._dtype)
    if record:
        from tensorweave.distribute.autodiff import record_boxing
        record_boxing(x, out)
    return out


def _check_placement(placement, what):
    if not isinstance(placement, Placement):
        raise TypeError(f"{what}: placement must be tw.placement(type, ranks), got {placement!r}")
    return placement


def to_global(x, placement=None, sbp=None):
    """A global tensor from ``x``: a local tensor's value is the logical value (each rank keeps
    its slice for ``S``, a copy for ``B``, and for ``P`` rank 0 the value, the others zeros);
    a global tensor is boxed."""
    if isinstance(x, GlobalTensor):
        return x.to_global(placement, sbp)
    from tensorweave.core.convert import convert_to_tensor
    x = convert_to_tensor(x)
    if not isinstance(x, EagerTensor):
        raise errors.UnimplementedError(
            "to_global: symbolic tensors (tw.function / graphs) are not global yet; call it eagerly")
    if placement is None or sbp is None:
        raise ValueError("to_global of a local tensor needs placement= and sbp=")
    placement = _check_placement(placement, "to_global")
    value = np.asarray(x._value)
    nd = normalize_sbp(sbp, placement, value.shape, "to_global")
    out = GlobalTensor(place(placement, split_to_pieces(value, placement, nd)), placement, nd, value.shape, x.dtype)
    from tensorweave.distribute.autodiff import record_local_to_global
    record_local_to_global(x, out)
    return out


def _logical_shape(shapes, placement, nd, what):
    """The logical shape per-rank piece shapes (mesh order) make, combining the last mesh axis first."""
    grid = np.empty(placement.mesh_shape, dtype=object)
    for i, s in enumerate(shapes):
        grid[placement.coords(i)] = (tuple(s), [placement.ranks[i]])
    for axis in reversed(range(placement.ndim)):
        s = nd[axis]
        reduced = np.empty(grid.shape[:-1], dtype=object)
        for outer in np.ndindex(*grid.shape[:-1]):
            row = [grid[outer + (i,)][0] for i in range(grid.shape[-1])]
            owners = [grid[outer + (i,)][1] for i in range(grid.shape[-1])]
            # the ranks behind each shape: a shape made of several pieces names all of them
            named = ", ".join(f"rank{'s' * (len(o) > 1)} {o[0] if len(o) == 1 else o}: {list(r)}"
                              for r, o in zip(row, owners))
            ndims = [len(r) for r in row]
            if len(set(ndims)) != 1:
                raise ValueError(f"{what}: pieces have different numbers of dimensions ({named})")
            if isinstance(s, Split):
                if s.axis >= ndims[0]:
                    raise ValueError(f"{what}: sbp {_fmt(nd)} splits axis {s.axis} of pieces with {ndims[0]} "
                                     "dimensions")
                others = {r[:s.axis] + r[s.axis + 1:] for r in row}
                if len(others) != 1:
                    raise ValueError(f"{what}: along mesh axis {axis} ({s!r}) the shapes disagree outside split "
                                     f"axis {s.axis} ({named})")
                first = row[0]
                shape = first[:s.axis] + (sum(r[s.axis] for r in row),) + first[s.axis + 1:]
            else:
                if len(set(row)) != 1:
                    raise ValueError(f"{what}: along mesh axis {axis} the shapes disagree ({named}) but {s!r} "
                                     "needs the same shape on every rank")
                shape = row[0]
            reduced[outer] = (shape, [r for o in owners for r in o])
        grid = reduced
    return grid[()][0]


def from_local(tensors, placement, sbp):
    """A global tensor from per-rank pieces (mesh order): OneFlow's local-to-global for every
    rank at once. Shapes must be the balanced split of one logical shape.

    >>> import tensorweave as tw
    >>> p = tw.placement("cpu", ranks=[0, 1])
    >>> x = tw.distribute.from_local([tw.constant([1.0, 2.0]), tw.constant([3.0])], p, tw.sbp.split(0))
    >>> x.shape, x.numpy().tolist()
    (TensorShape([3]), [1.0, 2.0, 3.0])
    """
    from tensorweave.core.convert import convert_to_tensor
    placement = _check_placement(placement, "from_local")
    tensors = [convert_to_tensor(t) for t in tensors]
    if len(tensors) != placement.size:
        raise ValueError(f"from_local: {len(tensors)} tensors for a placement of {placement.size} ranks "
                         f"{list(placement.ranks)}")
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) != 1:
        raise TypeError(f"from_local: pieces for sbp {_fmt(normalize_sbp(sbp, placement, None, 'from_local'))} "
                        f"have different dtypes: " + ", ".join(
                            f"rank {r}: {t.dtype.name} {list(t.shape)}" for r, t in zip(placement.ranks, tensors)))
    pieces = [np.asarray(t._value) for t in tensors]
    shapes = [p.shape for p in pieces]
    nd = normalize_sbp(sbp, placement, None, "from_local")
    what = f"from_local with sbp {_fmt(nd)} and piece shapes {[list(s) for s in shapes]}"
    shape = _logical_shape(shapes, placement, nd, what)
    normalize_sbp(nd, placement, shape, "from_local")
    for i, s in enumerate(shapes):
        want = local_shape(shape, placement, nd, i)
        if tuple(s) != want:
            raise ValueError(f"{what}: rank {placement.ranks[i]}'s piece has shape {list(s)} but the balanced "
                             f"split of logical shape {list(shape)} gives it {list(want)}. Hint: the first "
                             "dim % n ranks hold one more")
    return GlobalTensor(place(placement, [np.array(p) for p in pieces]), placement, nd, shape, dtypes.pop())


def _local_to_global(self, placement=None, sbp=None):
    return to_global(self, placement, sbp)


def _symbolic_to_global(self, placement=None, sbp=None):
    """Inside tw.function: pins this value's layout (a ``_ToGlobal`` op the planner honours)."""
    from tensorweave.core.dispatch import execute
    from tensorweave.core.registry import get_op
    from tensorweave.distribute.plan_function import mark_global
    graph = self.op.graph
    info = getattr(graph, "_tw_globals", None)
    placement = placement if placement is not None else info.placement if info is not None else None
    if placement is None or sbp is None:
        raise ValueError(f"to_global of '{self.name}' inside tw.function needs sbp= (and placement= when no global "
                         "value reached the function yet)")
    placement = _check_placement(placement, "to_global")
    shape = tuple(self.shape.as_list()) if self.shape.is_fully_defined() else None
    nd = normalize_sbp(sbp, placement, shape, "to_global")
    mark_global(graph, placement)
    return execute(get_op("_ToGlobal"), [self], {"placement_type": placement.type, "ranks": placement.mesh.tolist(),
                                                 "sbp": [repr(s) for s in nd]})


# A local eager tensor's to_global (like the ops' Python operators, installed on the class here); a
# symbolic one's pins a layout inside tw.function.
EagerTensor.to_global = _local_to_global
SymbolicTensor.to_global = _symbolic_to_global

__all__ = ["GlobalTensor", "to_global", "from_local", "box_tensor"]
