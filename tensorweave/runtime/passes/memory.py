"""Memory plan: live ranges, the planned peak of live bytes, and in-place elementwise ops.

**Live ranges.** In the plan's order (the sequential schedule) every value is live from the
step that produces it (feeds: from the start) to its last reader (fetched values: to the
end; values nobody reads: their own step only). Sizes come from static shapes; a buffer is
counted once however many slots share it (views such as Reshape/Identity/Transpose and
in-place results share their input's buffer). ``planned_peak_bytes`` is the largest sum of
live bytes over the steps; values with unknown static shapes count 0 and are reported in
``unknown_size_values``. For parallel plans it is the sequential order's figure.

**In-place.** An elementwise node (Add, Sub, Mul, RealDiv, Maximum, Minimum, Neg, Square,
Sqrt, Exp, Log, Tanh, Abs, Relu, and fused nodes) writes its result into an input's buffer
(``out=``) when that input is dead afterwards. Safe only when no one else can hold that
buffer, so all of these must hold: the input was freshly allocated by its producer (an
elementwise/MatMul/Cast/fused node with the stock kernel; never a feed, a constant, a
variable read or a view), this node is its only reader (so no other step, view or thread can
see it, in either schedule), it is not fetched, and it has exactly the output's static shape
and dtype (no broadcasting into it), and it is at least ``INPLACE_MIN_BYTES``. NumPy ufuncs
with ``out=`` compute the same values.
"""
import numpy as np

from tensorweave.kernels.cpu.fused_loop_kernels import inplace_kernel
from tensorweave.runtime.executor import PRESET_OPS
from tensorweave.runtime.passes.ir import Node, NodeDef, nbytes, runs_stock_kernel, static_dims

_VIEWS = ("Identity", "StopGradient", "Snapshot", "Reshape", "ExpandDims", "Squeeze", "Transpose",
          "BroadcastTo", "PlaceholderWithDefault")
# Besides elementwise ops (OpDef trait), these allocate their result for each run.
_FRESH_EXTRA = ("MatMul", "Cast")
_DTYPES = ("float16", "float32", "float64")
# Below this an in-place call saves less than its wrapper costs (``np.errstate`` ~1.5 µs; a
# 100-node chain of 10-element adds ran 4.4 instead of 1.6 µs/node).
INPLACE_MIN_BYTES = 1 << 16


def _is_stock(op, work):
    """Runs tensorweave's own CPU kernel (or a fused loop) on a CPU device: a kernel registered
    for another device type elsewhere does not matter, the device this node was placed on does."""
    return work.device_type(op) == "CPU" and (op.type == "FusedElementwise" or runs_stock_kernel(op))


def _fresh(t, work):
    """True when ``t`` is a buffer its producer allocated for this run and nobody else holds."""
    op = t.op
    if id(t) in work.feed_ids or id(t) in work.fetch_ids or len(op.outputs) != 1:
        return False
    if "elementwise" not in op.opdef.traits and op.type not in _FRESH_EXTRA and op.type != "FusedElementwise":
        return False
    if not _is_stock(op, work):
        return False
    if op.type == "Cast" and op.inputs and op.inputs[0].dtype is t.dtype:
        return False
    return True


def _try_inplace(op, work):
    t = op.type
    if t == "FusedElementwise":
        if op.attrs.get("inplace", -1) >= 0:
            return None
    elif "inplace" not in op.opdef.traits:
        return None
    if len(op.outputs) != 1 or id(op) in work.pinned or not _is_stock(op, work):
        return None
    y = op.outputs[0]
    dy = static_dims(y)
    if dy is None or len(dy) == 0 or y.dtype.name not in _DTYPES or nbytes(y) < INPLACE_MIN_BYTES:
        return None
    for k, x in enumerate(op.inputs):
        if static_dims(x) != dy or x.dtype is not y.dtype or not _fresh(x, work):
            continue
        if len(work.consumers.get(id(x), ())) != sum(1 for u in op.inputs if u is x):
            continue                                # another node reads it too
        if t == "FusedElementwise":
            attrs = dict(op.attrs)
            attrs["inplace"] = k
            n = Node(op, op.opdef, op.inputs, attrs, [(y.shape, y.dtype)], type_=t, fused=op.fused)
        else:
            d = NodeDef(t, {"CPU": inplace_kernel(t, k)}, traits=op.opdef.traits)
            n = Node(op, d, op.inputs, dict(op.attrs), [(y.shape, y.dtype)], type_=t)
        n.inplace_of = k
        return n
    return None


def live_ranges(work):
    """Planned peak bytes of the op list in order (see module docstring)."""
    ops = work.ops
    n = len(ops)
    end_all = max(n - 1, 0)
    buf_of = {}          # id(tensor) -> buffer key
    size = {}            # buffer key -> bytes
    start, end = {}, {}
    unknown = 0

    def new_buffer(t, at):
        nonlocal unknown
        b = nbytes(t)
        if b is None:
            unknown += 1
            b = 0
        key = id(t)
        buf_of[id(t)] = key
        size[key], start[key], end[key] = b, at, at
        return key

    def use(t, at):
        key = buf_of.get(id(t))
        if key is None:                 # a feed (or a value produced outside the list)
            key = new_buffer(t, 0)
        if at > end[key]:
            end[key] = at

    for i, op in enumerate(ops):
        for t in op.inputs:
            use(t, i)
        k = getattr(op, "inplace_of", None)
        alias = k if k is not None else (0 if op.type in _VIEWS and op.inputs else None)
        for j, t in enumerate(op.outputs):
            if alias is not None and j == 0 and id(op.inputs[alias]) in buf_of:
                key = buf_of[id(op.inputs[alias])]
                buf_of[id(t)] = key
                end[key] = max(end[key], i)
            else:
                new_buffer(t, 0 if op.type in PRESET_OPS else i)   # held from the run's start
    for t in work.fetches:
        use(t, end_all)
    delta = [0] * (n + 2)
    for key, b in size.items():
        delta[start[key]] += b
        delta[end[key] + 1] -= b
    peak = cur = 0
    for i in range(max(n, 1)):
        cur += delta[i]
        peak = max(peak, cur)
    return {"planned_peak_bytes": peak, "unknown_size_values": unknown}


def run(work):
    before = live_ranges(work)["planned_peak_bytes"]
    n = 0
    for op in work.ops:
        new = _try_inplace(op, work)
        if new is not None:
            work.node_rep[id(op)] = new
            n += 1
    work.commit()
    stats = live_ranges(work)
    stats["planned_peak_bytes_without_reuse"] = before
    work.stats.update(stats)
    return n
