"""A steady plan's compiled steps run as nogil segments (runtime/nogil_segments.py, kernels/cpu/nogil_ops.py):
the same bits as the stock kernels, split around steps without a compiled form, a shape change
leaves the steady path, errors name their node."""
import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import tensorweave as tw
from tensorweave.core import errors
from tensorweave.kernels import threads
from tensorweave.kernels.cpu import array_kernels, jit, nn_loops, nogil_ops as N, reduce_kernels
from tensorweave.runtime import nogil_segments
from mlp_step import mlp_step, plans, run

RNG = np.random.default_rng(24)
SIZES = (96, 64, 64, 32)     # every product of the step above gemm.MIN_WORK at batch 32


@pytest.fixture
def one_thread():
    before = threads.inter_op_slots()
    threads.set_inter_op_slots(1)
    try:
        with threadpool_limits(1):
            yield
    finally:
        threads.set_inter_op_slots(before)


@pytest.fixture
def switch():
    before = nogil_segments.enabled()
    yield nogil_segments.set_enabled
    nogil_segments.set_enabled(before)


def _segments(step):
    return [[d for d in (p.runner.__defaults__ or ()) if isinstance(d, nogil_segments.Segment)] for p in plans(step)]


def _train(switch, on, placement=None, steps=5):
    switch(on)
    step, params = mlp_step(SIZES, placement)
    return (*run(step, params, steps), _segments(step))


@pytest.mark.parametrize("ranks", [None, 2])
def test_mlp_step_same_bits_with_segments(one_thread, switch, ranks):
    placement = None if ranks is None else tw.placement("cpu", ranks=list(range(ranks)))
    off_losses, off_params, off_segs = _train(switch, False, placement)
    on_losses, on_params, on_segs = _train(switch, True, placement)
    assert all(not s for s in off_segs)
    # every plan starts with a segment (the forward pass: reads, bias adds, ReLUs and the products
    # whose one-thread class chose MKL, a per-machine timing)
    assert all(segs and segs[0].first == 0 and len(segs[0].program) >= 4 for segs in on_segs)
    assert [a.tobytes() for a in on_losses] == [a.tobytes() for a in off_losses]
    assert all(a.tobytes() == b.tobytes() for a, b in zip(on_params, off_params))


def _run(prog_rows, arrays):
    prog = np.zeros((len(prog_rows), N.WIDTH), np.int64)
    for r, row in enumerate(prog_rows):
        prog[r, :len(row)] = row
    addrs = np.array([a.ctypes.data for a in arrays], np.int64)
    assert jit.compile_now(N.run_program, prog, addrs)(prog, addrs) == 0


def test_opcodes_match_their_kernels_and_numpy():
    x = RNG.standard_normal((37, 19)).astype(np.float32)
    x[0, :3] = [-0.0, np.nan, 0.0]
    b, g = RNG.standard_normal(19).astype(np.float32), RNG.standard_normal((37, 19)).astype(np.float32)
    add, relu, rg, cs, mean = (np.empty_like(x), np.empty_like(x), np.empty_like(x), np.full(19, 7, np.float32),
                               np.empty(1, np.float32))
    loss = RNG.standard_normal(300).astype(np.float32) * 10
    _run([[N.ADD, 0, 1, 2, 37, 19], [N.RELU, 0, -1, 3, x.size], [N.RELU_GRAD, 4, 0, 5, x.size],
          [N.COLSUM, 4, -1, 6, 37, 19], [N.MEAN, 7, -1, 8, loss.size]], [x, b, add, relu, g, rg, cs, loss, mean])
    assert add.tobytes() == np.add(x, b).tobytes()
    assert relu.tobytes() == np.maximum(x, np.float32(0)).tobytes()
    ref = np.empty_like(x)
    nn_loops.relu_grad(g.reshape(-1), x.reshape(-1), ref.reshape(-1))
    assert rg.tobytes() == ref.tobytes() and np.array_equal(rg, np.where(x > 0, g, 0))
    assert cs.tobytes() == array_kernels._sum_to_like(g, b).tobytes() and np.allclose(cs, g.sum(0), rtol=1e-5)
    assert mean[0] == reduce_kernels._mean(loss, None, False) and np.isclose(mean[0], loss.astype(np.float64).mean())
    for n in (1, 7, 8, 9, 127, 128, 129, 1000):      # NumPy's pairwise blocks and halves
        v = RNG.standard_normal(n).astype(np.float32) * 100
        assert N.mean_1d(v, n) == reduce_kernels._mean(v, None, False)


def test_gemm_opcode_is_mkl_one_thread_call():
    from tensorweave.kernels.cpu import gemm
    serial = gemm._gemm_serial.get(np.dtype(np.float32))
    if serial is None:
        pytest.skip("no MKL with a per-thread setting")
    a, b = RNG.standard_normal((40, 24)).astype(np.float32), RNG.standard_normal((40, 16)).astype(np.float32)
    c, ref = np.empty((24, 16), np.float32), np.empty((24, 16), np.float32)
    serial(gemm._TRANS, gemm._NO_TRANS, 24, 16, 40, a, 24, b, 16, ref, 16)
    prog = [[N.GEMM, 0, 1, 2, gemm._TRANS, gemm._NO_TRANS, 24, 16, 40, 24, 16, 16, 3, 4]]
    p = np.zeros((1, N.WIDTH), np.int64)
    p[0] = prog[0]
    addrs = np.array([a.ctypes.data, b.ctypes.data, c.ctypes.data, serial.args[2], serial.args[0]], np.int64)
    assert jit.compile_now(N.run_program, p, addrs)(p, addrs) == 0
    assert c.tobytes() == ref.tobytes() and np.allclose(c, a.T @ b, atol=1e-4)


def test_step_without_compiled_form_splits_segments(one_thread, switch):
    switch(True)
    w = tw.Variable(RNG.standard_normal((64, 64)).astype(np.float32))
    x = tw.constant(RNG.standard_normal((32, 64)).astype(np.float32))

    @tw.function
    def f():
        m = tw.matmul(x, w)
        h = tw.nn.relu(m) + m                    # the ReLU's input is read after it: not written over
        h = tw.math.tanh(h)                      # no compiled form: the plan runs it between two segments
        return tw.reduce_mean(tw.nn.relu(h + x), axis=1)

    off = None
    for _ in range(2):
        off = f().numpy()
    jit.wait_for_compiles()
    on = [f().numpy() for _ in range(2)]
    segs = _segments(f)[0]
    assert len(segs) == 2 and segs[0].first < segs[1].first
    assert [s.steps[-1].node.op for s in segs][0] == "AddV2"
    assert all(o.tobytes() == off.tobytes() for o in on)


def test_shape_change_leaves_steady_path_and_errors_name_the_node(one_thread, switch):
    switch(True)
    w = tw.Variable(RNG.standard_normal((64, 64)).astype(np.float32))

    @tw.function
    def f(x, y):
        return tw.nn.relu(tw.nn.relu(x + y) + x)

    def args(n):
        return tw.constant(np.ones((n, 64), np.float32)), tw.constant(np.full((n, 64), 2, np.float32))
    for _ in range(2):
        f(*args(8))
    jit.wait_for_compiles()
    assert f(*args(8)).numpy()[0, 0] == 4 and _segments(f)[0]
    plan = list(f._cache.values())[-1]._plan
    vals = [np.ones((3, 64), np.float32), np.ones((3, 64), np.float32)]
    assert plan(vals)[0].shape == (3, 64) and plan.runner is None      # ran the Python way, re-plans
    assert plan(vals)[0][0, 0] == 3 and plan(vals)[0][0, 0] == 3         # recorded again at the new shape
    with pytest.raises(errors.InvalidArgumentError, match=r"node AddV2"):
        plan([np.ones((3, 64), np.float32), np.ones((4, 64), np.float32)])
    for n in range(4, 4 + 3 * nogil_segments.MAX_MISSES):     # a new shape every other call
        assert plan([np.ones((n % 5 + 1, 64), np.float32)] * 2)[0][0, 0] == 3
    assert plan.nogil_misses == nogil_segments.MAX_MISSES and not plan.runner.nogil_due   # no longer recorded
    del w
