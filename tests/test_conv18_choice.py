"""Winograd or im2col chosen per shape class by timing, cached on disk (kernels/cpu/conv_choice.py).

Timings are scripted (``gemm_tuning._time_call`` replaced): the tests check which path runs for
which measurement, what is remembered where, and that both paths give the float64 reference's
values for every kind (forward, input gradient, filter gradient) — never how fast anything is."""
import json

import numpy as np
import pytest
import scripted_clock

from tensorweave.kernels.cpu import conv_choice, conv_kernels as ck, gemm_tuning, jit, winograd

RNG = np.random.default_rng(18)
S = [1, 1]
PAD = ((1, 1), (1, 1))


@pytest.fixture
def auto(monkeypatch, tmp_path):
    """Auto mode, a fresh cache file, a quiet machine, and a scripted clock: ``times[backend]``
    is the seconds every timed call of that backend takes."""
    monkeypatch.setattr(conv_choice, "MODE", "auto")
    monkeypatch.setattr(conv_choice, "STACKS_MODE", "0")      # Winograd's product stacks: not timed here
    times = {"winograd": 1e-3, "im2col": 1e-3}
    calls = scripted_clock.script(monkeypatch, tmp_path, times)
    _paths(*_case())                                 # the transforms and col2im compiled: timings count
    jit.wait_for_compiles()
    _paths(*_case())
    conv_choice.reset()
    yield times, calls, tmp_path / "conv-tuning.json"
    conv_choice.reset()


def _case(n=3, h=9, w=10, c=8, o=16):
    x = RNG.standard_normal((n, h, w, c)).astype(np.float32)
    f = (RNG.standard_normal((3, 3, c, o)) / np.sqrt(9 * c)).astype(np.float32)
    dy = RNG.standard_normal((n, h, w, o)).astype(np.float32)
    return x, f, dy


def _three(x, f, dy):
    return (ck.conv_forward(x, f, S, S, "SAME", "NHWC"),
            ck.conv_backprop_input(list(x.shape), f, dy, S, S, "SAME", "NHWC"),
            ck.conv_backprop_filter(x, list(f.shape), dy, S, S, "SAME", "NHWC"))


def _references(x, f, dy):
    return _three(x.astype(np.float64), f.astype(np.float64), dy.astype(np.float64))


def _paths(x, f, dy):
    out, pads = (x.shape[1], x.shape[2]), PAD
    return {"winograd": (winograd.conv3x3(x, f, pads),
                         winograd.conv3x3_backprop_input(x.shape, f, dy, pads),
                         winograd.conv3x3_backprop_filter(x, dy, pads).reshape(f.shape)),
            "im2col": (ck._dense_forward(x, f, out, pads, S, S),
                       ck._dense_backprop_input(x.shape, f, dy, out, pads, S, S),
                       ck._dense_backprop_filter(x, f.shape, dy, out, pads, S, S).reshape(f.shape))}


def test_shape_classes_bucket_batch_sizes_and_channels():
    sc = conv_choice.shape_class
    assert sc("input", 1, 26, 26, 32, 64, PAD) == "input:n1,h5,w5,c6,o7,p1111"
    assert sc("forward", 64, 32, 32, 16, 16, PAD) == sc("forward", 128, 32, 32, 16, 16, PAD)
    assert sc("forward", 64, 32, 32, 16, 16, PAD) != sc("forward", 1, 32, 32, 16, 16, PAD)
    assert sc("forward", 2, 8, 8, 8, 8, ((0, 0), (0, 0))) == "forward:n2,h4,w4,c4,o4,p0000"
    assert sc("filter", 8, 8, 8, 8, 8, PAD) != sc("forward", 8, 8, 8, 8, 8, PAD)


@pytest.mark.parametrize("faster", ["winograd", "im2col"])
def test_the_faster_path_runs_and_matches_the_float64_reference(auto, faster):
    times, calls, path = auto
    times["im2col" if faster == "winograd" else "winograd"] = 1e-2
    x, f, dy = _case()
    x[:, :2] = 0.5                                   # some structure in the border rows
    got, want = _three(x, f, dy), _paths(x, f, dy)[faster]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)          # the chosen path's own bits
    for g, r in zip(got, _references(x, f, dy)):
        assert g.dtype == np.float32
        assert np.abs(g - r).max() <= 2e-5 * np.abs(r).max()
    assert set(calls) == {"winograd", "im2col"}
    saved = json.loads(path.read_text())["choices"]
    assert sorted(saved) == sorted(conv_choice.shape_class(k, 3, 9, 10, 8, 16, PAD) for k in conv_choice.KINDS)
    assert {e["backend"] for e in saved.values()} == {faster}


def test_a_class_is_timed_once_per_machine_and_read_back(auto):
    times, calls, path = auto
    times["winograd"] = 1e-2
    x, f, dy = _case()
    _three(x, f, dy)
    timed = len(calls)
    _three(x, f, dy)
    assert len(calls) == timed                       # this process: remembered
    conv_choice.reset()                              # another process on this machine: the file
    got = _three(x, f, dy)
    assert len(calls) == timed
    np.testing.assert_array_equal(got[0], _paths(x, f, dy)["im2col"][0])
    assert json.loads(path.read_text())["machine"] == json.loads(json.dumps(
        conv_choice.tuner().key))


def test_a_small_lead_keeps_winograd(auto):
    times, _, _ = auto
    times["im2col"] = 0.95e-3                        # 5 % faster: under gemm_tuning.MARGIN
    x, f, dy = _case()
    np.testing.assert_array_equal(_three(x, f, dy)[0], _paths(x, f, dy)["winograd"][0])


def test_a_busy_machine_keeps_the_choice_for_this_process_only(auto, monkeypatch):
    times, _, path = auto
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: False)
    times["winograd"] = 1e-2
    x, f, dy = _case()
    np.testing.assert_array_equal(_three(x, f, dy)[0], _paths(x, f, dy)["im2col"][0])
    assert not path.exists()


def test_only_a_slice_of_the_batch_is_timed(auto, monkeypatch):
    seen = []
    real = winograd.conv3x3
    monkeypatch.setattr(winograd, "conv3x3", lambda x, *a, **k: (seen.append(x.shape[0]), real(x, *a, **k))[1])
    x, f, _ = _case(n=20)
    ck.conv_forward(x, f, S, S, "SAME", "NHWC")
    assert seen[:-1] and set(seen[:-1]) == {8} and seen[-1] == 20      # 8 images timed, then the batch


def test_uncompiled_transforms_mean_winograd_and_nothing_recorded(auto):
    _, calls, path = auto

    class Twin:                                      # a numba kernel with no compiled version yet
        overloads = {}

    def runners():
        raise AssertionError("must not be timed")
    assert conv_choice.use_winograd("forward", 4, 8, 8, 8, 8, PAD, runners, (Twin(),))
    assert not calls and not path.exists() and not conv_choice._chosen


@pytest.mark.parametrize("mode,want", [("0", False), ("1", True), ("always", True), ("never", False)])
def test_overrides_skip_the_timing(monkeypatch, mode, want):
    monkeypatch.setattr(conv_choice, "MODE", mode)

    def runners():
        raise AssertionError("must not be timed")
    assert conv_choice.use_winograd("forward", 4, 8, 8, 8, 8, PAD, runners) is want


def test_a_cache_of_another_machine_is_ignored(auto):
    times, calls, path = auto
    cls = conv_choice.shape_class("forward", 3, 9, 10, 8, 16, PAD)
    path.write_text(json.dumps({"format": gemm_tuning.FORMAT, "machine": {"cpu": "elsewhere"},
                                "choices": {cls: {"backend": "im2col"}}, "thresholds": {}}))
    x, f, dy = _case()
    np.testing.assert_array_equal(_three(x, f, dy)[0], _paths(x, f, dy)["winograd"][0])
    assert calls                                     # timed here instead


# ---- the choice alone (no convolution runs: fast, and what mutation testing runs) ----------------
class _Compiled:
    overloads = {"sig": None}                       # a numba kernel with a compiled version


@pytest.fixture
def scripted(monkeypatch, tmp_path):
    monkeypatch.setenv("TW_TUNING_CACHE", str(tmp_path / "gemm-tuning.json"))
    monkeypatch.setattr(conv_choice, "MODE", "auto")
    monkeypatch.setattr(conv_choice, "STACKS_MODE", "0")      # Winograd's product stacks: not timed here
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: True)
    times, ran = {"winograd": 1e-3, "im2col": 1e-3}, []
    monkeypatch.setattr(gemm_tuning, "_time_call", lambda backend, run: (run(), times[backend])[1])
    conv_choice.reset()
    yield times, ran, tmp_path / "conv-tuning.json"
    conv_choice.reset()


def _runners(ran):
    return lambda: {"winograd": lambda: ran.append("w"), "im2col": lambda: ran.append("i")}


@pytest.mark.parametrize("w,i,want", [(1e-3, 1e-3, True), (1e-3, 0.5e-3, False), (0.5e-3, 1e-3, True),
                                      (1e-3, 0.95e-3, True)])
def test_the_choice_follows_the_timings(scripted, w, i, want):
    times, ran, path = scripted
    times.update(winograd=w, im2col=i)
    assert conv_choice.use_winograd("filter", 64, 16, 16, 32, 32, PAD, _runners(ran), (_Compiled(),)) is want
    assert "w" in ran and "i" in ran
    entry = json.loads(path.read_text())["choices"][conv_choice.shape_class("filter", 64, 16, 16, 32, 32, PAD)]
    assert entry["backend"] == ("winograd" if want else "im2col") and entry["settled"] is True
    del ran[:]
    assert conv_choice.use_winograd("filter", 64, 16, 16, 32, 32, PAD, _runners(ran), (_Compiled(),)) is want
    assert not ran                                   # remembered
    conv_choice.reset()
    assert conv_choice.use_winograd("filter", 64, 16, 16, 32, 32, PAD, _runners(ran), (_Compiled(),)) is want
    assert not ran                                   # read back from the file


def test_every_kernel_must_be_compiled(scripted):
    _, ran, path = scripted

    class Twin:
        overloads = {}
    assert conv_choice._compiled([_Compiled(), _Compiled()])
    assert not conv_choice._compiled([_Compiled(), Twin()])
    assert not conv_choice._compiled([object()])
    assert conv_choice._compiled([])
    assert conv_choice.use_winograd("input", 64, 16, 16, 32, 32, PAD, _runners(ran), (_Compiled(), Twin()))
    assert not ran and not path.exists()


def test_the_cache_sits_next_to_the_gemm_tuning_file(monkeypatch, tmp_path):
    monkeypatch.setenv("TW_TUNING_CACHE", str(tmp_path / "sub" / "g.json"))
    conv_choice.reset()
    try:
        assert conv_choice.cache_path() == str(tmp_path / "sub" / "conv-tuning.json")
        assert conv_choice.tuner().path == conv_choice.cache_path()
        assert conv_choice.tuner() is conv_choice.tuner()
        assert conv_choice.tuner().backends == frozenset(conv_choice.BACKENDS)
    finally:
        conv_choice.reset()


def test_unsettled_choices_hold_for_the_process(scripted, monkeypatch):
    times, ran, path = scripted
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: False)
    times["winograd"] = 1e-2
    assert not conv_choice.use_winograd("forward", 2, 8, 8, 8, 8, PAD, _runners(ran), (_Compiled(),))
    del ran[:]
    assert not conv_choice.use_winograd("forward", 2, 8, 8, 8, 8, PAD, _runners(ran), (_Compiled(),))
    assert not ran and not path.exists()


def test_batch_buckets_stop_at_the_probe_size():
    assert conv_choice.PROBE_IMAGES == 8             # a few ms per class on the ResNet's layers
    sc = conv_choice.shape_class
    assert [sc("forward", n, 8, 8, 8, 8, PAD).split(",")[0] for n in (1, 2, 3, 4, 7, 8, 9, 500)] == \
        ["forward:n1", "forward:n2", "forward:n2", "forward:n3", "forward:n3", "forward:n4", "forward:n4", "forward:n4"]
    assert sc("forward", 8, 8, 8, 8, 8, [(2, 0), (1, 0)]).endswith(",p2010")
