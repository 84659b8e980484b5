"""The planner's FLOPS_PER_BYTE from a measurement: the ratio rounded to two digits, opt-in per process."""
import types

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.distribute import calibrate, planner


def test_calibrate_sets_the_measured_ratio_to_two_digits(monkeypatch):
    monkeypatch.setattr(planner, "FLOPS_PER_BYTE", planner.FLOPS_PER_BYTE)
    monkeypatch.setattr(calibrate, "measure", lambda **kw: {"flops_per_s": 8.0e10, "bytes_per_s": 2.9e10,
                                                            "flops_per_byte": 8.0e10 / 2.9e10})
    r = calibrate.calibrate()
    assert planner.FLOPS_PER_BYTE == 2.8 and r["flops_per_s"] == 8.0e10


def test_the_measurement_takes_the_best_of_its_repeats(monkeypatch):
    # a scripted clock (no measured time in tests): the product's spans 4 then 2 ms, the copy's 1 then 3 ms
    ticks = iter([0.0, 0.004, 1.0, 1.002, 2.0, 2.001, 3.0, 3.003])
    monkeypatch.setattr(calibrate, "time", types.SimpleNamespace(perf_counter=lambda: next(ticks)))
    r = calibrate.measure(repeat=2, n=32, nbytes=1 << 14)
    assert r["flops_per_s"] == pytest.approx(2 * 32 ** 3 / 0.002)
    assert r["bytes_per_s"] == pytest.approx((1 << 14) / 0.001)
    assert r["flops_per_byte"] == r["flops_per_s"] / r["bytes_per_s"]


def test_only_the_environment_variable_calibrates_before_the_first_plan(monkeypatch):
    calls = []
    monkeypatch.setattr(calibrate, "calibrate", lambda **kw: calls.append(1))
    monkeypatch.setattr(calibrate, "_done", [False])
    monkeypatch.delenv("TW_PLANNER_CALIBRATE", raising=False)
    calibrate.calibrate_once_if_asked()
    assert calls == []
    monkeypatch.setattr(calibrate, "_done", [False])
    monkeypatch.setenv("TW_PLANNER_CALIBRATE", "1")
    p = tw.placement("cpu", ranks=[0, 1])
    x = tw.constant(np.ones((4, 3), np.float32)).to_global(placement=p, sbp=tw.sbp.split(0))
    tw.function(lambda x: x * 2.0)(x)                      # the first plan calibrates ...
    tw.function(lambda x: x * 3.0)(x)                      # ... once
    assert calls == [1]
