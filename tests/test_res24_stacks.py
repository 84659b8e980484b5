"""A Winograd tile's 36 products through ``np.matmul`` or ``gemm.matmul`` (winograd._products),
chosen per stack class by measurement (conv_choice.numpy_stacks): the three kernels against a
direct float64 reference either way, which path runs for which (scripted) timing, and the overrides
— never how fast anything is."""
import json

import numpy as np
import pytest
import scripted_clock

from tensorweave.kernels.cpu import conv_choice, conv_tiles, gemm, winograd
from test_conv20_planes import _references

RNG = np.random.default_rng(2420)
PADS = ((1, 1), (1, 1))


@pytest.fixture
def tiled(monkeypatch):
    """Two cores, so a batch is cut into several tiles whose stacks run on one thread; the
    ``gemm.matmul`` calls of one-thread stacks are counted."""
    monkeypatch.setattr(conv_tiles.threads, "cores", lambda: 2)
    stacked, real = [], gemm.matmul

    def counting(a, b, out=None, one_thread=False):
        if a.ndim == 3 and one_thread:
            stacked.append(a.shape)
        return real(a, b, out=out, one_thread=one_thread)
    monkeypatch.setattr(gemm, "matmul", counting)
    return stacked


def _case():
    x = RNG.standard_normal((10, 8, 8, 8)).astype(np.float32)    # 10 > GROUP_IMAGES: the filter gradient's groups too
    f = (RNG.standard_normal((3, 3, 8, 8)) / 8).astype(np.float32)
    return x, f, RNG.standard_normal(x.shape).astype(np.float32)


def _kernels(x, f, dy):
    return (winograd.conv3x3(x, f, PADS), winograd.conv3x3_backprop_input(x.shape, f, dy, PADS),
            winograd.conv3x3_backprop_filter(x, dy, PADS))


@pytest.mark.parametrize("mode", ["0", "1"])
def test_both_paths_match_the_direct_reference(monkeypatch, tiled, mode):
    monkeypatch.setattr(conv_choice, "STACKS_MODE", mode)
    x, f, dy = _case()
    refs = _references(x, f, dy, (1, 1), (1, 1), "SAME")
    for g, r in zip(_kernels(x, f, dy), refs):
        assert g.shape == r.shape and np.abs(g - r).max() <= 1e-5 * np.abs(r).max()
    assert bool(tiled) is (mode == "0")              # "1": no stack went through gemm.matmul


@pytest.fixture
def scripted(monkeypatch, tmp_path):
    """Auto mode, a fresh cache file, a quiet machine, and a scripted clock (seconds per call)."""
    monkeypatch.setattr(conv_choice, "STACKS_MODE", "auto")
    times = {"gemm": 1e-3, "numpy": 1e-3}
    calls = scripted_clock.script(monkeypatch, tmp_path, times)
    conv_choice.reset()
    yield times, calls, tmp_path / "conv-tuning.json"
    conv_choice.reset()


@pytest.mark.parametrize("faster", ["gemm", "numpy"])
def test_the_faster_path_runs_and_is_remembered(scripted, tiled, faster):
    times, calls, path = scripted
    times["numpy" if faster == "gemm" else "gemm"] = 1e-2
    x, f, dy = _case()
    _kernels(x, f, dy)
    assert set(calls) == {"gemm", "numpy"}
    saved = json.loads(path.read_text())["choices"]
    stacks = {k: e["backend"] for k, e in saved.items() if k.startswith("stacks:")}
    # the forward's and the input gradient's stacks (one class at C = O), the filter gradient's (transposed)
    assert len(stacks) == 2 and set(stacks.values()) == {faster}
    # the kernels' own stacks (the timings' runners call gemm.matmul too): only where gemm is chosen
    tiled.clear()
    timed = len(calls)
    conv_choice.reset()                              # another process on this machine: the file
    _kernels(x, f, dy)
    assert len(calls) == timed and bool(tiled) is (faster == "gemm")


@pytest.mark.parametrize("mode,want", [("0", False), ("1", True), ("never", False)])
def test_overrides_skip_the_timing(monkeypatch, mode, want):
    monkeypatch.setattr(conv_choice, "STACKS_MODE", mode)
    monkeypatch.setattr(conv_choice, "_stack_runners", lambda *a: pytest.fail("must not be timed"))
    assert conv_choice.numpy_stacks(np.float32, 36, 192, 16, 16) is want


def test_a_single_tile_asks_nothing(monkeypatch):
    monkeypatch.setattr(conv_choice, "numpy_stacks", lambda *a, **k: pytest.fail("no stacks to choose"))
    x, f, dy = _case()
    for g, r in zip(_kernels(x[:1], f, dy[:1]), _references(x[:1], f, dy[:1], (1, 1), (1, 1), "SAME")):
        assert np.abs(g - r).max() <= 1e-5 * np.abs(r).max()


def test_the_pair_chooses_its_stacks_before_running_the_gradients_side_by_side(scripted, tiled, monkeypatch):
    import threading

    from tensorweave.kernels.cpu import conv_pair_kernels
    monkeypatch.setattr(conv_choice, "MODE", "1")                       # Winograd, untimed
    monkeypatch.setattr(conv_pair_kernels, "side_by_side", lambda n: True)
    where, real = [], conv_choice._faster

    def spy(cls, *args):
        if cls.startswith("stacks:"):
            where.append(threading.current_thread() is threading.main_thread())
        return real(cls, *args)
    monkeypatch.setattr(conv_choice, "_faster", spy)
    x, f, dy = _case()
    dx, df = conv_pair_kernels.conv_backprop_pair(list(x.shape), f, x, list(f.shape), dy, [1, 1], [1, 1], "SAME",
                                                  "NHWC")
    assert len(where) >= 2 and all(where)          # both gradients' classes, timed on the calling thread
    refs = _references(x, f, dy, (1, 1), (1, 1), "SAME")
    for g, r in zip((dx, df), refs[1:]):
        assert np.abs(g - r).max() <= 1e-5 * np.abs(r).max()
