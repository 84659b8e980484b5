"""One thread times a one-thread shape class; another thread meeting the class meanwhile waits
and takes its choice (``gemm._serial_timing``). Before, both timed it at once, and a near-tie
could give MKL to one tile of a tiled kernel and OpenBLAS to the other: one call's bits then
depended on the race. The clock is scripted: no real timing is asserted."""
import threading

import numpy as np
import pytest

from test_blas18_one_thread import libs  # noqa: F401  (the fixture: fresh tuner, quiet, two cores)
from tensorweave.kernels.cpu import gemm, gemm_tuning

needs_mkl = pytest.mark.skipif(not gemm._gemm, reason="MKL (the 'mkl' extra) is not loaded")
SHAPE = (np.float32, 48, 40, 56)


@needs_mkl
@pytest.mark.parametrize("faster", ["mkl1", "numpy1"])
def test_a_class_met_while_timed_is_timed_once_and_both_threads_take_its_choice(monkeypatch, libs, faster):
    other_timed, timers, results = threading.Event(), [], {}

    def clock(backend, run):
        run()
        timers.append(threading.get_ident())
        if len(timers) == 1:            # the first timed call: the second thread meets the class now
            second.start()
            other_timed.wait(1.0)       # set only if the second thread times too (no lock: the old race)
        else:
            if threading.get_ident() != timers[0]:
                other_timed.set()
        return 1e-3 if backend == faster else 4e-3
    monkeypatch.setattr(gemm_tuning, "_time_call", clock)
    second = threading.Thread(target=lambda: results.update(second=gemm.serial_library(*SHAPE)))
    results["first"] = gemm.serial_library(*SHAPE)
    second.join()
    assert set(timers) == {timers[0]}, "the second thread timed the class as well"
    assert results == {"first": faster, "second": faster}
