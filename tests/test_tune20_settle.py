"""Thresholds settled only when two walks agree (``gemm_tuning.settle_when_two_agree``), timed
samples as blocks of calls (``gemm_tuning.measure``), and the route report asking ``gemm.route``
(issue 18, session 16). Scripted clocks everywhere: no real timing in an assertion."""
import json
import os

import numpy as np
import pytest

from tensorweave.kernels.cpu import gemm, gemm_route, gemm_tuning, split_passes

KEY = {"cpu": "Test CPU 9000", "cores": 2, "versions": {"mkl": "m1", "numpy": "n1"}}
F32 = np.dtype(np.float32)
SPARE_CORE = gemm_tuning.spare_core         # the real one (the autouse fixture grants a core to spare)


class Clock:
    """A scripted clock: ``now`` advances only when a runner 'spends' time."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def runner(self, seconds, log=None, name=None):
        def run():
            self.now += seconds
            if log is not None:
                log.append(name)
        return run


@pytest.fixture(autouse=True)
def _a_core_to_spare(monkeypatch):
    """Threshold walks also need a spare core (``gemm_tuning.spare_core``): granted unless a test says."""
    monkeypatch.setattr(gemm_tuning, "spare_core", lambda: True)


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(gemm_tuning, "_clock", c)
    return c


def _walks(*draws):
    it = iter(draws)
    return lambda: next(it)


@pytest.mark.parametrize("first,second,expected", [
    ((1000, True), (1000, True), (1000, True)),
    ((1000, True), (4000, True), (4000, True)),         # within the factor: the larger (incumbent's side)
    ((4000, True), (1000, True), (4000, True)),
    ((1000, True), (4001, True), (7, False)),           # just outside: the default, not settled
    ((16_000, True), (880, True), (7, False)),          # the 19x spread of session 15
    ((1000, False), (1000, True), (7, False)),          # a walk not settled in itself
    ((1000, True), (1000, False), (7, False)),
])
def test_two_walks_settle_only_when_they_agree(clock, first, second, expected):
    assert gemm_tuning.AGREE_FACTOR == 4
    assert gemm_tuning.settle_when_two_agree(_walks(first, second), 7)[:2] == expected


@pytest.mark.parametrize("first,second,expected", [
    (("mkl1", True), ("mkl1", True), ("mkl1", True)),
    (("mkl1", True), ("numpy1", True), ("one", False)),
    (("mkl1", True), ("mkl1", False), ("one", False)),
])
def test_choices_agree_when_equal(clock, first, second, expected):
    assert gemm_tuning.settle_when_two_agree(_walks(first, second), "one")[:2] == expected


def test_a_zero_threshold_agrees_only_with_zero(clock):
    assert gemm_tuning.settle_when_two_agree(_walks((0, True), (0, True)), 7)[:2] == (0, True)
    assert gemm_tuning.settle_when_two_agree(_walks((0, True), (1, True)), 7)[:2] == (7, False)


def test_the_cost_of_both_walks_is_reported_in_ms(clock):
    def walk():
        clock.now += 0.0125
        return 10, True
    assert gemm_tuning.settle_when_two_agree(walk, 7) == (10, True, 25.0)
    assert gemm_tuning.agree((10, True), (30, True), 7) == (30, True)


def _process(path, name, walk_value, default=7, settled=True):
    """One fresh process's threshold: a new Tuner on the file, its walk answering ``walk_value``."""
    tuner = gemm_tuning.Tuner(path, KEY, ("mkl",))
    return tuner.threshold(name, lambda: (walk_value, settled), default), tuner


def _on_disk(path, name):
    return json.loads(open(path).read())["thresholds"][name]


def test_a_threshold_settles_when_two_processes_walks_agree(monkeypatch, tmp_path, clock):
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: True)
    path = str(tmp_path / "t.json")
    got, first = _process(path, "serial:float32", 880_000, default=2_097_152)
    assert got == 2_097_152 and first.thresholds["serial:float32"]["settled"] is False   # one walk: the default
    assert _on_disk(path, "serial:float32") == {"value": 2_097_152, "settled": False, "ms": 0.0, "tries": 0,
                                                "walk": 880_000}
    assert gemm_tuning.Tuner(path, KEY, ("mkl",)).thresholds == {}                      # nothing settled
    got, _ = _process(path, "serial:float32", 16_800_000, default=2_097_152)            # disagrees: 19x
    assert got == 2_097_152 and _on_disk(path, "serial:float32")["tries"] == 1
    assert _on_disk(path, "serial:float32")["walk"] == 16_800_000                      # the newest walk left
    got, _ = _process(path, "serial:float32", 7_100_000, default=2_097_152)            # agrees within 4x
    assert got == 16_800_000
    assert _on_disk(path, "serial:float32") == {"value": 16_800_000, "settled": True, "ms": 0.0}
    assert _process(path, "serial:float32", 1)[0] == 16_800_000                        # read, not walked


def test_a_walk_not_settled_in_itself_is_not_left_for_the_next_process(monkeypatch, tmp_path, clock):
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: True)
    path = str(tmp_path / "t.json")
    _process(path, "x", 100)
    assert _process(path, "x", 5000, settled=False)[0] == 7
    assert _on_disk(path, "x")["walk"] == 100                         # the earlier settled walk stays
    assert _process(path, "x", 300)[0] == 300                         # and the next agreeing one settles


def test_after_max_tries_disagreeing_processes_the_default_stands_unwalked(monkeypatch, tmp_path, clock):
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: True)
    path = str(tmp_path / "t.json")
    walks = [10 ** (3 * i) for i in range(gemm_tuning.MAX_TRIES + 1)]     # each 1000x the one before
    for i, value in enumerate(walks):
        assert _process(path, "x", value)[0] == 7
        assert _on_disk(path, "x")["tries"] == i
    tuner = gemm_tuning.Tuner(path, KEY, ("mkl",))
    assert tuner.threshold("x", lambda: pytest.fail("walked after MAX_TRIES"), 7) == 7
    assert _on_disk(path, "x")["tries"] == gemm_tuning.MAX_TRIES


def test_a_try_never_replaces_a_threshold_another_process_settled(monkeypatch, tmp_path, clock):
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: True)
    path = str(tmp_path / "t.json")
    _process(path, "x", 100)
    failing = gemm_tuning.Tuner(path, KEY, ("mkl",))                   # reads the file now
    assert _process(path, "x", 200)[0] == 200                          # another process settles
    assert failing.threshold("x", lambda: (10 ** 6, True), 7) == 7     # disagrees with the walk it read
    assert _on_disk(path, "x") == {"value": 200, "settled": True, "ms": 0.0}
    assert gemm_tuning.Tuner(path, KEY, ("mkl",)).threshold("x", lambda: pytest.fail("walked"), 7) == 200


def test_a_busy_machine_takes_the_default_untimed(monkeypatch, tmp_path, clock):
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: False)
    path = str(tmp_path / "t.json")
    tuner = gemm_tuning.Tuner(path, KEY, ("mkl",))
    assert tuner.threshold("x", lambda: pytest.fail("timed on a busy machine"), 5) == 5
    assert tuner.thresholds["x"] == {"value": 5, "settled": False, "ms": 0.0}
    assert not os.path.exists(path)


def test_walks_that_agree_while_the_machine_turns_busy_hold_for_the_process_only(monkeypatch, tmp_path, clock):
    answers = iter([True, True, False])                # the second process: quiet at its walk, busy after it
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: next(answers))
    path = str(tmp_path / "t.json")
    _process(path, "x", 200)
    got, tuner = _process(path, "x", 300)
    assert got == 300 and tuner.thresholds["x"]["settled"] is False
    assert gemm_tuning.Tuner(path, KEY, ("mkl",)).thresholds == {}


def test_the_walk_cost_is_recorded_in_ms(monkeypatch, tmp_path, clock):
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: True)
    path = str(tmp_path / "t.json")

    def walk():
        clock.now += 0.0125
        return 10, True
    for _ in range(2):
        gemm_tuning.Tuner(path, KEY, ("mkl",)).threshold("x", walk, 7)
    assert _on_disk(path, "x") == {"value": 10, "settled": True, "ms": 12.5}


def test_the_serial_and_split_pass_thresholds_use_the_helper_with_their_defaults(monkeypatch, tmp_path):
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: True)
    monkeypatch.setitem(gemm._tuning, "tuner", gemm_tuning.Tuner(str(tmp_path / "t.json"), KEY, ("mkl",)))
    monkeypatch.setattr(gemm, "_cores", lambda: 2)
    draws = iter([(1 << 20, True), (1 << 26, True)] * 4)            # every pair disagrees
    monkeypatch.setattr(gemm_tuning, "serial_threshold", lambda *args, **kw: next(draws))
    monkeypatch.setitem(split_passes._limit, "bytes", None)
    assert split_passes.min_bytes() == split_passes.DEFAULT_BYTES == 1 << 22
    if F32 in gemm._gemm_serial:
        monkeypatch.setattr(gemm, "_serial_work", {})
        assert gemm.serial_work(F32) == gemm_tuning.SERIAL_DEFAULT == 128 ** 3


def test_a_timed_sample_is_the_mean_of_a_block_sized_to_the_call(clock, monkeypatch):
    """A 1 µs candidate is timed in blocks of BLOCK_S / 1 µs calls, a 1 ms one call by call; the
    sample is the mean per call either way."""
    fast, slow = 2.0 ** -20, 2.0 ** -10                  # ~1 µs and ~1 ms, exact in binary
    monkeypatch.setattr(gemm_tuning, "BLOCK_S", 50 * fast)
    log = []
    runners = {"fast": clock.runner(fast, log, "fast"), "slow": clock.runner(slow, log, "slow")}
    times = gemm_tuning.measure(runners)
    rounds = len(times["fast"])
    assert rounds == len(times["slow"]) >= gemm_tuning.MIN_CALLS
    assert times["fast"] == pytest.approx([fast] * rounds) and times["slow"] == pytest.approx([slow] * rounds)
    # one warm-up each, then per round a lead-in call and a block: 50 calls of fast, 1 of slow
    assert log[:2] == ["fast", "slow"]
    assert log[2:] == (["fast"] * 51 + ["slow"] * 2) * rounds
    assert gemm_tuning.block_reps(slow) == 1 and gemm_tuning.block_reps(fast / 4) == gemm_tuning.MAX_REPS


def test_a_one_call_burst_does_not_decide_a_block(clock, monkeypatch):
    """One slow call inside a block of 10 moves the block's mean by a tenth of the burst, so
    the 'threaded' candidate, 2x faster but for a 6x slower call in every 11, still wins."""
    monkeypatch.setattr(gemm_tuning, "BLOCK_S", 1e-5)
    calls = {"n": 0}

    def threaded():
        calls["n"] += 1
        clock.now += 1e-6 + (5e-6 if calls["n"] % 11 == 0 else 0.0)    # a burst every 11th call

    times = gemm_tuning.measure({"serial": clock.runner(2e-6), "threaded": threaded})
    assert gemm_tuning.pick(times, incumbent="serial") == ("threaded", True)


# --- the route: one function for the product's path and for the report ---------------------------

needs_routes = pytest.mark.skipif(not gemm._gemm_serial or gemm._openblas_threads() is None,
                                  reason="needs MKL with a per-thread setting and NumPy's OpenBLAS")


@pytest.fixture
def routes(monkeypatch, tmp_path):
    """A fresh tuner, two threads' share, every route's choice function recording that it ran."""
    tuner = gemm_tuning.Tuner(str(tmp_path / "t.json"), KEY, ("mkl", "numpy", "mkl1", "numpy1", "rows", "cols", "one"))
    monkeypatch.setitem(gemm._tuning, "tuner", tuner)
    monkeypatch.setitem(gemm._tuning, "on", False)
    monkeypatch.setitem(gemm._split, "on", True)
    monkeypatch.setitem(gemm._split, "share", True)
    for name in ("_chosen", "_split_chosen", "_serial_chosen", "_thin_chosen"):
        monkeypatch.setattr(gemm, name, {})
    monkeypatch.setattr(gemm, "threads_here", lambda: 2)
    monkeypatch.setattr(gemm, "split_parts", lambda: 2)
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: True)
    monkeypatch.setattr(gemm, "_thin_set", {})
    monkeypatch.setattr(gemm, "THIN_SET_MAX", 0)          # a thin class timed at its first product
    monkeypatch.setattr(gemm, "_stub_compiled", lambda *args: True)      # as after the install-time build
    monkeypatch.setattr(gemm_tuning, "_time_call", lambda backend, run: (run(), {"one": 1e-3}.get(backend, 5e-3))[1])
    taken = []
    for name, way in (("_thin_choice", "thin"), ("_run_one", "one"), ("_choose", "tuned"),
                      ("_threaded_choice", "threads")):
        real = getattr(gemm, name)
        def recording(*args, real=real, way=way, **kw):
            taken.append(way)
            return real(*args, **kw)
        monkeypatch.setattr(gemm, name, recording)
    real_mkl = gemm._gemm[F32]
    monkeypatch.setitem(gemm._gemm, F32, lambda *args: (taken.append("mkl"), real_mkl(*args))[1])
    return taken


@needs_routes
@pytest.mark.parametrize("case", ["thin", "one", "tuned", "threads", "mkl"])
def test_the_report_names_the_route_the_product_takes(monkeypatch, rng, routes, case):
    """For each route, ``gemm_route.decision`` (asked before the product runs) names the way
    ``_run_2d`` then takes: the report once missed the thin route."""
    shapes = {"thin": (1, 512, 512), "one": (64, 64, 64), "tuned": (128, 96, 64), "threads": (128, 96, 64),
              "mkl": (128, 96, 64)}
    m, k, n = shapes[case]
    monkeypatch.setitem(gemm._serial_work, F32, 1 << 30 if case in ("thin", "one") else 1)
    if case == "tuned":
        monkeypatch.setitem(gemm._tuning, "on", True)
    if case == "mkl":
        monkeypatch.setitem(gemm._split, "on", False)
        monkeypatch.setattr(gemm, "split_parts", lambda: 1)
    if case == "thin":      # no numba pool loop to wait for: the timing is settled at once (pred20's pending case aside)
        from tensorweave.kernels.cpu import thin_gemm
        monkeypatch.setattr(gemm, "_thin_ready", lambda *args: False)
        monkeypatch.setattr(thin_gemm, "possible", lambda: False)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    before = gemm_route.decision(a, b)
    assert gemm.route(F32, m, n, k) == case
    np.testing.assert_allclose(gemm.matmul(a, b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    assert routes[0] == case                                        # the way _run_2d took first
    after = gemm_route.decision(a, b)
    base = gemm_tuning.shape_class(m, n, k, "float32", False, False)
    expected = {"thin": f"thincold:{base},p2", "one": f"serial:{base}", "tuned": base, "threads": f"threads:{base},p2",
                "mkl": ""}[case]
    assert before[0] == after[0] == expected
    if case == "mkl":
        assert before == after == ("", "mkl", True)
    else:
        assert before[1] is None and after[1] is not None          # run once: the class's backend known
        assert after[2] is True                                     # timed quiet, median and fastest agreeing


@needs_routes
def test_a_thin_product_without_a_second_thread_is_reported_on_one_thread(monkeypatch, rng, routes):
    monkeypatch.setitem(gemm._serial_work, F32, 1 << 30)
    a = rng.standard_normal((1, 512)).astype(np.float32)
    b = rng.standard_normal((512, 512)).astype(np.float32)
    for off in ("split", "blocks"):
        if off == "split":
            monkeypatch.setitem(gemm._split, "on", False)
            assert gemm.route(F32, 1, 512, 512) == "one"
            monkeypatch.setitem(gemm._split, "on", True)
        else:
            with gemm.blocks_here(2):
                assert gemm.route(F32, 1, 512, 512) == "one"
    assert gemm.route(F32, 1, 512, 512) == "thin"
    assert gemm.route(F32, 1, 512, 512, one_thread=True) == "one"
    assert gemm.route(F32, 16, 512, 512) == "one"                     # MIN_PART rows: not thin
    assert gemm.route(np.dtype(np.float64), 1, 256, 256) == "thin"    # 512 KiB of float64
    assert gemm.route(F32, 1, 256, 256) == "thin"                     # exactly THIN_BYTES
    assert gemm.route(F32, 1, 256, 255) == "one"                      # under THIN_BYTES


def test_the_threshold_walk_does_not_force_a_jit_compile_of_a_built_stub(monkeypatch):
    """``_thread_runners`` compiles MKL's stub only where no compiled version serves the types
    (forcing it anyway cost a cold process 0.5-1.1 s)."""
    if not gemm._gemm_serial:
        pytest.skip("MKL with a per-thread setting is not loaded")
    compiled = []
    monkeypatch.setattr(gemm.jit, "compile_now", lambda *args: compiled.append(1))
    monkeypatch.setattr(gemm, "_stub_ready", lambda args: True)
    gemm._thread_runners(np.float32, 32)
    assert compiled == []
    monkeypatch.setattr(gemm, "_stub_ready", lambda args: False)
    gemm._thread_runners(np.float32, 32)
    assert compiled == [1, 1]


def test_a_threshold_walk_needs_a_spare_core(monkeypatch, tmp_path, clock):
    """Two-thread timings of a walk at load 1.0-2.0 on two cores agreed on 33.5 M, at 0.6-0.8 on 0.88-2.1 M."""
    monkeypatch.setattr(gemm_tuning.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(gemm_tuning, "stolen", lambda: False)           # (a VM's steal: test_lead19_steal)
    for load, choices, walks in ((0.5, True, True), (1.5, True, False), (2.5, False, False)):
        monkeypatch.setattr(gemm_tuning.os, "getloadavg", lambda load=load: (load, load, load))
        assert (gemm_tuning.quiet(), SPARE_CORE()) == (choices, walks)
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: True)            # quiet for choices, no core to spare
    monkeypatch.setattr(gemm_tuning, "spare_core", lambda: False)
    tuner = gemm_tuning.Tuner(str(tmp_path / "t.json"), KEY, ("mkl",))
    assert tuner.threshold("x", lambda: pytest.fail("walked without a spare core"), 7) == 7
