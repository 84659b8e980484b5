"""Automatic differentiation: one backward walk shared by ``tw.gradients`` (graphs) and
``tw.GradientTape`` (eager and traced functions)."""
