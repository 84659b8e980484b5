"""One local Ray instance per test process (each xdist worker), shared by the Ray test modules.

Each Ray module's fixture calls ``tw.distribute.connect``, which starts a local Ray instance
when none runs and stops it again at ``shutdown``: ~15 s a start on a loaded 2-core machine
(ray_start.py's figure), paid by every module on every worker that ran one of its tests. When
an instance runs already, ``connect`` attaches to it (the cluster's ``_started_ray`` is False)
and ``shutdown`` removes only that cluster's actors, rendezvous actors and placement group —
what a user with a running Ray gets. So ``tests/conftest.py`` starts one here before the first
Ray test of the process and stops it at the session's end: one start per worker.

The instance is started as ``connect`` starts one (loopback only, dashboard off, rank actors at
the driver's priority), with logical room for the largest module's placement group (4 ranks of
one CPU: tests/test_ray14_steps.py; ``connect`` gives a module max(its ranks, the cores)).
``connect``'s own start and the stop of what it started keep their check without a real start:
tests/test_audit12_ray_connect.py drives ``connect``/``shutdown`` on a fake Ray.

Where Ray cannot start, nothing is recorded here: each module's ``connect`` fails as before and
tests/ray_start.py turns that into a skip with Ray's reason.

>>> import ray_shared
>>> ray_shared.CPUS >= 4
True
"""
import os
import sys

CPUS = max(4, os.cpu_count() or 1)

# this process's one try: {"started": True (we started it) / False (it failed, or Ray ran already)}
_state = {}


def connects(item):
    """Whether ``item`` uses a module-scoped fixture of its own module (how the Ray modules
    connect: ``cluster``, ``strategy``...); the modules that fake Ray have none and start nothing."""
    module = getattr(getattr(item, "module", None), "__name__", None)
    infos = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    return any(d.scope == "module" and getattr(d.func, "__module__", None) == module
               for defs in infos.values() for d in defs)


def start():
    """Starts the shared instance once per process (a no-op where Ray already runs, or where
    the first try failed); returns True when this process runs one that it started."""
    if "started" not in _state or (_state["started"] and not _running()):
        # (again where a test stopped it: else each later module's connect would start and stop its own)
        _state["started"] = _start()
    return _state["started"]


def _running():
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


def _start():
    try:
        import ray
        if ray.is_initialized():
            return False
        from tensorweave.distribute.ray.cluster import _loopback_only
        _loopback_only(ray)
        os.environ.setdefault("RAY_worker_niceness", "0")     # as connect: ranks at the driver's priority
        ray.init(num_cpus=CPUS, include_dashboard=False, _node_ip_address="127.0.0.1", logging_level="ERROR",
                 log_to_driver=False, configure_logging=False)
        return True
    except Exception as e:  # noqa: BLE001 - then each module's connect starts (or fails to start) its own
        _state["error"] = f"{type(e).__name__}: {e}"          # (for a look: ray_shared._state)
        try:
            import ray
            ray.shutdown()
        except Exception:  # noqa: BLE001, S110 - a start that failed may leave nothing to stop
            pass
        return False


def stop():
    """Stops the instance this process started (at the session's end)."""
    if _state.get("started"):
        import ray
        if ray.is_initialized():
            ray.shutdown()
        _state["started"] = False
