"""``tw.custom_gradient``: a function that supplies its own gradient.

The decorated function returns ``(outputs, grad_fn)``; ``grad_fn(*upstream)`` returns the
gradients of the inputs. If the function reads variables, ``grad_fn`` is called with
``variables=[...]`` and returns ``(input_grads, variable_grads)``.

>>> import tensorweave as tw
>>> @tw.custom_gradient
... def clipped_identity(x):
...     def grad(dy):
...         return tw.clip_by_value(dy, -1.0, 1.0)
...     return tw.identity(x), grad
>>> x = tw.constant(3.0)
>>> with tw.GradientTape() as t:
...     t.watch(x)
...     y = clipped_identity(x) * 5.0
>>> float(t.gradient(y, x))
1.0
"""
import functools

from tensorweave.autodiff.tape import GradientTape
from tensorweave.core import nest
from tensorweave.core.context import building_graph, ctx
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.dispatch import EagerOp, execute, record_custom
from tensorweave.core.registry import get_op, register_kernel, register_op
from tensorweave.core.sbp import B, Partial, S
from tensorweave.core.sbp_rules import signatures
from tensorweave.core.tensor import Tensor


def _identity_infer(inputs, attrs):
    return [(t.shape, t.dtype) for t in inputs[:attrs["n_out"]]]


def _grad_dispatch(op, *grads):
    return op.attrs["_grad_fn"](op, *grads)


# Outputs are identities of the first n_out inputs; the remaining inputs are the
# function's arguments (and variable handles), which receive the custom gradient.
def _sbp(inputs, attrs):
    """SBP: the outputs are their inputs in any layout; the other inputs (the function's
    arguments, read only by the gradient) keep the SBP they have, so nothing is boxed for them."""
    n = attrs["n_out"]
    rest = [x.sbp or B for x in inputs[n:]]
    rank = max((x.rank for x in inputs[:n]), default=0)
    for i in range(rank):
        outs = [S(i) if i < x.rank else B for x in inputs[:n]]
        yield outs + rest, outs
    for k in Partial.KINDS:
        yield [Partial(k)] * n + rest, [Partial(k)] * n


register_op("CustomGradient", infer=_identity_infer, num_outputs=lambda a: a["n_out"], grad=_grad_dispatch,
            sbp=signatures(_sbp, lambda a: a["n_out"]))
register_kernel("CustomGradient", "CPU")(lambda *xs, n_out: tuple(xs[:n_out]))


def custom_gradient(f=None):
    if f is None:
        return custom_gradient

    @functools.wraps(f)
    def wrapped(*args, **kwargs):
        inputs = [convert_to_tensor(a) if not isinstance(a, Tensor) else a for a in args]
        saved = ctx.tapes
        ctx.tapes = []
        try:
            with GradientTape() as probe:  # only to learn which variables the function reads
                result, user_grad = f(*inputs, **kwargs)
        finally:
            ctx.tapes = saved
        variables = list(probe.watched_variables())
        flat = [convert_to_tensor(o) for o in nest.flatten(result)]
        handles = [v.handle for v in variables]
        n_in = len(inputs)

        def grad_fn(op, *upstream):
            if variables:
                gx, gv = user_grad(*upstream, variables=variables)
            else:
                gx, gv = user_grad(*upstream), []
            gx = list(gx) if isinstance(gx, (list, tuple)) else [gx]
            if len(gx) != n_in:
                raise ValueError(f"custom gradient of {f.__name__} returned {len(gx)} gradients for {n_in} inputs")
            return gx + list(gv)

        if building_graph() is None:
            if ctx.tapes:
                for tape in ctx.tapes:
                    if tape._watch_accessed:
                        for h in handles:
                            tape._watch_handle(h)
                record_custom(EagerOp(get_op("CustomGradient"), inputs + handles, flat, {}, grad_fn=grad_fn))
            return result
        # In a graph no gradient flows into the forward computation (the first inputs).
        attrs = {"n_out": len(flat), "_grad_fn": lambda op, *g: [None] * len(flat) + grad_fn(op, *g)}
        outs = execute(get_op("CustomGradient"), flat + inputs + handles, attrs)
        return nest.pack_sequence_as(result, list(outs))
    return wrapped
