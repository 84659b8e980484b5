"""Counter-offset random pieces (``kernels/cpu/sbp_local_kernels.counter_draw``): a rank's piece
of a uniform float or full-range integer draw equals that slice of NumPy's whole draw, from
any stream position (buffered words, a pending 32-bit half), and the stream ends where the
whole draw leaves it. The SBP checker runs the ops; this pins the sampler arithmetic."""
import numpy as np
import pytest

from tensorweave.kernels.cpu.sbp_local_kernels import counter_draw

DTYPES = (np.float64, np.float32, np.int64, np.uint64, np.int32, np.uint32)


def _draw(gen, dtype, shape):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return gen.random(shape, dtype=dtype)
    info = np.iinfo(dtype)
    return gen.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


@pytest.mark.parametrize("dtype", DTYPES)
def test_piece_equals_the_slice_of_the_whole_draw_and_the_stream_goes_on(dtype):
    rng = np.random.default_rng(1)
    for before, before_dtype in [(0, np.float64), (1, np.float32), (3, np.float32), (2, np.float64), (6, np.float64),
                                 (5, np.float32)]:
        for shape in [(5, 3), (9,), (2, 3, 4), (0, 3), (1,)]:
            key = int(rng.integers(1 << 30))
            one, start = np.random.Philox(key), np.random.Philox(key)
            _draw(np.random.Generator(one), before_dtype, before)
            _draw(np.random.Generator(start), before_dtype, before)
            whole = _draw(np.random.Generator(one), dtype, shape)
            after = np.random.Generator(one).random(3, np.float32)
            for axis in range(len(shape)):
                d = shape[axis]
                for lo, hi in {(0, d), (1, d), (0, max(d - 1, 0)), (d // 2, d), (d, d)}:
                    rank = np.random.Philox()
                    rank.state = start.state
                    slices = [(0, n) for n in shape]
                    slices[axis] = (min(lo, hi), hi)
                    piece = counter_draw(rank, dtype, shape, slices)
                    want = whole[tuple(slice(a, b) for a, b in slices)]
                    where = f"{np.dtype(dtype)} after {before} {np.dtype(before_dtype)}, {shape} {slices}"
                    assert piece.dtype == want.dtype and piece.shape == want.shape, where
                    np.testing.assert_array_equal(piece, want, err_msg=where)
                    np.testing.assert_array_equal(np.random.Generator(rank).random(3, np.float32), after,
                                                  err_msg=f"{where}: the stream goes on elsewhere")


def test_a_scalar_draw():
    one, rank = np.random.Philox(3), np.random.Philox(3)
    whole = np.random.Generator(one).random((), np.float64)
    assert counter_draw(rank, np.float64, (), ()) == whole
    assert rank.random_raw() == one.random_raw()
