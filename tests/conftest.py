import os
import sys
import tempfile

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
# GEMM backends chosen by a fixed rule, not by timing (kernels/cpu/gemm_tuning.py): tests are
# deterministic and leave the user's tuning cache alone. test_gemm_tuning.py turns it on.
os.environ.setdefault("TW_BLAS_TUNE", "0")
# Convolutions: Winograd wherever it applies, not chosen by timing (kernels/cpu/conv_choice.py;
# tests/test_conv18_choice.py times it with a scripted clock).
os.environ.setdefault("TW_CONV_WINOGRAD", "1")
# Likewise a 1x1 convolution as one GEMM and Winograd's product stacks through NumPy (conv_choice:
# tests/test_res24_pointwise.py and tests/test_res24_stacks.py time them with a scripted clock).
os.environ.setdefault("TW_CONV_POINTWISE", "1")
os.environ.setdefault("TW_CONV_STACKS", "1")
# A single image's convolution by its batch route, not by a route timed on this machine (a timed
# direct loop's bits differ from a GEMM's in the last places; tests/test_pred24_conv_batch1.py
# forces each route and times them with a scripted clock).
os.environ.setdefault("TW_CONV_BATCH1", "0")
# Compiled loops once compiled, their NumPy twins until then (the same bits), not chosen by timing
# (kernels/cpu/loop_choice.py; tests/test_rnn18_loop_choice.py times them with a scripted clock).
os.environ.setdefault("TW_LOOPS", "numba")
# A timing's settling by the quiet check alone, not also by a probe of what else runs on the core
# now (kernels/cpu/own_core.py; tests/test_enc25_own_core.py scripts its clocks).
os.environ.setdefault("TW_OWN_CORE", "0")
# Whether the machine is quiet for a timing by the load average and steal only, not by the run queue
# of this moment (gemm_tuning.others_running: its neighbours, other tests' workers, would decide;
# tests/test_tune25_retime.py scripts it).
os.environ.setdefault("TW_TUNING_RUNQUEUE", "0")
# Choices that are still timed (a product class's split, at -n 0 on a quiet machine) go to a
# cache of this run, never into the user's (TW_TUNING_CACHE names the GEMM file; the
# convolution file sits next to it).
os.environ.setdefault("TW_TUNING_CACHE", os.path.join(tempfile.mkdtemp(prefix="tw-tests-tuning-"), "gemm-tuning.json"))

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Each xdist worker gets one BLAS (and numba) thread, so parallel workers do not
    # oversubscribe the cores.
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
    from threadpoolctl import threadpool_limits
    _blas_limit = threadpool_limits(1)

SHARED = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "shared", "datasets"))


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture
def graph_mode():
    """Runs the test body in TF1 mode (ops build the default graph)."""
    import tensorweave as tw
    from tensorweave.core.context import disable_eager_execution, enable_eager_execution
    tw.reset_default_graph()
    disable_eager_execution()
    try:
        yield
    finally:
        enable_eager_execution()
        tw.reset_default_graph()


@pytest.fixture
def shared_datasets():
    if not os.path.isdir(SHARED):
        pytest.skip("../shared/datasets is not present")
    return SHARED


# ---- Ray tests skip only where Ray cannot start, with Ray's reason (tests/ray_start.py) ----
# ---- and share one local Ray instance per test process (tests/ray_shared.py) ---------------
import ray_shared  # noqa: E402
import ray_start  # noqa: E402
from ray_start import pytest_runtest_makereport  # noqa: E402,F401


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    ray_start.pytest_runtest_setup(item)        # skips at once where Ray is known not to start
    if ray_start.is_ray_test(item) and ray_shared.connects(item):
        ray_shared.start()                      # before the module's connect: it attaches


def pytest_sessionfinish(session):
    ray_shared.stop()


def pytest_configure(config):
    config.addinivalue_line("markers", "ray: a test that needs a local Ray instance (skips where Ray cannot start)")
