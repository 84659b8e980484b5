"""Ray tests skip only where Ray cannot start (``tests/ray_start.py``): a simulated start
failure (``ray.init`` raising) turns a Ray test's failure into a skip with Ray's reason, tried
once per process; where Ray starts, a Ray test's failure stays a failure, and tests that are
not Ray's are never touched. Nothing here starts Ray."""
import pytest

ray = pytest.importorskip("ray")

import ray_start  # noqa: E402

def _fake_init(calls, error=None):
    def init(*args, **kwargs):
        calls.append(kwargs)
        if error is not None:
            raise error
    return init


def test_a_failed_start_is_tried_once_and_skips_with_rays_reason(monkeypatch):
    calls = []
    monkeypatch.setattr(ray_start, "_attempt", {})
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", _fake_init(calls, RuntimeError("simulated: the GCS did not start")))
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    assert ray_start.known_failure() is None
    assert ray_start.start_failure() == "RuntimeError: simulated: the GCS did not start"
    with pytest.raises(pytest.skip.Exception, match="cannot start a local instance here: RuntimeError: simulated"):
        ray_start.require_ray()
    assert len(calls) == 1                                    # once per process
    assert calls[0]["_node_ip_address"] == "127.0.0.1" and calls[0]["include_dashboard"] is False
    assert ray_start.known_failure() == "RuntimeError: simulated: the GCS did not start"


def test_a_start_that_works_or_a_running_ray_skips_nothing(monkeypatch):
    calls = []
    monkeypatch.setattr(ray_start, "_attempt", {})
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray, "init", _fake_init(calls, RuntimeError("never called")))
    ray_start.require_ray()
    assert calls == [] and ray_start.start_failure() is None
    monkeypatch.setattr(ray_start, "_attempt", {})
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", _fake_init(calls))
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append("shutdown"))
    ray_start.require_ray()
    assert len(calls) == 2 and calls[1] == "shutdown"       # started, and stopped again


_CONFTEST = """
from ray_start import pytest_runtest_makereport, pytest_runtest_setup  # noqa: F401


def pytest_configure(config):
    config.addinivalue_line("markers", "ray: needs Ray")
"""

_RAY_TESTS = """
import pytest
ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def cluster():
    ray.init()                       # what tw.distribute.connect does first
    yield


def test_one(cluster):
    assert True


def test_two(cluster):
    assert True


def test_a_bug():
    assert 1 == 2, "a real failure"
"""

_OTHER_TESTS = """
import pytest


def test_not_ray():
    assert 1 == 2, "not a Ray test"


@pytest.mark.ray
def test_marked():
    raise OSError("needs Ray")
"""


class _Reports:
    """The nested session's reports: ``{test name: (outcome, longrepr text)}``, a failed phase winning."""

    def __init__(self):
        self.out = {}

    def pytest_runtest_logreport(self, report):
        name = report.nodeid.split("::")[-1]
        old = self.out.get(name, ("passed", ""))
        if old[0] == "failed" or (old[0] == "skipped" and report.outcome == "passed"):
            return
        self.out[name] = (report.outcome, str(report.longrepr))


def _session(tmp_path, monkeypatch, error):
    """A nested pytest session (in this process) over two small test modules, with
    ``ray.init`` faked (raising ``error``, or starting nothing); returns the reports and the
    start attempts."""
    calls = []
    monkeypatch.setattr(ray_start, "_attempt", {})
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", _fake_init(calls, error))
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    d = tmp_path / ("fails" if error else "starts")
    d.mkdir()
    (d / "conftest.py").write_text(_CONFTEST)
    (d / "test_uses_ray.py").write_text(_RAY_TESTS)
    (d / "test_other.py").write_text(_OTHER_TESTS)
    reports = _Reports()
    pytest.main(["-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:randomly", "--import-mode=importlib",
                 str(d)], plugins=[reports])
    return reports.out, calls


def test_in_a_session_ray_tests_skip_with_the_reason_only_when_ray_cannot_start(tmp_path, monkeypatch):
    out, calls = _session(tmp_path, monkeypatch, ConnectionError("simulated: Failed to connect to GCS"))
    # the marked test's failure (test_other.py runs first) made the one attempt; it failed:
    # that test and every later Ray test (the bug too: Ray cannot run here) skip with Ray's
    # reason, at once (no second start); the unmarked failure stays
    assert {k: v[0] for k, v in out.items()} == {"test_not_ray": "failed", "test_marked": "skipped",
                                                 "test_one": "skipped", "test_two": "skipped",
                                                 "test_a_bug": "skipped"}
    assert len(calls) == 1
    for name in ("test_marked", "test_one", "test_a_bug"):
        assert "Ray cannot start a local instance here: ConnectionError: simulated: Failed to connect" in out[name][1]
    # Ray starts: its tests run, the failures stay failures, nothing is skipped
    out, calls = _session(tmp_path, monkeypatch, None)
    assert {k: v[0] for k, v in out.items()} == {"test_not_ray": "failed", "test_marked": "failed",
                                                 "test_one": "passed", "test_two": "passed",
                                                 "test_a_bug": "failed"}
