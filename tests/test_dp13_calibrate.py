"""The planner's FLOPS_PER_BYTE from a measurement: the ratio rounded to two digits, opt-in per process."""
import numpy as np

import tensorweave as tw
from tensorweave.distribute import calibrate, planner


def test_calibrate_sets_the_measured_ratio_to_two_digits(monkeypatch):
    monkeypatch.setattr(planner, "FLOPS_PER_BYTE", planner.FLOPS_PER_BYTE)
    monkeypatch.setattr(calibrate, "measure", lambda **kw: {"flops_per_s": 8.0e10, "bytes_per_s": 2.9e10,
                                                            "flops_per_byte": 8.0e10 / 2.9e10})
    r = calibrate.calibrate()
    assert planner.FLOPS_PER_BYTE == 2.8 and r["flops_per_s"] == 8.0e10


def test_the_measurement_is_of_this_machine():
    r = calibrate.measure(repeat=2, n=32, nbytes=1 << 14)
    assert r["flops_per_byte"] == r["flops_per_s"] / r["bytes_per_s"] > 0


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
