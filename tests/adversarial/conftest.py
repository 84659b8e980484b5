"""Every adversarial test runs under a timeout and a memory limit, so that a regression (a
loader that blocks on a FIFO, replays without end, or allocates what a file claims) fails
the test instead of hanging or exhausting the CI machine.

The memory limit is an address-space limit (``RLIMIT_AS``) of the current size plus
:data:`HEADROOM`, set for the duration of each test and then lifted; an allocation beyond it
raises ``MemoryError``, which no loader may let escape.
"""
import os

import pytest

TIMEOUT_S = int(os.environ.get("TW_ADVERSARIAL_TIMEOUT", "120"))
HEADROOM = 3 << 30


def pytest_collection_modifyitems(items):
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(TIMEOUT_S))


def _address_space():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


@pytest.fixture(autouse=True)
def memory_limit():
    try:
        import resource
    except ImportError:
        yield
        return
    size = _address_space()
    if size is None:
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = size + HEADROOM
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
