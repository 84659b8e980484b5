"""The passes' working form of a plan: the executor's op list with some ops replaced.

A pass never edits the user's :class:`~tensorweave.core.graph.Graph`. It works on
:class:`Work`: the pruned, topologically ordered op list that ``build_plan`` walks, where
rewritten ops are :class:`Node` objects (duck-typed like ``Operation``: name, type, opdef,
inputs, outputs, attrs, device, control_inputs, traceback, graph) whose outputs are new
:class:`Value` objects (duck-typed like ``SymbolicTensor``). Untouched ops stay the user's
``Operation`` objects, so error messages, the profiler and ``err.op`` see them unchanged.

Passes record rewrites as a replacement map (old tensor -> equivalent tensor) and node
substitutions; :meth:`Work.commit` then rebuilds the list in one linear sweep, cloning every
op whose inputs or control inputs changed (a clone's outputs are new values, so the change
propagates downstream).
"""
import numpy as np

from tensorweave.core.registry import OpDef
from tensorweave.core.devices import device_type_of


class Value:
    """An output of a :class:`Node` (stands in for a ``SymbolicTensor``)."""

    __slots__ = ("op", "value_index", "shape", "dtype")

    def __init__(self, op, value_index, shape, dtype):
        self.op, self.value_index, self.shape, self.dtype = op, value_index, shape, dtype

    @property
    def name(self):
        return f"{self.op.name}:{self.value_index}"

    def __repr__(self):
        return f"<Value {self.name} shape={self.shape} dtype={self.dtype.name}>"


class NodeDef(OpDef):
    """The ``OpDef`` of a rewritten node: kernels given, no shape rule or gradient (the node
    exists only in a plan); the executor reads kernels, num_outputs, bind, heavy, stateful."""

    __slots__ = ()

    def __init__(self, name, kernels, num_outputs=1, bind=None, heavy=False, stateful=False, traits=None):
        super().__init__(name, None, num_outputs, stateful, bind=bind, heavy=heavy, traits=traits)
        self.kernels = kernels


def clone_def(opdef, orig):
    """An OpDef stand-in for a clone of ``orig``: same kernels; ``bind`` still sees the original
    op (random ops keep their stream on it, If/While read their sub-graphs from it)."""
    bind = None if opdef.bind is None else (lambda _node, _b=opdef.bind, _o=orig: _b(_o))
    return NodeDef(opdef.name, opdef.kernels, opdef.num_outputs, bind, opdef.heavy, opdef.stateful, opdef.traits)


class Node:
    """A rewritten node (stands in for an ``Operation`` in the executor's op list)."""

    __slots__ = ("graph", "name", "type", "opdef", "inputs", "outputs", "attrs", "device",
                 "control_inputs", "traceback", "_id", "_extra", "orig", "fused", "inplace_of")

    def __init__(self, like, opdef, inputs, attrs, out_specs, type_=None, name=None, control_inputs=None,
                 fused=None):
        self.graph = like.graph
        self.name = like.name if name is None else name
        self.type = opdef.name if type_ is None else type_
        self.opdef = opdef
        self.inputs = tuple(inputs)
        self.attrs = attrs
        self.device = like.device
        self.control_inputs = list(like.control_inputs if control_inputs is None else control_inputs)
        self.traceback = like.traceback
        self._id = like._id
        self._extra = None
        self.orig = getattr(like, "orig", like)
        self.fused = fused             # names of the original nodes a fused node computes
        self.inplace_of = None         # index of the input whose buffer receives the output
        self.outputs = [Value(self, i, s, d) for i, (s, d) in enumerate(out_specs)]

    def get_attr(self, name):
        return self.attrs[name]

    def __repr__(self):
        return f"<Node '{self.name}' type={self.type}>"


def clone(op, inputs=None, attrs=None, control_inputs=None):
    """A copy of ``op`` (an Operation or Node) with other inputs/attrs/control inputs."""
    opdef = op.opdef if isinstance(op, Node) else clone_def(op.opdef, op)
    new = Node(op, opdef, op.inputs if inputs is None else inputs, dict(op.attrs) if attrs is None else attrs,
                [(t.shape, t.dtype) for t in op.outputs], type_=op.type,
                control_inputs=op.control_inputs if control_inputs is None else control_inputs,
               fused=getattr(op, "fused", None))
    new.inplace_of = getattr(op, "inplace_of", None)
    return new


def fused_names(steps):
    """The names of the original nodes ``steps`` compute (a fused node's ``fused``, else its own name), in
    order: the ``fused`` of a node made of them."""
    return [name for op in steps for name in (getattr(op, "fused", None) or [op.name])]


# ---- static facts ------------------------------------------------------------------------------
def static_dims(t):
    """The static shape as a tuple of ints, or None if any dimension (or the rank) is unknown."""
    dims = t.shape.as_tuple()
    if dims is None or any(d is None for d in dims):
        return None
    return tuple(dims)


def nbytes(t):
    """Bytes of a tensor from its static shape (None if unknown; 0 for resource handles)."""
    if t.dtype.name in ("resource", "variant", "string"):
        return 0
    dims = static_dims(t)
    if dims is None:
        return None
    n = 1
    for d in dims:
        n *= d
    return n * np.dtype(t.dtype.np_dtype).itemsize


def is_pure(op):
    """True for ops whose kernel is a pure function of its inputs: not stateful, no bound extras
    (If/While sub-plans, placeholders) and a kernel that ships with tensorweave or NumPy/SciPy
    (a user kernel registered with ``tw.register_kernel`` might have side effects)."""
    d = op.opdef
    if d.stateful or d.bind is not None or op.type in ("Placeholder", "PlaceholderWithDefault"):
        return False
    k = d.kernels.get("CPU")
    if k is None:
        return False
    if isinstance(k, np.ufunc):
        return True
    mod = getattr(k, "__module__", None) or ""
    return mod.split(".")[0] in ("tensorweave", "numpy", "scipy")


_STOCK = {}   # op type -> the CPU kernel tensorweave registered for it


def runs_stock_kernel(op, op_type=None):
    """Whether ``op`` (an ``op_type`` node, when given) runs the CPU kernel tensorweave registers
    for its type. Passes that replace nodes by their own loops reproduce that kernel's
    arithmetic, so a kernel a user registers in its place (captured here at the first ask)
    keeps its node untouched."""
    t = op.type if op_type is None else op_type
    if op.type != t:
        return False
    if t not in _STOCK:
        from tensorweave.core import errors
        from tensorweave.core.registry import get_op
        try:
            _STOCK[t] = get_op(t).kernels.get("CPU")
        except errors.NotFoundError:   # a plan-only node (FusedElementwise, ...)
            _STOCK[t] = None
    k = _STOCK[t]
    return k is not None and op.opdef.kernels.get("CPU") is k


def const_value(t, work):
    """The value of ``t`` if it is the (unfed) output of a Const node, else None."""
    if id(t) in work.feed_ids or t.op.type != "Const":
        return None
    return t.op.attrs.get("value")


# ---- the working list ----------------------------------------------------------------------------
class Work:
    """The op list being optimised, plus what passes must respect."""

    def __init__(self, ops, fetches, targets, feeds, options, placed=None):
        self.ops = list(ops)
        self.placed = placed or {}     # id(original op) -> its device (the plan places before the passes)
        self.fetches = list(fetches)
        self.feed_ids = {id(t) for t in feeds}
        self.options = options
        self.rep = {}                  # id(old tensor) -> equivalent tensor
        self.node_rep = {}             # id(old op) -> replacement op, or None (deleted)
        self.extra = {}                # id(op) -> new nodes to insert before it
        self.stats = {"nodes_in": len(self.ops)}
        # ops whose position relative to others matters: targets, control inputs, ops with control
        # inputs. id -> op: holding the op keeps its id from being reused by a node made later
        # (a dropped clone's id passed on to a new node pinned it, and kept dead nodes alive)
        self.pinned = {id(t): t for t in targets}
        for op in self.ops:
            if op.control_inputs:
                self.pinned[id(op)] = op
                self.pinned.update((id(c), c) for c in op.control_inputs if c is not None)
        self.refresh()

    def refresh(self):
        """Recomputes the fetched set and the consumers of every tensor."""
        self.fetch_ids = {id(t) for t in self.fetches}
        cons = {}
        for op in self.ops:
            for t in op.inputs:
                cons.setdefault(id(t), []).append(op)
        self.consumers = cons

    def device_type(self, op):
        """The device type ``op`` runs on: where the placer put it (a rewritten node: where the
        op it stands for was put). Passes that swap in a kernel check it has one there."""
        d = self.placed.get(id(op))
        if d is None:
            orig = getattr(op, "orig", None)
            d = self.placed.get(id(orig)) if orig is not None else None
            if d is None:
                d = op.device
        return device_type_of(d)

    def n_uses(self, t):
        """How many input positions read ``t`` (plus one if fetched)."""
        return len(self.consumers.get(id(t), ())) + (id(t) in self.fetch_ids)

    def protected(self, t):
        """Fed and fetched tensors keep their identity: never replaced, never computed elsewhere."""
        return id(t) in self.feed_ids or id(t) in self.fetch_ids

    def frozen(self, op):
        """Ops that must stay as they are (may still be cloned with equivalent inputs)."""
        return id(op) in self.pinned or op.opdef.stateful or any(self.protected(t) for t in op.outputs)

    def resolve(self, t):
        rep = self.rep
        while id(t) in rep:
            t = rep[id(t)]
        return t

    def fuse(self, node, steps):
        """Puts ``node`` where the last of ``steps`` (in plan order) stood, its outputs read as that
        step's; the other steps leave the plan (the caller checked nothing else reads them). Returns ``node``."""
        self.node_rep[id(steps[-1])] = node
        for op in steps[:-1]:
            self.node_rep[id(op)] = None
        return node

    def tally(self, key, n):
        """Adds ``n`` (a pass's matches) to ``stats[key]`` (no entry while none); returns ``n``."""
        if n:
            self.stats[key] = self.stats.get(key, 0) + n
        return n

    def replace(self, old, new):
        """Records that tensor ``old`` may be read as ``new``."""
        if old is not new and not self.protected(old):
            self.rep[id(old)] = new
            return True
        return False

    def commit(self):
        """Applies recorded replacements in one sweep; ops whose inputs changed become clones."""
        if not self.rep and not self.node_rep and not self.extra:
            return
        new_ops = []
        node_rep = self.node_rep
        for op in self.ops:
            new_ops.extend(self.extra.get(id(op), ()))
            if id(op) in node_rep:
                op2 = node_rep[id(op)]
                if op2 is None:
                    continue
                for a, b in zip(op.outputs, op2.outputs):
                    if a is not b and id(a) not in self.feed_ids:
                        self.rep[id(a)] = b
                op = op2
            ins = [self.resolve(t) for t in op.inputs]
            ctl = [self._resolve_op(c) for c in op.control_inputs]
            if any(a is not b for a, b in zip(ins, op.inputs)) or any(
                    a is not b for a, b in zip(ctl, op.control_inputs)):
                new = clone(op, inputs=ins, control_inputs=[c for c in ctl if c is not None])
                if id(op) in self.pinned:
                    self.pinned[id(new)] = new
                node_rep[id(op)] = new
                for a, b in zip(op.outputs, new.outputs):
                    # consumers of a fed tensor read the feed; a value a pass already
                    # replaced (folded, merged) keeps its replacement
                    if id(a) not in self.feed_ids and id(a) not in self.rep:
                        self.rep[id(a)] = b
                op = new
            new_ops.append(op)
        self.ops = new_ops
        self.fetches = [self.resolve(t) for t in self.fetches]
        self.pinned.update((id(node_rep[i]), node_rep[i]) for i in list(self.pinned) if node_rep.get(i) is not None)
        self.rep = {}
        self.node_rep = {}
        self.extra = {}
        self.refresh()

    def insert_before(self, op, node):
        self.extra.setdefault(id(op), []).append(node)

    def _resolve_op(self, op):
        seen = 0
        while op is not None and id(op) in self.node_rep and seen < 1000:
            op = self.node_rep[id(op)]
            seen += 1
        return op
