"""A batch-1 3x3 convolution by Winograd over bands of output-block rows, one band per core
(``conv_batch1._winograd_rows``, route ``"winograd_rows"``).

The route is forced (``conv_batch1.MODE``) or chosen under a scripted clock (pred24's
``scripted`` fixture): the tests check its values against the batch route's bits and a float64
reference, how the rows are cut, and when it is a candidate — never how fast it is."""
import json

import numpy as np
import pytest

from tensorweave.kernels.cpu import conv_batch1 as cb, conv_kernels as ck, jit
from test_pred24_conv_batch1 import ROUTES, _reference, _run_compiled, scripted  # noqa: F401 - fixture

RNG = np.random.default_rng(25)


def _case(h=13, w=11, c=8, o=16):
    x = RNG.standard_normal((1, h, w, c)).astype(np.float32)
    f = (RNG.standard_normal((3, 3, c, o)) / np.sqrt(9 * c)).astype(np.float32)
    return x, f, RNG.standard_normal(o).astype(np.float32)


def _forced(monkeypatch, route, x, f, b, padding, relu):
    monkeypatch.setattr(cb, "MODE", route)
    ck.conv_forward(x, f, [1, 1], [1, 1], padding, "NHWC", b, relu)
    jit.wait_for_compiles()                     # the compiled transforms, not their twins
    return ck.conv_forward(x, f, [1, 1], [1, 1], padding, "NHWC", b, relu)


def _rows_independent(x_shape, padding, c, o):
    """Whether NumPy's stacked product gives the rows of the two bands' products (two cores) the
    bits of the whole image's product: a property of the BLAS, not of the route. OpenBLAS's
    SkylakeX kernels (the Intel machine) do; its Haswell kernels on the AMD EPYC of session 22 do
    not (a row's sums are ordered by the product's height there), so the bands can only give the
    batch route's values to rounding (issue 18, res26)."""
    blk = cb.winograd._Blocks(x_shape, ((1, 1), (1, 1)) if padding == "SAME" else ((0, 0), (0, 0)))
    v = RNG.standard_normal((36, blk.th * blk.tw, c)).astype(np.float32)
    u = RNG.standard_normal((36, c, o)).astype(np.float32)
    cut = -(-blk.th // 2) * blk.tw
    bands = np.concatenate([np.matmul(v[:, :cut], u), np.matmul(v[:, cut:], u)], axis=1)
    return bands.tobytes() == np.matmul(v, u).tobytes()


@pytest.mark.parametrize("padding,relu,bias", [("VALID", True, True), ("SAME", False, True), ("SAME", True, False)])
def test_the_bands_give_the_batch_routes_bits_and_the_reference(monkeypatch, padding, relu, bias):
    x, f, b = _case()
    b = b if bias else None
    monkeypatch.setattr(cb.threads, "cores", lambda: 2)          # two bands whatever the machine
    got = _forced(monkeypatch, "winograd_rows", x, f, b, padding, relu)
    batch = _forced(monkeypatch, "0", x, f, b, padding, relu)
    assert got.shape == batch.shape
    if _rows_independent(x.shape, padding, x.shape[-1], f.shape[-1]):
        assert got.tobytes() == batch.tobytes()
    else:
        np.testing.assert_allclose(got, batch, rtol=1e-5, atol=1e-5)
    want = _reference(x, f, np.zeros(16, np.float32) if b is None else b, [1, 1], [1, 1], padding, relu and bias)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("cores,bands", [(1, [1]), (2, [2]), (4, [3])])
def test_one_band_of_block_rows_per_core(monkeypatch, cores, bands):
    cuts, real = [], cb.over_bands

    def recorded(n, rows, run):
        cuts.append(-(-n // rows))
        return real(n, rows, run)
    monkeypatch.setattr(cb, "over_bands", recorded)
    monkeypatch.setattr(cb.threads, "cores", lambda: cores)
    x, f, b = _case()                           # 11x9 outputs: 3 rows of 4x4 blocks
    _forced(monkeypatch, "winograd_rows", x, f, b, "VALID", True)
    assert cuts[-1:] == bands


def test_the_bands_are_a_candidate_only_where_winograd_applies(monkeypatch):
    x, f, b = _case()
    pads = ((0, 0), (0, 0))
    assert "winograd_rows" in cb._routes(x, f, pads, (1, 1), (1, 1))
    assert "winograd_rows" not in cb._routes(x, f, pads, (2, 2), (1, 1))
    assert cb.shape_class(x.dtype, x.shape, f.shape, pads, (1, 1), (1, 1)).endswith(",w")
    assert not cb.shape_class(x.dtype, x.shape, f.shape, pads, (2, 2), (1, 1)).endswith(",w")
    # forced on a layer Winograd cannot take: the batch route
    monkeypatch.setattr(cb, "MODE", "winograd_rows")
    got = ck.conv_forward(x, f, [2, 2], [1, 1], "VALID", "NHWC", b, True)
    want = ck._batch_forward(x, f, 1, (6, 5), pads, [2, 2], [1, 1], b, True)
    assert got.tobytes() == want.tobytes()


def test_the_bands_timed_faster_are_chosen_remembered_and_run(scripted, monkeypatch):
    times, calls, path = scripted
    times["winograd_rows"] = 0.5e-3
    ran, real = [], cb._winograd_rows
    monkeypatch.setattr(cb, "_winograd_rows", lambda *a: ran.append(1) or real(*a))
    x, f, b = _case(h=10, w=8)
    got = _run_compiled(x, f, b)
    cls = cb.shape_class(x.dtype, x.shape, f.shape, ((0, 0), (0, 0)), (1, 1), (1, 1))
    assert set(calls) == set(ROUTES) | {"winograd_rows"} and cb._chosen[cls] == "winograd_rows"
    assert json.loads(path.read_text())["choices"][cls]["backend"] == "winograd_rows"
    del ran[:]
    assert _run_compiled(x, f, b).tobytes() == got.tobytes() and ran


class _Pool:
    """A scripted intra-op pool: each helper either never starts (cancelled) or runs at once."""

    def __init__(self, starts):
        self.starts, self.waited = starts, []

    def submit(self, fn):
        pool = self

        class Future:
            def cancel(self):
                return not pool.starts

            def result(self):
                pool.waited.append(fn())
        return Future()


@pytest.mark.parametrize("starts", [False, True])
def test_a_helper_not_started_is_cancelled_and_a_started_one_waited_for(monkeypatch, starts):
    pool, ran = _Pool(starts), []
    monkeypatch.setattr(cb.gemm, "threads_here", lambda: 2)
    monkeypatch.setattr(cb.tiles, "current_runtime", lambda: type("R", (), {"intra_op_pool": lambda self: pool})())
    cb.over_bands(5, 2, lambda r0, r1, scratch: ran.append((r0, r1)))
    assert sorted(ran) == [(0, 2), (2, 4), (4, 5)]      # every band once: here, or on the helper
    assert len(pool.waited) == (1 if starts else 0)
