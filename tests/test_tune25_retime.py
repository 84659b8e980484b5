"""gemm_tuning (issue 18 tune25): choices that stay right. Timings come from a scripted clock
(each candidate's call advances it by a scripted cost), never from the machine."""
import json
import os

import pytest

from tensorweave.kernels.cpu import gemm_tuning

KEY = {"cpu": "Test CPU 9000", "cores": 2, "versions": {"mkl": "m1", "numpy": "n1"}}
BACKENDS = ("mkl", "numpy")


class Clock:
    """A scripted clock: reading it costs nothing; a candidate's call advances it by its cost."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _runners(clock, costs, log=None):
    """``{name: run}`` where each run advances ``clock`` by ``costs[name]`` (a number, or a
    callable of the previous candidate run, for a pool asleep after another's call)."""
    last = [None]

    def run(name):
        cost = costs[name]
        clock.now += cost(last[0]) if callable(cost) else cost
        last[0] = name
        if log is not None:
            log.append(name)
    return {name: (lambda name=name: run(name)) for name in costs}


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(gemm_tuning, "_clock", c)          # the budget too: rounds end by the script
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: True)
    monkeypatch.setattr(gemm_tuning, "others_running", lambda: 0)
    return c


def _file(path, choices, fmt=gemm_tuning.FORMAT):
    path.write_text(json.dumps({"format": fmt, "machine": KEY, "choices": choices}))


def test_a_noisy_entry_is_timed_again_when_quiet_once_per_process(clock, monkeypatch, tmp_path):
    path = tmp_path / "t.json"
    _file(path, {"c": {"backend": "mkl", "settled": True, "noisy": True},
                 "spent": {"backend": "mkl", "settled": True, "noisy": True, "retimes": gemm_tuning.MAX_RETIMES}})
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: False)
    busy = gemm_tuning.Tuner(str(path), KEY, BACKENDS)
    assert busy.backend("c") == "mkl"                        # a busy process takes the noisy entry's word
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: True)
    tuner = gemm_tuning.Tuner(str(path), KEY, BACKENDS)
    assert tuner.backend("spent") == "mkl"                   # timed again often enough: it stands
    assert tuner.backend("c") is None                        # quiet: due to be timed again
    assert tuner.choose("c", _runners(clock, {"mkl": 2e-3, "numpy": 1e-3})) == "numpy"
    entry = json.loads(path.read_text())["choices"]["c"]
    assert entry["backend"] == "numpy" and entry["noisy"] is False and entry["retimes"] == 1
    _file(path, {"c": {"backend": "mkl", "settled": True, "noisy": True}})
    tuner.choices["c"]["noisy"] = True
    assert tuner.backend("c") == "numpy"                     # once per process, not on every lookup


def test_bad_conditions_or_spread_samples_make_an_entry_noisy(clock, monkeypatch, tmp_path):
    tuner = gemm_tuning.Tuner(str(tmp_path / "t.json"), KEY, BACKENDS)
    tuner.choose("steady", _runners(clock, {"mkl": 2e-3, "numpy": 1e-3}))
    assert tuner.choices["steady"]["noisy"] is False and tuner.choices["steady"]["spread"] == 0
    monkeypatch.setattr(gemm_tuning, "others_running", lambda: 1)    # a neighbour ran beside the timing
    tuner.choose("crowded", _runners(clock, {"mkl": 2e-3, "numpy": 1e-3}))
    assert tuner.choices["crowded"]["noisy"] is True and tuner.choices["crowded"]["others"] == 1
    monkeypatch.setattr(gemm_tuning, "others_running", lambda: 0)
    calls = iter(range(10 ** 6))                              # every 3rd call of numpy 3x slower
    tuner.choose("spread", _runners(clock, {"mkl": 2e-3, "numpy": lambda _: 3e-3 if next(calls) % 3 else 1e-3}))
    assert tuner.choices["spread"]["noisy"] is True and tuner.choices["spread"]["spread"] > gemm_tuning.MAX_SPREAD


def test_a_threaded_candidate_is_warmed_before_its_timed_block(clock):
    """A pool asleep after the other candidate's call pays a wake-up (50x a call) on its first call:
    the untimed lead-in pays it, so every timed sample is the awake speed and the pool wins."""
    def threaded(previous):
        return 50e-6 if previous != "threaded" else 1e-6
    times = gemm_tuning.measure(_runners(clock, {"one": 1.5e-6, "threaded": threaded}), clock)
    assert times["threaded"] == pytest.approx([1e-6] * len(times["threaded"]))
    assert gemm_tuning.pick(times, "one") == ("threaded", True)


def test_an_old_format_file_is_timed_again_not_misread(clock, tmp_path):
    path = tmp_path / "t.json"
    _file(path, {"c": {"backend": "mkl", "settled": True}}, fmt=1)
    tuner = gemm_tuning.Tuner(str(path), KEY, BACKENDS)
    assert tuner.backend("c") is None
    log = []
    assert tuner.choose("c", _runners(clock, {"mkl": 2e-3, "numpy": 1e-3}, log)) == "numpy" and log
    data = json.loads(path.read_text())
    assert data["format"] == gemm_tuning.FORMAT == 2 and data["choices"]["c"]["backend"] == "numpy"


@pytest.mark.parametrize("numpy,chosen", [(0.95, ("mkl", True)), (0.85, ("numpy", True)),
                                          ([0.5, 0.95, 0.95], ("mkl", False))])
def test_the_margin_rule(numpy, chosen):
    """The incumbent stays unless beaten by MARGIN by the median and by the fastest sample; where
    the two disagree (one lucky sample) the incumbent holds, unsettled."""
    samples = numpy if isinstance(numpy, list) else [numpy] * 3
    assert gemm_tuning.pick({"mkl": [1.0, 1.0, 1.0], "numpy": samples}, "mkl") == chosen


def test_other_processes_runnable_threads_are_the_run_queue_less_ours(monkeypatch, tmp_path):
    stat = tmp_path / "loadavg"
    monkeypatch.setattr(gemm_tuning, "LOADAVG_FILE", str(stat))
    monkeypatch.setattr(gemm_tuning, "RUNQUEUE", True)
    stat.write_text("0.50 0.40 0.30 1/131 2704\n")
    assert gemm_tuning.others_running() == 0                 # the caller itself
    stat.write_text("9.00 0.40 0.30 9/131 2704\n")
    assert 9 - len(os.listdir("/proc/self/task")) <= gemm_tuning.others_running() <= 8
    monkeypatch.setattr(gemm_tuning, "RUNQUEUE", False)      # TW_TUNING_RUNQUEUE=0
    assert gemm_tuning.others_running() == 0
