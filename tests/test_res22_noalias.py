"""The batch-norm sum loops and col2im compiled with ``noalias`` (``jit.njit(noalias=True)``, issue 18
session 18): marked for LLVM, and never handed overlapping arrays by their callers — the promise the
flag makes (checked for every batch-norm loop). (Their bits against the NumPy twins:
test_batch_norm_kernels.py, test_conv18_bn_relu.py; the ahead-of-time loops against the JIT:
test_cold18_aot.py.)"""
import numpy as np
import pytest

from tensorweave.kernels.cpu import batch_norm_kernels as bnk
from tensorweave.kernels.cpu import batch_norm_loops as loops
from tensorweave.kernels.cpu import conv_kernels, nn_loops
from test_wino21_noalias import _noalias_count

RNG = np.random.default_rng(22)
#: the loops compiled with the flag
MARKED = ("moments", "grad_sums", "grad_sums_relu", "grad_sums_relu_select")
#: kernel name -> positions of the arguments it writes (the rest it only reads)
WRITES = {"moments": (2, 3), "grad_sums": (3, 4), "grad_sums_relu": (4, 5), "scale_shift": (3,),
          "scale_shift_relu": (3,), "input_grad": (6,), "input_grad_relu": (7,),
          "grad_sums_relu_select": (3, 5, 6), "scale_shift_add_relu": (4,)}      # (res25's)


def test_the_loops_are_marked_noalias_for_llvm():
    x, v = np.zeros((4, 3), np.float32), np.zeros(3)
    for name in WRITES:
        assert getattr(getattr(loops, name).py_func, "tw_noalias", False) is (name in MARKED), name
    assert nn_loops.col2im.py_func.tw_noalias is True
    # numba's own two (return and exception pointers), then the arrays' data pointers
    assert _noalias_count(loops.moments, x, v, np.zeros(3), np.zeros(3)) > 2 + 3
    dcols, dx = np.zeros((1, 1, 2, 2, 1, 1, 1, 3), np.float32), np.zeros((1, 1, 4, 4, 3), np.float32)
    assert _noalias_count(nn_loops.col2im, dcols, (1, 2, 2), (1, 1, 1), (0, 0, 0), dx) > 2 + 1


def _checked(name, kernel, writes, calls):
    """``kernel`` with a check before each call: no written argument shares memory with another array."""
    def call(*args):
        arrays = [(i, a) for i, a in enumerate(args) if isinstance(a, np.ndarray)]
        for i in writes:
            for j, b in arrays:
                assert j == i or not np.shares_memory(args[i], b), (name, i, j)
        calls.append(name)
        return kernel(*args)
    return call


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
def test_batch_norm_kernels_never_pass_overlapping_arrays(monkeypatch, data_format):
    calls = []
    for name, writes in WRITES.items():
        monkeypatch.setattr(loops, name, _checked(name, getattr(loops, name), writes, calls))
    shape = (5, 3, 4, 6) if data_format == "NHWC" else (5, 6, 3, 4)
    x, dy = RNG.standard_normal(shape).astype(np.float32), RNG.standard_normal(shape).astype(np.float32)
    scale, offset = RNG.standard_normal(6).astype(np.float32), RNG.standard_normal(6).astype(np.float32)
    zero = np.zeros(6, np.float32)
    y, mean, var = bnk._batch_norm_training(x, scale, offset, 1e-3, data_format)
    relu_y = bnk._batch_norm_training_relu(x, scale, offset, 1e-3, data_format)[0]
    bnk._batch_norm_training_grad(dy, x, scale, mean, var, zero, zero, 1e-3, data_format)
    bnk._relu_grad_batch_norm_training_grad(dy, relu_y, x, scale, mean, var, zero, zero, 1e-3, data_format)
    bnk._batch_norm_training_add_relu(x, scale, offset, dy, 1e-3, data_format)
    bnk._relu_grad_batch_norm_training_grad_select(dy, relu_y, x, scale, mean, var, zero, zero, 1e-3, data_format)
    # also when the caller hands the same array as gradient and input (read-only overlap is allowed)
    bnk._batch_norm_training_grad(x, x, scale, mean, var, zero, zero, 1e-3, data_format)
    assert set(calls) == set(WRITES)


def test_the_input_gradient_never_passes_overlapping_arrays_to_col2im(monkeypatch):
    calls = []
    monkeypatch.setattr(nn_loops, "col2im", _checked("col2im", nn_loops.col2im, (4,), calls))
    for ksize, pads in ((3, ((0, 1), (0, 1))), (1, ((0, 0), (0, 0)))):      # the resnet's stride-2 kinds
        f = RNG.standard_normal((ksize, ksize, 4, 8)).astype(np.float32)
        dy = RNG.standard_normal((9, 4, 4, 8)).astype(np.float32)
        conv_kernels._dense_backprop_input((9, 8, 8, 4), f, dy, (4, 4), pads, (2, 2), (1, 1))
    assert calls and set(calls) == {"col2im"}
