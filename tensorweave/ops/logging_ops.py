"""``tw.print``: prints tensors when the op runs (at once when eager, at Session.run in a graph).

>>> import tensorweave as tw
>>> import sys
>>> tw.print("x =", tw.constant([1, 2]), output_stream=sys.stdout)
x = [1 2]
"""
import sys

import numpy as np

from tensorweave.core.context import executing_eagerly
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.dispatch import execute
from tensorweave.core.registry import get_op, register_kernel, register_op
from tensorweave.core.tensor import Tensor

register_op("PrintV2", infer=lambda inputs, attrs: [], num_outputs=0, stateful=True)


def _format(values, template, summarize):
    it = iter(values)
    parts = []
    for item in template:
        if item is None:
            v = np.asarray(next(it))
            with np.printoptions(threshold=max(summarize * 2, 1) if summarize and summarize > 0 else sys.maxsize,
                                 edgeitems=summarize if summarize and summarize > 0 else 3):
                parts.append(np.array2string(v) if v.ndim else str(v.item() if hasattr(v, "item") else v))
        else:
            parts.append(str(item))
    return parts


@register_kernel("PrintV2", "CPU")
def _print(*values, template, sep, end, stream, summarize):
    print(sep.join(_format(values, template, summarize)), end=end, file=stream)
    stream.flush()
    return ()


def print_(*inputs, output_stream=None, summarize=3, sep=" ", end="\n", name=None):
    """Prints Python values and tensors (like Python's print); returns the op in graph mode."""
    stream = output_stream if output_stream is not None else sys.stderr
    template, tensors = [], []
    for x in inputs:
        if isinstance(x, Tensor) or hasattr(x, "_tw_tensor_"):
            template.append(None)
            tensors.append(convert_to_tensor(x))
        else:
            template.append(x)
    attrs = {"template": tuple(template), "sep": sep, "end": end, "stream": stream, "summarize": summarize}
    if executing_eagerly():
        _print(*[t.numpy() for t in tensors], **attrs)
        return None
    return execute(get_op("PrintV2"), tensors, attrs, name or "PrintV2")
