"""A thin product's (a batch-1 layer's) choice of threads, issue 18 pred20: timed over rotating
copies of the weight operand (cold, as in a model's forward pass), repeated until two timings in
a row agree before it is kept on disk; OpenBLAS's threads a candidate. Scripted clocks (the
``thin`` fixture of test_pred19_batch1): no timing thresholds."""
import numpy as np
import pytest
from test_pred19_batch1 import KEY, BACKENDS, _thin_operands, needs_openblas, needs_serial, thin  # noqa: F401

from tensorweave.kernels.cpu import gemm, gemm_tuning

CLS = "thincold:float32:NN:1,10,10,p2"


def _one_mkl_call(a, b):
    """``a @ b`` by one one-thread MKL call."""
    out = np.empty((a.shape[0], b.shape[1]), a.dtype)
    op_a, op_b = gemm._operand(a), gemm._operand(b)
    gemm._gemm_serial[a.dtype](op_a[0], op_b[0], a.shape[0], b.shape[1], a.shape[1], a, op_a[1], b, op_b[1],
                               out, out.shape[1])
    return out


@pytest.fixture
def rounds(thin, monkeypatch):  # noqa: F811 - the imported fixture
    """``thin``, with ``plan``: the scripted seconds of each timing round in turn (``{backend:
    seconds}``, 1 s for the others); ``thin.rounds`` counts the rounds run."""
    real = gemm_tuning.measure
    thin.plan, thin.rounds = [], 0

    def measure(runners, clock=None):
        before = thin.seconds
        if "one" in runners:                                              # a thin class's round
            thin.seconds = thin.plan[min(thin.rounds, len(thin.plan) - 1)]
            thin.rounds += 1
        else:             # a one-thread library's (a split's block's, within a thin round too)
            thin.seconds = {}
        try:
            return real(runners, clock)
        finally:
            thin.seconds = before
    monkeypatch.setattr(gemm_tuning, "measure", measure)
    return thin


def _on_disk(cls):
    return gemm_tuning.Tuner(gemm.tuner().path, KEY, BACKENDS).backend(cls)


@needs_serial
@needs_openblas
@pytest.mark.parametrize("plan,count,chosen,settled", [
    ([{"mkl": 0.1}], 2, "mkl", True),                                       # two agree at once
    ([{"mkl": 0.1}, {"cols": 0.1}, {"cols": 0.1}], 3, "cols", True),        # the second and third agree
    ([{"mkl": 0.1}, {"cols": 0.1}, {"numpy": 0.1}], 3, "one", False),       # none agree: one, for the process
    ([{}], 2, "one", True),                                                 # a tie twice: the incumbent
])
def test_a_thin_class_is_kept_once_two_timings_agree(rounds, rng, plan, count, chosen, settled):
    rounds.plan = plan
    a, b = _thin_operands(rng)
    got = gemm.matmul(a, b)
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    entry = gemm.tuner().choices[CLS]
    assert rounds.rounds == count == entry["rounds"]
    assert entry["backend"] == chosen and entry["settled"] is settled
    assert _on_disk(CLS) == (chosen if settled else None)
    assert list(gemm._thin_chosen.values()) == [chosen]
    rounds.clear()
    np.testing.assert_array_equal(gemm.matmul(a, b), got)                 # not timed again, same bits
    assert rounds.rounds == count and not rounds


@needs_serial
@needs_openblas
def test_a_machine_turned_busy_during_the_timing_keeps_the_choice_off_disk(rounds, rng, monkeypatch):
    rounds.plan = [{"mkl": 0.1}]
    quiet = iter([True] + [False] * 10)                                   # quiet at the start only
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: next(quiet))
    a, b = _thin_operands(rng)
    gemm.matmul(a, b)
    assert gemm.tuner().choices[CLS]["settled"] is False and _on_disk(CLS) is None
    assert list(gemm._thin_chosen.values()) == ["one"]


def test_timed_calls_rotate_over_copies_so_each_call_reads_a_cold_one():
    """Every timed call (of any candidate, lead-ins included) takes the next copy of ``b``: a copy
    is read again only after every other copy was, whichever candidates ran in between."""
    a = np.ones((1, 4), np.float32)
    bs = [np.full((4, 2), i, np.float32) for i in range(5)]
    outs = [np.empty((1, 2), np.float32) for _ in range(2)]
    seen = []
    runners = gemm._rotating({name: lambda a, b, out, name=name: seen.append((name, int(b[0, 0])))
                              for name in ("one", "mkl", "cols")}, a, bs, outs)
    for _ in range(4):
        for name in ("one", "mkl", "cols"):
            runners[name]()
            runners[name]()
    assert [i for _, i in seen] == [i % 5 for i in range(24)]
    assert {i for name, i in seen if name == "one"} == set(range(5))


@needs_serial
@needs_openblas
@pytest.mark.parametrize("l2_per_weight,copies", [(1, 4), (0.2, 1), (0.3, 2)])
def test_the_copies_cover_twice_every_parts_l2(rounds, rng, monkeypatch, l2_per_weight, copies):
    rounds.plan = [{"one": 0.1}]
    a, b = _thin_operands(rng)
    # 2 parts x 2 x L2 over the weight's bytes, rounded up: 4 copies, 0.8 -> 1 (none made), 1.2 -> 2
    monkeypatch.setattr(gemm, "_l2_bytes", lambda: int(b.nbytes * l2_per_weight))
    made = []
    real = gemm._rotating
    monkeypatch.setattr(gemm, "_rotating", lambda runners, a, bs, outs: (made.append(bs), real(runners, a, bs, outs))[1])
    got = gemm.matmul(a, b)
    assert len(made[0]) == copies and made[0][0] is b
    assert all(np.array_equal(c, b) and not np.may_share_memory(c, b) for c in made[0][1:])
    np.testing.assert_array_equal(got, gemm.matmul(a, b))


@needs_serial
@needs_openblas
def test_openblas_threads_are_a_candidate_and_run_the_class(rounds, rng, monkeypatch):
    rounds.plan = [{"numpy": 0.1}]
    a, b = _thin_operands(rng)
    first = gemm.matmul(a, b)
    assert gemm.tuner().choices[CLS]["backend"] == "numpy" and "numpy_us" in gemm.tuner().choices[CLS]
    calls = []
    real = np.matmul
    monkeypatch.setattr(gemm.np, "matmul", lambda *args, **kw: (calls.append(1), real(*args, **kw))[1])
    again = gemm.matmul(a, b)
    assert calls == [1]
    np.testing.assert_array_equal(first, again)
    np.testing.assert_array_equal(again, real(a, b))


@pytest.mark.parametrize("files,expected", [
    ({"index0": ("1", "48K"), "index1": ("1", "32K"), "index2": ("2", "2048K"), "index3": ("3", "107520K")}, 2 << 20),
    ({"index0": ("1", "48K"), "index2": ("2", "1M")}, 1 << 20),
    ({"index0": ("1", "48K"), "index2": ("2", "odd")}, 2 << 20),            # unreadable: 2 MiB
    ({}, 2 << 20),
])
def test_the_l2_size_is_read_from_sysfs(tmp_path, files, expected):
    for name, (level, size) in files.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "level").write_text(level + "\n")
        (tmp_path / name / "size").write_text(size + "\n")
    assert gemm._l2_bytes(str(tmp_path)) == expected


# ---- column blocks on numba's pool (thin_gemm) --------------------------------------------------------
@needs_serial
@needs_openblas
def test_the_class_is_timed_again_with_the_parallel_loop_once_it_is_ready(rounds, rng, monkeypatch):
    from tensorweave.kernels.cpu import thin_gemm
    monkeypatch.setattr(thin_gemm, "possible", lambda: True)             # a pool to come
    rounds.plan = [{"par": 0.01, "mkl": 0.1}]
    a, b = _thin_operands(rng)
    reference = a.astype(np.float64) @ b
    first = gemm.matmul(a, b)
    entry = gemm.tuner().choices[CLS]
    assert entry["backend"] == "mkl" and entry["settled"] is False and "par_us" not in entry
    assert _on_disk(CLS) is None and len(gemm._thin_pending) == 1
    gemm.matmul(a, b)                                                     # not ready yet: not timed again
    assert rounds.rounds == 2
    monkeypatch.setattr(thin_gemm, "ready", lambda args: True)
    runs = []
    real = thin_gemm.run
    monkeypatch.setattr(thin_gemm, "run", lambda *args, **kw: (runs.append(1), real(*args, **kw))[1])
    timed = gemm.matmul(a, b)                                             # timed again, with the loop
    assert rounds.rounds == 4 and "par" in rounds
    assert gemm.tuner().choices[CLS]["backend"] == "par" and _on_disk(CLS) == "par"
    assert not gemm._thin_pending
    runs.clear()
    again = gemm.matmul(a, b)
    assert runs == [1]
    for got in (first, timed, again):
        np.testing.assert_allclose(got, reference, rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(timed, again)


@needs_serial
@needs_openblas
def test_without_a_thread_safe_pool_nothing_waits(rounds, rng):
    rounds.plan = [{"mkl": 0.1}]                                          # the fixture: no pool possible
    a, b = _thin_operands(rng)
    gemm.matmul(a, b)
    assert gemm.tuner().choices[CLS]["settled"] is True and not gemm._thin_pending


@needs_serial
@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize("n,parts", [(512, 2), (100, 2), (96, 3)])
def test_the_parallel_loop_gives_the_bits_of_its_twin_and_of_one_call_per_block(rng, trans_b, n, parts):
    from tensorweave.kernels.cpu import jit, thin_gemm
    k = 80
    a = rng.standard_normal((1, k)).astype(np.float32)
    b = rng.standard_normal((n, k)).astype(np.float32).T if trans_b else rng.standard_normal((k, n)).astype(np.float32)
    op_a, op_b = gemm._operand(a), gemm._operand(b)
    step = gemm.block_size(n, parts)
    twin = np.full((1, n), np.nan, np.float32)
    thin_gemm.run(a, b, twin, op_a[0], op_a[1], op_b[0], op_b[1], n, parts, step, parallel=False)
    np.testing.assert_allclose(twin, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)
    blocks = np.concatenate([_one_mkl_call(a, b[:, j:j + step]) for j in range(0, n, step)], axis=1)
    np.testing.assert_array_equal(twin, blocks)
    if not jit.parallel_loops():
        pytest.skip("numba has no thread-safe pool here")
    args = thin_gemm.arguments(a, b, np.empty((1, n), np.float32), op_a[0], op_a[1], op_b[0], op_b[1], n, parts, step)
    loop = jit.compile_now(thin_gemm._blocks, *args)
    out = np.full((1, n), np.nan, np.float32)
    loop(*args[:11], out, *args[12:])
    np.testing.assert_array_equal(out, twin)
