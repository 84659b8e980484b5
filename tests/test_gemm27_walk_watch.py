"""The one-thread threshold's walk under load (issue 18, session 23): other processes' use of the CPUs
is looked at *during* a walk (``gemm_tuning.Watch``) and a disturbed walk is no evidence; a tie at the
walk's last rung no longer unsettles it; a threshold kept at its ladder's top is walked again by later
quiet processes. Scripted clocks, loads and timed calls: no timing thresholds."""
import json

import pytest

from tensorweave.kernels.cpu import gemm_tuning

LADDER = gemm_tuning.SERIAL_LADDER
TOP = 2 * LADDER[-1] ** 3


@pytest.fixture
def machine(monkeypatch):
    """Scripted clocks and ``/proc/stat``: ``machine.wall``, ``machine.own`` (this process's CPU
    seconds), ``machine.busy`` (the CPUs' busy seconds, None: no file), ``machine.crowded``."""
    class Machine:
        wall, own, busy, crowded = 0.0, 0.0, 0.0, False
    m = Machine()
    monkeypatch.setattr(gemm_tuning, "RUNQUEUE", True)
    monkeypatch.setattr(gemm_tuning, "_clock", lambda: m.wall)
    monkeypatch.setattr(gemm_tuning, "_process_clock", lambda: m.own)
    monkeypatch.setattr(gemm_tuning, "busy_seconds", lambda: m.busy)
    monkeypatch.setattr(gemm_tuning, "crowded", lambda: m.crowded)
    monkeypatch.setattr(gemm_tuning.os, "cpu_count", lambda: 2)
    return m


#: seconds a scripted timed call takes
STEP = 0.01


def _run(m, wall, own, others):
    """``wall`` seconds pass; this process uses ``own`` CPU seconds, the rest of the machine ``others``."""
    m.wall += wall
    m.own += own
    m.busy += own + others


# ---- the watch ------------------------------------------------------------------------------------
def test_a_walk_alone_on_the_machine_is_not_disturbed(machine):
    watch = gemm_tuning.Watch()
    _run(machine, 0.1, 0.16, 0.0)
    assert watch.disturbed() is False and watch.others_ms == 0.0


@pytest.mark.parametrize("others_ticks,disturbed", [(0, False), (1, False), (2, False), (3, True)])
def test_the_others_cpu_counts_beyond_the_share_and_one_tick_per_cpu(machine, monkeypatch, others_ticks, disturbed):
    """A quarter-second walk on two CPUs: the others may use a quarter of one core's time plus one
    tick per CPU (64 ticks a second here: every figure exact in binary)."""
    monkeypatch.setattr(gemm_tuning, "TICKS_PER_S", 64)
    watch = gemm_tuning.Watch()
    _run(machine, 0.25, 0.5, gemm_tuning.MAX_OTHERS_SHARE * 0.25 + others_ticks / 64)
    assert watch.disturbed() is disturbed


def test_a_busy_loop_on_the_other_core_disturbs_the_walk(machine):
    watch = gemm_tuning.Watch()
    _run(machine, 0.1, 0.1, 0.1)                     # the other core's whole time went to another process
    assert watch.disturbed() is True and watch.others_ms == 100.0


def test_a_runnable_thread_of_another_process_seen_at_any_look_disturbs_the_walk(machine):
    watch = gemm_tuning.Watch()
    machine.crowded = True
    watch.look()
    machine.crowded = False                          # gone by the end: the look remembers
    _run(machine, 0.1, 0.16, 0.0)
    assert watch.disturbed() is True


def test_a_runnable_thread_gone_at_the_second_read_does_not_disturb_the_walk(machine, monkeypatch):
    """One of this process's own threads going to sleep between ``/proc/loadavg`` and its task list
    reads as another process's for one read."""
    reads = iter([True, False, False, True, True])
    monkeypatch.setattr(gemm_tuning, "crowded", lambda: next(reads))
    watch = gemm_tuning.Watch()
    watch.look()
    assert watch.crowded is False
    watch.look()                                     # False: the second read is not made
    watch.look()
    assert watch.crowded is True


def test_without_proc_stat_the_looks_alone_decide(machine):
    machine.busy = None
    watch = gemm_tuning.Watch()
    assert watch.disturbed() is False and watch.others_ms is None
    machine.crowded = True
    assert watch.disturbed() is True


def test_with_other_processes_not_looked_at_a_walk_is_never_disturbed(machine, monkeypatch):
    monkeypatch.setattr(gemm_tuning, "RUNQUEUE", False)     # TW_TUNING_RUNQUEUE=0 (the suite's pin)
    watch = gemm_tuning.Watch()
    machine.crowded = True
    _run(machine, 0.1, 0.1, 0.1)
    assert watch.disturbed() is False


def test_busy_seconds_are_all_ticks_but_idle_and_iowait(monkeypatch, tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  10 1 20 300 4 5 6 7 8 9\ncpu0 5 0 10 150 2 2 3 3 4 4\n")
    monkeypatch.setattr(gemm_tuning, "STAT_FILE", str(stat))
    monkeypatch.setattr(gemm_tuning, "TICKS_PER_S", 100)
    assert gemm_tuning.busy_seconds() == pytest.approx((10 + 1 + 20 + 5 + 6 + 7) / 100)
    monkeypatch.setattr(gemm_tuning, "STAT_FILE", str(tmp_path / "absent"))
    assert gemm_tuning.busy_seconds() is None


def test_the_tick_error_is_one_tick_per_cpu(monkeypatch):
    monkeypatch.setattr(gemm_tuning.os, "cpu_count", lambda: 4)
    monkeypatch.setattr(gemm_tuning, "TICKS_PER_S", 100)
    assert gemm_tuning.tick_error() == 0.04


# ---- the walk -------------------------------------------------------------------------------------
def _ladder(monkeypatch, machine, threads_win_from=None, others_at=(), tie_at=None):
    """Scripts ``serial_threshold``'s timed calls: threads win by half from ``threads_win_from`` up
    and lose below; a rung in ``others_at`` runs beside another process (its threads lose, its thread
    is runnable, and the rest of the machine uses one core while it runs); at ``tie_at`` the fastest
    call and the median disagree. Returns the sides the walk timed and the looks the watch made."""
    side, timed, looks = {}, [], []

    def runners_for(s):
        side["now"] = s
        timed.append(s)
        return {"serial": lambda: None, "threaded": lambda: None}
    tie = iter([1.0, 9.0, 9.0, 9.0] * 100)

    def seconds(variant, run):
        s = side["now"]
        machine.crowded = s in others_at
        _run(machine, STEP, STEP, STEP if s in others_at else 0.0)
        if variant == "serial":
            return 2.0
        if s == tie_at:
            return next(tie)                 # threaded's fastest call wins, its median loses
        wins = threads_win_from is not None and s >= threads_win_from and s not in others_at
        return 1.0 if wins else 4.0
    monkeypatch.setattr(gemm_tuning, "_time_call", seconds)
    real = gemm_tuning.crowded
    monkeypatch.setattr(gemm_tuning, "crowded", lambda: (looks.append(side.get("now")), real())[1])
    return runners_for, timed, looks


def test_a_walk_beside_another_process_ends_at_the_top_and_does_not_settle(monkeypatch, machine):
    """The reproduction, scripted: the other process ran while the top rung was timed, threads lost
    there, and the walk ended at the top; the watch makes it unsettled (before: settled)."""
    runners_for, timed, looks = _ladder(monkeypatch, machine, threads_win_from=96, others_at=(256,))
    assert gemm_tuning.serial_threshold(runners_for) == (TOP, False)
    assert timed == [256] and gemm_tuning.walk_others_ms() > 0


def test_the_watch_looks_after_every_timed_round(monkeypatch, machine):
    runners_for, timed, looks = _ladder(monkeypatch, machine, threads_win_from=96)
    assert gemm_tuning.serial_threshold(runners_for) == (96 ** 3, True)
    assert timed == [256, 192, 128, 96, 64]
    for s in timed:                                  # every round of every rung, and once at the end
        assert looks.count(s) >= gemm_tuning.MIN_CALLS
    assert gemm_tuning.walk_others_ms() == 0.0


def test_a_tie_at_the_last_rung_stops_the_walk_there_settled(monkeypatch, machine):
    runners_for, timed, _ = _ladder(monkeypatch, machine, threads_win_from=96, tie_at=96)
    assert gemm_tuning.serial_threshold(runners_for) == (128 ** 3, True)
    assert timed == [256, 192, 128, 96]


def test_every_two_neighbouring_rungs_agree():
    """Walks one rung apart (the crossover's rung a tie in one of them) settle, on the larger."""
    values = [side ** 3 for side in LADDER] + [TOP]
    for low, high in zip(values, values[1:]):
        assert gemm_tuning.agree((low, True), (high, True), 0) == (high, True)
    for low, high in zip(values, values[2:]):
        assert gemm_tuning.agree((low, True), (high, True), 0) == (0, False)


# ---- the tuner: a disturbed walk is no evidence ------------------------------------------------------
@pytest.fixture
def path(monkeypatch, tmp_path):
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: True)
    monkeypatch.setattr(gemm_tuning, "spare_core", lambda: True)
    return str(tmp_path / "t.json")


def _process(path):
    return gemm_tuning.Tuner(path, {"cpu": "x"}, ("one",))


def _walk(monkeypatch, machine, **script):
    runners_for = _ladder(monkeypatch, machine, **script)[0]
    return lambda: gemm_tuning.serial_threshold(runners_for)


def _on_disk(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)["thresholds"]["serial-ways:float32"]


def test_walks_beside_other_processes_are_not_kept_and_spend_no_try(monkeypatch, machine, path):
    """Two processes whose walks ran beside a busy loop (threads lost at the top rung): before,
    the second settled the top for the machine; now neither walk is left, no try is spent, and two
    later quiet walks settle the crossover."""
    busy = _walk(monkeypatch, machine, threads_win_from=96, others_at=LADDER)
    for _ in range(2):
        t = _process(path)
        assert t.threshold("serial-ways:float32", busy, gemm_tuning.SERIAL_DEFAULT) == gemm_tuning.SERIAL_DEFAULT
        entry = _on_disk(path)
        assert entry["settled"] is False and entry["tries"] == 0 and entry["walk"] is None
        assert entry["others_ms"] > 0
    quiet_walk = _walk(monkeypatch, machine, threads_win_from=96)
    _process(path).threshold("serial-ways:float32", quiet_walk, gemm_tuning.SERIAL_DEFAULT)
    assert _on_disk(path)["walk"] == 96 ** 3 and _on_disk(path)["others_ms"] == 0.0
    busy_again = _walk(monkeypatch, machine, threads_win_from=96, others_at=LADDER)
    _process(path).threshold("serial-ways:float32", busy_again, gemm_tuning.SERIAL_DEFAULT)
    assert _on_disk(path)["walk"] == 96 ** 3 and _on_disk(path)["tries"] == 0     # the quiet walk stands
    quiet_again = _walk(monkeypatch, machine, threads_win_from=96)
    assert _process(path).threshold("serial-ways:float32", quiet_again, gemm_tuning.SERIAL_DEFAULT) == 96 ** 3
    assert _on_disk(path)["settled"] is True and "edge" not in _on_disk(path)


def test_a_disturbed_walk_that_agrees_with_the_one_left_settles_nothing(monkeypatch, machine, path):
    """Its answer happens to match (the other process ran only at the rung below the crossover): a
    disturbed walk is no evidence either way."""
    _process(path).threshold("serial-ways:float32", _walk(monkeypatch, machine, threads_win_from=96), 7)
    t = _process(path)
    assert t.threshold("serial-ways:float32", _walk(monkeypatch, machine, threads_win_from=96, others_at=(64,)), 7) == 7
    assert _on_disk(path) == {**_on_disk(path), "settled": False, "walk": 96 ** 3, "tries": 0}


def test_walks_one_rung_apart_settle_where_one_ended_on_a_tie(monkeypatch, machine, path):
    """Session 22's 64³ / 96³ walks: the one ending on a tie at 64 used to count as a disagreement."""
    _process(path).threshold("serial-ways:float32", _walk(monkeypatch, machine, threads_win_from=64),
                             gemm_tuning.SERIAL_DEFAULT)
    got = _process(path).threshold("serial-ways:float32",
                                   _walk(monkeypatch, machine, threads_win_from=64, tie_at=64),
                                   gemm_tuning.SERIAL_DEFAULT)
    assert got == 96 ** 3 and _on_disk(path)["settled"] is True


def test_a_walk_of_another_kind_that_did_not_settle_spends_no_try(path):
    """A walk that is no ``serial_threshold`` (no watch) says ``settled`` itself; unsettled, it is
    left out like a disturbed one; settled and disagreeing, it counts a try."""
    _process(path).threshold("x", lambda: (100, True), 7)
    t = _process(path)
    assert t.threshold("x", lambda: (900, False), 7) == 7
    assert t.thresholds["x"]["tries"] == 0 and t.thresholds["x"]["walk"] == 100
    assert "others_ms" not in t.thresholds["x"]
    t = _process(path)
    assert t.threshold("x", lambda: (900, True), 7) == 7
    assert t.thresholds["x"]["tries"] == 1 and t.thresholds["x"]["walk"] == 900


# ---- the tuner: a threshold at its ladder's top is walked again --------------------------------------
def _top(path, **fields):
    t = _process(path)
    t.thresholds["serial-ways:float32"] = {"value": TOP, "settled": True, "ms": 30.0, "edge": "top", **fields}
    t._write()


def test_a_top_edge_threshold_is_challenged_then_replaced_by_two_quiet_walks(monkeypatch, machine, path):
    _top(path)
    quiet_walk = _walk(monkeypatch, machine, threads_win_from=96)
    first = _process(path)
    assert first.threshold("serial-ways:float32", quiet_walk, 0) == TOP         # one walk: the value stands
    assert _on_disk(path) == {"value": TOP, "settled": True, "ms": 30.0, "edge": "top", "rewalks": 1,
                              "challenger": 96 ** 3}
    assert first.threshold("serial-ways:float32", pytest.fail, 0) == TOP         # once per process
    second = _process(path)
    assert second.threshold("serial-ways:float32", _walk(monkeypatch, machine, threads_win_from=128), 0) == 128 ** 3
    entry = _on_disk(path)
    assert entry["value"] == 128 ** 3 and entry["settled"] is True and entry["rewalks"] == 2
    assert "edge" not in entry and "challenger" not in entry
    assert _process(path).threshold("serial-ways:float32", pytest.fail, 0) == 128 ** 3   # no longer at the top


def test_a_walk_that_agrees_with_the_top_confirms_it_and_drops_a_challenger(monkeypatch, machine, path):
    _top(path, challenger=64 ** 3, rewalks=1)
    assert _process(path).threshold("serial-ways:float32", _walk(monkeypatch, machine), 0) == TOP
    entry = _on_disk(path)
    assert entry["rewalks"] == 2 and "challenger" not in entry and entry["edge"] == "top"


def test_a_walk_that_agrees_with_neither_becomes_the_challenger(monkeypatch, machine, path):
    _top(path, challenger=64 ** 3, rewalks=1)
    assert _process(path).threshold("serial-ways:float32", _walk(monkeypatch, machine, threads_win_from=192), 0) == TOP
    entry = _on_disk(path)
    assert entry["value"] == TOP and entry["challenger"] == 192 ** 3 and entry["rewalks"] == 2


def test_a_disturbed_walk_again_changes_nothing(monkeypatch, machine, path):
    _top(path, challenger=96 ** 3, rewalks=1)
    busy = _walk(monkeypatch, machine, threads_win_from=96, others_at=(256,))
    assert _process(path).threshold("serial-ways:float32", busy, 0) == TOP
    assert _on_disk(path) == {"value": TOP, "settled": True, "ms": 30.0, "edge": "top", "rewalks": 1,
                              "challenger": 96 ** 3}


def test_a_walk_again_that_ends_as_the_machine_gets_busy_changes_nothing(monkeypatch, machine, path):
    _top(path)
    quiet = iter([True, False])                          # quiet before the walk, busy after it
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: next(quiet))
    assert _process(path).threshold("serial-ways:float32", _walk(monkeypatch, machine, threads_win_from=96), 0) == TOP
    assert "rewalks" not in _on_disk(path)


@pytest.mark.parametrize("fields", [{"edge": "bottom"}, {"edge": None}, {"rewalks": gemm_tuning.MAX_RETIMES},
                                    {"rewalks": "x"}])
def test_no_walk_again_off_the_top_or_after_the_last_one(path, fields):
    _top(path, **fields)
    assert _process(path).threshold("serial-ways:float32", pytest.fail, 0) == TOP


@pytest.mark.parametrize("quiet,spare", [(False, True), (True, False)])
def test_no_walk_again_on_a_busy_machine(monkeypatch, path, quiet, spare):
    _top(path)
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: quiet)
    monkeypatch.setattr(gemm_tuning, "spare_core", lambda: spare)
    assert _process(path).threshold("serial-ways:float32", pytest.fail, 0) == TOP
