"""The forward ReLU as one vector loop, in place too (issue 18, session 25 rows29).

A nogil segment's ``RELU`` row written into its input's buffer ran scalar (LLVM's overlap check of its
two views fails), a one-array select became a masked store of the zeros, and the Relu kernel's
``np.maximum`` has no vector loop on the AMD EPYC (35 µs for 65,536 float32). ``nn_loops.relu``
stores ``nn_loops.relu_value``, a form LLVM cannot take for the loaded value, and is the loop of
all three and of ``bias_act``'s ReLU. Bits: ``np.maximum(x, 0)``'s, NaN payloads (signalling ones
too), infinities and signed zeros (``-0.0`` gives ``0.0``)."""
import re

import numpy as np
import pytest

from tensorweave.kernels.cpu import jit, loop_choice, nn_loops, nn_loops_twins, split_passes
from test_nogil24_segments import _run
from test_vec27_select_loops import _avx2_host

#: NaNs, quiet and signalling, of both signs and several payloads
NANS = {np.float32: np.array([0x7fc00123, 0xffc00456, 0x7f800001, 0xff800777], np.uint32),
        np.float64: np.array([0x7ff8000000000123, 0xfff8000000000456, 0x7ff0000000000001, 0xfff0000000000777],
                             np.uint64)}


def _special(dtype, repeats=1):
    """Every special float (signed zeros, infinities, subnormals, NaNs) among normal values, ``repeats`` times."""
    specials = np.array([-0.0, 0.0, np.inf, -np.inf, 1e-45, -1e-45, 3.0, -3.0], dtype)
    normal = np.random.default_rng(repeats).standard_normal(37).astype(dtype)
    return np.tile(np.concatenate([specials, NANS[dtype].view(dtype), normal]), repeats)


def _same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("repeats", [1, 3, 41])
def test_the_loop_gives_numpys_maximum_bits_into_another_array_and_in_place(dtype, repeats):
    x = _special(dtype, repeats)
    want = np.maximum(x, dtype(0))
    out, inplace = np.empty_like(x), x.copy()
    kernel = jit.compile_now(nn_loops.relu.dispatcher, x, out)
    kernel(x, out)
    kernel(inplace, inplace)
    assert _same(out, want) and _same(inplace, want)
    assert np.signbit(want[0]) == False and want[0] == 0        # noqa: E712 - -0.0 gives 0.0
    twin = x.copy()
    nn_loops_twins.relu(twin, twin)
    assert _same(twin, want)


def test_one_value():
    z = np.float32(0)
    got = [nn_loops.relu_value(np.float32(v), z) for v in (-0.0, 0.0, 2.5, -2.5, np.inf, -np.inf)]
    assert [(float(v), bool(np.signbit(v))) for v in got] == [(0.0, False), (0.0, False), (2.5, False), (0.0, False),
                                                              (np.inf, False), (0.0, False)]
    assert np.isnan(nn_loops.relu_value(np.float32(np.nan), z))      # (a signalling NaN: in the arrays above)


def test_an_output_that_overlaps_its_input_shifted_gets_the_sequential_bits():
    base = _special(np.float32, 2)
    x = base.copy()
    jit.compile_now(nn_loops.relu.dispatcher, x[1:], x[:-1])(x[1:], x[:-1])
    want = base.copy()
    for i in range(len(want) - 1):                     # out[i] = relu(x[i + 1]), in order
        want[i] = np.maximum(want[i + 1], np.float32(0))
    assert _same(x, want)


@pytest.mark.parametrize("shape, dtype", [((37, 19), np.float32), ((3, 130), np.float64), ((512, 256), np.float32),
                                          ((7,), np.float16), ((4, 6), np.int32)])
def test_the_relu_kernel_gives_numpys_bits_for_every_layout_and_dtype(shape, dtype):
    if dtype == np.int32:
        x = np.arange(-12, 12, dtype=dtype).reshape(shape)
    else:
        x = np.resize(_special(np.float32 if dtype == np.float16 else dtype, 2), shape).astype(dtype)
    want = np.maximum(x, np.zeros((), dtype))
    assert _same(split_passes.relu(x), want)
    if x.ndim == 2:                                   # a strided view takes NumPy's loop
        assert _same(split_passes.relu(x[:, ::2]), want[:, ::2])
        assert _same(split_passes.relu(x.T), want.T)


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_the_relu_kernel_by_either_backend(backend):
    x = np.resize(_special(np.float32, 3), (64, 40))
    with loop_choice.forced(backend):
        assert _same(split_passes.relu(x), np.maximum(x, np.float32(0)))


@pytest.mark.parametrize("shape", [(1, 1), (37, 19), (256, 512)])
def test_the_segment_row_in_place_and_into_another_buffer(shape):
    from tensorweave.kernels.cpu import nogil_ops as N
    x = np.resize(_special(np.float32, 2), shape)
    n = x.size
    out, inplace = np.empty_like(x), x.copy()
    _run([[N.RELU, 0, -1, 1, n], [N.RELU, 2, -1, 2, n]], [x, out, inplace])
    want = np.maximum(x, np.float32(0))
    assert _same(out, want) and _same(inplace, want)


def test_bias_act_relu_gives_its_twins_bits_signed_zeros_too():
    # (the loop's np.maximum kept -0.0 for -0.0 + -0.0, its NumPy twin gave 0.0)
    y = np.resize(_special(np.float32, 2), (6, 9))
    y[:, 0] = -0.0
    b = np.random.default_rng(3).standard_normal(9).astype(np.float32)
    b[0] = -0.0
    got, want = y.copy(), y.copy()
    jit.compile_now(nn_loops.bias_act.dispatcher, got, b, True)(got, b, True)
    with np.errstate(invalid="ignore"):            # (a signalling NaN in the sums)
        nn_loops_twins.bias_act(want, b, True)
    assert _same(got, want) and not np.signbit(got[:, 0]).any()


@pytest.mark.skipif(not _avx2_host(), reason="the machine code is checked on x86-64 CPUs with AVX2")
def test_the_in_place_loop_stores_whole_vectors_not_masked_ones():
    # (x[i] = 0 if x[i] <= 0 else x[i] compiles to vmaskmovps stores of the zeros: 36 µs for 65,536 float32
    # against 6-7 for whole-vector stores, AMD EPYC Zen 4)
    x = np.zeros(64, np.float32)

    @jit.njit
    def in_place(x):
        nn_loops.relu(x, x)
    signature = (in_place.typeof_pyval(x),)
    in_place.compile(signature)
    asm = in_place.inspect_asm(signature)
    assert re.search(r"vmovups\s+%ymm\d+, ", asm) and "vmaskmov" not in asm
