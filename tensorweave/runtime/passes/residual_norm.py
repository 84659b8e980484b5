"""A residual add and the layer norm after it as one plan step (``AddLayerNorm``,
``layer_norm_kernels.add_layer_norm``): ``LayerNorm(AddV2(x, res))`` normalizes ``x + res``
row by row, the sum taken in the rows' loop and never written out.

Why: a post-norm transformer block ends each half with ``LayerNorm(x + sublayer(x))``
(``encoder2_predict``: four a request, [128, 256] float32). The add was a plan step of its
own: a kernel call and a pass writing the sum that the layer norm then reads again (issue 18,
session 22, enc26). The sum's bits are the add's (the same float add in the rows' dtype), so the
outputs are the two steps'.

Where: the add's two inputs of one static shape and dtype (float32/64, no broadcast), its sum
read by the ``LayerNorm``'s ``x`` alone (neither fed nor fetched), both ops running their stock
CPU kernels on one device, with no ordering edges. The node takes the layer norm's place (both
add inputs are computed before the add, so before it). Training plans do not match: there the
layer norm's gradient reads the sum too. ``TW_RESIDUAL_NORM=0`` (read when a plan is built)
leaves the two steps apart.

>>> import tensorweave as tw
>>> from tensorweave.ops.layer_norm_ops import layer_norm
>>> f = tw.function(lambda x, r: layer_norm(x + r, tw.ones([4]), tw.zeros([4]))[0])
>>> f(tw.ones([2, 4]), tw.ones([2, 4])).numpy().tolist()
[[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
>>> from tensorweave.runtime.passes import plan_stats
>>> plan_stats(f).get("residual_norm")
1
"""
import os

from tensorweave.kernels.cpu import layer_norm_kernels
from tensorweave.runtime.passes import remapping
from tensorweave.runtime.passes.ir import Node, NodeDef, runs_stock_kernel, static_dims

#: read when a plan is built; ``TW_RESIDUAL_NORM=0``: off, for comparisons
ENABLED = os.environ.get("TW_RESIDUAL_NORM", "1") != "0"
_DTYPES = ("float32", "float64")


def _fuse(norm, work):
    """The node in place of ``norm`` (a ``LayerNorm``), or None where it and the add before it do
    not match (see the module docstring)."""
    if not runs_stock_kernel(norm, "LayerNorm") or norm.control_inputs or id(norm) in work.pinned \
            or work.device_type(norm) != "CPU":
        return None
    total = norm.inputs[0]
    add = total.op
    if not runs_stock_kernel(add, "AddV2") or add.control_inputs or id(add) in work.pinned \
            or add.device != norm.device or not remapping._only_reader(total, norm, work):
        return None
    x, res = add.inputs
    dims = static_dims(total)
    if dims is None or total.dtype.name not in _DTYPES \
            or any(t.dtype is not total.dtype or static_dims(t) != dims for t in (x, res)):
        return None
    d = NodeDef("AddLayerNorm", {"CPU": layer_norm_kernels.add_layer_norm}, num_outputs=3, heavy=True)
    attrs = {"epsilon": norm.attrs["epsilon"], "begin_norm_axis": norm.attrs.get("begin_norm_axis", -1),
             "rms": norm.attrs.get("rms", False)}
    node = Node(norm, d, [x, res, norm.inputs[1], norm.inputs[2]], attrs,
                [(t.shape, t.dtype) for t in norm.outputs], type_="AddLayerNorm", name=norm.name + "/residual",
                control_inputs=(), fused=[add.name, norm.name])
    work.node_rep[id(norm)] = node      # (commit maps the layer norm's three outputs to the node's)
    work.node_rep[id(add)] = None
    return node


def run(work):
    """Fuses every match (see the module docstring); returns how many."""
    if not ENABLED:
        return 0
    n = sum(1 for op in list(work.ops) if op.type == "LayerNorm" and _fuse(op, work) is not None)
    if n:
        work.stats["residual_norm"] = work.stats.get("residual_norm", 0) + n
    return n
