"""A scripted clock for the tests of a timed choice (``gemm_tuning.Tuner`` users).

The choice modules time their candidates through ``gemm_tuning._time_call``; a test replaces it
so each candidate's timed call takes the seconds the test scripts, on a machine that reads as
quiet, with the tuning caches in the test's own folder. The candidates still run (a choice must
never skip the call it times); timings of other names (the GEMM libraries') stay real.

>>> import pytest
>>> mp = pytest.MonkeyPatch()
>>> import tempfile, pathlib
>>> from tensorweave.kernels.cpu import gemm_tuning
>>> calls = script(mp, pathlib.Path(tempfile.mkdtemp()), {"a": 1e-3})
>>> gemm_tuning._time_call("a", lambda: None), calls
(0.001, ['a'])
>>> mp.undo()
"""
from tensorweave.kernels.cpu import gemm_tuning


def script(monkeypatch, tmp_path, times):
    """Make ``times[name]`` the seconds every timed call of ``name`` takes; returns the list of
    names timed, in order. ``times`` may change later: each call reads it then."""
    monkeypatch.setenv("TW_TUNING_CACHE", str(tmp_path / "gemm-tuning.json"))
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: True)
    calls, real = [], gemm_tuning._time_call

    def timed(name, run):
        if name not in times:                        # the GEMM library timings: left alone
            return real(name, run)
        run()
        calls.append(name)
        return times[name]
    monkeypatch.setattr(gemm_tuning, "_time_call", timed)
    return calls
