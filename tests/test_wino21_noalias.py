"""``jit.njit(noalias=True)``: the Winograd transforms compiled with numba's ``noalias`` flag, by the
JIT and by the ahead-of-time build (their bits against the twins: test_jit_twins.py, and against the
JIT: test_cold18_aot.py)."""
import warnings

import numpy as np
from numba.core.compiler import Flags

with warnings.catch_warnings():
    warnings.simplefilter("ignore")         # pycc's deprecation notice (aot_build silences it the same way)
    from numba.pycc import compiler as pycc_compiler

from tensorweave.kernels.cpu import aot_build, jit, nn_loops, winograd


def _noalias_count(kernel, *args):
    """How many ``noalias`` attributes the compiled function's LLVM definition carries."""
    jit.compile_now(kernel, *args)
    signature = tuple(kernel.typeof_pyval(a) for a in args)
    name = kernel.py_func.__name__
    lines = [line for line in kernel.inspect_llvm(signature).splitlines()
             if line.startswith("define") and name in line and "cpython" not in line and "cfunc" not in line]
    return lines[0].count("noalias")


def test_the_transforms_mark_their_array_arguments_noalias_and_other_kernels_do_not():
    x, v = np.zeros((1, 6, 6, 16), np.float32), np.zeros((36, 1, 16), np.float32)
    marked = _noalias_count(winograd._input_transform, x, 0, 1, 1, 1, v)
    y, b = np.zeros((4, 16), np.float32), np.zeros(16, np.float32)
    plain = _noalias_count(nn_loops.bias_act.dispatcher, y, b, True)
    assert plain == 2                       # numba's own: the return and exception pointers
    assert marked > plain + 2               # and the arrays' pointers
    for kernel in (winograd._input_transform, winograd._output_transform, winograd._output_grad_transform,
                   winograd._input_grad_transform):
        assert kernel.py_func.tw_noalias is True
    assert not getattr(nn_loops.bias_act.dispatcher.py_func, "tw_noalias", False)


def test_the_ahead_of_time_build_sets_the_flag_for_marked_kernels_only(monkeypatch):
    seen = []

    def recorder(tctx, cctx, func, args, ret, flags, **kwargs):
        seen.append((func, flags.noalias))
    monkeypatch.setattr(pycc_compiler, "compile_extra", recorder)

    def marked():
        pass
    marked.tw_noalias = True

    def plain():
        pass
    with aot_build._jit_settings():
        for fn in (marked, plain):
            pycc_compiler.compile_extra(None, None, fn, (), None, Flags(), locals={}, library=None)
    assert seen == [(marked, True), (plain, False)]
    assert pycc_compiler.compile_extra is recorder and pycc_compiler.Flags is Flags     # restored
