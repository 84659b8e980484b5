"""Executor concurrency and buffer freeing, devices and placement, custom ops, py_function."""
import threading

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core import devices
from tensorweave.runtime import executor


def test_independent_nodes_run_concurrently():
    barrier = threading.Barrier(2, timeout=10)

    def wait(x):
        barrier.wait()  # returns only when both nodes are running at the same time
        return x * 2

    g = tw.Graph()
    with g.as_default():
        a = tw.py_function(wait, [tw.constant(1.0)], tw.float32)
        b = tw.py_function(wait, [tw.constant(2.0)], tw.float32)
        c = a + b
    with tw.Session(graph=g) as s:
        assert s.run(c) == 6.0


def test_sequential_config_forbids_concurrency():
    g = tw.Graph()
    with g.as_default():
        a = tw.matmul(tw.ones([256, 256]), tw.ones([256, 256]))
        b = tw.matmul(tw.ones([256, 256]), tw.fill([256, 256], 2.0))   # not a duplicate (CSE)
        c = a + b
        small = tw.matmul(tw.ones([2, 2]), tw.ones([2, 2])) + tw.matmul(tw.ones([2, 2]), tw.ones([2, 2]))
    plan = executor.build_plan([c], [], [])
    assert plan.parallel  # two big independent matmuls
    assert not executor.build_plan([small], [], []).parallel  # tiny ones are not worth a thread
    plan1 = executor.build_plan([c], [], [], parallel=False)
    assert executor.run_plan(plan1, [])[0].tolist() == executor.run_plan(plan, [])[0].tolist()


@pytest.fixture
def two_inter_op_slots():
    """Lets plans run ops side by side even where BLAS uses every core."""
    tw.config.threading.set_inter_op_parallelism_threads(2)
    yield
    tw.config.threading.set_inter_op_parallelism_threads(0)


def test_parallel_plans_wait_for_free_cores(two_inter_op_slots):
    from threadpoolctl import threadpool_limits
    from tensorweave.kernels import threads
    g = tw.Graph()
    with g.as_default():
        c = (tw.matmul(tw.ones([256, 256]), tw.ones([256, 256]))
             + tw.matmul(tw.ones([256, 256]), tw.fill([256, 256], 2.0)))
    assert executor.build_plan([c], [], []).parallel
    tw.config.threading.set_inter_op_parallelism_threads(0)
    with threadpool_limits(threads.cores()):
        assert threads.inter_op_slots() == 1 or threads.intra_op_threads() < threads.cores()
    with threadpool_limits(1):
        assert threads.inter_op_slots() == threads.cores()


def test_results_do_not_depend_on_schedule(two_inter_op_slots):
    rng = np.random.default_rng(0)
    g = tw.Graph()
    with g.as_default():
        x = tw.constant(rng.normal(size=(256, 256)).astype(np.float32))
        branches = [tw.matmul(x, x * float(k)) for k in range(8)]
        out = tw.add_n([tw.reduce_sum(b, axis=0) for b in branches])
    seq = executor.run_plan(executor.build_plan([out], [], [], parallel=False), [])[0]
    for _ in range(5):
        par = executor.run_plan(executor.build_plan([out], [], [], parallel=True), [])[0]
        np.testing.assert_array_equal(par, seq)


def test_a_chain_of_heavy_ops_is_not_worth_threads():
    g = tw.Graph()
    with g.as_default():
        w = tw.ones([256, 256])
        a = tw.matmul(tw.fill([256, 256], 2.0), w)
        c = tw.matmul(tw.matmul(a, w), w)        # each waits for the one before
    assert not executor.build_plan([c], [], []).parallel


def test_unknown_dimensions_count_as_large():
    g = tw.Graph()
    with g.as_default():
        x = tw.compat.v1.placeholder(tw.float32, [None, 256])
        y = tw.compat.v1.placeholder(tw.float32, [None, 256])
        w = tw.constant(np.ones((256, 256), np.float32))
        c = tw.matmul(x, w) + tw.matmul(y, w)
    assert executor.build_plan([c], [], [x, y]).parallel      # two heavy matmuls side by side


@pytest.mark.parametrize("parallel", [False, True])
def test_multi_output_ops_and_values_with_several_readers(two_inter_op_slots, parallel):
    """Each output of a multi-output op reaches its readers, and a value read by two (or
    four) ops stays until the last has run, in either schedule."""
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    g = tw.Graph()
    with g.as_default():
        feed = tw.compat.v1.placeholder(tw.float32, [4, 3])
        h = feed * 2.0                                   # two readers
        a, b = tw.split(h + 1.0, 2, axis=0)              # multi-output; h + 1.0 is read by Split only
        t = tw.exp(h * 0.0)                             # four readers
        out = tw.concat([a - b, tw.reduce_sum(t * 1.0 + t * 2.0 + t * 3.0 + t * 4.0, axis=0, keepdims=True)], 0)
    plan = executor.build_plan([out], [], [feed], parallel=parallel)
    got = executor.run_plan(plan, [x])[0]
    h = x * 2.0
    want = np.concatenate([(h + 1.0)[:2] - (h + 1.0)[2:], np.full((1, 3), 40.0, np.float32)], 0)
    np.testing.assert_array_equal(got, want)


def test_buffers_are_freed_after_their_last_reader():
    g = tw.Graph()
    with g.as_default():
        a = tw.constant(np.ones(4, np.float32))
        b = a * 2.0
        c = b + 1.0
        d = c * c
    plan = executor.build_plan([d], [], [])
    live_after = []
    vals = plan.initial.copy()   # constants are placed before the run
    for i, st in enumerate(plan.steps):
        r = st.fn(*[vals[s] for s in st.ins])
        vals[st.outs] = r
        for s in plan.frees[i]:
            vals[s] = None
        live_after.append(sum(v is not None for v in vals))
    assert max(live_after) <= 3  # never all intermediates at once
    assert vals[plan.fetch_slots[0]] is not None


def test_buffers_of_unfused_ops_are_freed_after_their_last_reader():
    """As above for ops the fusion pass leaves alone (a matmul chain: four steps)."""
    g = tw.Graph()
    with g.as_default():
        x = tw.compat.v1.placeholder(tw.float32, [4, 4])
        d = tw.matmul(tw.matmul(tw.matmul(tw.matmul(x, x), x), x), x)
    plan = executor.build_plan([d], [], [x])
    assert len(plan.steps) == 4
    vals = plan.initial.copy()
    vals[plan.feed_slots[0]] = np.eye(4, dtype=np.float32)
    live_after = []
    for i, st in enumerate(plan.steps):
        vals[st.outs] = st.fn(*[vals[s] for s in st.ins])
        for s in plan.frees[i]:
            vals[s] = None
        live_after.append(sum(v is not None for v in vals))
    assert live_after == [2, 2, 2, 2]       # the fed value and the newest product only
    np.testing.assert_array_equal(vals[plan.fetch_slots[0]], np.eye(4))


def test_an_op_touching_exactly_the_heavy_threshold_is_heavy():
    # [128, 256] x [256, 256] -> [128, 256]: 32768 + 65536 + 32768 = 2 ** 17 elements
    assert executor.HEAVY_ELEMENTS == 1 << 17
    g = tw.Graph()
    with g.as_default():
        w = tw.constant(np.ones((256, 256), np.float32))
        x = tw.compat.v1.placeholder(tw.float32, [128, 256])
        y = tw.compat.v1.placeholder(tw.float32, [128, 256])
        big = tw.matmul(x, w) + tw.matmul(y, w)
        x2 = tw.compat.v1.placeholder(tw.float32, [127, 256])
        y2 = tw.compat.v1.placeholder(tw.float32, [127, 256])
        small = tw.matmul(x2, w) + tw.matmul(y2, w)
    assert executor.build_plan([big], [], [x, y]).parallel
    assert not executor.build_plan([small], [], [x2, y2]).parallel


_TRACKED = []


def _tracking_ops():
    """Two custom ops: ``RtTracked`` returns a fresh array it keeps a weak reference to;
    ``RtAlive`` (after its input is ready) says how many of those arrays are still alive."""
    import gc
    import weakref
    from tensorweave.core.registry import registered_ops
    if "RtTracked" in registered_ops():
        return

    def tracked(x):
        a = np.array(x, copy=True)
        _TRACKED.append(weakref.ref(a))
        return a

    def alive(x):
        gc.collect()
        return np.float32(sum(r() is not None for r in _TRACKED))
    for name, fn in (("RtTracked", tracked), ("RtAlive", alive)):
        tw.register_op(name, infer=lambda inputs, attrs: (inputs[0].shape, inputs[0].dtype))
        tw.register_kernel(name, "CPU")(fn)
    # two outputs: a tracked array nobody may read, and a plain copy
    tw.register_op("RtTrackedPair", num_outputs=2,
                   infer=lambda inputs, attrs: [(inputs[0].shape, inputs[0].dtype)] * 2)
    tw.register_kernel("RtTrackedPair", "CPU")(lambda x: (tracked(x), np.array(x, copy=True)))


@pytest.mark.parametrize("parallel", [False, True])
def test_a_value_is_released_once_its_last_reader_has_run(two_inter_op_slots, parallel):
    _tracking_ops()
    _TRACKED.clear()
    g = tw.Graph()
    with g.as_default():
        x = tw.compat.v1.placeholder(tw.float32, [4])
        a = tw.raw_op("RtTracked", [x])               # read by the two reductions only
        b = tw.reduce_sum(a) + tw.reduce_max(a)
        alive = tw.raw_op("RtAlive", [b])
    plan = executor.build_plan([alive], [], [x], parallel=parallel)
    assert executor.run_plan(plan, [np.ones(4, np.float32)])[0] == 0.0
    assert len(_TRACKED) == 1


@pytest.mark.parametrize("parallel", [False, True])
def test_an_output_nobody_reads_is_released_at_once(two_inter_op_slots, parallel):
    _tracking_ops()
    _TRACKED.clear()
    g = tw.Graph()
    with g.as_default():
        x = tw.compat.v1.placeholder(tw.float32, [4])
        _, copy = tw.raw_op("RtTrackedPair", [x])
        alive = tw.raw_op("RtAlive", [tw.reduce_sum(copy)])
    plan = executor.build_plan([alive], [], [x], parallel=parallel)
    assert executor.run_plan(plan, [np.ones(4, np.float32)])[0] == 0.0
    assert len(_TRACKED) == 1


@pytest.mark.timeout(60)
def test_a_parallel_plan_without_steps_returns(two_inter_op_slots):
    g = tw.Graph()
    with g.as_default():
        x = tw.compat.v1.placeholder(tw.float32, [2])
    plan = executor.build_plan([x], [], [x], parallel=True)
    assert len(plan.steps) == 0
    assert executor.run_plan(plan, [np.ones(2, np.float32)])[0].tolist() == [1.0, 1.0]


def test_device_strings_and_scopes():
    spec = tw.DeviceSpec.from_string("/job:worker/task:1/device:CPU:0")
    assert (spec.job, spec.task, spec.device_type, spec.device_index) == ("worker", 1, "CPU", 0)
    assert tw.DeviceSpec.from_string("/cpu:3").to_string() == "/job:localhost/replica:0/task:0/device:CPU:3"
    with pytest.raises(ValueError, match="Invalid device"):
        tw.DeviceSpec.from_string("/banana")
    g = tw.Graph()
    with g.as_default():
        with tw.device("/job:worker"):
            with tw.device("/cpu:1"):
                x = tw.constant(1.0)
    assert x.op.device == "/job:worker/replica:0/task:0/device:CPU:1"


@pytest.fixture
def three_cpus():
    old = devices.device_count("CPU")
    devices.set_logical_cpu_count(3)
    yield
    devices.set_logical_cpu_count(old)


def test_placement_copies_and_logging(three_cpus, capsys):
    g = tw.Graph()
    with g.as_default():
        with tw.device("/cpu:1"):
            x = tw.constant(2.0) * 3.0
        with tw.device("/cpu:2"):
            y = x + 1.0
    plan = executor.build_plan([y], [], [])
    assert plan.num_copies == 1
    with tw.Session(graph=g, config=tw.compat.v1.ConfigProto(log_device_placement=True)) as s:
        assert s.run(y) == 7.0
    err = capsys.readouterr().err
    assert "AddV2: (AddV2): /job:localhost/replica:0/task:0/device:CPU:2" in err


def test_soft_placement_and_hard_failure(three_cpus):
    g = tw.Graph()
    with g.as_default():
        with tw.device("/gpu:0"):
            x = tw.constant(1.0) + 1.0
    with tw.Session(graph=g) as s:
        assert s.run(x) == 2.0
    with tw.Session(graph=g, config=tw.compat.v1.ConfigProto(allow_soft_placement=False)) as s:
        with pytest.raises(tw.errors.InvalidArgumentError, match="Cannot assign a device"):
            s.run(x)
    with tw.device("/cpu:2"):
        e = tw.constant([1.0]) * 2.0
    assert e.device.endswith("CPU:2")
    with tw.device("/gpu:0"):
        e = tw.constant([1.0]) * 2.0
    assert e.device.endswith("CPU:0")


def test_register_custom_op_kernel_and_gradient():
    tw.register_op("TimesThreePlusOne", infer=lambda inputs, attrs: (inputs[0].shape, inputs[0].dtype),
                   grad=lambda op, g: [g * 3.0])
    tw.register_kernel("TimesThreePlusOne", "CPU")(lambda x: x * 3 + 1)
    x = tw.constant([1.0, 2.0])
    with tw.GradientTape() as t:
        t.watch(x)
        y = tw.raw_op("TimesThreePlusOne", [x])
    assert y.numpy().tolist() == [4.0, 7.0]
    assert t.gradient(y, x).numpy().tolist() == [3.0, 3.0]
    g = tw.Graph()
    with g.as_default():
        z = tw.raw_op("TimesThreePlusOne", [tw.constant([0.0])])
    with tw.Session(graph=g) as s:
        assert s.run(z).tolist() == [1.0]
    with pytest.raises(ValueError, match="already registered"):
        tw.register_op("TimesThreePlusOne", infer=lambda i, a: None)


def test_missing_kernel_names_op_and_device():
    tw.register_op("KernelLess", infer=lambda inputs, attrs: (inputs[0].shape, inputs[0].dtype))
    with pytest.raises(tw.errors.NotFoundError, match="No kernel registered for op 'KernelLess'"):
        tw.raw_op("KernelLess", [tw.constant(1.0)])


def test_py_function_graph_and_numpy_function():
    g = tw.Graph()
    with g.as_default():
        x = tw.placeholder(tw.float32, [None])
        y = tw.py_function(lambda a: tw.reduce_sum(a * a), [x], tw.float32)
        (dx,) = tw.gradients(y, [x])
        z = tw.numpy_function(lambda a: np.sort(a)[::-1].copy(), [x], tw.float32)
    with tw.Session(graph=g) as s:
        yv, dv, zv = s.run([y, dx, z], {x: [3.0, 1.0, 2.0]})
    assert yv == 14.0 and dv.tolist() == [6.0, 2.0, 4.0] and zv.tolist() == [3.0, 2.0, 1.0]


def test_runtime_error_names_node_and_site():
    g = tw.Graph()
    with g.as_default():
        p = tw.placeholder(tw.int32, [None])
        bad = tw.floordiv(p, tw.constant([0, 1]), name="divider")
    with tw.Session(graph=g) as s:
        with pytest.raises(tw.errors.InvalidArgumentError, match=r"node divider .*test_runtime.py:\d+"):
            s.run(bad, {p: [1, 2]})


def test_constants_and_handles_are_preset_and_keep_the_ordering_through_them():
    a, b = tw.Variable(1.0), tw.Variable(2.0)

    @tw.function
    def write_a_then_read_b():
        a.assign(5.0)
        return b.read_value() * 2.0   # b's handle is made here: chained after the assign

    f = write_a_then_read_b.get_concrete_function()
    plan = executor.build_plan(f.outputs, [f.graph._last_stateful], f.inputs + [p for _, p in f.graph.captures])
    types = [st.op.type for st in plan.steps]
    assert "Const" not in types and "VarHandleOp" not in types
    handle_b = next(op for op in f.graph.get_operations() if op.type == "VarHandleOp" and op.control_inputs)
    assert handle_b.control_inputs[0].type == "AssignVariableOp"
    # The chain assign -> handle -> read survives the handle becoming a preset value.
    assert types.index("AssignVariableOp") in plan.deps[types.index("ReadVariableOp")]
    assert float(write_a_then_read_b()) == 4.0 and float(a.numpy()) == 5.0


def test_device_index_equal_to_the_device_count_does_not_exist(three_cpus):
    """/cpu:3 with 3 CPUs is one past the last device (indices are 0-based)."""
    from tensorweave.core.registry import get_op
    assert devices.place("/cpu:2", get_op("AddV2"), soft=False).endswith("CPU:2")
    with pytest.raises(tw.errors.InvalidArgumentError, match="no CPU device with index 3 \\(this process has 3\\)"):
        devices.place("/cpu:3", get_op("AddV2"), soft=False)
    assert devices.place("/cpu:3", get_op("AddV2"), soft=True).endswith("CPU:0")
