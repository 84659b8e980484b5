"""``predict_on_batch``'s request bound once per input signature (issue 18, pred23).

Keras' ``predict_on_batch`` traces its predict function once and then calls it; so does
tensorweave's, and each request then walked the generic call: the array made a tensor, the
repeated-call key built and looked up (``Function._fast_key``), the feeds re-checked
(``ConcreteFunction._call_checked``), the output wrapped as a tensor and unwrapped again. For one
NumPy array of the dims and dtype of the call that bound the request, the request goes straight
to the traced plan (``executor.run_plan``: its straight-line runner) with the array and the
function's captures, and hands back the plan's output array: the same plan on the same values,
the same bits. Anything else (another signature, a tape recording, a graph being built, a
function planned over ranks, several inputs or outputs) takes the generic call, which binds the
request for the next one.

>>> import numpy as np
>>> import tensorweave as tw
>>> from tensorweave.keras.engine import predict_request
>>> fn = tw.function(lambda x: x[0] * 2.0)
>>> x = np.ones((1, 3), np.float32)
>>> predict_request.run(fn, x) is None             # nothing bound yet: the generic call
True
>>> _ = fn((tw.convert_to_tensor(x),)); predict_request.bind(fn, x)
>>> predict_request.run(fn, x).tolist()
[[2.0, 2.0, 2.0]]
"""
import numpy as np

from tensorweave.core.context import building_graph, ctx
from tensorweave.core.tensor import EagerTensor
from tensorweave.runtime import executor
from tensorweave.runtime.function import Function


class Request:
    """One input signature's call of a predict function: its plan and captures, bound."""

    __slots__ = ("dims", "dtype", "plan", "captures")

    def __init__(self, dims, dtype, plan, captures):
        self.dims, self.dtype, self.plan, self.captures = dims, dtype, plan, captures

    def __call__(self, x):
        values = [x]
        for c, _ in self.captures:      # read per call, as the generic call does
            values.append(c._value if type(c) is EagerTensor else c)
        return executor.run_plan(self.plan, values)[0]


def run(fn, x):
    """The output array of the predict function ``fn`` for the NumPy array ``x`` through the request
    bound for ``x``'s dims and dtype (:func:`bind`), or None where none fits: then the caller makes
    the generic call (and binds)."""
    request = getattr(fn, "_tw_request", None)
    if (request is None or x.shape != request.dims or x.dtype != request.dtype or ctx.tapes
            or building_graph() is not None):
        return None
    return request(x)


def bind(fn, x):
    """Binds ``fn``'s request for ``x``'s dims and dtype after a generic call ``fn((tensor of x,))``
    passed its checks (the concrete function its repeated-call key found), where that function
    takes one local input and gives one output; otherwise leaves whatever was bound."""
    if type(fn) is not Function:        # run_eagerly, a distribution's step: no traced plan to bind
        return
    cf = fn._repeated(((EagerTensor(x),),))
    if cf is None or cf._global is not None or not cf._single_out or len(cf.inputs) != 1 \
            or cf.inputs[0].dtype.np_dtype != x.dtype:
        return
    fn._tw_request = Request(x.shape, x.dtype, cf._plan, list(cf.graph.captures))
