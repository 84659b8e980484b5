"""A class's timed way is kept on disk only where the calling thread had its core just before the
timing (``own_core.had_core``, ``gemm.timed_choice``; issue 18, enc25): scripted clocks, no
timing of this machine."""
import os

import numpy as np
import pytest

from tensorweave.kernels.cpu import einsum_matmul, gemm, gemm_tuning, own_core


def _clock(*readings):
    return iter(readings).__next__


@pytest.fixture
def probing(monkeypatch):
    monkeypatch.setenv("TW_OWN_CORE", "1")


def test_wall_past_the_thread_cpu_means_the_core_was_taken(probing):
    calls = []
    assert own_core.had_core(lambda: calls.append(1), wall=_clock(0.0, 0.002), cpu=_clock(0.0, 0.0017))
    assert not own_core.had_core(lambda: calls.append(1), wall=_clock(0.0, 0.002), cpu=_clock(0.0, 0.0015))
    assert len(calls) == 2


def test_short_calls_are_repeated_up_to_the_probe_length(probing):
    calls = []
    # 0.4 ms a call: three calls reach MIN_S; the CPU clock read after each
    wall = _clock(0.0, 0.0004, 0.0008, 0.0012)
    cpu = _clock(0.0, 0.0004, 0.0008, 0.0009)
    assert not own_core.had_core(lambda: calls.append(1), wall=wall, cpu=cpu)
    assert len(calls) == 3
    tiny = []
    assert own_core.had_core(lambda: tiny.append(1), wall=_clock(*[0.0] * 9), cpu=_clock(*[0.0] * 9))
    assert len(tiny) == own_core.MAX_CALLS


def test_switched_off_it_calls_nothing(monkeypatch):
    monkeypatch.setenv("TW_OWN_CORE", "0")
    assert own_core.had_core(lambda: pytest.fail("probed"))


@pytest.mark.parametrize("had", [True, False])
def test_a_timing_after_a_taken_core_is_used_but_not_kept(monkeypatch, tmp_path, had):
    path = os.path.join(tmp_path, "t.json")
    monkeypatch.setattr(gemm, "tuner", lambda: tuner)
    tuner = gemm_tuning.Tuner(path, {"cpu": "x"}, {"one", "rows"})
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: True)
    monkeypatch.setattr(gemm_tuning, "_time_call", lambda name, run: (run(), {"one": 4e-3, "rows": 1e-3}[name])[1])
    monkeypatch.setattr(own_core, "had_core", lambda probe: (probe(), had)[1])
    probed = []
    got = gemm.timed_choice("threads:c", {"one": lambda: None, "rows": lambda: None}, "one", lambda: probed.append(1))
    assert got == "rows" and probed == [1] and tuner.backend("threads:c") == "rows"
    kept = gemm_tuning.Tuner(path, {"cpu": "x"}, {"one", "rows"}).backend("threads:c")
    assert kept == ("rows" if had else None)


def test_an_einsum_stack_probes_its_one_thread_product(monkeypatch, tmp_path):
    """The stack classes go through the same gate (``einsum_matmul._small_stack``), with the
    result of every way equal to np.einsum."""
    tuner = gemm_tuning.Tuner(os.path.join(tmp_path, "t.json"), {"cpu": "x"}, {"mkl", "one", "rows", "mkl1", "numpy1"})
    monkeypatch.setattr(gemm, "tuner", lambda: tuner)
    monkeypatch.setattr(gemm, "split_parts", lambda: 2)
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: True)
    monkeypatch.setattr(einsum_matmul, "_small_chosen", {})
    monkeypatch.setattr(einsum_matmul, "_min_split", {np.dtype(np.float64): 1 << 40})
    monkeypatch.setattr(gemm_tuning, "_time_call", lambda name, run: (run(), 1e-3)[1])
    probes = []
    monkeypatch.setattr(own_core, "had_core", lambda probe: (probes.append(probe), False)[1])
    rng = np.random.default_rng(25)
    a, b = rng.standard_normal((2, 1, 32, 4, 16))
    got = einsum_matmul.contract(a, b, "aecd", "abcd", "acbe")
    np.testing.assert_allclose(got, np.einsum("aecd,abcd->acbe", a, b), rtol=1e-12, atol=1e-12)
    stack = [cls for cls in tuner.choices if cls.startswith("einsum-stack:")]
    assert len(probes) == 1 and len(stack) == 1 and tuner.choices[stack[0]]["settled"] is False


def _entry(tuner, cls):
    return gemm_tuning.Tuner(tuner.path, tuner.key, tuner.backends).choices.get(cls)


def test_a_kept_timing_is_marked_and_an_unmarked_one_timed_again(monkeypatch, tmp_path, probing):
    """A threaded class kept before the probe (timings, no mark: this machine's Q/K/V class was
    kept as "one" from a loaded timing) is timed again where the process can time, and kept with
    the mark; where it cannot, or with the probe off, the cached way stands."""
    tuner = gemm_tuning.Tuner(os.path.join(tmp_path, "t.json"), {"cpu": "x"}, {"one", "rows"})
    monkeypatch.setattr(gemm, "tuner", lambda: tuner)
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: True)
    monkeypatch.setattr(own_core, "had_core", lambda probe: True)
    tuner.choices["threads:c"] = {"backend": "one", "settled": True, "one_us": 960.2, "rows_us": 1230.4}
    tuner._write()
    assert gemm._cached_threaded("threads:c", can_time=False) == "one"
    monkeypatch.setenv("TW_OWN_CORE", "0")
    assert gemm._cached_threaded("threads:c", can_time=True) == "one"
    monkeypatch.setenv("TW_OWN_CORE", "1")
    assert gemm._cached_threaded("threads:c", can_time=True) is None and "threads:c" not in tuner.choices
    monkeypatch.setattr(gemm_tuning, "_time_call", lambda name, run: (run(), {"one": 4e-3, "rows": 1e-3}[name])[1])
    assert gemm.timed_choice("threads:c", {"one": lambda: None, "rows": lambda: None}, "one", None) == "rows"
    kept = _entry(tuner, "threads:c")
    assert kept["backend"] == "rows" and kept[gemm.PROBED] is True
    assert gemm._cached_threaded("threads:c", can_time=True) == "rows"


def test_attention_times_again_a_class_kept_before_the_probe(monkeypatch, tmp_path, probing):
    """``FusedAttention``'s way (``attention_kernels._way``) goes through the same re-timing;
    the result of the way chosen equals the three steps apart."""
    from tensorweave.kernels.cpu import attention_kernels
    rng = np.random.default_rng(25)
    k, q, v = (rng.standard_normal((1, 8, 2, 4)).astype(np.float32) for _ in range(3))
    how = attention_kernels._fusable(k, q, v)
    if how is None:
        pytest.skip("MKL not loaded: the fused way does not run")
    tuner = gemm_tuning.Tuner(os.path.join(tmp_path, "t.json"), {"cpu": "x"}, {"mkl", "one", "rows"})
    monkeypatch.setattr(gemm, "tuner", lambda: tuner)
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: True)
    monkeypatch.setattr(own_core, "had_core", lambda probe: True)
    monkeypatch.setattr(attention_kernels, "_chosen", {})
    monkeypatch.setattr(gemm_tuning, "_time_call",
                        lambda name, run: (run(), {"mkl": 4e-3, "one": 3e-3, "rows": 1e-3}[name])[1])
    dot, combine = "aecd,abcd->acbe", "acbe,aecd->abcd"
    assert attention_kernels._way(k, q, v, dot, combine, *how, 2) == "rows"
    cls = next(iter(tuner.choices))
    tuner.choices[cls] = {"backend": "one", "settled": True, "mkl_us": 1817.2, "one_us": 648.4, "rows_us": 933.4}
    attention_kernels._chosen.clear()
    assert attention_kernels._way(k, q, v, dot, combine, *how, 2) == "rows"
    assert _entry(tuner, cls)[gemm.PROBED] is True
    got = attention_kernels.fused_attention(k, q, v, dot=dot, combine=combine)
    np.testing.assert_allclose(got, attention_kernels._apart(k, q, v, dot, combine), rtol=1e-5, atol=1e-6)
