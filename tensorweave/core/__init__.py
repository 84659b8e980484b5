"""Core data structures: dtypes, shapes, graphs, tensors, the op registry and the execution context."""
