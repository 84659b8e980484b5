"""Ray tests skip only where Ray cannot start (installed, but no local instance comes up:
no shared memory, no free ports, a sandbox...), with Ray's own reason; anywhere else they
pass or fail as written.

A *Ray test* is a test of a module that imported Ray (``ray = pytest.importorskip("ray")``)
or one marked ``@pytest.mark.ray``. When one fails (its setup — the module's ``connect``
fixture — or its body), :func:`start_failure` tries once per test process to start a local
instance the way ``tw.distribute.connect`` does; if that fails the failure is reported as a
skip with Ray's error, and every later Ray test of the process skips at once (no second
wait for a start that cannot succeed). When Ray starts, the failure stands. The attempt is
made only after a failure because a start costs ~15 s of a loaded 2-core machine (measured
here: ray.init 14.9 s, shutdown 1.6 s), which every passing run would otherwise pay.

The hooks are installed by the block at the end of ``tests/conftest.py``.

>>> import ray_start
>>> ray_start.skip_reason("OSError: no space left on /dev/shm")
'Ray cannot start a local instance here: OSError: no space left on /dev/shm'
"""
import pytest

# the one attempt of this process: {"reason": None (Ray started) or Ray's error as text}
_attempt = {}


def skip_reason(error):
    return f"Ray cannot start a local instance here: {error}"


def _try_start():
    """None when a local Ray instance starts (and stops again), else Ray's error as text."""
    try:
        import ray
    except ImportError as e:
        return f"Ray is not importable ({e})"
    if ray.is_initialized():
        return None                     # it started in this process: a failure is the test's own
    try:
        from tensorweave.distribute.ray.cluster import _loopback_only
        _loopback_only(ray)
        ray.init(num_cpus=1, include_dashboard=False, _node_ip_address="127.0.0.1", logging_level="ERROR",
                 log_to_driver=False, configure_logging=False)
    except Exception as e:  # noqa: BLE001 - any error of a start is the reason to report
        return f"{type(e).__name__}: {e}"
    finally:
        try:
            ray.shutdown()
        except Exception:  # noqa: BLE001, S110 - a start that failed may leave nothing to stop
            pass
    return None


def start_failure():
    """Ray's reason why a local instance cannot start here, or None; tried once per process."""
    if "reason" not in _attempt:
        _attempt["reason"] = _try_start()
    return _attempt["reason"]


def known_failure():
    """The reason of an attempt already made (None: none made, or Ray started)."""
    return _attempt.get("reason")


def require_ray():
    """Skips the calling test when Ray cannot start here (for tests that start Ray themselves)."""
    reason = start_failure()
    if reason is not None:
        pytest.skip(skip_reason(reason))


def is_ray_test(item):
    if item.get_closest_marker("ray") is not None:
        return True
    module = getattr(item, "module", None)
    ray = getattr(module, "ray", None)
    return getattr(ray, "__name__", None) == "ray"


def as_skip_if_ray_cannot_start(item, report):
    """Turns a Ray test's failed setup or call report into a skip when Ray cannot start here."""
    if not report.failed or report.when not in ("setup", "call") or not is_ray_test(item):
        return
    reason = start_failure()
    if reason is None:
        return
    path, line, _ = item.location
    report.outcome = "skipped"
    report.longrepr = (str(item.fspath), (line or 0) + 1, "Skipped: " + skip_reason(reason))


# ---- the hooks (installed by tests/conftest.py) ---------------------------------------------------
@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    reason = known_failure()
    if reason is not None and is_ray_test(item):
        pytest.skip(skip_reason(reason))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    as_skip_if_ray_cannot_start(item, outcome.get_result())
