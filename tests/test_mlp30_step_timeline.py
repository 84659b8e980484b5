"""``benchmarks/bench_step_timeline.py`` (issue 18 mlp30): one mlp step's kernels, hand-offs and waits
by thread, summed per step from stubbed events (the caller's idle time, its waits, the helper's gaps,
the step by phase), and a run on the mlp whose instruments are taken back after."""
import os
import sys

from tensorweave.core import registry
from tensorweave.kernels.cpu import gemm
from tensorweave.runtime import overlap
from tensorweave.runtime.passes import ir

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
import bench_step_timeline as timeline  # noqa: E402

US = 1000     # ns


def _step():
    """A 1,000 µs step: the caller's split product (a wait of 30 µs at its end), a deferred product on
    the helper collected after a 20 µs wait, an MKL threaded call (caller CPU 100 of 250 µs), a small op."""
    events = [
        ("op", "FusedMatMul", "Main", 0, 400 * US, 340 * US),
        ("handoff", "share 2", "Main", 10 * US, 390 * US, 0),
        ("task", "task", "Main", 20 * US, 360 * US, 340 * US),
        ("task", "task", "helper", 50 * US, 380 * US, 330 * US),
        ("wait", "share", "Main", 360 * US, 390 * US, 0),
        ("handoff", "defer", "Main", 400 * US, 420 * US, 20 * US),
        ("op", "MatMul", "helper", 430 * US, 700 * US, 270 * US),
        ("op", "FusedMatMulReluGradBiasAddGrad", "Main", 420 * US, 680 * US, 250 * US),
        ("wait", "join", "Main", 680 * US, 700 * US, 5 * US),
        ("op", "FusedMatMulGroupApplyAdam", "Main", 700 * US, 980 * US, 150 * US),
        ("handoff", "mkl threads", "Main", 710 * US, 960 * US, 100 * US),
        ("op", "Sum", "Main", 985 * US, 995 * US, 10 * US),
    ]
    return 1000 * US, 800 * US, events


def test_the_summary_counts_hand_offs_waits_and_idle_time():
    got = timeline.summarize([_step(), _step()], "Main")
    assert got["step wall (µs)"] == 1000 and got["caller CPU (µs)"] == 800
    assert got["caller idle = wall - CPU (µs)"] == 200
    assert got["caller waits: share (µs)"] == 30 and got["caller waits: share (count)"] == 1
    assert got["caller waits: join (µs)"] == 20 and got["caller waits: join (count)"] == 1
    assert got["hand-offs: share (count)"] == got["hand-offs: defer (count)"] == got["hand-offs: mkl (count)"] == 1
    assert got["caller idle inside MKL's threaded call (µs)"] == 150
    assert got["helper busy in shared tasks (µs)"] == 330 and got["helper busy in deferred products (µs)"] == 270
    assert got["helper idle gaps inside the step (µs)"] == 50 and got["helper idle gaps inside the step (count)"] == 1
    assert got["caller in Sum: CPU (µs)"] == 10 and got["caller in FusedMatMul: wall (µs)"] == 400


def test_the_helpers_gaps_are_between_its_pieces_of_work_only():
    events = [("task", "task", "h", 0, 10, 0), ("op", "MatMul", "h", 25, 40, 0), ("task", "task", "h", 30, 35, 0),
              ("wait", "join", "h", 50, 60, 0), ("op", "X", "Main", 41, 90, 0), ("task", "task", "h", 70, 80, 0),
              ("task", "task", "h", 80, 90, 0)]      # (back to back: no gap)
    assert timeline._helper_gaps(events, "Main") == [15, 30]


def test_the_step_by_phase_adds_up_to_the_step():
    got = timeline.phases([_step()], "Main")
    assert got["forward products (+ bias, ReLU)"] == (400, 340)
    assert got["backward products"] == (260, 250)
    assert got["dW1 + Adam update"] == (280, 150)
    assert got["small ops"] == (10, 10)
    assert got["caller waits (share)"] == (30, 0) and got["caller waits (join)"] == (20, 5)
    assert got["outside kernels (executor, Keras)"] == (1000 - 950, 800 - 750)
    assert got["step"] == (1000, 800)


def test_shared_tasks_are_recorded_only_while_on_and_only_when_handed_off(monkeypatch):
    for opdef in registry._OPS.values():
        if "CPU" in opdef.kernels:
            monkeypatch.setitem(opdef.kernels, "CPU", opdef.kernels["CPU"])
    for name in ("share_tasks", "_sleeping_after"):
        monkeypatch.setattr(gemm, name, getattr(gemm, name))
    for name in ("defer", "join"):
        monkeypatch.setattr(overlap, name, getattr(overlap, name))
    rec, done = timeline.Recorder(), []
    timeline.instrument(rec)
    tasks = [lambda: done.append(1), lambda: done.append(2)]
    gemm.share_tasks(tasks, 2)                  # off: nothing recorded
    rec.on = True
    gemm.share_tasks(tasks[:1], 2)              # one task: no hand-off
    with gemm.blocks_here(2):
        gemm.share_tasks(tasks, 2)              # all on this thread
    assert rec.events == [] and sorted(done) == [1, 1, 1, 2, 2]
    gemm.share_tasks(tasks, 2)
    kinds = sorted(kind for kind, *_ in rec.events)
    assert kinds == ["handoff", "task", "task", "wait"] and len(done) == 7


def test_the_mlp_step_runs_and_reports_its_timeline(monkeypatch, capsys):
    # (not with --threads: the benchmark's BLAS thread limit is kept for the process's life)
    for opdef in registry._OPS.values():
        if "CPU" in opdef.kernels:
            monkeypatch.setitem(opdef.kernels, "CPU", opdef.kernels["CPU"])
    monkeypatch.setattr(ir, "_STOCK", {})
    for name in ("share_tasks", "_sleeping_after"):
        monkeypatch.setattr(gemm, name, getattr(gemm, name))
    for name in ("defer", "join"):
        monkeypatch.setattr(overlap, name, getattr(overlap, name))
    timeline.main(["--workload", "mlp", "--steps", "2"])
    out = capsys.readouterr().out
    assert "the median step: wall" in out and "| MainThread | step | step |" in out
    assert "| phase (calling thread) | wall µs | CPU µs |" in out and "| step |" in out
    assert "caller CPU (µs)" in out and "all threads:" in out and "voluntary context switches per step" in out
