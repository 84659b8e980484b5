"""SBP rule generators: rules made from op traits and einsum equations (see ``core/sbp.py``).

* :func:`elementwise_rule` (the ``elementwise`` trait): ``S(i)`` on every input that has
  output axis ``i`` (inputs broadcast along it get ``B``) -> ``S(i)``; with the ``linear``
  trait also partial values: ``"all"`` (add, sub, neg: ``P, P -> P``), ``"each"``
  (mul: ``P, B -> P`` and ``B, P -> P``), ``"first"`` (div: ``P, B -> P``).
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


def elementwise_rule(linear=None, n_outputs=1):
    """The rule of an elementwise op with broadcasting (see the module docstring)."""
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
        return _dedupe(sigs)
    return rule


def _reduced_axes(axis, rank):
    if axis is None:
        return tuple(range(rank))
    axis = (axis,) if isinstance(axis, int) else tuple(axis)
    return tuple(sorted({a % rank for a in axis})) if rank else ()


def reduction_rule(kind):
    """The rule of a reduction over attr ``axis`` (``keepdims`` respected); ``kind`` is the
    ``reduction`` trait: "sum", "max", "min" or "prod"."""
    partial = Partial(kind)

    def rule(inputs, attrs):
        x = inputs[0]
        reduced = _reduced_axes(attrs.get("axis"), x.rank)
        keep = attrs.get("keepdims", False)
        others = [B] * (len(inputs) - 1)        # an axis tensor, if any, is the same everywhere
        sigs = [Signature([B] + others, [B]), Signature([partial] + others, [partial])]
        out_axis = 0
        for i in range(x.rank):
            if i in reduced:
                sigs.append(Signature([S(i)] + others, [partial]))
                if keep:
                    out_axis += 1
            else:
                sigs.append(Signature([S(i)] + others, [S(out_axis)]))
                out_axis += 1
        return sigs
    return rule


def _parse(equation):
    """(operand terms, output term), or None for equations not generated ('...', implicit output)."""
    lhs, arrow, out = equation.replace(" ", "").partition("->")
    if "." in equation or not arrow:
        return None
    return lhs.split(","), out


def einsum_rule(equation=None):
    """The rule of an einsum (``equation``, or the op's ``equation`` attr when None)."""
    def rule(inputs, attrs):
        parsed = _parse(equation or attrs["equation"])
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
    """The einsum equation of ``MatMul`` for operands of these ranks (equal batch axes), or
    None (other rank combinations: only all-B is offered)."""
    if rank_a != rank_b or rank_a < 2:
        return None
    batch = "abcdefgh"[:rank_a - 2]
    a = batch + ("km" if transpose_a else "mk")
    b = batch + ("nk" if transpose_b else "kn")
    return f"{a},{b}->{batch}mn"


def matmul_rule(inputs, attrs):
    """``MatMul``'s rule: the einsum rule of its equation (see :func:`matmul_equation`)."""
    eq = matmul_equation(inputs[0].rank, inputs[1].rank, attrs.get("transpose_a", False),
                         attrs.get("transpose_b", False))
    return einsum_rule(eq or "...")(inputs, attrs)


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
