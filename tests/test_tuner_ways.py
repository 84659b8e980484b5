"""The GEMM tuner keeps only the ways it knows (``gemm.WAYS``): a class whose chosen way the cache
file's reader would drop is timed again in every process, so choosing such a way is an error, and
every way a module's class offers (attention training's ``"apart"`` among them) is one it keeps."""
import numpy as np
import pytest

from tensorweave.kernels.cpu import attention_train, gemm, gemm_tuning

KEY = {"cpu": "Test CPU 9000", "cores": 2, "versions": {"mkl": "m1", "numpy": "n1"}}


@pytest.fixture(autouse=True)
def _quiet_machine(monkeypatch):
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: True)


def _timed(monkeypatch, seconds):
    """Each timed runner 'takes' ``seconds[name]`` (no real clock)."""
    def measure(runners, clock=None):
        out = {}
        for name, run in runners.items():
            run()
            out[name] = [seconds[name]] * 5
        return out
    monkeypatch.setattr(gemm_tuning, "measure", measure)


def test_a_way_the_reader_would_drop_is_refused(monkeypatch, tmp_path):
    _timed(monkeypatch, {"mkl": 2.0, "heads": 1.0})
    t = gemm_tuning.Tuner(str(tmp_path / "t.json"), KEY, ("mkl", "numpy"))
    with pytest.raises(ValueError, match=r"way 'heads' is not one this tuner keeps \(mkl, numpy\)"):
        t.choose("c", {"mkl": lambda: None, "heads": lambda: None}, incumbent="mkl")


def test_a_known_way_is_kept_for_the_next_process(monkeypatch, tmp_path):
    _timed(monkeypatch, {"mkl": 2.0, "numpy": 1.0})
    path = str(tmp_path / "t.json")
    assert gemm_tuning.Tuner(path, KEY, ("mkl", "numpy")).choose("c", {"mkl": lambda: None,
                                                                       "numpy": lambda: None}) == "numpy"
    assert gemm_tuning.Tuner(path, KEY, ("mkl", "numpy")).backend("c") == "numpy"


@pytest.mark.parametrize("winner", ["apart", "one"])
def test_attention_training_ways_survive_a_fresh_process(monkeypatch, tmp_path, winner):
    """``attention_train._way``'s choice is in the file a fresh tuner reads (before ``"apart"`` was
    among the ways, its entry was dropped on reading and the class timed again in each process)."""
    monkeypatch.setattr(gemm_tuning, "cache_path", lambda: str(tmp_path / "gemm.json"))
    monkeypatch.setattr(gemm, "_tuning", {**gemm._tuning, "tuner": None})
    monkeypatch.setattr(attention_train, "_chosen", {})
    _timed(monkeypatch, {"apart": 1.0 if winner == "apart" else 3.0, "one": 2.0, "rows": 4.0})
    runners = {name: (lambda: None) for name in ("apart", "one", "rows")}
    assert attention_train._way("k", "attention-train:x", runners) == winner
    fresh = gemm_tuning.Tuner(str(tmp_path / "gemm.json"), gemm.machine_key(), gemm.WAYS)
    assert fresh.backend("attention-train:x") == winner
    assert set(runners) <= set(gemm.WAYS) and np.isin(["rows", "one", "mkl"], gemm.WAYS).all()
