"""Two products side by side in a sequential plan: one on the calling thread, the other on the
runtime's helper thread, each on one thread (issue 18, mlp18 session 14).

Why: on two cores the executor runs a training step's plan on one thread and splits each large
product over both cores (``gemm.split_parts``: one hand-off to the helper thread per product,
the caller waiting for the helper's block at the end). Where two large products are independent
— a dense layer's input gradient ``dX = dz @ Wᵀ`` and weight gradient ``dW = xᵀ @ dz`` — the
second can instead start on the helper at the first one's place and run there whole while the
calling thread computes the first, then the small ops after it (the next layer's ReLU gradient),
and collect it where it is first read: one hand-off instead of two, and the helper busy during
the calling thread's small ops. The mlp step's dX2 and dW2 (128x512 @ (512x512)ᵀ and
(128x512)ᵀ @ 128x512) are such a pair.

Same bits as the split: both products run inside ``gemm.blocks_here``, cut into the blocks of
the two-way split they would otherwise get, every block a one-thread call, so the bits are
those of the plan without overlap, whichever thread runs a block.

:func:`schedule` picks, per plan, the products to start early (``DEFERRED_OPS``, heavy): one whose
inputs are all computed before an earlier heavy product (``PARTNER_OPS``) starts at that
product's place; it is collected before the first step that reads it, or that could change what
it reads or wait for the helper (a stateful step other than a variable read, an opaque one, one
writing in place, a heavy op of another kind), or where the next such pair starts, whichever
comes first. A variable read the product waits for runs at the launch instead of its own place
(:func:`early_reads`; the forward pass's Q/K/V projections read their kernels right before their
products). One at a time: the next pair's launch collects the one out (by then the helper has
had the time of the partner product it started beside), so a run of pairs (the transformer's
backprop: each projection's dX and dW) keeps the helper busy through all of them instead of
through the first alone (issue 18 session 16, tx20).
``executor._sequential_runner`` writes the schedule into the plan's generated code; what runs:
:func:`defer` (at run time: only with exactly two split parts on the calling thread, else the
product runs there at once as before) and :func:`join` (which takes the product back and computes
it on the calling thread, split as usual, if the helper has not started it: on a busy machine the
caller never waits for a helper that has no core yet, as with a split's blocks).
``TW_OVERLAP_PRODUCTS=0`` (or ``ENABLED["on"] = False``, read per run) keeps every product at its
own place.

>>> steps = [("MatMul", (), True), ("MatMul", (), True), ("Relu", (0,), False), ("AddN", (1, 2), False)]
>>> schedule_of(steps)
[(1, 0, 3)]
"""
import os

from tensorweave.core.registry import _OPS
from tensorweave.kernels.cpu import gemm

#: op types started early on the helper thread. ``Einsum``: a Keras ``Dense`` on a sequence and
#: ``EinsumDense``/attention's products (the transformer step's backprop pairs, issue 18 session
#: 16, tx20); its kernel (``einsum_matmul.contract``) cuts a product into the blocks of
#: ``gemm.split_parts`` and keeps them on this thread inside ``gemm.blocks_here``, as MatMul's does;
#: ``FusedEinsum``: an Einsum with its bias (``runtime/passes/einsum_bias.py``), the same product
DEFERRED_OPS = frozenset({"MatMul", "FusedMatMul", "Einsum", "FusedEinsum"})
#: heavy op types the calling thread may run meanwhile (their products follow ``gemm.blocks_here``);
#: ``FusedMatMulReluGradBiasAddGrad``: an input gradient's MatMul with the ReLU and bias gradients
#: after it (``runtime/passes/matmul_relu_grad.py``), the mlp's dX2 beside dW2
PARTNER_OPS = frozenset({"MatMul", "FusedMatMul", "Einsum", "FusedEinsum", "FusedMatMulReluGradBiasAddGrad"})
#: stateful op types that only read (a variable's value): they may run while a product is out
READ_ONLY = frozenset({"ReadVariableOp", "VarHandleOp"})
#: other heavy op types the calling thread may run meanwhile besides elementwise ones (their
#: kernels' work sharing, ``tiles.over_tiles``, runs on the calling thread in ``gemm.blocks_here``);
#: a heavy op of a type not listed may hand work to the helper and wait for it: collected before
WINDOW_OPS = frozenset({"FusedReluGradBiasAddGrad", "ReluGrad", "BiasAddGrad", "BiasAdd", "Relu"})
#: read per run: ``TW_OVERLAP_PRODUCTS=0`` keeps each product at its place (for A/B comparisons)
ENABLED = {"on": os.environ.get("TW_OVERLAP_PRODUCTS", "1") != "0"}


def schedule(plan):
    """``[(deferred step, launch step, join step), ...]`` for a bound plan (see the module
    docstring; the join step may be ``len(plan.steps)``: collected before the fetches return)."""
    deps = getattr(plan, "deps", None)
    if deps is None or any(getattr(st, "node", None) is None for st in plan.steps):
        return []               # (a plan put together without nodes: nothing known to overlap)
    steps = [(st.node.op, st.ins, st.node.heavy, _barrier(st.node)) for st in plan.steps]
    outs = [st.outs if st.single else None for st in plan.steps]
    kept = getattr(plan, "overlap_kept", None)
    # products a nogil segment runs itself (``nogil_segments._placed``: recorded on a thread where
    # :func:`defer` runs them at once); the others' windows are unchanged or shorter
    return [e for e in _schedule(steps, outs, deps) if not kept or e[0] not in kept]


def hands_off():
    """Whether :func:`defer` would start a product on the helper thread from this thread now (else
    it runs it at once, where it stands): overlap on, and this thread's products split in two."""
    return ENABLED["on"] and getattr(gemm._thread_share, "here", None) is None and gemm.split_parts() == 2


def schedule_of(steps):
    """:func:`schedule` of ``[(op type, input steps, heavy[, barrier]), ...]`` (each step's one
    output read by the steps listing it; dependencies are the inputs): for tests and the docstring."""
    plain = [(s[0], tuple(s[1]), s[2], s[3] if len(s) > 3 else False) for s in steps]
    return _schedule(plain, list(range(len(steps))), [s[1] for s in plain])


def _light(op):
    """A heavy op type the calling thread may run while a product is out (``WINDOW_OPS``, or
    elementwise): the schedule sees it as light."""
    opdef = _OPS.get(op)
    return op in WINDOW_OPS or opdef is not None and bool(opdef.traits.get("elementwise"))


def _barrier(node):
    """Whether ``node`` must not run while a product is out on the helper (see the docstring)."""
    if node.opaque or node.inplace is not None:
        return True
    opdef = _OPS.get(node.op)
    return opdef is not None and opdef.stateful and node.op not in READ_ONLY


def _schedule(steps, outs, deps):
    steps = [(op, ins, heavy and not _light(op), barrier) for op, ins, heavy, barrier in steps]
    n = len(steps)
    out = []
    for j, (op, ins, heavy, barrier) in enumerate(steps):
        if op not in DEFERRED_OPS or not heavy or barrier or outs[j] is None:
            continue
        # a variable read it waits for (its value, read at the launch instead: no write between
        # them, see the barrier check below) does not hold it back: the Q/K/V projections each
        # read their kernel right before their product
        first = 1 + max((d for d in deps[j] if steps[d][0] != "ReadVariableOp"), default=-1)
        # after the last one's launch (and never at its own place): a launch inside its window
        # collects it there, so the next pair has the helper (see the docstring)
        after = out[-1][1] + 1 if out else 0
        launch = next((i for i in range(max(first, after), j) if (not out or i != out[-1][0])
                       and steps[i][2] and steps[i][0] in PARTNER_OPS and not steps[i][3]
                       and all(_hoistable(steps, deps, d, i) for d in deps[j] if d >= i)), None)
        if launch is None or any(steps[i][3] for i in range(launch, j)):
            continue
        join = next((q for q in range(launch, n) if q != j and (
            outs[j] in steps[q][1] or steps[q][3] or steps[q][2] and steps[q][0] not in PARTNER_OPS)), n)
        if join <= launch:
            continue
        if out and launch < out[-1][2]:
            out[-1] = out[-1][:2] + (launch,)
        out.append((j, launch, join))
    return out


def _hoistable(steps, deps, d, launch):
    """Whether variable read ``d`` may run at ``launch`` instead (no barrier between, checked by
    the caller): what it waits for comes before, or is another read (the plan keeps stateful
    steps in order; two reads commute)."""
    return all(e < launch or steps[e][0] == "ReadVariableOp" for e in deps[d])


def early_reads(deps, j, launch):
    """The steps a product deferred at ``launch`` reads that come after it: variable reads
    (:func:`_hoistable`) the runner moves to the launch, before the product is started."""
    return sorted(d for d in deps[j] if d >= launch)


class Pending:
    """A product out on the helper thread: its future, its step function and arguments (to run
    here if the helper has not started it), and the calling thread's ``gemm.blocks_here``
    setting to put back when it is collected."""
    __slots__ = ("future", "fn", "args", "before")

    def __init__(self, future, fn, args, before):
        self.future, self.fn, self.args, self.before = future, fn, args, before


def _on_helper(fn, args, parts):
    with gemm.blocks_here(parts):
        return fn(*args)


def defer(fn, *args):
    """``fn(*args)`` started on the helper thread (a :class:`Pending`, for :func:`join`), the
    calling thread's products running their blocks on it meanwhile; or run here now (its value)
    when overlap is off or this thread's products are not split in two."""
    if not hands_off():
        return fn(*args)
    from tensorweave.core.context import current_runtime
    future = current_runtime().intra_op_pool().submit(_on_helper, fn, args, 2)
    pending = Pending(future, fn, args, None)
    gemm._thread_share.here = 2
    return pending


def join(value):
    """The value of a deferred step, the calling thread's setting put back: waited for if the
    helper has started it, else taken back and computed here (split as usual). So, as with a
    split's blocks (``gemm.share_tasks``), the calling thread never waits for a helper that has
    not started: on a busy machine a helper thread can wait a time slice or more for a core."""
    if type(value) is not Pending:
        return value
    gemm._thread_share.here = value.before
    if value.future.cancel():
        return value.fn(*value.args)
    return value.future.result()


def abandon(value):
    """After a failure between :func:`defer` and :func:`join`: the setting put back, the product
    waited for (it reads the plan's arrays) and its own error, if any, dropped for the first one."""
    if type(value) is Pending:
        gemm._thread_share.here = value.before
        if not value.future.cancel():
            value.future.exception()

