"""A virtual machine whose hypervisor takes the CPUs is not quiet, whatever its load average
(``gemm_tuning.stolen``): timings there measure another guest and must not be cached for good."""
import os

import pytest

from tensorweave.kernels.cpu import gemm_tuning


@pytest.fixture
def ticks(monkeypatch):
    """Scripted ``/proc/stat`` samples: append ``(total, steal)`` pairs; each read takes the next."""
    script = []
    monkeypatch.setattr(gemm_tuning, "_cpu_jiffies", lambda: script.pop(0))
    monkeypatch.setattr(gemm_tuning, "_steal", {"last": (1000, 100), "busy": False})
    return script


@pytest.mark.parametrize("steal,busy", [(0, False), (10, False), (11, True), (100, True)])
def test_steal_over_the_share_of_the_interval_is_busy(ticks, steal, busy):
    ticks.append((1100, 100 + steal))              # 100 ticks since the last sample
    assert gemm_tuning.stolen() is busy
    assert gemm_tuning._steal["last"] == (1100, 100 + steal)


def test_a_short_interval_keeps_the_verdict_and_the_sample(ticks):
    ticks.extend([(1100, 150), (1100 + gemm_tuning.MIN_TICKS - 1, 150), (1200, 151)])
    assert gemm_tuning.stolen() is True            # half the interval stolen
    assert gemm_tuning.stolen() is True            # too short to judge: the verdict stands
    assert gemm_tuning._steal["last"] == (1100, 150)
    assert gemm_tuning.stolen() is False           # 1 tick of 100 since (1100, 150)


def test_no_counter_or_a_reset_counter_is_not_stolen(ticks):
    ticks.extend([None, (10, 0), (200, 0)])
    assert gemm_tuning.stolen() is False           # no /proc/stat
    assert gemm_tuning.stolen() is False           # counters went back (a restored VM): a new start
    assert gemm_tuning._steal["last"] == (10, 0)
    assert gemm_tuning.stolen() is False


@pytest.mark.parametrize("stolen", [False, True])
def test_quiet_and_spare_core_need_no_steal(monkeypatch, stolen):
    monkeypatch.setattr(os, "getloadavg", lambda: (0.1, 0.0, 0.0))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(gemm_tuning, "stolen", lambda: stolen)
    assert gemm_tuning.quiet() is not stolen
    assert gemm_tuning.spare_core() is not stolen


def test_the_counter_is_the_cpu_lines_sum_and_eighth_field(monkeypatch, tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  10 1 20 300 4 5 6 7 8 9\ncpu0 5 0 10 150 2 2 3 3 4 4\n")
    monkeypatch.setattr(gemm_tuning, "STAT_FILE", str(stat))
    assert gemm_tuning._cpu_jiffies() == (10 + 1 + 20 + 300 + 4 + 5 + 6 + 7, 7)
    for text in ("intr 1 2 3 4 5 6 7 8 9\n", "cpu 1 2 3\n"):      # not the cpu line; a kernel without steal
        stat.write_text(text)
        assert gemm_tuning._cpu_jiffies() is None
    monkeypatch.setattr(gemm_tuning, "STAT_FILE", str(tmp_path / "absent"))
    assert gemm_tuning._cpu_jiffies() is None


def test_the_real_counter_reads_two_numbers():
    got = gemm_tuning._cpu_jiffies()
    if got is None:
        pytest.skip("no /proc/stat here")
    total, steal = got
    assert 0 <= steal <= total


def test_an_interval_of_min_ticks_is_judged(ticks):
    ticks.append((1000 + gemm_tuning.MIN_TICKS, 100 + gemm_tuning.MIN_TICKS))
    assert gemm_tuning.stolen() is True
