"""Process-wide settings made when tensorweave is imported: idle BLAS workers sleep sooner
(kernels/threads.py) and freed step memory stays in the heap (runtime/host_memory.py).
Each check runs in a fresh interpreter, since both act when the libraries start."""
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc and OpenBLAS settings")

_PROBE = r"""
import json, os, resource
import numpy as np
from threadpoolctl import ThreadpoolController
import tensorweave  # noqa: F401
openblas = any(lib.internal_api == "openblas" for lib in ThreadpoolController().lib_controllers)

def faults(nbytes, times=20):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(times):   # a "step": three activations, written (every page touched), freed
        step = [np.ones(nbytes // 8) for _ in range(3)]
        del step
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

a = np.random.default_rng(0).random((512, 512))
product_ok = bool(np.allclose(a @ a, np.einsum("ij,jk->ik", a, a)))
faults(20 << 20, 1)   # the first allocation may fault its pages in
print(json.dumps({"openblas": openblas, "timeout": os.environ.get("OPENBLAS_THREAD_TIMEOUT"),
                  "product_ok": product_ok, "faults": faults(20 << 20)}))
"""


def _probe(**env):
    full = dict(os.environ)
    full.pop("OPENBLAS_THREAD_TIMEOUT", None)
    full.pop("TW_HOST_MEMORY_RETAIN_MB", None)
    full.update(env)
    out = subprocess.run([sys.executable, "-c", _PROBE], env=full, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_idle_openblas_workers_sleep_sooner_and_blas_still_works():
    from tensorweave.kernels import threads
    got = _probe()
    assert got["product_ok"]
    if not got["openblas"]:
        pytest.skip("NumPy is not linked with OpenBLAS")
    assert got["timeout"] == str(threads.IDLE_BLAS_SPIN_LOG2)


def test_a_users_openblas_timeout_is_left_alone():
    got = _probe(OPENBLAS_THREAD_TIMEOUT="12")
    assert got["timeout"] == "12" and got["product_ok"]


def test_freed_step_memory_is_reused_without_page_faults():
    # Three 20 MiB blocks allocated and freed 20 times: malloc's own policy hands the free top
    # of the heap back to the OS each time (15,000 faults per step), the setting keeps it.
    kept = _probe()["faults"]
    returned = _probe(TW_HOST_MEMORY_RETAIN_MB="0")["faults"]
    assert kept < 200
    assert returned > 20 * 1000


def test_retain_freed_memory_zero_leaves_malloc_alone():
    from tensorweave.runtime import host_memory
    assert host_memory.retain_freed_memory(0) is False


def test_a_bad_retention_setting_is_a_clear_error(monkeypatch):
    from tensorweave.runtime import host_memory
    monkeypatch.setenv("TW_HOST_MEMORY_RETAIN_MB", "lots")
    with pytest.raises(ValueError, match="TW_HOST_MEMORY_RETAIN_MB must be a number of MiB"):
        host_memory.configure_from_environment()
