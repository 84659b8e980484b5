"""Batch-1 convolution routes chosen per shape class by timing (kernels/cpu/conv_batch1.py).

Timings are scripted (``gemm_tuning._time_call`` replaced): the tests check which route runs for
which measurement and what is remembered, and that every route gives the float64 reference's
values (the direct loop: its twin's bits) — never how fast anything is."""
import json

import numpy as np
import pytest
import scripted_clock

from tensorweave.kernels.cpu import conv_batch1 as cb, conv_kernels as ck, gemm_tuning, jit

RNG = np.random.default_rng(24)
ROUTES = ("incumbent", "direct", "direct_rows", "gemm_rows")


def _case(h=10, w=8, c=3, o=5, k=(3, 2)):
    x = RNG.standard_normal((1, h, w, c)).astype(np.float32)
    f = (RNG.standard_normal(k + (c, o)) / np.sqrt(k[0] * k[1] * c)).astype(np.float32)
    b = RNG.standard_normal(o).astype(np.float32)
    return x, f, b


def _reference(x, f, b, strides, dilations, padding, relu):
    """float64 NumPy: the windows' sums, ``+ b``, ReLU."""
    y = ck._batch_forward(x.astype(np.float64), f.astype(np.float64), 1,
                          *_geometry(x, f, strides, dilations, padding), strides, dilations, None, False)
    y = y + b
    return np.maximum(y, 0) if relu else y


def _geometry(x, f, strides, dilations, padding):
    from tensorweave.kernels.cpu.nn_util import geometry
    return geometry(x.shape[1:3], f.shape[:2], strides, dilations, padding)


@pytest.fixture
def forced(monkeypatch):
    def force(route):
        monkeypatch.setattr(cb, "MODE", route)
    return force


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("strides,dilations,padding,relu", [
    ([1, 1], [1, 1], "VALID", True), ([2, 1], [1, 1], "SAME", False), ([1, 1], [2, 1], "SAME", True)])
def test_every_route_matches_the_float64_reference(forced, route, strides, dilations, padding, relu):
    x, f, b = _case()
    forced(route)
    ck.conv_forward(x, f, strides, dilations, padding, "NHWC", b, relu)
    jit.wait_for_compiles()                     # the compiled loop, not its twin
    got = ck.conv_forward(x, f, strides, dilations, padding, "NHWC", b, relu)
    want = _reference(x, f, b, strides, dilations, padding, relu)
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_the_compiled_direct_loop_gives_its_twins_bits_nan_included():
    x, f, b = _case(c=4, o=16)
    x[0, 2, 3, 1] = np.nan
    y_loop, y_twin = np.empty((8, 7, 16), np.float32), np.empty((8, 7, 16), np.float32)
    args = (x[0], f, b, True, True, 1, 1, 1, 1)
    loop = jit.compile_now(cb.direct_rows, *args, 0, 8, y_loop)
    loop(*args, 2, 8, y_loop)
    loop(*args, 0, 2, y_loop)                   # rows in two tiles
    cb.direct_rows.twin(*args, 0, 8, y_twin)
    assert y_loop.tobytes() == y_twin.tobytes()
    assert np.isnan(y_loop[0, 2]).all() and np.isnan(y_loop[2, 3]).all() and not np.isnan(y_loop[6, 6]).any()
    strided = (x[0], f, b, False, False, 2, 1, 1, 2)            # stride 2 down, dilation 2 across
    y_loop, y_twin = np.empty((4, 6, 16), np.float32), np.empty((4, 6, 16), np.float32)
    loop(*strided, 0, 4, y_loop)
    cb.direct_rows.twin(*strided, 0, 4, y_twin)
    assert y_loop.tobytes() == y_twin.tobytes()
    want = sum(x[0, 2 * 3 + a, 5 + 2 * e].astype(np.float64) @ f[a, e] for a in range(3) for e in range(2))
    np.testing.assert_allclose(y_loop[3, 5], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("route,tiles", [("direct", 1), ("direct_rows", 2), ("gemm_rows", 2)])
def test_the_threaded_routes_cut_the_rows_into_tiles_for_every_core(forced, monkeypatch, route, tiles):
    cuts, real = [], cb.over_bands

    def recorded(n, rows, run):
        cuts.append(-(-n // rows))
        return real(n, rows, run)
    monkeypatch.setattr(cb, "over_bands", recorded)
    monkeypatch.setattr(cb.threads, "cores", lambda: 2)
    monkeypatch.setattr(cb, "TILES_PER_CORE", 1)
    forced(route)
    x, f, b = _case()
    ck.conv_forward(x, f, [1, 1], [1, 1], "VALID", "NHWC", b, True)
    assert cuts == [tiles]


def test_only_one_image_two_dims_one_group_floats_take_a_batch1_route(forced):
    x, f, _ = _case()
    forced("auto")
    assert cb.applies(x, f, 1, 2)
    assert not cb.applies(np.concatenate([x, x]), f, 1, 2)
    assert not cb.applies(x, f, 3, 2)
    assert not cb.applies(x[0], f[0], 1, 1)
    assert not cb.applies(x.astype(np.int32), f.astype(np.int32), 1, 2)
    forced("0")
    assert not cb.applies(x, f, 1, 2)


@pytest.fixture
def scripted(monkeypatch, tmp_path):
    """Auto mode, a fresh cache file, a quiet machine, a scripted clock (``times[route]``)."""
    monkeypatch.setattr(cb, "MODE", "auto")
    times = dict.fromkeys(ROUTES, 1e-3)
    calls = scripted_clock.script(monkeypatch, tmp_path, times)
    cb.reset()
    yield times, calls, tmp_path / "conv-batch1-tuning.json"
    cb.reset()


def _run_compiled(x, f, b):
    """conv_forward until the loops are compiled and a route chosen (the first calls warm them)."""
    got = ck.conv_forward(x, f, [1, 1], [1, 1], "VALID", "NHWC", b, True)
    jit.wait_for_compiles()
    return ck.conv_forward(x, f, [1, 1], [1, 1], "VALID", "NHWC", b, True)


@pytest.mark.parametrize("faster", ["direct", "gemm_rows"])
def test_a_route_faster_by_the_margin_is_chosen_remembered_and_run(scripted, faster):
    times, calls, path = scripted
    times[faster] = 0.5e-3
    x, f, b = _case()
    got = _run_compiled(x, f, b)
    cls = cb.shape_class(x.dtype, x.shape, f.shape, ((0, 0), (0, 0)), (1, 1), (1, 1))
    assert cb._chosen[cls] == faster and set(calls) == set(ROUTES)
    assert json.loads(path.read_text())["choices"][cls]["backend"] == faster
    cb.reset()
    del calls[:]
    np.testing.assert_allclose(_run_compiled(x, f, b), got, rtol=1e-6, atol=1e-6)
    assert not calls and cb._chosen[cls] == faster          # read from the file, not timed again


def test_the_batch_route_stays_unless_another_is_faster_by_the_margin(scripted):
    times, calls, _ = scripted
    times.update(direct=0.95e-3, gemm_rows=0.93e-3)
    x, f, b = _case()
    got = _run_compiled(x, f, b)
    assert cb._chosen[cb.shape_class(x.dtype, x.shape, f.shape, ((0, 0), (0, 0)), (1, 1), (1, 1))] == "incumbent"
    assert got.tobytes() == ck._batch_forward(x, f, 1, (8, 7), ((0, 0), (0, 0)), [1, 1], [1, 1], b, True).tobytes()
