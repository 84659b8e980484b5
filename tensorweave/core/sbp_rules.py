"""SBP rule generators: rules made from op traits and einsum equations (see ``core/sbp.py``).

* :func:`elementwise_rule` (the ``elementwise`` trait): ``S(i)`` on every input that has
  output axis ``i`` (inputs broadcast along it get ``B``) -> ``S(i)``; with the ``linear``
  trait also partial values: ``"all"`` (add, sub, neg: ``P, P -> P``), ``"each"``
  (mul: ``P, B -> P`` and ``B, P -> P``), ``"first"`` (div: ``P, B -> P``); with
  ``monotone`` (unary ops on floats) partial max/min values: ``"up"`` (exp, relu, tanh:
  ``f(max a_i) = max f(a_i)``, so ``P(max) -> P(max)``, ``P(min) -> P(min)``), ``"down"``
  (neg: ``P(max) -> P(min)``, ``P(min) -> P(max)``); ``x * b`` and ``x / b`` by a ``b`` of known
  sign (:data:`SIGNED`, attr ``_signs``) keep the kind (``b > 0``) or swap it (``b < 0``); on an
  N-D mesh ``b`` is then partial on no mesh axis (:func:`signed_inputs`).
* :func:`reduction_rule` (the ``reduction`` trait): a split of a kept axis stays a split
  (renumbered), a split of a reduced axis becomes ``P(kind)``; ``P(kind) -> P(kind)``.
* :func:`einsum_rule`: per index letter, split it in every operand that has it; a letter
  the output keeps gives ``S`` there, a contracted one gives ``P``; and ``P`` in one
  operand with ``B`` in the others gives ``P`` (einsum is multilinear). Matmul is einsum
  (``mk,kn->mn``, transposes and batch axes from its attrs): ``S(0) x B -> S(0)``,
  ``B x S(1) -> S(1)``, ``S(1) x S(0) -> P``, ``P x B -> P``, ``B x P -> P``.

Every rule also offers all-``B`` (always legal). :func:`rule_for` gives an op's rule: its
own ``sbp``, else one generated from its traits, else None (the op boxes to ``B``).

>>> from tensorweave.core.sbp import SbpInput
>>> rule = einsum_rule("mk,kn->mn")
>>> [str(s) for s in rule([SbpInput((8, 4)), SbpInput((4, 6))], {})]
['B, B -> B', 'S(0), B -> S(0)', 'S(1), S(0) -> P', 'B, S(1) -> S(1)', 'P, B -> P', 'B, P -> P']
"""
from tensorweave.core.sbp import B, BOXES_TO_B, P, Partial, S, Signature


def _dedupe(sigs):
    seen, out = set(), []
    for s in sigs:
        if s not in seen:
            seen.add(s)
            out.append(s)
    return out


PMAX, PMIN = Partial("max"), Partial("min")


def monotone_signatures(inputs, direction):
    """Partial max/min through an op monotone in its inputs, on floats. ``direction``: for a
    unary op ``"up"`` (non-decreasing) or ``"down"`` (non-increasing); for several inputs a tuple
    with one entry per input (``None``: not monotone in it). ``P(max)`` in one monotone input, the
    others ``B``: each rank applies the op to its share and the max of the results is the op of
    the max (``"down"``: the min), exactly, since rounding is monotone too (``x + b``,
    ``maximum(x, b)``, ``b - x``). Not for ints (``-x`` overflows at the minimum) nor ops undefined
    on part of the reals (``log`` of a negative share is NaN where the combined value is not)."""
    n = len(inputs)
    if direction is None or not n or any(x.dtype is None or not x.dtype.is_floating for x in inputs):
        return []
    directions = (direction,) if isinstance(direction, str) else tuple(direction)
    if len(directions) != n:
        return []
    sigs = []
    for i, d in enumerate(directions):
        if d is None:
            continue
        flip = {"up": {PMAX: PMAX, PMIN: PMIN}, "down": {PMAX: PMIN, PMIN: PMAX}}[d]
        sigs += [Signature([kind if j == i else B for j in range(n)], [out]) for kind, out in flip.items()]
    return sigs


# Ops monotone in an input where another input's sign is known: x * b, b * x, x / b. The sign is
# data, not a shape: the planner (a constant operand) and the eager interpreter (a B operand's
# value) add it as attr ``_signs`` (:func:`with_signs`) where a partial max/min could pass.
SIGNED = frozenset({"Mul", "RealDiv"})


def value_sign(value):
    """1 if every element of ``value`` is positive and finite, -1 if every one is negative and
    finite, else 0 (a zero or an infinite factor turns the ``-inf`` identity of a share into NaN).

    >>> import numpy as np
    >>> value_sign(np.array([0.5, 2.0])), value_sign(np.float32(-3)), value_sign(np.array([1.0, 0.0]))
    (1, -1, 0)
    """
    import numpy as np
    v = np.asarray(value)
    if v.size == 0 or v.dtype.kind not in "fiu" or not np.all(np.isfinite(v)):
        return 0
    return 1 if np.all(v > 0) else -1 if np.all(v < 0) else 0


def with_signs(op_type, in_sbps, value_of, attrs):
    """``attrs`` with ``_signs`` (per input :func:`value_sign` of ``value_of(i)``, 0 where it is
    None: unknown) when op ``op_type`` is in :data:`SIGNED` and an input is ``P(max)``/``P(min)``
    (``in_sbps``: each input's N-D SBP); else ``attrs`` itself."""
    if op_type not in SIGNED or not any(s in (PMAX, PMIN) for nd in in_sbps for s in nd):
        return attrs
    signs = []
    for i in range(len(in_sbps)):
        v = value_of(i)
        signs.append(0 if v is None else value_sign(v))
    return {**attrs, "_signs": tuple(signs)}


_DIRECTION = {1: "up", -1: "down"}


def _mesh_signs(attrs):
    """``(signs, n_d)``: the ``_signs`` attr and whether the mesh has several axes; ``(None, _)``
    when no sign is known or the mesh is not given."""
    mesh = attrs.get("_mesh_shape")
    return (attrs.get("_signs"), len(mesh) > 1) if mesh is not None else (None, False)


def signed_inputs(attrs):
    """The inputs whose known sign a signature relies on, on an N-D mesh (else empty): they may be
    partial on *no* mesh axis. A rule sees one mesh axis; on another axis a partial sum (or max)
    of ``b`` has shares of any sign, and ``max_i(x_i * b_j)`` summed over ``j`` is not
    ``b * max_i x_i``. Split or broadcast, each rank's piece of ``b`` is part of ``b`` and keeps
    its sign, so forbidding partial signed inputs makes the signatures correct per mesh axis."""
    signs, n_d = _mesh_signs(attrs)
    return frozenset(i for i, s in enumerate(signs) if s) if signs is not None and n_d else frozenset()


def _directions(signs, n_d, pairs):
    """Per input: the direction its partner's sign gives (``pairs``: input -> its partner), None
    where unknown or, on an N-D mesh, where the input's own sign is relied on."""
    return tuple(None if partner is None or (n_d and signs[i]) else _DIRECTION.get(signs[partner])
                 for i, partner in enumerate(pairs))


def mul_direction(attrs):
    """Per input of ``x * y``: monotone ``"up"``/``"down"`` when the other's sign is known."""
    signs, n_d = _mesh_signs(attrs)
    return None if signs is None else _directions(signs, n_d, (1, 0))


def div_direction(attrs):
    """``x / b``: monotone in ``x`` when ``b``'s sign is known (``b / x`` is not monotone on the reals)."""
    signs, n_d = _mesh_signs(attrs)
    return None if signs is None else _directions(signs, n_d, (1, None))


def elementwise_rule(linear=None, n_outputs=1, monotone=None):
    """The rule of an elementwise op with broadcasting (see the module docstring); ``monotone``
    is a direction of :func:`monotone_signatures` or ``fn(attrs) -> direction``."""
    def rule(inputs, attrs):
        rank = max((x.rank for x in inputs), default=0)
        sigs = [Signature([B] * len(inputs), [B] * n_outputs)]
        for axis in range(rank):
            ins = []
            for x in inputs:
                a = axis - (rank - x.rank)
                ins.append(B if a < 0 or x.shape[a] == 1 else S(a))
            if any(s != B for s in ins):
                sigs.append(Signature(ins, [S(axis)] * n_outputs))
        n = len(inputs)
        if linear == "all":
            sigs.append(Signature([P] * n, [P] * n_outputs))
        elif linear == "each":
            sigs += [Signature([P if j == i else B for j in range(n)], [P] * n_outputs) for i in range(n)]
        elif linear == "first":
            sigs.append(Signature([P] + [B] * (n - 1), [P] * n_outputs))
        if monotone is not None and n_outputs == 1:
            sigs += monotone_signatures(inputs, monotone(attrs) if callable(monotone) else monotone)
            fixed = signed_inputs(attrs)
            if fixed:             # N-D: a signed operand stays whole-signed on every mesh axis
                sigs = [s for s in sigs if not any(isinstance(s.inputs[i], Partial) for i in fixed)]
        return _dedupe(sigs)
    return rule


def shape_only_rule(linear=None):
    """The rule of an op whose output depends on its input's shape only (OnesLike, ZerosLike): the
    elementwise signatures, and a partial input gives ``B`` with no communication — each rank's
    piece of a partial value already has the logical shape."""
    elementwise = elementwise_rule(linear)

    def rule(inputs, attrs):
        return _dedupe(elementwise(inputs, attrs) + [Signature([P], [B])])
    return rule


def _reduced_axes(axis, rank):
    if axis is None:
        return tuple(range(rank))
    axis = (axis,) if isinstance(axis, int) else tuple(axis)
    return tuple(sorted({a % rank for a in axis})) if rank else ()


def reduction_rule(kind, split_reduced=True):
    """The rule of a reduction over attr ``axis`` (``keepdims`` respected); ``kind`` is the
    ``reduction`` trait: "sum", "max", "min" or "prod" (None: no partial values pass, as
    for argmax). ``split_reduced=False``: a split reduced axis is not offered (a mean of
    uneven shards is no partial mean; ``distribute/decompositions.py`` has Mean as Sum/n)."""
    partial = Partial(kind) if kind else None

    def rule(inputs, attrs):
        x = inputs[0]
        reduced = _reduced_axes(attrs.get("axis"), x.rank)
        keep = attrs.get("keepdims", False)
        others = [B] * (len(inputs) - 1)        # an axis tensor, if any, is the same everywhere
        sigs = [Signature([B] + others, [B])] + ([Signature([partial] + others, [partial])] if partial else [])
        out_axis = 0
        for i in range(x.rank):
            if i in reduced:
                if split_reduced:
                    sigs.append(Signature([S(i)] + others, [partial]))
                if keep:
                    out_axis += 1
            else:
                sigs.append(Signature([S(i)] + others, [S(out_axis)]))
                out_axis += 1
        return sigs
    return rule


def _parse(equation, ranks=None):
    """(operand terms, output term), or None for equations not generated (an implicit output;
    '...' without the operands' ``ranks``). '...' becomes letters not in the equation, aligned
    from the right as broadcasting aligns them."""
    lhs, arrow, out = equation.replace(" ", "").partition("->")
    if not arrow:
        return None
    terms = lhs.split(",")
    if "." not in equation:
        return terms, out
    if ranks is None or len(ranks) != len(terms):
        return None
    spare = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in equation]
    widths = [r - len(t.replace("...", "")) for t, r in zip(terms, ranks)]
    if any(w < 0 for w in widths):
        return None
    width = max(widths, default=0)
    ell = "".join(spare[:width])
    terms = [t.replace("...", ell[width - w:]) for t, w in zip(terms, widths)]
    return terms, out.replace("...", ell)


def einsum_rule(equation=None):
    """The rule of an einsum (``equation``, or the op's ``equation`` attr when None)."""
    def rule(inputs, attrs):
        parsed = _parse(equation or attrs["equation"], [x.rank for x in inputs])
        n = len(inputs)
        sigs = [Signature([B] * n, [B])]
        if parsed is None:
            return sigs            # only all-B is known to be legal
        operands, out = parsed
        letters = []
        for term in operands:
            letters += [c for c in term if c not in letters]
        for c in letters:
            # a dimension of size 1 in one operand broadcasts: it cannot be split there
            if any(c in t and x.shape[t.index(c)] == 1 for t, x in zip(operands, inputs)):
                continue
            ins = [S(t.index(c)) if c in t else B for t in operands]
            sigs.append(Signature(ins, [S(out.index(c)) if c in out else P]))
        sigs += [Signature([P if j == i else B for j in range(n)], [P]) for i in range(n)]
        return _dedupe(sigs)
    return rule


def matmul_equation(rank_a, rank_b, transpose_a=False, transpose_b=False):
    """The einsum equation of ``MatMul`` for operands of these ranks (batch axes broadcast from
    the right, as ``x[b, t, k] @ w[k, n]`` in a dense layer), or None (a rank below 2)."""
    if min(rank_a, rank_b) < 2:
        return None
    batch = "abcdefgh"[:max(rank_a, rank_b) - 2]
    a = batch[len(batch) - (rank_a - 2):] + ("km" if transpose_a else "mk")
    b = batch[len(batch) - (rank_b - 2):] + ("nk" if transpose_b else "kn")
    return f"{a},{b}->{batch}mn"


def matmul_rule(inputs, attrs):
    """``MatMul``'s rule: the einsum rule of its equation (see :func:`matmul_equation`)."""
    eq = matmul_equation(inputs[0].rank, inputs[1].rank, attrs.get("transpose_a", False),
                         attrs.get("transpose_b", False))
    return einsum_rule(eq or "...")(inputs, attrs)


def signatures(fn, n_outputs=1):
    """A rule from ``fn(inputs, attrs)`` yielding candidates — :class:`Signature` or
    ``(input SBPs, output SBPs[, local])`` tuples; all-``B`` comes first and duplicates go.
    ``n_outputs``: an int or a function of attrs.

    >>> from tensorweave.core.sbp import SbpInput
    >>> rule = signatures(lambda inputs, attrs: [((S(0),), (S(1),))])
    >>> rule([SbpInput((4,))], {})
    [B -> B, S(0) -> S(1)]
    """
    def rule(inputs, attrs):
        n = n_outputs(attrs) if callable(n_outputs) else n_outputs
        sigs = [Signature([B] * len(inputs), [B] * n)]
        for c in fn(inputs, attrs):
            sigs.append(c if isinstance(c, Signature) else Signature(*c))
        return _dedupe(sigs)
    return rule


def identity_rule(inputs, attrs):
    """Ops whose outputs are their inputs (Identity, StopGradient, IdentityN): any layout,
    every partial kind included, passes through."""
    out = [Signature([B] * len(inputs), [B] * len(inputs))]
    rank = max((x.rank for x in inputs), default=0)
    out += [Signature([S(i) if i < x.rank else B for x in inputs], [S(i) if i < x.rank else B for x in inputs])
            for i in range(rank)]
    bools = any(getattr(x.dtype, "name", None) == "bool" for x in inputs)   # or/and: P(max)/P(min) only
    return out + [Signature([Partial(k)] * len(inputs), [Partial(k)] * len(inputs)) for k in Partial.KINDS
                  if not (bools and k in ("sum", "prod"))]


def free_axes_rule(free_axes, partial=None, n_outputs=1):
    """Ops that treat some axes independently: ``free_axes(inputs, attrs)`` gives tuples
    ``(axis of each input or None for B, axis of each output)``; splitting those axes
    splits the outputs there. ``partial``: the input indices that may be ``P`` together
    (the others ``B``) for an output ``P`` (ops linear in those inputs jointly)."""
    def fn(inputs, attrs):
        for in_axes, out_axes in free_axes(inputs, attrs):
            if any(a is not None for a in in_axes):
                yield ([B if a is None else S(a) for a in in_axes], [B if a is None else S(a) for a in out_axes])
        if partial is not None:
            n = n_outputs(attrs) if callable(n_outputs) else n_outputs
            yield ([P if i in partial else B for i in range(len(inputs))], [P] * n)
    return signatures(fn, n_outputs)


def batched_rule(core_in, core_out, linear=None, extra=None):
    """Ops on the trailing "core" axes of each operand, batched over the leading ones (batch
    axes broadcast from the right, as matmul's): a split batch axis splits every operand that
    has it and every output. ``core_in``/``core_out``: core ranks per input/output, or a
    function of attrs giving them. ``linear``: the input indices that may be ``P`` together
    (the others ``B``) for ``P`` outputs. ``extra(inputs, attrs)``: more candidates.

    >>> from tensorweave.core.sbp import SbpInput
    >>> [str(s) for s in batched_rule((2,), (2,))([SbpInput((5, 3, 3))], {})]
    ['B -> B', 'S(0) -> S(0)']
    """
    def fn(inputs, attrs):
        cin = core_in(attrs) if callable(core_in) else core_in
        cout = core_out(attrs) if callable(core_out) else core_out
        batch = [x.rank - c for x, c in zip(inputs, cin)]
        nb = max(batch, default=0)
        for k in range(nb):
            ins = []
            for x, b in zip(inputs, batch):
                a = k - (nb - b)
                ins.append(B if a < 0 or x.shape[a] == 1 else S(a))
            if any(s != B for s in ins):
                yield ins, [S(k)] * len(cout)
        if linear is not None:
            yield [P if i in linear else B for i in range(len(inputs))], [P] * len(cout)
        if extra is not None:
            yield from extra(inputs, attrs)
    return signatures(fn, lambda attrs: len(core_out(attrs) if callable(core_out) else core_out))


WRAPPERS = ("SbpRowsOnly", "SbpReplaceInput", "SbpEmbedded")   # local ops holding an inner op_type and op_attrs


def through_wrappers(hook):
    """``hook`` applied to the inner op when an earlier mesh axis's hook already wrapped it
    (hooks chain in mesh-axis order: see ``Signature.local``)."""
    def local(op_type, attrs, shard):
        if op_type in WRAPPERS:
            inner_type, inner_attrs = hook(attrs["op_type"], attrs["op_attrs"], shard)
            return op_type, {**attrs, "op_type": inner_type, "op_attrs": inner_attrs}
        return hook(op_type, attrs, shard)
    return local


def shape_input_hook(index):
    """A ``local`` hook running the op with its shape input ``index`` (a convolution gradient's
    ``input_sizes``, ``Fill``'s dims, ``Slice``'s size) made the rank's output shape
    (``SbpReplaceInput``)."""
    def local(op_type, attrs, shard):
        import numpy as np
        value = np.array(shard.out_local_shape(0), np.int64)
        if op_type == "SbpReplaceInput" and attrs["index"] == index:
            return op_type, {**attrs, "value": value}
        return "SbpReplaceInput", {"op_type": op_type, "op_attrs": attrs, "index": index, "value": value}
    return local


def embed_hook(axis, index=0, constants=()):
    """A ``local`` hook for ``S(axis) -> P`` of an op linear in input ``index`` that cuts that
    axis (a slice, pad, tile, reverse of it): the rank's piece is put at its place in zeros
    of the logical length along ``axis`` and the op runs on that (``SbpEmbedded``); the ranks'
    inputs sum to the whole, so their outputs sum to the op's (OneFlow's slice on a split
    axis gives partial sums the same way). ``constants``: inputs the op adds in whole (a
    pad's constant value), which only the rank whose piece starts each embedded axis keeps
    (the others get zeros). Memory per rank is the logical length along ``axis``, as ``B``;
    what it saves is the input's all-gather. Idempotent over chained mesh axes.

    >>> from tensorweave.core.sbp import ShardInfo
    >>> info = ShardInfo([(5, 2)], [(slice(3, 5), slice(0, 2))], [(7, 2)], [(slice(0, 7), slice(0, 2))], (1,), (2,))
    >>> op, a = embed_hook(0)("Tile", {"T": 1}, info)
    >>> op, a["op_type"], a["embeds"], a["zeroed"]
    ('SbpEmbedded', 'Tile', ((0, 3, 5),), ())
    """
    def local(op_type, attrs, shard):
        if op_type in WRAPPERS and op_type != "SbpEmbedded":
            inner_type, inner_attrs = local(attrs["op_type"], attrs["op_attrs"], shard)
            return op_type, {**attrs, "op_type": inner_type, "op_attrs": inner_attrs}
        if op_type == "SbpEmbedded":
            axes = sorted({a for a, _, _ in attrs["embeds"]} | {axis})
            op_type, attrs = attrs["op_type"], attrs["op_attrs"]
        else:
            axes = [axis]
        offsets = shard.in_offsets(index)
        embeds = tuple((a, offsets[a], shard.in_shapes[index][a]) for a in axes)
        first = all(offsets[a] == 0 for a in axes)
        return "SbpEmbedded", {"op_type": op_type, "op_attrs": attrs, "index": index, "embeds": embeds,
                               "zeroed": () if first else tuple(constants)}
    return local


def linear_cut_rule(cut_axes, constants=(), index=0):
    """Candidates ``S(a) -> P`` (an :func:`embed_hook` each) for the axes ``cut_axes(inputs,
    attrs)`` of input ``index`` that an op linear in it cuts; the other inputs ``B``."""
    def fn(inputs, attrs):
        x = inputs[index]
        for a in cut_axes(inputs, attrs):
            if x.shape[a] is None or x.shape[a] < 1:
                continue        # an empty axis: every piece starts at 0 (no first rank to keep constants)
            ins = [B] * len(inputs)
            ins[index] = S(a)
            yield Signature(ins, [P], embed_hook(a, index, constants))
    return fn


def zeros_if_empty(like, inner=None):
    """A ``local`` hook for signatures that may leave a rank an empty shard (a dimension
    smaller than the rank count) that the kernel cannot take (a convolution over 0 channels):
    such a rank makes zeros of its output shape (the dtype of input ``like``) — the empty
    piece of a split output, or its share of a partial sum over nothing. Other ranks run
    ``inner`` (a hook, or the op as it is)."""
    def local(op_type, attrs, shard):
        emptied = any(0 in shard.in_local_shape(i) and 0 not in shard.in_shapes[i]
                      for i in range(len(shard.in_shapes)))
        if emptied or op_type == "SbpLocalConst":
            import numpy as np
            return "SbpLocalConst", {"value": np.zeros(shard.out_local_shape(0)), "dtype": None, "like": like}
        return inner(op_type, attrs, shard) if inner is not None else (op_type, attrs)
    return local


def rule_for(opdef):
    """The op's SBP rule: its own, else one generated from its traits; None means no rule
    (its inputs are boxed to B), as does an explicit :data:`BOXES_TO_B`."""
    if opdef.sbp is not None:
        return None if opdef.sbp == BOXES_TO_B else opdef.sbp
    traits = opdef.traits
    if "elementwise" in traits:
        return elementwise_rule(traits.get("linear"))
    if "reduction" in traits:
        return reduction_rule(traits["reduction"])
    return None
