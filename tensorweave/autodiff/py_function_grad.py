"""Gradient of ``py_function`` (``ops/script_ops.py``): another ``py_function`` that runs the
Python function again under a :class:`GradientTape`. It needs the tape, so it lives in the
autodiff layer and registers itself when ``tensorweave.autodiff`` is imported.

>>> import tensorweave as tw
>>> x = tw.constant(3.0)
>>> with tw.GradientTape() as t:
...     t.watch(x)
...     y = tw.py_function(lambda v: v * v, [x], tw.float32)
>>> float(t.gradient(y, x))
6.0
"""
from tensorweave.autodiff.tape import GradientTape
from tensorweave.core import nest
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.registry import register_gradient
from tensorweave.ops.array_ops import zeros_like
from tensorweave.ops.script_ops import py_function


@register_gradient("EagerPyFunc")
def _py_grad(op, *grads):
    func = op.attrs["_func"]
    inputs = list(op.inputs)
    diff = [i for i, t in enumerate(inputs) if t.dtype.is_floating]
    if not diff:
        return [None] * len(inputs)
    n_in = len(inputs)

    def grad_impl(*args):
        xs, gys = list(args[:n_in]), list(args[n_in:])
        with GradientTape() as tape:
            for i in diff:
                tape.watch(xs[i])
            outs = nest.flatten(func(*xs))
        pairs = [(convert_to_tensor(o), g) for o, g in zip(outs, gys) if o is not None]
        res = tape.gradient([o for o, _ in pairs], [xs[i] for i in diff],
                            output_gradients=[g for _, g in pairs])
        return [zeros_like(xs[i]) if r is None else r for r, i in zip(res, diff)]
    gys = [g for g in grads if g is not None]
    out = py_function(grad_impl, inputs + gys, [inputs[i].dtype for i in diff], name="py_function_grad")
    out = out if isinstance(out, list) else [out]
    full = [None] * n_in
    for i, g in zip(diff, out):
        full[i] = g
    return full
