"""Compiled loop or NumPy twin chosen per kernel and shape class by timing, cached on disk
(kernels/cpu/loop_choice.py).

Timings are scripted (``gemm_tuning._time_call`` replaced): the tests check which implementation
runs for which measurement, what is remembered where, that timing never touches the caller's
arrays, and that both give the same bits — never how fast anything is."""
import json

import numpy as np
import pytest
import scripted_clock

from tensorweave.kernels.cpu import aot, gemm_tuning, jit, loop_choice, lstm_kernels as lk, nn_loops

RNG = np.random.default_rng(1318)
TWIN_CALLS = []


def _twin_scale(y, factor, shift):
    TWIN_CALLS.append(y.shape)
    if shift:
        y += np.float32(1)
    y *= factor


@jit.njit_twin(_twin_scale)
def _scale(y, factor, shift):
    for i in range(y.shape[0]):
        if shift:
            y[i] += np.float32(1)
        y[i] *= factor


@pytest.fixture
def auto(monkeypatch, tmp_path):
    """Auto mode, a fresh cache file, a quiet machine, and a scripted clock: ``times[backend]``
    is the seconds every timed call of that backend takes; ``calls`` lists the timed calls."""
    monkeypatch.setattr(loop_choice, "MODE", "auto")
    times = {"numba": 1e-3, "numpy": 1e-3}
    calls = scripted_clock.script(monkeypatch, tmp_path, times)
    loop_choice.reset()
    TWIN_CALLS.clear()
    yield times, calls, tmp_path / "loop-tuning.json"
    loop_choice.reset()


def _compiled_case(n=6):
    y = RNG.standard_normal(n).astype(np.float32)
    jit.compile_now(_scale, y.copy(), np.float32(2), True)
    return y


def test_shape_class_buckets_arrays_and_bools():
    a = np.zeros((3, 9), np.float64)
    assert loop_choice.shape_class((a, np.zeros(5, np.int32), False, 7, 2.5)) == "d2x4,i3,F"
    assert loop_choice.shape_class((np.zeros((4, 9)),)) == loop_choice.shape_class((np.zeros((7, 15)),))
    assert loop_choice.shape_class((np.zeros((4, 9)),)) != loop_choice.shape_class((np.zeros((8, 9)),))


def test_twin_chosen_when_faster_by_the_margin_and_saved(auto):
    times, calls, path = auto
    y = _compiled_case()
    times["numpy"] = 0.5e-3
    expect = (y + 1) * 2
    loop_choice.run(_scale, y, np.float32(2), True)
    assert calls.count("numba") >= gemm_tuning.MIN_CALLS and calls.count("numpy") >= gemm_tuning.MIN_CALLS
    np.testing.assert_array_equal(y, expect)        # applied once: timing ran on scratch copies
    assert TWIN_CALLS[-1] == y.shape                # the real call ran the twin
    saved = json.loads(path.read_text())
    (cls, entry), = saved["choices"].items()
    assert cls.startswith("test_rnn18_loop_choice._scale:f3,T") and entry["backend"] == "numpy"
    assert saved["machine"] == loop_choice.machine_key()
    # a new process (state forgotten) takes the file's choice without timing
    loop_choice.reset()
    del calls[:]
    TWIN_CALLS.clear()
    loop_choice.run(_scale, y, np.float32(2), True)
    assert calls == [] and TWIN_CALLS == [y.shape]


def test_compiled_loop_kept_within_the_margin(auto):
    times, calls, path = auto
    y = _compiled_case()
    times["numpy"] = 0.95e-3                        # 5 % faster: under MARGIN
    loop_choice.run(_scale, y, np.float32(2), False)
    TWIN_CALLS.clear()
    loop_choice.run(_scale, y, np.float32(2), False)
    assert TWIN_CALLS == [] and calls
    assert json.loads(path.read_text())["choices"].popitem()[1]["backend"] == "numba"


def test_a_busy_machine_keeps_the_choice_in_the_process_only(auto, monkeypatch):
    times, calls, path = auto
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: False)
    y = _compiled_case()
    times["numpy"] = 0.1e-3
    loop_choice.run(_scale, y, np.float32(2), True)
    n = len(calls)
    loop_choice.run(_scale, y, np.float32(2), True)
    assert len(calls) == n and TWIN_CALLS[-1] == y.shape    # held for the process, not timed again
    assert not path.exists()


def test_not_compiled_yet_no_timing_nothing_recorded(auto):
    times, calls, path = auto
    y = np.ones((2, 3), np.float32)                 # a 2-D signature nobody compiled
    assert loop_choice.choose(_scale, (y, np.float32(2), True)) == "numba"
    assert calls == [] and not loop_choice.tuner().choices and not path.exists()


def test_twin_needs_compiled_before_timing(auto):
    times, calls, _ = auto
    y = _compiled_case()
    fresh = jit.njit(lambda v: v)                   # nothing compiled for it
    assert loop_choice.choose(_scale, (y, np.float32(2), True), needs=(fresh,)) == "numba"
    assert calls == []
    fresh(1)
    loop_choice.choose(_scale, (y, np.float32(2), True), needs=(fresh,))
    assert calls


def test_a_timed_run_that_raises_keeps_the_loop_unsettled(auto, monkeypatch):
    times, calls, path = auto
    y = _compiled_case()

    def boom(backend, run):
        raise FloatingPointError("drifted")
    monkeypatch.setattr(gemm_tuning, "_time_call", boom)
    assert loop_choice.choose(_scale, (y, np.float32(2), True)) == "numba"
    entry = loop_choice.tuner().choices.popitem()[1]
    assert entry == {"backend": "numba", "settled": False} and not path.exists()


def test_probe_times_the_shorter_call(auto):
    times, calls, _ = auto
    y = _compiled_case(n=8)
    timed = []

    def probe(args):
        timed.append(args[0].shape)
        return (args[0][:4].copy(),) + args[1:]
    loop_choice.choose(_scale, (y, np.float32(2), True), probe=probe)
    assert timed == [(8,)] and calls


def test_env_override(auto, monkeypatch):
    times, calls, _ = auto
    y = _compiled_case()
    monkeypatch.setattr(loop_choice, "MODE", "numpy")
    loop_choice.run(_scale, y, np.float32(2), True)
    assert TWIN_CALLS == [y.shape] and calls == []
    monkeypatch.setattr(loop_choice, "MODE", "numba")
    TWIN_CALLS.clear()
    loop_choice.run(_scale, y, np.float32(2), True)
    assert TWIN_CALLS == [] and calls == []
    monkeypatch.setattr(loop_choice, "MODE", "fast")
    with pytest.raises(ValueError, match="TW_LOOPS='fast'"):
        loop_choice.choose(_scale, (y, np.float32(2), True))


def test_scratch_keeps_the_numba_type():
    for a in (np.ones((3, 4)), np.asfortranarray(np.ones((3, 4))), np.ones((3, 8))[:, ::2]):
        copy = loop_choice._scratch(a)
        assert copy is not a and jit.njit(lambda v: v).typeof_pyval(copy) == jit.njit(lambda v: v).typeof_pyval(a)
    frozen = np.ones(3)
    frozen.flags.writeable = False
    assert loop_choice._scratch(frozen) is frozen


def test_nn_loop_through_chosen_same_bits_either_way(auto):
    times, _, path = auto
    g = RNG.standard_normal((37, 9)).astype(np.float32)
    y = RNG.standard_normal((37, 9)).astype(np.float32)
    jit.compile_now(nn_loops.relu_grad_column_sums, g, y, np.empty_like(g), np.zeros(9))
    results = []
    for twin_time in (0.1e-3, 10e-3):               # the twin, then the compiled loop
        loop_choice.reset()
        path.unlink(missing_ok=True)
        times["numpy"] = twin_time
        out, acc = np.empty_like(g), np.zeros(9)
        nn_loops.relu_grad_column_sums(g, y, out, acc)
        results.append((out, acc))
    assert [e["backend"] for e in loop_choice.tuner().choices.values()] == ["numba"]
    np.testing.assert_array_equal(results[0][0], results[1][0])
    np.testing.assert_array_equal(results[0][1], results[1][1])


def test_lstm_loops_choice_same_bits_and_probe(auto):
    times, calls, path = auto
    b, t, f, u = 3, 11, 5, 4
    x = RNG.standard_normal((b, t, f)).astype(np.float32)
    h0, c0 = RNG.standard_normal((2, b, u)).astype(np.float32)
    k = (RNG.standard_normal((f, 4 * u)) * 0.3).astype(np.float32)
    rk = (RNG.standard_normal((u, 4 * u)) * 0.3).astype(np.float32)
    bias = RNG.standard_normal(4 * u).astype(np.float32)
    kw = dict(activation="tanh", recurrent_activation="sigmoid", go_backwards=True, zero_output_for_mask=False)

    def both():
        out, h, c, res = lk.lstm_sequence(x, h0, c0, k, rk, bias, **kw)
        return (out, h, c, res) + lk.lstm_sequence_grad(x, h0, c0, k, rk, res, np.ones_like(out), h, c, **kw)
    with loop_choice.forced("numba"):
        both()
        jit.wait_for_compiles()
        reference = both()
    for twin_time in (0.1e-3, 10e-3):
        loop_choice.reset()
        path.unlink(missing_ok=True)
        times["numpy"] = twin_time
        got = both()
        for a, e in zip(got, reference):
            np.testing.assert_array_equal(a, e)
    chosen = loop_choice.tuner().choices
    # timed only once every kernel the twins call is compiled (loop_choice.choose's rule): without the
    # install-time build the reference run compiled them; with it, only if another test of this
    # process JIT-compiled the step loops (the fresh-clone CI's order did), else the old rule stands
    if all(loop_choice._any_compiled(k) for k in lk._forward_rows.needs + lk._backward_rows.needs):
        assert {c.split(":")[0] for c in chosen} == {"lstm_kernels._forward_rows", "lstm_kernels._backward_rows"}
        assert {e["backend"] for e in chosen.values()} == {"numba"} and calls
    else:
        assert aot.library() is not None and not chosen
    args = tuple(range(17))
    assert lk._forward_rows.probe(args)[-2:] == (15, 16)
    assert lk._forward_rows.probe(args[:-1] + (15 + lk.PROBE_STEPS + 5,))[-2:] == (15, 15 + lk.PROBE_STEPS)
    assert lk._backward_rows.probe((0, 3, 20, 7))[-3:] == (20 - lk.PROBE_STEPS, 20, 7)


def test_scratch_copies_without_a_compiled_loop_are_not_timed(auto, monkeypatch):
    times, calls, path = auto
    y = _compiled_case()
    # copies whose numba type has no compiled loop (here: 2-D) would time the twin against itself
    monkeypatch.setattr(loop_choice, "_scratch", lambda a: a.reshape(2, 3) if isinstance(a, np.ndarray) else a)
    assert loop_choice.choose(_scale, (y, np.float32(2), True)) == "numba"
    assert calls == [] and not path.exists()
    assert loop_choice.tuner().choices.popitem()[1] == {"backend": "numba", "settled": False}


def test_a_chosen_class_is_remembered_by_exact_key(auto, monkeypatch):
    times, calls, _ = auto
    y = _compiled_case()
    loop_choice.run(_scale, y, np.float32(2), True)
    classified = []
    real = loop_choice.shape_class
    monkeypatch.setattr(loop_choice, "shape_class", lambda args: classified.append(1) or real(args))
    loop_choice.run(_scale, y, np.float32(2), True)
    assert classified == []                      # one dict lookup, no class string built again
    loop_choice.run(_scale, y, np.float32(2), False)
    assert classified == [1]                     # another bool: another key
