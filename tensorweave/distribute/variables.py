"""Global variables: ``tw.Variable(initial_value, placement=, sbp=)``.

A :class:`GlobalVariable` is one ordinary variable per rank holding that rank's shard, and
a global *handle* (a global tensor of dtype resource whose per-rank pieces are those
variables). Reads, assignments and the optimizers' fused updates are ops on the handle,
so they go through the global interpreter like any op: an op on a variable handle runs
where the variable lives (the variable keeps its SBP; inputs shaped like the variable are
boxed to its SBP, e.g. a data-parallel ``P`` gradient is all-reduced to the ``B`` weight;
other inputs are ``B``).

The variable is created per shard, on its rank (on the Ray workers after ``connect``): a tw
initializer (``tw.keras.initializers.*``) runs on each rank, which keeps its slice of the
one-device value (a random initializer without a seed gets one drawn from the driver's random
state first, so every rank draws the same logical value; the common initializers draw only
the rank's slice, ``InitialPieces``); another callable taking a shape (``lambda shape, dtype: ...``) is called
per shard with the piece's shape on the driver's rank threads. A value (array, tensor) is
split; a global tensor is boxed.

>>> import numpy as np, tensorweave as tw
>>> p = tw.placement("cpu", ranks=[0, 1])
>>> v = tw.Variable(tw.keras.initializers.Ones(), shape=(3, 2), placement=p, sbp=tw.sbp.split(0))
>>> [t.shape.as_list() for t in v.to_local()], v.sbp
([[2, 2], [1, 2]], (S(0),))
>>> _ = v.assign_add(tw.constant(np.full((3, 2), 2.0, np.float32)))
>>> v.numpy().tolist()
[[3.0, 3.0], [3.0, 3.0], [3.0, 3.0]]
"""
import inspect

import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core import errors
from tensorweave.core.context import building_graph, ctx, eager_mode, init_scope
from tensorweave.core.sbp import Partial
from tensorweave.core.shape import TensorShape, as_shape
from tensorweave.core.tensor import EagerTensor
from tensorweave.distribute.global_tensor import GlobalTensor, to_global
from tensorweave.distribute.layout import (Placement, local_shape, normalize_sbp, partial_identity, shard_slices,
                                          split_to_pieces)
from tensorweave.distribute.ray.pieces import RemotePiece, cluster_for, local_pieces, make_variables
from tensorweave.ops import variables as _variables
from tensorweave.ops.variables import Variable, _next_uid


class InitialPieces:
    """The pieces of a global variable made by a tw initializer (``keras.initializers``): rank
    ``i``'s piece (:meth:`piece`) is its slice of ``init(logical shape)`` (the identity on the
    ranks without a share of a ``P``), so the logical value is the one-device value. Zeros,
    ones, constants and the seeded uniform/normal/truncated-normal draws (Glorot, He, Lecun...)
    make only the slice (``keras.initializers.slice_of``: peak memory the piece plus one block
    of the draw); other initializers make the whole value and keep the slice. Plain data (the
    initializer by its class and config), sent to the Ray workers that make the pieces."""

    def __init__(self, init, logical, placement, nd, dtype):
        self.init, self.logical, self.placement, self.nd, self.dtype = init, tuple(logical), placement, nd, dtype

    def piece(self, i):
        dtype, coords = self.dtype.np_dtype, self.placement.coords(i)
        for axis, s in enumerate(self.nd):
            if isinstance(s, Partial) and coords[axis] != 0:
                return np.full(local_shape(self.logical, self.placement, self.nd, i), partial_identity(s.kind, dtype),
                               dtype)
        from tensorweave.keras.initializers import slice_of
        where = shard_slices(self.logical, self.placement, self.nd)[i]
        with init_scope(), eager_mode():
            piece = slice_of(self.init, self.logical, self.dtype, where)     # only the slice drawn
            if piece is not None:
                return piece
            value = self.init(list(self.logical), dtype=self.dtype)
        value = np.asarray(getattr(value, "numpy", lambda: value)(), dtype=dtype).reshape(self.logical)
        return np.array(value[where])


def _with_seed(init):
    """``init`` with a seed when it is a random initializer without one: drawn here, from the
    driver's random state (``keras.utils.set_random_seed`` makes it reproducible), so every rank
    draws the same logical value (a ``B`` variable's replicas agree)."""
    config = init.get_config()
    if "seed" not in config or config["seed"] is not None:
        return init
    from tensorweave.ops.random_ops import uniform
    seed = int(uniform([], 0, 2 ** 31 - 1, dtype=_dt.int32).numpy())
    return type(init).from_config({**config, "seed": seed})


class GlobalHandle(GlobalTensor):
    """The handle of a global variable: pieces are the per-rank variables; its logical shape
    and SBP are the variable's."""

    __slots__ = ("_variable",)

    def __init__(self, variable, pieces):
        super().__init__(pieces, variable._placement, variable._nd, variable._shape.as_list(), _dt.resource)
        self._variable = variable

    @property
    def _value(self):
        return self._variable           # what the tape's watch reads (as for an eager handle)

    def numpy(self):
        raise TypeError("a variable handle has no value; read the variable")

    def __repr__(self):
        return f"<global handle of {self._variable.name}>"


def _takes_shape(fn):
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
    except (TypeError, ValueError):
        return False
    return bool(params)


class GlobalVariable(Variable):
    """A variable laid out over ``placement`` as ``sbp`` (see the module docstring)."""

    is_global = True

    def __init__(self, initial_value=None, trainable=True, name=None, dtype=None, shape=None, validate_shape=True,
                 constraint=None, placement=None, sbp=None, collections=None, **unused):
        if initial_value is None:
            raise ValueError("Variable: initial_value must be given")
        if not isinstance(placement, Placement):
            raise TypeError(f"Variable: placement must be tw.placement(type, ranks), got {placement!r}")
        # (in a TF1 graph too: its shards are made now, so it needs no initializer run; the graph's
        # Session plans its reads and updates over the ranks)
        self.trainable = bool(trainable)
        self.constraint = constraint
        self._value = None
        self._uid = _next_uid()
        self._graph = None
        self._graph_read = None
        self._initializer_op = None
        self._init_value_tensor = None
        self._device = None
        self._placement = placement
        base = (name or "Variable").rstrip("/").split(":")[0]
        self._name = (ctx.name_stack + "/" if ctx.name_stack else "") + base + ":0"
        with eager_mode():        # shards are made now, also while a TF1 graph is being built
            pieces, logical_shape, dt, self._nd = self._make_pieces(initial_value, placement, sbp, dtype, shape)
            self._dtype = dt
            self._shape = TensorShape(logical_shape)
            cluster = cluster_for(placement)
            if cluster is not None:     # each shard a variable on its Ray worker
                locals_ = make_variables(cluster, placement, pieces, base, dt)
            else:
                locals_ = [Variable(p, trainable=False, name=f"{base}/rank{r}", dtype=dt)
                           for p, r in zip(local_pieces(pieces), placement.ranks)]
        self._locals = locals_
        self._eager_handle = GlobalHandle(self, locals_)
        self._handles = {}
        graph = building_graph()
        if graph is not None and not graph.is_function_graph:
            self._join_tf1_graph(graph, base, collections)

    def _join_tf1_graph(self, graph, base, collections):
        # a TF1 program finds its variables through the graph's collections (Saver(), minimize(),
        # global_variables_initializer()); the shards already hold the initial value, so the
        # initializer has nothing left to do
        from tensorweave.ops.control_flow_ops import no_op
        with graph.name_scope(base + "/"), graph.control_dependencies(None):
            self._initializer_op = no_op(name="Initializer")
        if collections is None:
            collections = [_variables.GLOBAL_VARIABLES] + ([_variables.TRAINABLE_VARIABLES] if self.trainable else [])
        graph.add_to_collections(collections, self)

    def _make_pieces(self, init, placement, sbp, dtype, shape):
        dtype = None if dtype is None else _dt.as_dtype(dtype)
        if isinstance(init, GlobalTensor) or (not callable(init) and not isinstance(init, Variable)):
            if not isinstance(init, GlobalTensor):
                from tensorweave.core.convert import convert_to_tensor
                init = convert_to_tensor(init, dtype=dtype) if not isinstance(init, EagerTensor) else init
            g = to_global(init, placement, sbp) if isinstance(init, GlobalTensor) else None
            if g is None:
                nd = normalize_sbp(sbp, placement, tuple(init.shape.as_list()), f"Variable '{self._name[:-2]}'")
                g = to_global(init, placement, nd)
            return [p if isinstance(p, RemotePiece) else np.array(p) for p in g._pieces], g._shape, g.dtype, g._sbp
        if isinstance(init, Variable):
            return self._make_pieces(init.read_value(), placement, sbp, dtype, shape)
        if not _takes_shape(init):
            # a zero-argument callable makes the whole value: the caller's choice; then it is split
            return self._make_pieces(init(), placement, sbp, dtype, shape)
        if shape is None or not as_shape(shape).is_fully_defined():
            raise ValueError(f"Variable '{self._name[:-2]}': an initializer called per shard needs shape=")
        logical = tuple(as_shape(shape).as_list())
        nd = normalize_sbp(sbp, placement, logical, f"Variable '{self._name[:-2]}'")
        dtype = dtype or _dt.float32
        from tensorweave.distribute.ranks import default_world
        from tensorweave.keras.initializers import Initializer
        if isinstance(init, Initializer):
            # a tw initializer makes the one-device value, each rank keeps its piece: on the Ray
            # workers themselves (nothing passes through the driver), else on the rank threads
            spec = InitialPieces(_with_seed(init), logical, placement, nd, dtype)
            if cluster_for(placement) is not None:
                return [spec] * placement.size, logical, dtype, nd
            return default_world().run(placement.ranks, spec.piece), logical, dtype, nd

        def on_rank(i):
            piece_shape = local_shape(logical, placement, nd, i)
            coords = placement.coords(i)
            for axis, s in enumerate(nd):
                if isinstance(s, Partial) and coords[axis] != 0:
                    return np.full(piece_shape, partial_identity(s.kind, dtype.np_dtype), dtype.np_dtype)
            with init_scope():
                value = init(list(piece_shape), dtype=dtype)
            return np.array(getattr(value, "numpy", lambda: value)(), dtype=dtype.np_dtype).reshape(piece_shape)
        return default_world().run(placement.ranks, on_rank), logical, dtype, nd

    # ---- what differs from a local variable ---------------------------------------------------
    @property
    def placement(self):
        return self._placement

    @property
    def sbp(self):
        return self._nd

    @property
    def handle(self):
        graph = building_graph()
        if graph is None:
            return self._eager_handle
        return self.handle_in(graph)

    def handle_in(self, graph):
        """In a graph (tw.function or TF1): a ``VarHandleOp`` carrying this variable (its logical
        shape; the graph planner lays it out as the variable's SBP and binds each rank's shard)."""
        from tensorweave.distribute.plan_function import mark_global
        mark_global(graph, self._placement)
        return super().handle_in(graph)

    def read_value(self):
        g = building_graph()
        if g is not None and getattr(g, "shape_only", False):
            # a trace for output shapes only (Keras' functional API): the logical value's stand-in
            from tensorweave.ops.array_ops import placeholder
            return placeholder(self._dtype, self._shape)
        return super().read_value()

    def sparse_read(self, indices, name=None):
        g = building_graph()
        if g is not None and getattr(g, "shape_only", False):
            # the shape-only trace (an embedding in a Keras functional model): rows of the stand-in
            from tensorweave.ops.array_ops import gather
            return gather(self.read_value(), indices)
        return super().sparse_read(indices, name)

    def _read(self):
        return self.read_value().numpy()

    def _write(self, value):
        # a kernel writing the logical value through a local handle (a function traced before
        # model.to_global made this variable global): each rank's shard gets its piece
        value = np.asarray(value, dtype=self._dtype.np_dtype).reshape(self._shape.as_list())
        for v, piece in zip(self._locals, split_to_pieces(value, self._placement, self._nd)):
            v._write(np.array(piece))

    def _storage_for_update(self):
        raise errors.FailedPreconditionError(
            f"global variable '{self.name}' updated in place through a local handle (a tw.function traced "
            "before the variable became global, e.g. before model.to_global). Hint: trace the function again")

    def to_local(self):
        """Each rank's shard (mesh order), as local tensors."""
        return [EagerTensor(np.asarray(v._read()), self._dtype) for v in self._locals]

    def __repr__(self):
        return (f"<tw.Variable '{self.name}' shape={tuple(self._shape.as_list())} dtype={self._dtype.name} "
                f"placement={self._placement!r} sbp={self.sbp}>")


def _make_global_variable(*args, **kwargs):
    return object.__new__(GlobalVariable)


_variables.set_global_variable_factory(_make_global_variable)
