"""The optimizer apply as a nogil segment's rows (``nogil_ops.APPLY``, runtime/nogil_segments.py):
the one-device step's SGD / momentum update runs compiled with the bits of the Python way, a
variable reassigned between steps is updated from its new value, and a value read before a step
keeps what it read (copy-on-write: the segment resolves the storages on every call)."""
import numpy as np
import pytest

from tensorweave.kernels.cpu import jit, nogil_ops as N
from mlp_step import mlp_step, run, same
from test_nogil24_segments import SIZES, _segments, one_thread, switch  # noqa: F401 - fixtures

RNG = np.random.default_rng(26)


def _run(switch, on, momentum, between=None, steps=5):
    """Losses and parameters of ``steps`` one-device MLP steps; ``between(params, i)`` before step i."""
    switch(on)
    step, params = mlp_step(SIZES, momentum=momentum)
    return (*run(step, params, steps, between and (lambda i: between(params, i))), _segments(step)[0])


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_apply_in_a_segment_gives_the_kernels_bits(one_thread, switch, momentum):  # noqa: F811
    off = _run(switch, False, momentum)
    on = _run(switch, True, momentum)
    assert not off[2] and len(on[2][0].program) >= 4          # (the forward pass: one segment)
    applied = [seg for seg in on[2] if N.APPLY in seg.program[:, 0]]
    assert len(applied) == 1 and list(applied[0].program[:, 0]).count(N.APPLY) == 6   # one row per variable
    assert applied[0].runs["compiled"] >= 2 and applied[0].runs["python"] <= 1
    assert (applied[0].program[:, 5] >= 0).all() == (momentum > 0)                   # its slots' storages
    assert same(on[0], off[0]) and same(on[1], off[1])


def test_a_variable_reassigned_between_steps_is_updated_from_its_new_value(one_thread, switch):  # noqa: F811
    held = {}

    def between(params, i):
        if i == 3:
            params[0].assign(np.full(params[0].shape, 0.01, np.float32))
        if i == 4:      # a value read now keeps what it read through the step (the update copies)
            held["read"] = params[2].read_value()
            held["then"] = held["read"].numpy().copy()
    off = _run(switch, False, 0.9, between)
    off_held = held.pop("then")
    on = _run(switch, True, 0.9, between)
    assert [seg.runs["compiled"] for seg in on[2] if N.APPLY in seg.program[:, 0]][0] >= 3
    assert same(on[0], off[0]) and same(on[1], off[1])
    assert held["read"].numpy().tobytes() == held["then"].tobytes() == off_held.tobytes()
    assert held["read"].numpy().tobytes() != on[1][2].tobytes()


def test_apply_opcode_rows_match_the_loops():
    from tensorweave.kernels.cpu import training_kernels as T
    w, m, g = (RNG.standard_normal(300).astype(np.float32) for _ in range(3))
    lr, mom = np.array(0.05, np.float32), np.array([0.9], np.float32)
    for nesterov in (0, 1):
        w1, m1, w2, m2 = w.copy(), m.copy(), w.copy(), m.copy()
        T._momentum_flat(w1, m1, g, np.float32(lr), np.float32(0.9), bool(nesterov))
        prog = np.zeros((2, N.WIDTH), np.int64)
        prog[0, :8] = [N.APPLY, 0, 1, 2, 300, 3, 4, nesterov]
        prog[1, :8] = [N.APPLY, 0, 1, 5, 300, -1, 4, 0]
        w3 = w.copy()
        addrs = np.array([a.ctypes.data for a in (g, lr, w2, m2, mom, w3)], np.int64)
        assert jit.compile_now(N.run_program, prog, addrs)(prog, addrs) == 0
        assert w2.tobytes() == w1.tobytes() and m2.tobytes() == m1.tobytes()
        ref = w.copy()
        T._sgd_flat(ref, g, np.float32(lr))
        assert w3.tobytes() == ref.tobytes()


@pytest.mark.parametrize("decay", [0.0, 0.01])
def test_an_apply_after_a_step_without_compiled_form_is_a_segment_alone(one_thread, switch, decay):  # noqa: F811
    import tensorweave as tw
    rng = np.random.default_rng(1)
    w = tw.Variable(rng.standard_normal((16, 8)).astype(np.float32))
    b = tw.Variable(np.zeros(8, np.float32))
    x = tw.constant(rng.standard_normal((32, 16)).astype(np.float32))

    def run(on):
        switch(on)
        w.assign(rng.standard_normal((16, 8)).astype(np.float32) * 0 + 0.5)
        b.assign(np.zeros(8, np.float32))
        opt = tw.keras.optimizers.SGD(0.1, momentum=0.5, nesterov=True, weight_decay=decay or None)

        @tw.function
        def step():
            with tw.GradientTape() as tape:
                loss = tw.reduce_mean(tw.nn.relu(tw.matmul(x, w) + b))
            grads = [tw.math.tanh(g) for g in tape.gradient(loss, [w, b])]     # (no compiled form)
            opt.apply_gradients(zip(grads, [w, b]))
            return loss
        for i in range(5):
            step()
            if i == 1:
                jit.wait_for_compiles()
        return w.numpy().copy(), b.numpy().copy(), _segments(step)[0]
    off_w, off_b, _ = run(False)
    on_w, on_b, segs = run(True)
    alone = [seg for seg in segs if seg.steps[-1].node.op.endswith("ApplyKerasMomentum")]
    assert on_w.tobytes() == off_w.tobytes() and on_b.tobytes() == off_b.tobytes()
    if decay:       # (weight decay: the kernel's own pass first, no compiled form)
        assert not alone
        return
    assert len(alone) == 1 and set(alone[0].program[:, 0]) == {N.APPLY} and alone[0].runs["compiled"] >= 2
    assert (alone[0].program[:, 7] == 1).all()          # nesterov
    assert on_w.tobytes() == off_w.tobytes() and on_b.tobytes() == off_b.tobytes()


def test_entry_takes_an_offset_view_and_refuses_a_misaligned_input(one_thread, switch):  # noqa: F811
    import tensorweave as tw
    switch(True)

    @tw.function
    def f(x, y):
        return tw.nn.relu(tw.nn.relu(x + y) + x)
    x, y = tw.constant(np.ones((8, 64), np.float32)), tw.constant(np.full((8, 64), 2, np.float32))
    for _ in range(2):
        f(x, y)
    jit.wait_for_compiles()
    f(x, y)
    plan = list(f._cache.values())[-1]._plan
    seg = _segments(f)[0][0]
    shifted = np.ones(8 * 64 + 1, np.float32)[1:].reshape(8, 64)        # 4 bytes past an aligned start: aligned
    before = seg.runs["compiled"]
    assert plan([shifted, np.full((8, 64), 2, np.float32)])[0][0, 0] == 4
    assert seg.runs["compiled"] == before + 1 and plan.runner is not None
    odd = np.frombuffer(bytearray(8 * 64 * 4 + 1), np.float32, offset=1).reshape(8, 64)   # not aligned
    assert not odd.flags.aligned
    assert plan([odd, np.full((8, 64), 2, np.float32)])[0][0, 0] == 2
    assert seg.runs["why"].startswith("input") and seg.runs["compiled"] == before + 1 and plan.runner is None


def test_a_storage_that_cannot_be_had_raises_from_the_apply_step_named(one_thread, switch):  # noqa: F811
    switch(True)
    step, params = mlp_step(SIZES, momentum=0.9)
    for _ in range(2):
        step()
    jit.wait_for_compiles()
    step()

    def refuse():
        raise RuntimeError("storage refused")
    params[2]._storage_for_update = refuse
    with pytest.raises(Exception, match=r"(?s)storage refused.*ApplyKerasMomentum|ApplyKerasMomentum.*storage refused"):
        step()
    seg = [s for s in _segments(step)[0] if N.APPLY in s.program[:, 0]][0]
    assert seg.runs["why"] == "variable failed"
