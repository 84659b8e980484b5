"""Python functions as ops: ``py_function`` (tensors in, tensors out, differentiable) and
``numpy_function`` (arrays in, arrays out).

In a graph the function runs when the node executes, eagerly on the executor's thread;
its gradient runs the function again under a ``GradientTape`` (``autodiff/py_function_grad.py``).

>>> import tensorweave as tw
>>> def cube(x):
...     return x * x * x
>>> x = tw.constant(2.0)
>>> with tw.GradientTape() as t:
...     t.watch(x)
...     y = tw.py_function(cube, [x], tw.float32)
>>> float(y), float(t.gradient(y, x))
(8.0, 12.0)
"""
import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core import nest
from tensorweave.core.context import eager_mode, executing_eagerly
from tensorweave.core.convert import convert_to_tensor, to_numpy
from tensorweave.core.dispatch import execute
from tensorweave.core.registry import get_op, register_kernel, register_op
from tensorweave.core.shape import TensorShape
from tensorweave.core.tensor import EagerTensor

__all__ = ["py_function", "numpy_function"]


def _infer(inputs, attrs):
    return [(TensorShape(None), d) for d in attrs["Tout"]]


register_op("EagerPyFunc", infer=_infer, num_outputs=lambda a: len(a["Tout"]), stateful=True,
            heavy=lambda op: True)
register_op("PyFunc", infer=_infer, num_outputs=lambda a: len(a["Tout"]), stateful=True,
            heavy=lambda op: True)


def _results(out, Tout):
    out = nest.flatten(out) if isinstance(out, (list, tuple)) else [out]
    if len(out) != len(Tout):
        raise ValueError(f"The Python function returned {len(out)} values, expected {len(Tout)} (Tout)")
    res = []
    for o, d in zip(out, Tout):
        a = o.numpy() if hasattr(o, "numpy") else o
        res.append(np.asarray(to_numpy(a, d)))
    return tuple(res)


@register_kernel("EagerPyFunc", "CPU")
def _eager_py_func(*inputs, Tout, func):
    with eager_mode():
        out = func(*[EagerTensor(np.asarray(x)) for x in inputs])
        return _results(out, Tout)


@register_kernel("PyFunc", "CPU")
def _py_func(*inputs, Tout, func):
    with eager_mode():
        return _results(func(*[np.asarray(x) for x in inputs]), Tout)


def _bind(op):
    return {"func": op.attrs["_func"]}


get_op("EagerPyFunc").bind = _bind
get_op("PyFunc").bind = _bind


def _call(op_name, func, inp, Tout, name, eager_call):
    single = not isinstance(Tout, (list, tuple))
    Tout = [_dt.as_dtype(Tout)] if single else [_dt.as_dtype(d) for d in Tout]
    inputs = [convert_to_tensor(x) for x in (inp if isinstance(inp, (list, tuple)) else [inp])]
    if not executing_eagerly():
        out = list(execute(get_op(op_name), inputs, {"Tout": tuple(Tout), "_func": func}, name or op_name))
    elif op_name == "PyFunc":
        out = [EagerTensor(v) for v in _results(eager_call(inputs), Tout)]
    else:
        # Eagerly the function just runs, so an active tape records the ops inside it.
        res = eager_call(inputs)
        flat = list(res) if isinstance(res, (list, tuple)) else [res]
        if len(flat) != len(Tout):
            raise ValueError(f"The Python function returned {len(flat)} values, expected {len(Tout)} (Tout)")
        from tensorweave.ops.math_ops import cast
        out = [cast(convert_to_tensor(r), d) for r, d in zip(flat, Tout)]
    return out[0] if single else out


def py_function(func, inp, Tout, name=None):
    """Wraps ``func`` (tensors -> tensors) as an op; eager code inside it is differentiable."""
    return _call("EagerPyFunc", func, inp, Tout, name, lambda xs: func(*xs))


def numpy_function(func, inp, Tout, stateful=True, name=None):
    """Wraps ``func`` (NumPy arrays -> arrays) as an op; not differentiable."""
    return _call("PyFunc", func, inp, Tout, name, lambda xs: func(*[x.numpy() for x in xs]))
