"""The convolution choice's timing as the step runs (issue 18, session 18): the slice of the batch it
times is cut into tiles as the whole batch is (``conv_tiles.cut_as``), every candidate is timed by
process CPU time, and choices timed the earlier way (the slice's own tiles) are not read back.
Timings are scripted: nothing here depends on how fast anything runs."""
import json
import time

import numpy as np
import pytest

from tensorweave.kernels.cpu import conv_choice, conv_kernels as ck, conv_tiles, gemm, gemm_tuning, winograd

RNG = np.random.default_rng(22)
S, PAD = [1, 1], ((1, 1), (1, 1))


@pytest.fixture
def scripted(monkeypatch, tmp_path):
    """Auto mode, a fresh cache, a quiet machine; each timed call runs and reports 1 ms, and what it
    saw is kept: ``(backend, the batch conv_tiles cuts for, the clock the timing reads)``."""
    monkeypatch.setenv("TW_TUNING_CACHE", str(tmp_path / "gemm-tuning.json"))
    monkeypatch.setattr(conv_choice, "MODE", "auto")
    monkeypatch.setattr(conv_choice, "STACKS_MODE", "0")      # Winograd's product stacks: not timed here
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: True)
    seen, real = [], gemm_tuning._time_call

    def fake(backend, run):
        if backend not in conv_choice.BACKENDS:      # the GEMM library timings: left alone
            return real(backend, run)
        run()
        seen.append((backend, conv_tiles.batch(1), gemm_tuning._timing.clock))
        return 1e-3
    monkeypatch.setattr(gemm_tuning, "_time_call", fake)
    monkeypatch.setattr(conv_choice, "_compiled", lambda kernels: True)
    conv_choice.reset()
    yield seen, tmp_path / "conv-tuning.json"
    conv_choice.reset()


@pytest.mark.parametrize("per_image", [1 << 12, 73728, 147456, 294912, 589824, 3 << 20])
@pytest.mark.parametrize("n,cores", [(64, 2), (20, 2), (64, 4), (9, 1)])
def test_a_slice_inside_cut_as_gets_the_whole_batchs_tiles(per_image, n, cores):
    whole = conv_tiles.split(n, per_image, 1 << 20, cores=cores)
    with conv_tiles.cut_as(n):
        assert conv_tiles.batch(8) == n
        part = conv_tiles.split(8, per_image, 1 << 20, cores=cores)
        with conv_tiles.cut_as(3):                   # nested: the inner batch, then the outer again
            assert conv_tiles.batch(2) == 3
        assert conv_tiles.batch(2) == n
    assert part == whole
    assert conv_tiles.batch(8) == 8                  # restored on leaving


def test_without_it_a_slice_is_cut_finer_than_its_batch():
    # the ResNet's 64-channel 8x8 Winograd layer: one-image tiles for 8 images, eight-image ones for 64
    assert conv_tiles.split(8, 73728, 1 << 20, cores=2) == (73728, True)
    assert conv_tiles.split(64, 73728, 1 << 20, cores=2) == (8 * 73728, True)


def test_cut_as_is_restored_when_the_timing_raises():
    with pytest.raises(RuntimeError):
        with conv_tiles.cut_as(64):
            raise RuntimeError
    assert conv_tiles.batch(8) == 8


@pytest.mark.parametrize("kind", ["forward", "input", "filter"])
def test_every_kind_is_timed_on_its_slice_cut_as_the_batch_by_process_cpu(scripted, kind):
    seen, path = scripted
    x = RNG.standard_normal((20, 8, 8, 8)).astype(np.float32)
    f = RNG.standard_normal((3, 3, 8, 8)).astype(np.float32)
    dy = RNG.standard_normal((20, 8, 8, 8)).astype(np.float32)
    if kind == "forward":
        ck.conv_forward(x, f, S, S, "SAME", "NHWC")
    elif kind == "input":
        ck.conv_backprop_input(list(x.shape), f, dy, S, S, "SAME", "NHWC")
    else:
        ck.conv_backprop_filter(x, list(f.shape), dy, S, S, "SAME", "NHWC")
    assert {b for b, _, _ in seen} == {"winograd", "im2col"}
    assert all(batch == 20 and clock is time.process_time for _, batch, clock in seen)
    assert conv_tiles.batch(1) == 1                  # nothing left behind after the timing
    entry = json.loads(path.read_text())["choices"][conv_choice.shape_class(kind, 20, 8, 8, 8, 8, PAD)]
    assert entry["backend"] == "winograd"            # a tie keeps the incumbent


def test_the_few_channel_planes_are_timed_the_same_way(scripted):
    seen, _ = scripted
    x = RNG.standard_normal((20, 8, 8, 3)).astype(np.float32)
    f = RNG.standard_normal((3, 3, 3, 8)).astype(np.float32)
    ck.conv_forward(x, f, S, S, "SAME", "NHWC")
    assert {b for b, _, _ in seen} == {"planes", "im2col"}
    assert all(batch == 20 and clock is time.process_time for _, batch, clock in seen)


def test_the_filter_gradient_of_a_slice_uses_the_batchs_one_thread_products(monkeypatch):
    ones = []
    real = winograd._products
    monkeypatch.setattr(conv_choice, "STACKS_MODE", "0")      # (not timed here)
    monkeypatch.setattr(winograd, "_products",
                        lambda a, b, out, one, stacks=False: (ones.append(one), real(a, b, out, one, stacks))[1])
    x = RNG.standard_normal((8, 8, 8, 8)).astype(np.float32)
    dy = RNG.standard_normal((8, 8, 8, 8)).astype(np.float32)
    alone = winograd.conv3x3_backprop_filter(x, dy, PAD)
    with conv_tiles.cut_as(64):
        sliced = winograd.conv3x3_backprop_filter(x, dy, PAD)
    assert set(ones[:len(ones) // 2]) == {False} and set(ones[len(ones) // 2:]) == {True}
    np.testing.assert_allclose(sliced, alone, rtol=1e-5, atol=1e-5)


def test_choices_timed_the_earlier_way_are_not_read(scripted):
    seen, path = scripted
    cls = conv_choice.shape_class("forward", 20, 8, 8, 8, 8, PAD)
    path.write_text(json.dumps({"format": gemm_tuning.FORMAT, "machine": gemm.machine_key(),
                                "choices": {cls: {"backend": "im2col", "settled": True}}, "thresholds": {}}))
    assert conv_choice.use_winograd("forward", 20, 8, 8, 8, 8, PAD,
                                    lambda: {"winograd": lambda: None, "im2col": lambda: None})
    assert seen                                      # timed again, not read
    saved = json.loads(path.read_text())
    assert saved["machine"] == {**gemm.machine_key(), "probe": conv_choice.PROBE_METHOD}
    assert saved["choices"][cls]["backend"] == "winograd"
