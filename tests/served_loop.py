"""The compiled loop a twin test compares a NumPy twin with (``jit.njit_twin`` kernels).

Where the ahead-of-time build serves the arguments' types (``aot.py``), its loop: calling the
dispatcher runs it and compiles nothing, and tests/test_cold18_aot.py checks that it gives the
JIT's bits (each kernel's first signature in the suite, every one it serves in `make aot-check`),
so twin == built loop here means twin == JIT. Other
types: the JIT's loop, compiled now (a plain call of a twin kernel would answer through the twin
while it compiles on the background thread).

>>> import numpy as np
>>> from tensorweave.kernels.cpu import nn_loops
>>> g, out = np.ones((2, 3), np.float32), np.zeros(3)
>>> compiled(nn_loops.column_sums, g, out)(g, out)
>>> out.tolist()
[2.0, 2.0, 2.0]
"""
from tensorweave.kernels.cpu import jit


def compiled(kernel, *args):
    """What runs ``kernel``'s compiled loop for ``args``: the built one where served, else the JIT's."""
    loop = getattr(kernel, "dispatcher", kernel)
    if tuple(loop.typeof_pyval(a) for a in args) in getattr(loop, "aot_signatures", ()):
        return loop
    return jit.compile_now(kernel, *args)
