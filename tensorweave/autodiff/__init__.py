"""Automatic differentiation: one backward walk shared by ``tw.gradients`` (graphs) and
``tw.GradientTape`` (eager and traced functions)."""

# Gradient rules that need the graph walker or the tape; the ops they belong to are in ops/,
# which does not import this layer, so they register here.
from tensorweave.autodiff import control_flow_grad, py_function_grad  # noqa: E402,F401
