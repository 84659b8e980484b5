"""Plans as data (runtime/plan_spec.py, saving/plan_io.py) and one Runtime per rank."""
import contextlib
import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.runtime import executor
from tensorweave.runtime.plan_spec import LocalValue, PlanSpec, ResourceRef
from tensorweave.runtime.runtime import Runtime, default_runtime
from tensorweave.saving import plan_io
from tensorweave.saving.graph_io import SaveError
from tensorweave.saving.validation import LoadError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
v1 = tw.compat.v1


def _program():
    """A graph with a While loop (a random op in its body), a random op and a variable update."""
    g = tw.Graph()
    with g.as_default():
        tw.random.set_seed(3)
        v = tw.Variable(np.arange(4, dtype=np.float32), name="v")
        x = v1.placeholder(tw.float32, [4], name="x")
        noise = tw.random.uniform([4], seed=7, name="noise")

        def body(i, a):
            return i + 1, a * 1.5 + x + tw.random.normal([4], seed=11)
        _, acc = tw.while_loop(lambda i, a: i < 3, body, (tw.constant(0), x))
        upd = v.assign_add(acc + noise)
    sess = v1.Session(graph=g)
    sess.run(v.initializer)
    return g, v, x, [upd, noise, acc]


_X = np.array([0.5, -1.0, 2.0, 0.25], np.float32)

_CHILD = r"""
import json, sys
import numpy as np
from tensorweave.runtime.runtime import Runtime
from tensorweave.saving import plan_io
rt = Runtime("rank1", rank=1)
plan = plan_io.load_plan(sys.argv[1], rt)
x = np.array(json.loads(sys.argv[2]), np.float32)
runs = [[a.tolist() for a in plan([x])] for _ in range(2)]
print(json.dumps({"runs": runs, "v": rt.resource("variable", "v")._read().tolist()}))
"""


def test_spec_round_trips_through_files_and_runs_in_a_fresh_process(tmp_path):
    g, v, x, fetches = _program()
    plan = executor.build_plan(fetches, [], [x])
    plan([_X])                                   # streams and the variable move on first
    plan_io.save_plan(plan, str(tmp_path))
    here = [[a.tolist() for a in plan([_X])] for _ in range(2)]
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    env = dict(os.environ, PYTHONPATH=REPO)
    out = subprocess.run([sys.executable, str(script), str(tmp_path), json.dumps(_X.tolist())], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    there = json.loads(out.stdout.strip().splitlines()[-1])
    assert there["runs"] == here                 # bit for bit: While, random ops, variable update
    assert there["v"] == here[-1][0]           # the rank's own copy of v, updated twice
    doc = json.loads((tmp_path / "plan.json").read_text())
    kinds = sorted(r["kind"] for r in doc["resources"])
    assert kinds == ["random_stream", "random_stream", "variable"]
    assert "plan" in json.dumps(doc["plan"]["nodes"])      # the While body is a nested spec


def test_spec_is_data_and_binds_on_another_runtime_in_process():
    g, v, x, fetches = _program()
    plan = executor.build_plan(fetches, [], [x])
    spec = plan.spec
    assert isinstance(spec, PlanSpec) and spec.resources
    for s in spec.walk():
        for node in s.nodes:
            for a in node.attrs.values():
                assert not callable(a) or isinstance(a, PlanSpec), (node, a)
    doc, tensors = plan_io.plan_to_json(plan)
    json.dumps(doc)                              # plain JSON, no objects
    rt = Runtime("other")
    other = plan_io.plan_from_json(doc, tensors, rt)
    a = [r.tolist() for r in plan([_X])]
    b = [r.tolist() for r in other([_X])]
    assert a == b
    assert rt.resource("variable", "v") is not v   # each rank has its own state


def test_build_stages_each_alone():
    g = tw.Graph()
    with g.as_default():
        a = v1.placeholder(tw.float32, [2], name="a")
        with tw.device("/cpu:1"):
            b = tw.exp(a, name="e")
        c = tw.add(b, 1.0, name="c")
        unused = tw.negative(a, name="unused")
    feed_ids = {id(a): 0}
    ops = executor.prune([c], [], feed_ids)
    assert [o.name for o in ops] == ["e", "Const", "c"] and unused.op not in ops
    rt = Runtime("two", cpu_count=2)
    placed = executor.place(ops, rt)
    assert placed[id(b.op)].endswith("CPU:1") and placed[id(c.op)].endswith("CPU:0")
    from tensorweave.runtime.plan_spec import ResourceTable
    spec, node_ops = executor.lower(ops, placed, [c], [a], rt, ResourceTable())
    assert [n.op for n in spec.nodes] == ["Exp", "_Copy", "AddV2"]
    assert spec.presets[0][1] == np.float32(1.0)
    executor.schedule(spec)
    assert spec.frees[-1] and spec.keep == {0, spec.fetch_slots[0]}
    plan = executor.bind(spec, rt)
    assert plan.num_copies == 1 and plan.runtime is rt
    np.testing.assert_allclose(plan([np.zeros(2, np.float32)])[0], [2.0, 2.0])


def _variable(doc):
    return next(r for r in doc["resources"] if r["kind"] == "variable")


def _node_of(doc, op):
    return next(n for n in doc["plan"]["nodes"] if n["op"] == op)


def _single_node(doc):
    return next(n for n in doc["plan"]["nodes"] if n["single"])


def test_loader_rejects_tampered_plans():
    g, v, x, fetches = _program()
    plan = executor.build_plan(fetches, [], [x])
    doc, tensors = plan_io.plan_to_json(plan)

    def broken(edit):
        d = json.loads(json.dumps(doc))
        edit(d)
        return d
    cases = [
        (lambda d: d["plan"]["nodes"][0].update(op="NoSuchOp"), "not registered"),
        (lambda d: d["plan"]["deps"][0].append(len(d["plan"]["nodes"]) - 1), "dependency"),
        (lambda d: d["plan"]["nodes"][-1].update(ins=[10 ** 6]), "input slot"),
        (lambda d: d["plan"]["nodes"][-1]["attrs"].update(evil={"variable": 0}), "resource table"),
        (lambda d: d["resources"].append({"kind": "module", "name": "os"}), "unknown resource kind"),
        (lambda d: d["plan"]["nodes"][-1]["attrs"].update(surprise=1), "not taken by"),
        (lambda d: _variable(d).update(shape=[5]), r"variable value has shape \[4\], the resource says \[5\]"),
        (lambda d: _variable(d).update(shape=[4, 1]), r"variable value has shape \[4\], the resource says \[4, 1\]"),
        (lambda d: _single_node(d).update(outs=d["plan"]["feed_slots"][0]), "is written twice"),
        (lambda d: d["plan"]["nodes"][-1].update(ins=[d["plan"]["n_slots"]]), r"input slot = \d+ is outside \[0, "),
        (lambda d: d["plan"].update(n_slots=-1), r"n_slots = -1 is outside \[0, "),
        (lambda d: d["plan"]["nodes"][-1].update(traceback=5), "traceback must be"),
        (lambda d: d["plan"]["deps"][-1].append(len(d["plan"]["nodes"]) - 1), "dependency"),   # on itself
        (lambda d: d["plan"]["deps"][-1].append(-1), "dependency = -1 is outside"),
        (lambda d: d["plan"]["presets"][0].__setitem__(0, d["plan"]["feed_slots"][0]), "is written twice"),
        (lambda d: d["plan"]["nodes"][0].update(device="/device:NOPE:0"), "has no NOPE kernel here"),
        (lambda d: d["plan"]["nodes"][0].update(device="/cpu:abc"), "Invalid device string '/cpu:abc'"),
        (lambda d: _node_of(d, "AddV2").update(inplace=2), r"inplace input = 2 is outside \[0, 1\]"),
        (lambda d: _node_of(d, "AddV2").update(inplace=-1), r"inplace input = -1 is outside \[0, 1\]"),
        (lambda d: _node_of(d, "RandomUniform").update(inplace=0), "has no in-place form"),
        (lambda d: _node_of(d, "RandomUniform").update(inplace=1), r"inplace input = 1 is outside \[0, 0\]"),
    ]
    # the untampered plan, and AddV2 written in place, load; slots are bounded at 64 per node
    # of the node limit, not by the node count
    plan_io.plan_from_json(broken(lambda d: None), tensors, Runtime("t"))
    plan_io.plan_from_json(broken(lambda d: d["plan"].update(n_slots=3_000_000)), tensors, Runtime("t"))
    from tensorweave.saving.validation import MAX_NODES
    with pytest.raises(LoadError, match="n_slots = 128000001 is outside"):
        plan_io.plan_from_json(broken(lambda d: d["plan"].update(n_slots=MAX_NODES * 64 + 1)), tensors, Runtime("t"))
    plan_io.plan_from_json(broken(lambda d: _node_of(d, "AddV2").update(inplace=1)), tensors, Runtime("t"))
    for edit, message in cases:
        with pytest.raises(LoadError, match=message):
            plan_io.plan_from_json(broken(edit), tensors, Runtime("t"))


def test_python_code_stays_in_its_process():
    g = tw.Graph()
    with g.as_default():
        y = tw.py_function(lambda t: t * 2, [tw.constant([1.0])], tw.float32, name="double")
    plan = executor.build_plan([y], [], [])
    node = plan.spec.nodes[0]
    assert isinstance(node.attrs["func"], LocalValue)
    assert plan([])[0].tolist() == [2.0]          # runs here
    with pytest.raises(SaveError, match="double.*Python code"):
        plan_io.plan_to_json(plan)


def test_two_runtimes_run_different_plans_concurrently():
    g, v, x, fetches = _program()
    base = executor.build_plan(fetches, [], [x])
    doc, tensors = plan_io.plan_to_json(base)
    g2 = tw.Graph()
    with g2.as_default():
        w = tw.Variable(np.ones(3, np.float32), name="v")      # same name, other rank, other plan
        step = w.assign(w * 2.0)
    v1.Session(graph=g2).run(w.initializer)
    doc2, tensors2 = plan_io.plan_to_json(executor.build_plan([step], [], []))

    class Recorder:
        def __init__(self):
            self.nodes = []

        def record_node(self, name, op_type, device, t0, t1, result):
            self.nodes.append(op_type)

        def record_run(self, *args):
            pass
    rt1, rt2 = Runtime("rank0", rank=0), Runtime("rank1", rank=1, cpu_count=2)
    rt2.profiler = Recorder()
    p1 = plan_io.plan_from_json(doc, tensors, rt1)
    p2 = plan_io.plan_from_json(doc2, tensors2, rt2)
    ref = plan_io.plan_from_json(doc, tensors, Runtime("ref2"))
    expected = [[a.tolist() for a in ref([_X])] for _ in range(20)]
    got1, got2 = [], []
    barrier = threading.Barrier(2)

    def run1():
        barrier.wait()
        got1.extend([a.tolist() for a in p1([_X])] for _ in range(20))

    def run2():
        barrier.wait()
        got2.extend(p2([])[0].tolist() for _ in range(20))
    threads = [threading.Thread(target=run1), threading.Thread(target=run2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got1 == expected
    assert got2 == [[2.0 ** (k + 1)] * 3 for k in range(20)]
    assert rt2.profiler.nodes and set(rt2.profiler.nodes) <= {"AssignVariableOp", "ReadVariableOp", "Mul"}
    assert default_runtime().profiler is None and rt1.profiler is None
    assert isinstance(p1.spec.presets[0][1], (ResourceRef, np.ndarray, np.generic))


@contextlib.contextmanager
def _stand_in_gpu_kernels(*op_types):
    """GPU kernels for ``op_types`` that are their CPU kernels (no GPU needed), removed after."""
    from tensorweave.core.registry import get_op
    added = [t for t in op_types if "GPU" not in get_op(t).kernels]
    for t in added:
        get_op(t).kernels["GPU"] = get_op(t).kernels["CPU"]
    try:
        yield
    finally:
        for t in added:
            del get_op(t).kernels["GPU"]


def test_passes_run_after_placement_and_fuse_only_where_the_device_has_the_kernel():
    rng = np.random.default_rng(0)
    av, wv, bv = (rng.normal(size=s).astype(np.float32) for s in ((4, 8), (8, 3), (3,)))
    g = tw.Graph()
    with g.as_default():
        a = v1.placeholder(tw.float32, [4, 8])
        with tw.device("/gpu:0"):
            y = tw.nn.relu(tw.nn.bias_add(tw.matmul(a, tw.constant(wv)), tw.constant(bv)))
    gpu = Runtime("gpu-rank", device_counts={"GPU": 1})
    moved = []
    gpu.register_copy("CPU", "GPU", lambda v, src, dst: moved.append(dst) or np.array(v))   # a real transfer hook
    with _stand_in_gpu_kernels("MatMul", "BiasAdd", "Relu"):
        plan = executor.build_plan([y], [], [a], runtime=gpu)
        on_gpu = [(n.op, n.device.rsplit("/", 1)[-1]) for n in plan.spec.nodes if n.op != "_Copy"]
        assert on_gpu == [("MatMul", "device:GPU:0"), ("BiasAdd", "device:GPU:0"), ("Relu", "device:GPU:0")]
        # the device has no FusedMatMul kernel, so nothing silently moves to CPU:0
        got = plan([av])[0]
        assert len(moved) == 2 and all(d.endswith("GPU:0") for d in moved)   # w and b cross (a feed lands in place)
    cpu = executor.build_plan([y], [], [a])      # the default runtime has no GPU: soft-placed on CPU, fused
    assert [n.op for n in cpu.spec.nodes] == ["FusedMatMul"]
    np.testing.assert_array_equal(got, cpu([av])[0])


def test_gpu_kernels_elsewhere_leave_cpu_in_place_rewrites_on():
    n = 1 << 15
    g = tw.Graph()
    with g.as_default():
        x = v1.placeholder(tw.float32, [n])
        y = tw.exp(tw.exp(x) + tw.constant(1.0))

    def inplace_nodes():
        from tensorweave.runtime import passes
        old = passes.get_options()
        passes.set_options({"elementwise_fusion": False})
        try:
            plan = executor.build_plan([y], [], [x], parallel=False)
        finally:
            passes.reset_options()
            passes.set_options(old)
        return plan.pass_stats.get("memory_optimization", 0)
    before = inplace_nodes()
    assert before > 0
    with _stand_in_gpu_kernels("AddV2", "Exp"):
        assert inplace_nodes() == before


def test_fusion_and_inplace_read_op_traits():
    from tensorweave.core.registry import get_op
    from tensorweave.runtime import passes
    n = 1 << 15
    g = tw.Graph()
    with g.as_default():
        x = v1.placeholder(tw.float32, [n])
        y = tw.exp(tw.exp(x) * 2.0)

    def plan_types():
        old = passes.get_options()
        passes.set_options({"fusion_min_elements": 1, "fusion_function_graphs_only": False})
        try:
            return [nd.op for nd in executor.build_plan([y], [], [x]).spec.nodes]
        finally:
            passes.reset_options()
            passes.set_options(old)
    assert plan_types() == ["FusedElementwise"]
    exp = get_op("Exp")
    saved = dict(exp.traits)
    exp.traits.clear()          # an op without traits: the passes know nothing about it
    try:
        assert plan_types() == ["Exp", "Mul", "Exp"]
    finally:
        exp.traits.update(saved)


def test_execute_dispatches_through_the_threads_interpreter():
    from tensorweave.core import dispatch

    class Recording(dispatch.Interpreter):
        name = "recording"

        def __init__(self):
            self.ops = []

        def execute(self, opdef, inputs, attrs, name):
            self.ops.append(opdef.name)
            return dispatch.EAGER.execute(opdef, inputs, attrs, name)
    rec = Recording()
    other = []
    scoped_before = dispatch._scoped   # 1 for good once any test in this process made a global tensor
    with dispatch.interpreter_scope(rec):
        assert dispatch.current_interpreter() is rec
        y = tw.constant(2.0) * 3.0
        t = threading.Thread(target=lambda: other.append(float(tw.constant(1.0) + 1.0)))
        t.start()
        t.join()
    assert float(y) == 6.0 and "Mul" in rec.ops and "AddV2" not in rec.ops   # the other thread is not affected
    assert other == [2.0] and dispatch.current_interpreter() is dispatch.EAGER and dispatch._scoped == scoped_before
    from tensorweave.core.registry import get_op
    one = tw.constant(1.0)
    g = tw.Graph()
    with g.as_default():
        assert dispatch.current_interpreter() is dispatch.GRAPH
        with dispatch.interpreter_scope(dispatch.EAGER):      # eager inside a graph being built
            r = dispatch.execute(get_op("AddV2"), [one, one])
    assert float(r) == 2.0 and not g.get_operations()


def test_fused_loops_and_in_place_nodes_are_data_and_cannot_carry_code():
    from tensorweave.runtime import passes
    n = 1 << 15
    g = tw.Graph()
    with g.as_default():
        x = v1.placeholder(tw.float32, [n])
        m = tw.matmul(tw.reshape(x, [n // 8, 8]), tw.constant(np.eye(8, dtype=np.float32)))
        y = tw.exp(tw.reshape(m, [n]) * 2.0) - 1.0                   # fused, writing into the dead matmul result
        s = tw.reduce_sum(tw.square(x - 1.0))                         # fused with its reduction
        z = tw.exp(tw.exp(x))                                         # in-place Exp (fusion off below)
    old = passes.get_options()
    try:
        passes.set_options({"fusion_min_elements": 1, "fusion_function_graphs_only": False})
        plan = executor.build_plan([y, s], [], [x])
        passes.set_options({"elementwise_fusion": False})
        plan2 = executor.build_plan([z], [], [x])
    finally:
        passes.reset_options()
        passes.set_options(old)
    types = [nd.op for nd in plan.spec.nodes]
    assert "FusedElementwise" in types and "FusedReduction" in types
    assert any(nd.inplace is not None for nd in plan2.spec.nodes)
    xv = np.linspace(-1, 1, n).astype(np.float32)
    for p in (plan, plan2):
        doc, tensors = plan_io.plan_to_json(p)
        assert "import" not in json.dumps(doc)       # a fused loop is op types and argument names
        other = plan_io.plan_from_json(doc, tensors, Runtime("r"))
        for a, b in zip(p([xv]), other([xv])):
            np.testing.assert_array_equal(a, b)
    doc, tensors = plan_io.plan_to_json(plan)
    fused = next(i for i, nd in enumerate(doc["plan"]["nodes"]) if nd["op"] == "FusedElementwise")
    bad_args = [{"tuple": [{"tuple": ["Exp", {"tuple": ["a0[0]); __import__('os'"]}]}]},
                {"tuple": [{"tuple": ["MatMul", {"tuple": ["a0", "a0"]}]}]},
                {"tuple": [{"tuple": ["Exp", {"tuple": ["v0"]}]}]}]
    for program in bad_args:
        d = json.loads(json.dumps(doc))
        d["plan"]["nodes"][fused]["attrs"]["program"] = program
        with pytest.raises(ValueError, match="fused program"):
            plan_io.plan_from_json(d, tensors, Runtime("r"))
