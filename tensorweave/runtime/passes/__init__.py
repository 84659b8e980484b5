"""Graph passes ("Grappler"): rewrite the op list a plan is built from, never the user's graph.

``build_plan`` prunes the graph to the ops the fetches need, then calls :func:`optimize`,
which returns the op list to compile (original ``Operation`` objects where nothing changed,
:class:`~tensorweave.runtime.passes.ir.Node` stand-ins where something did), the fetches to
read (a fetch may now be another, equivalent tensor) and statistics. The passes, in order:

===============================  =========================================================
``constant_folding``             pure nodes of constants (and shapes of static tensors)
``arithmetic_optimization``      ``x*1``, ``x+0``, Identity, double Neg/Transpose, no-op casts
``common_subgraph_elimination``  identical pure nodes computed once
``transpose_folding``            ``Transpose`` feeding a ``MatMul`` -> ``transpose_a/b``
``remapping``                    conv/matmul + bias (+ ReLU), ReLU grad + bias grad -> one node;
                                 at inference, products of one input and same-shaped weights -> one
``pruning``                      nodes nobody reads any more
``elementwise_fusion``           chains of elementwise float ops -> one numba loop
``memory_optimization``          live ranges, planned peak bytes, in-place elementwise ops
===============================  =========================================================

Every pass is switchable with ``tw.config.optimizer.set_experimental_options`` (names above,
plus ``disable_meta_optimizer`` to switch all off). Options are read when a plan is built;
plans already cached keep the options they were built with. The environment variable
``TW_GRAPH_PASSES=0`` switches them all off for a process.

>>> import tensorweave as tw
>>> opts = tw.config.optimizer.get_experimental_options()
>>> opts["constant_folding"], opts["elementwise_fusion"] in (True, False)
(True, True)
"""
import os

from tensorweave.runtime.passes import (algebraic, attention, attention_train, block_tail, bn_add_relu,
                                        constant_folding, cse, einsum_group, einsum_pair, fusion, head_attention,
                                        memory, prune, remapping, residual_norm, transpose_fold)
from tensorweave.runtime.passes.ir import Work

DEFAULTS = {
    "disable_meta_optimizer": False,
    "constant_folding": True,
    "arithmetic_optimization": True,
    "common_subgraph_elimination": True,
    "transpose_folding": True,
    "remapping": True,
    "pruning": True,
    "elementwise_fusion": True,
    "memory_optimization": True,
    # limits
    "fold_max_bytes": 1 << 16,          # a folded constant's largest size
    "cse_max_const_bytes": 1 << 12,     # constants compared byte by byte for CSE
    "fusion_min_elements": 1 << 14,     # fuse only chains over this many elements ...
    "fusion_min_ops": 2,                # ... of at least this many ops (and at most fusion_max_ops) ...
    "fusion_max_ops": 32,
    "fusion_function_graphs_only": True,  # ... in tw.function graphs (they run repeatedly)
}
OPTIONS = dict(DEFAULTS)
if os.environ.get("TW_GRAPH_PASSES", "1") == "0":   # for before/after measurements
    OPTIONS["disable_meta_optimizer"] = True


def set_options(options):
    unknown = set(options) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"Unknown optimizer options {sorted(unknown)}; known: {sorted(DEFAULTS)}")
    OPTIONS.update(options)


def get_options():
    return dict(OPTIONS)


def reset_options():
    OPTIONS.clear()
    OPTIONS.update(DEFAULTS)


_PIPELINE = (
    ("constant_folding", constant_folding.run),
    ("arithmetic_optimization", algebraic.run),
    ("common_subgraph_elimination", cse.run),
    ("transpose_folding", transpose_fold.run),
    ("remapping", remapping.run),
    ("remapping", bn_add_relu.run),     # (after the commit: a residual block's batch norm + add + ReLU)
    ("remapping", einsum_group.run),    # (after the commit: it groups the remapping's FusedEinsum nodes)
    ("remapping", attention.run),       # (after the group: its query is the group's output)
    ("remapping", attention_train.run),  # (training plans: the forward with its backward)
    ("remapping", head_attention.run),  # (inference plans: the Q/K/V group and the attention by heads)
    ("remapping", einsum_pair.run),     # (inference plans: a Dense(relu) -> Dense pair by rows)
    ("remapping", residual_norm.run),   # (after the commit: the layer norms the remapping made)
    ("remapping", block_tail.run),      # (inference plans: a block's projection, norms and pair by rows)
    ("pruning", prune.run),
    ("elementwise_fusion", fusion.run),
    ("pruning", prune.run),
    ("memory_optimization", memory.run),
)


def optimize(ops, fetches, targets, feeds, options=None, placed=None):
    """Returns ``(ops, fetches, stats)`` for ``build_plan``; ``stats`` has ``nodes_in``,
    ``nodes_out``, a count per pass and, with memory optimisation, ``planned_peak_bytes``.
    ``placed`` ({id(op): device}) is where the placer put each op: passes that swap in
    kernels of their own do so only where that device type has them."""
    opts = {**OPTIONS, **(options or {})}
    if opts["disable_meta_optimizer"]:
        return ops, fetches, {"nodes_in": len(ops), "nodes_out": len(ops)}
    work = Work(ops, fetches, targets, feeds, opts, placed)
    for name, fn in _PIPELINE:
        if opts[name]:
            n = fn(work)
            work.commit()
            if n:
                work.stats[name] = work.stats.get(name, 0) + n
    if not opts["memory_optimization"]:
        work.stats.update(memory.live_ranges(work))
    work.stats["nodes_out"] = len(work.ops)
    return work.ops, work.fetches, work.stats


def plan_stats(plan_or_function):
    """The pass statistics of a plan, a ``ConcreteFunction`` or a ``tw.function`` (its most
    recently traced concrete function): node counts before/after and planned peak bytes."""
    p = plan_or_function
    if hasattr(p, "_cache") and not hasattr(p, "steps"):     # tw.function
        if not p._cache:
            raise ValueError("The function has not been traced yet; call it first")
        p = list(p._cache.values())[-1]
    p = getattr(p, "_plan", p)
    return dict(getattr(p, "pass_stats", None) or {})
