"""tw.profiler: per-node records for Session.run, tw.function and eager ops; table; Chrome trace."""
import json
import threading

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import profiler
from tensorweave.core.registry import get_op
from tensorweave.runtime import executor
from tensorweave.runtime.runtime import default_runtime


def _mine(prof):
    # Only this thread's records: a thread another test left running must not change the counts.
    return [e for e in prof.events if e.thread_id == threading.get_ident()]


def _small_graph():
    g = tw.Graph()
    with g.as_default():
        x = tw.compat.v1.placeholder(tw.float32, [8, 8], name="x")
        w = tw.constant(np.eye(8, dtype=np.float32), name="w")
        h = tw.matmul(x, w, name="mm")
        y = tw.reduce_sum(tw.nn.relu(h, name="act") + 1.0, name="total")
    return g, x, y


def test_every_node_once_per_run_with_non_negative_durations():
    g, x, y = _small_graph()
    with tw.Session(graph=g) as sess:
        feed = {x: np.ones((8, 8), np.float32)}
        sess.run(y, feed)                         # plan built outside the profile
        plan, = sess._plans.values()
        nodes = sorted(st.op.name for st in plan.steps)
        with profiler.Profile() as prof:
            for _ in range(3):
                assert sess.run(y, feed) == 128.0
    ops = [e for e in _mine(prof) if e.kind == "op"]
    assert sorted(e.name for e in ops) == sorted(nodes * 3)
    assert {e.name: e.type for e in ops}["mm"] == "MatMul"
    assert all(e.end_ns >= e.start_ns for e in prof.events)
    assert all(e.device.endswith("CPU:0") for e in ops)
    assert all(e.thread_name == threading.current_thread().name for e in ops)
    runs = [e for e in _mine(prof) if e.kind == "run"]
    assert [r.name for r in runs] == ["Session.run"] * 3
    # every node of a run lies inside it
    for r in runs:
        inside = [e for e in ops if r.start_ns <= e.start_ns and e.end_ns <= r.end_ns]
        assert sorted(e.name for e in inside) == nodes
    assert {e.name: e.bytes for e in ops}["mm"] == 8 * 8 * 4
    assert {e.name: e.bytes for e in ops}["total"] == 4


def test_summary_splits_runs_into_kernels_and_overhead():
    g, x, y = _small_graph()
    with tw.Session(graph=g) as sess, profiler.Profile() as prof:
        for _ in range(5):
            sess.run(y, {x: np.ones((8, 8), np.float32)})
        plan, = sess._plans.values()
    s = prof.summary()
    assert s["runs"] == 5 and s["ops"] == 5 * len(plan.steps)
    assert s["kernel_busy_ns"] + s["executor_overhead_ns"] == s["in_runs_ns"]
    assert 0 < s["kernel_busy_ns"] <= s["in_runs_ns"] <= s["wall_ns"]
    assert s["in_runs_ns"] + s["outside_runs_ns"] == s["wall_ns"]
    assert s["planned_peak_bytes"] == plan.planned_peak_bytes > 0    # from the memory plan
    assert "planned peak" in prof.table()


def test_function_calls_and_eager_ops():
    @tw.function
    def f(a):
        return tw.matmul(a, a) + 1.0

    a = tw.constant(np.ones((4, 4), np.float32))
    f(a)
    with profiler.Profile() as prof:
        f(a)
        f(a)
        b = a * 3.0
    assert float(b.numpy()[0, 0]) == 3.0
    runs = [e for e in _mine(prof) if e.kind == "run"]
    assert [r.name for r in runs] == ["function:f", "function:f"]
    types = [e.type for e in _mine(prof) if e.kind == "op"]
    assert types.count("MatMul") == 2 and types.count("AddV2") == 2
    eager = [e for e in _mine(prof) if e.kind == "eager"]
    assert [e.type for e in eager] == ["Mul"] and eager[0].bytes == 64

    with profiler.Profile(eager=False) as prof2:
        a * 3.0
        f(a)
    assert not [e for e in _mine(prof2) if e.kind == "eager"]
    assert len([e for e in _mine(prof2) if e.kind == "op"]) == len(types) // 2


def test_parallel_plans_record_each_node_once_with_threads():
    tw.config.threading.set_inter_op_parallelism_threads(2)   # even where BLAS uses every core
    try:
        _check_parallel_profile()
    finally:
        tw.config.threading.set_inter_op_parallelism_threads(0)


def _check_parallel_profile():
    g = tw.Graph()
    with g.as_default():
        x = tw.constant(np.ones((256, 256), np.float32))
        branches = [tw.matmul(x, x * float(k), name=f"mm{k}") for k in range(4)]
        out = tw.add_n([tw.reduce_sum(b) for b in branches])
    plan = executor.build_plan([out], [], [], parallel=True)
    expected = executor.run_plan(plan, [])[0]
    with profiler.Profile() as prof:
        got = executor.run_plan(plan, [])[0]
    assert got == expected
    names = [e.name for e in prof.events if e.kind == "op"]
    assert sorted(names) == sorted(st.op.name for st in plan.steps)
    assert [e.type for e in prof.events if e.kind == "run"] == ["parallel"]
    assert all(e.thread_id in prof._threads for e in prof.events)


def test_nested_loop_bodies_and_self_time():
    @tw.function
    def count(n):
        return tw.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s + tw.cast(i, tw.float32)),
                             [tw.constant(0), tw.constant(0.0)])[1]

    n = tw.constant(5)
    assert float(count(n)) == 10.0
    with profiler.Profile() as prof:
        count(n)
    kinds = [e.kind for e in prof.events]
    assert kinds.count("run") > 5          # the call, plus cond and body plans per iteration
    total_self = sum(r["total_ns"] for r in prof.stats())
    ops_wall = sum(e.duration_ns for e in prof.events if e.kind == "op"
                   and not any(o is not e and o.kind == "op" and o.start_ns <= e.start_ns and e.end_ns <= o.end_ns
                               and o.thread_id == e.thread_id for o in prof.events))
    assert total_self <= ops_wall          # nested body ops are not counted twice
    assert abs(sum(r["percent"] for r in prof.stats()) - 100.0) < 1e-6


def test_chrome_trace_is_valid_json(tmp_path):
    g, x, y = _small_graph()
    with tw.Session(graph=g) as sess, profiler.Profile() as prof:
        sess.run(y, {x: np.ones((8, 8), np.float32)})
        sess.run(y, {x: np.ones((8, 8), np.float32)})
    path = prof.export_chrome_trace(str(tmp_path / "trace.json"))
    with open(path) as f:
        trace = json.load(f)
    events = trace["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert len(complete) == len(prof.events)
    for e in complete:
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        assert e["ts"] >= 0 and e["dur"] >= 0 and e["name"] and e["cat"] in ("op", "run", "eager", "copy")
    assert {e["name"] for e in complete if e["cat"] == "op"} >= {"mm", "act", "total"}
    meta = [e for e in events if e["ph"] == "M"]
    named = {e["tid"]: e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    assert named[complete[0]["tid"]] == threading.current_thread().name


def test_table_columns_and_sorting():
    g, x, y = _small_graph()
    with tw.Session(graph=g) as sess, profiler.Profile() as prof:
        for _ in range(4):
            sess.run(y, {x: np.ones((8, 8), np.float32)})
    text = prof.table(sort_by="total", top=20)
    lines = text.splitlines()
    assert lines[0].split() == ["op", "type", "calls", "total", "ms", "mean", "µs", "%", "time", "out", "bytes"]
    body = [ln for ln in lines[1:] if not ln.startswith("--")]
    types = [ln.split()[0] for ln in body]
    assert set(types) == {e.type for e in prof.events if e.kind == "op"}
    per_run = {}
    for e in prof.events:
        if e.kind == "op":
            per_run[e.type] = per_run.get(e.type, 0) + 1
    assert {ln.split()[0]: int(ln.split()[1]) for ln in body} == per_run
    assert all(c % 4 == 0 for c in per_run.values())
    totals = [float(ln.split()[2]) for ln in body]
    assert totals == sorted(totals, reverse=True)
    assert lines[-1].startswith("-- 4 plan runs")
    assert prof.table(top=2).splitlines()[3].startswith("(")          # "(n more)" row
    by_name = prof.table(sort_by="name", group_by="name", top=None)
    assert by_name.splitlines()[0].split()[0] == "node"
    assert [ln.split()[0] for ln in by_name.splitlines()[1:-1]] == sorted({e.name for e in prof.events
                                                                          if e.kind == "op"})
    with pytest.raises(ValueError, match="sort_by"):
        prof.table(sort_by="speed")
    with pytest.raises(ValueError, match="group_by"):
        prof.stats(group_by="device")


def test_zero_overhead_when_off_and_registry_restored():
    mul = get_op("Mul")
    before = dict(mul.kernels)
    g, x, y = _small_graph()
    with tw.Session(graph=g) as sess:
        prof = profiler.start()
        assert profiler.active() is prof and default_runtime().profiler is prof
        assert mul.kernels == before   # eager ops are timed by a dispatch hook, not by swapping kernels
        sess.run(y, {x: np.ones((8, 8), np.float32)})
        assert profiler.stop() is prof
        assert default_runtime().profiler is None and profiler.active() is None
        assert mul.kernels == before
        plan, = sess._plans.values()
        # the plan itself keeps the real kernels; only its profiling twin is wrapped
        assert all(not hasattr(getattr(st.fn, "func", st.fn), "_tw_unprofiled") for st in plan.steps)
        n = len(prof.events)
        sess.run(y, {x: np.ones((8, 8), np.float32)})
        tw.constant(1.0) * 2.0
        assert len(prof.events) == n


def test_plans_built_while_profiling_bind_real_kernels():
    with profiler.Profile():
        g, x, y = _small_graph()
        plan = executor.build_plan([y], [], [x])
    assert all(not hasattr(getattr(st.fn, "func", st.fn), "_tw_unprofiled") for st in plan.steps)


def test_profiles_do_not_nest_and_errors_still_stop():
    with profiler.Profile():
        with pytest.raises(RuntimeError, match="already active"):
            profiler.start()
    with pytest.raises(RuntimeError, match="No tw.profiler profile is active"):
        profiler.stop()

    def boom(v):
        raise ValueError("no")
    g = tw.Graph()
    with g.as_default():
        bad = tw.py_function(boom, [tw.constant(1.0)], tw.float32, name="bad")
    with pytest.raises(tw.errors.InvalidArgumentError, match="bad"):
        with tw.Session(graph=g) as sess, profiler.Profile() as prof:
            sess.run(bad)
    assert profiler.active() is None and default_runtime().profiler is None
    assert [e.kind for e in prof.events] == ["run", "op"]   # the failing node and its run are kept
    prof2 = profiler.Profile()
    prof2.start()
    prof2.stop()
    with pytest.raises(RuntimeError, match="already run"):
        prof2.start()
