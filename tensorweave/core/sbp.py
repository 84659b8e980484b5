"""SBP values and the form of an op's SBP rule (the ``sbp=`` slot of ``register_op``).

A global tensor is laid out over one mesh axis as ``S(i)`` (split along tensor axis ``i``,
OneFlow's balanced splitter), ``B`` (every rank holds all of it) or ``P`` (every rank holds
a partial value; the logical value is their sum, or max/min/product for ``P(max)`` ...).
An N-D mesh has one SBP per mesh axis; rules speak about one mesh axis at a time.

**The rule form.** Beside its shape rule ``infer(inputs, attrs)`` an op may have

    sbp(inputs, attrs) -> [Signature, ...]

where ``inputs`` are :class:`SbpInput` (logical ``shape``, ``dtype`` and the SBP the
producer gives now, or None), and each :class:`Signature` is one legal way to run the op
rank-locally: the SBP every input must have and the SBP of every output (as DTensor's
strategies list them). The planner (distribute package) chooses among the candidates by
communication cost, inserting boxing where an input's SBP differs; rules never move data.
``B`` everywhere is always legal, so an op whose rule is :data:`BOXES_TO_B` (or that has
none) still runs on global tensors: inputs are boxed to ``B`` (the planner warns once).

Rules are generated where possible (``core/sbp_rules.py``): from the ``elementwise`` and
``linear`` traits, from the ``reduction`` trait, and from einsum equations (matmul).

>>> S(0), B, P, Partial("max")
(S(0), B, P, P(max))
>>> Signature((S(0), B), (S(0),))
S(0), B -> S(0)
"""


class SBP:
    """An immutable layout over one mesh axis."""

    __slots__ = ()

    def __setattr__(self, name, value):
        raise AttributeError("SBP values are immutable")


class Split(SBP):
    __slots__ = ("axis",)

    def __init__(self, axis):
        if isinstance(axis, bool) or not isinstance(axis, int) or axis < 0:
            raise ValueError(f"split axis must be a non-negative int, got {axis!r}")
        object.__setattr__(self, "axis", axis)

    def __eq__(self, other):
        return isinstance(other, Split) and other.axis == self.axis

    def __hash__(self):
        return hash(("S", self.axis))

    def __reduce__(self):     # (pickling sets slots through __setattr__, which refuses)
        return Split, (self.axis,)

    def __repr__(self):
        return f"S({self.axis})"


class Broadcast(SBP):
    __slots__ = ()

    def __eq__(self, other):
        return isinstance(other, Broadcast)

    def __hash__(self):
        return hash("B")

    def __reduce__(self):
        return Broadcast, ()

    def __repr__(self):
        return "B"


class Partial(SBP):
    """A partial value; ``kind`` says how the ranks' values combine."""

    __slots__ = ("kind",)
    KINDS = ("sum", "max", "min", "prod")

    def __init__(self, kind="sum"):
        if kind not in self.KINDS:
            raise ValueError(f"partial kind must be one of {self.KINDS}, got {kind!r}")
        object.__setattr__(self, "kind", kind)

    def __eq__(self, other):
        return isinstance(other, Partial) and other.kind == self.kind

    def __hash__(self):
        return hash(("P", self.kind))

    def __reduce__(self):
        return Partial, (self.kind,)

    def __repr__(self):
        return "P" if self.kind == "sum" else f"P({self.kind})"


S = Split
B = Broadcast()
P = Partial("sum")


class Signature:
    """One candidate of an op's rule: the SBP each input needs and each output gets.

    ``local`` (optional) says how a rank runs the op on its pieces when that is not the op
    itself with the same attrs: ``local(op_type, attrs, shard) -> (op_type, attrs)`` with
    ``shard`` a :class:`ShardInfo` (e.g. a reshape's target shape made local, a gather on a
    row-split table given its row offset). It must return data only (a registered op type
    and graph-format attrs), so the per-rank plan stays data. On an N-D mesh the ``local``
    hooks of the chosen per-axis signatures are applied in mesh-axis order, each getting the
    previous one's result. Equality ignores ``local``.
    """

    __slots__ = ("inputs", "outputs", "local")

    def __init__(self, inputs, outputs, local=None):
        object.__setattr__(self, "inputs", tuple(inputs))
        object.__setattr__(self, "outputs", tuple(outputs))
        object.__setattr__(self, "local", local)

    def __setattr__(self, name, value):
        raise AttributeError("Signature is immutable")

    def __eq__(self, other):
        return isinstance(other, Signature) and (other.inputs, other.outputs) == (self.inputs, self.outputs)

    def __hash__(self):
        return hash((self.inputs, self.outputs))

    def __repr__(self):
        return f"{', '.join(map(repr, self.inputs))} -> {', '.join(map(repr, self.outputs))}"


class ShardInfo:
    """What a :attr:`Signature.local` hook sees of one rank: per input and per output the
    logical shape and the slices of the logical value this rank's piece covers (whole axes
    for ``B``/``P``), its mesh coordinates and the mesh shape.

    >>> info = ShardInfo([(4, 3)], [(slice(2, 4), slice(0, 3))], [(4, 3)], [(slice(2, 4), slice(0, 3))], (1,), (2,))
    >>> info.in_offsets(0), info.in_local_shape(0)
    ((2, 0), (2, 3))
    """

    __slots__ = ("in_shapes", "in_slices", "out_shapes", "out_slices", "coords", "mesh_shape")

    def __init__(self, in_shapes, in_slices, out_shapes, out_slices, coords, mesh_shape):
        self.in_shapes, self.in_slices = [tuple(s) for s in in_shapes], list(in_slices)
        self.out_shapes, self.out_slices = [tuple(s) for s in out_shapes], list(out_slices)
        self.coords, self.mesh_shape = tuple(coords), tuple(mesh_shape)

    def in_offsets(self, i):
        return tuple(s.start for s in self.in_slices[i])

    def in_local_shape(self, i):
        return tuple(s.stop - s.start for s in self.in_slices[i])

    def out_offsets(self, i):
        return tuple(s.start for s in self.out_slices[i])

    def out_local_shape(self, i):
        return tuple(s.stop - s.start for s in self.out_slices[i])


class SbpInput:
    """What a rule sees of one input: logical shape (tuple, None for unknown dims), dtype and
    the SBP its producer gives now (None when not yet decided)."""

    __slots__ = ("shape", "dtype", "sbp")

    def __init__(self, shape, dtype=None, sbp=None):
        self.shape = tuple(shape)
        self.dtype = dtype
        self.sbp = sbp

    @property
    def rank(self):
        return len(self.shape)

    def __repr__(self):
        return f"SbpInput({list(self.shape)}, {getattr(self.dtype, 'name', self.dtype)}, {self.sbp})"


# An op's explicit "no rule": its inputs are boxed to B and its outputs are B.
BOXES_TO_B = "boxes-to-B"
