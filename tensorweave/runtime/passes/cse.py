"""Common-subexpression elimination: two pure nodes of the same type, attrs, device and
inputs compute the same values, so the later one's outputs are read from the earlier one.

Keys are built after earlier merges are applied (inputs are resolved), so identical
subgraphs collapse bottom-up in one forward sweep. Safe because only pure nodes merge
(never stateful ones: two ``random_uniform`` nodes draw different numbers, two reads of a
variable may see different values); nodes with control edges, fed or fetched outputs, and
nodes whose attrs cannot be compared exactly (large arrays, unknown objects) are left
alone. Constants merge when their values are byte-identical and small (``cse_max_const_bytes``).
"""
import numpy as np

from tensorweave.core.dtypes import DType
from tensorweave.runtime.passes.ir import is_pure


class _Unkeyable(Exception):
    pass


def _key(v, cap):
    if v is None or isinstance(v, (bool, int, str)):
        return (type(v).__name__, v)
    if isinstance(v, float):
        return ("float", v.hex())        # -0.0 and 0.0 differ; nan never equals itself below
    if isinstance(v, DType):
        return ("dtype", v.name)
    if isinstance(v, (tuple, list)):
        return (type(v).__name__,) + tuple(_key(x, cap) for x in v)
    if isinstance(v, dict):
        return ("dict",) + tuple((k, _key(v[k], cap)) for k in sorted(v, key=str))
    if isinstance(v, (np.ndarray, np.generic)):
        a = np.asarray(v)
        if a.nbytes > cap or a.dtype == object:
            raise _Unkeyable
        return ("array", a.dtype.str, a.shape, a.tobytes())
    raise _Unkeyable


def run(work):
    cap = work.options["cse_max_const_bytes"]
    seen = {}
    merged = 0
    for op in work.ops:
        if not op.outputs or work.frozen(op) or not is_pure(op):
            continue
        if any(id(t) in work.feed_ids for t in op.outputs):
            continue
        try:
            key = (op.type, op.device, tuple(id(work.resolve(t)) for t in op.inputs),
                   _key({k: v for k, v in op.attrs.items()}, cap))
        except _Unkeyable:
            continue
        first = seen.get(key)
        if first is None:
            seen[key] = op
            continue
        if len(first.outputs) != len(op.outputs):
            continue
        for a, b in zip(op.outputs, first.outputs):
            work.replace(a, b)
        work.node_rep[id(op)] = None
        merged += 1
    return merged
