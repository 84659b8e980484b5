"""The whole-graph planner: tw.function on global tensors equals the eager global run and the
single-device run of the same function (2 and 3 ranks, a 2x2 mesh, uneven sizes), gradients
inside the function, training 20 steps, pinned layouts, per-rank specs through plan_io."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core.sbp import B, P, S

P2 = tw.placement("cpu", ranks=[0, 1])
P3 = tw.placement("cpu", ranks=[0, 1, 2])
MESH = tw.placement("cpu", ranks=[[0, 1], [2, 3]])
RNG = np.random.default_rng(11)


def _arr(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def mlp_block(x, w, b):
    h = tw.nn.relu(tw.matmul(x, w) + b)
    return tw.reduce_sum(h * h, axis=1) - tw.reduce_mean(h)


def softmax_ce(x, w, b):
    logits = tw.matmul(x, w) + b
    return tw.reduce_sum(tw.nn.softmax(logits) * logits, axis=-1)


def reshapes(x, w, b):
    y = tw.reshape(tw.matmul(x, w), [-1])
    return tw.concat([y * 2.0, tw.tanh(y)], axis=0) + tw.reduce_max(b)


def grads_fn(x, w, b):
    with tw.GradientTape() as tape:
        tape.watch([w, b])
        loss = tw.reduce_mean(tw.square(tw.matmul(x, w) + b))
    gw, gb = tape.gradient(loss, [w, b])
    return gw, gb, loss


def tw_gradients_fn(x, w, b):
    loss = tw.reduce_sum(tw.sigmoid(tw.matmul(x, w)) * b)
    return tw.gradients(loss, [x, w])


FUNCS = {"mlp_block": mlp_block, "softmax": softmax_ce, "reshapes": reshapes, "tape": grads_fn,
         "tw_gradients": tw_gradients_fn}

# placement, x sbp, w sbp, b sbp; x is (7, 5) (uneven over 2 and 3 ranks), w (5, 3), b (3,)
LAYOUTS = {
    "dp2": (P2, S(0), B, B),
    "mp3": (P3, B, S(1), S(0)),
    "contract2": (P2, S(1), S(0), B),
    "partial3": (P3, S(0), B, P),
    "mesh": (MESH, (S(0), S(1)), (B, S(0)), (B, B)),
}


def _flat(out):
    return [o for o in (out if isinstance(out, (list, tuple)) else [out])]


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("name", sorted(FUNCS))
def test_planned_equals_eager_equals_one_device(name, layout):
    fn = FUNCS[name]
    placement, xs, ws, bs = LAYOUTS[layout]
    x, w, b = _arr(7, 5), _arr(5, 3), _arr(3)
    want = _flat(tw.function(fn)(tw.constant(x), tw.constant(w), tw.constant(b)))
    gx, gw, gb = (tw.constant(v).to_global(placement=placement, sbp=s) for v, s in ((x, xs), (w, ws), (b, bs)))
    planned_fn = tw.function(fn)
    planned = _flat(planned_fn(gx, gw, gb))
    eager = _flat(fn(gx, gw, gb)) if name != "tw_gradients" else planned     # (tw.gradients: graphs only)
    assert len(planned) == len(want)
    for p, e, o in zip(planned, eager, want):
        assert getattr(p, "is_global", False)
        np.testing.assert_allclose(p.numpy(), o.numpy(), rtol=2e-5, atol=1e-5)
        np.testing.assert_allclose(e.numpy(), o.numpy(), rtol=2e-5, atol=1e-5)
    planned_fn(gx, gw, gb)
    assert planned_fn.experimental_get_tracing_count() == 1
    # another layout of the same shapes is another trace (a plan per input signature)
    other = (S(0),) * placement.ndim if gx.sbp != (S(0),) * placement.ndim else (B,) * placement.ndim
    again = _flat(planned_fn(gx.to_global(sbp=other), gw, gb))
    assert planned_fn.experimental_get_tracing_count() == 2
    for p, o in zip(again, want):
        np.testing.assert_allclose(p.numpy(), o.numpy(), rtol=2e-5, atol=1e-5)


def test_a_call_is_one_hand_off_per_rank(monkeypatch):
    from tensorweave.distribute.ranks import default_world
    world = default_world()
    f = tw.function(mlp_block)
    x, w, b = (tw.constant(v).to_global(placement=P2, sbp=s) for v, s in ((_arr(6, 5), S(0)), (_arr(5, 3), B),
                                                                            (_arr(3), B)))
    f(x, w, b)                          # traces, plans and binds
    calls = []
    real = world.run
    monkeypatch.setattr(world, "run", lambda ranks, fn, **kw: calls.append(tuple(ranks)) or real(ranks, fn, **kw))
    f(x, w, b)
    assert calls == [(0, 1)]


def test_a_pinned_layout_inside_the_function_wins():
    x, w = _arr(6, 4), _arr(4, 3)
    gx = tw.constant(x).to_global(placement=P2, sbp=S(0))
    gw = tw.constant(w).to_global(placement=P2, sbp=B)

    @tw.function
    def f(x, w):
        y = tw.matmul(x, w).to_global(sbp=S(1))
        return y * 2.0, tw.matmul(x, w)
    pinned, free = f(gx, gw)
    assert pinned.sbp == (S(1),) and free.sbp == (S(0),)
    np.testing.assert_allclose(pinned.numpy(), 2 * x @ w, rtol=1e-5)
    np.testing.assert_allclose(free.numpy(), x @ w, rtol=1e-5)


def _matmul_plan(f, *args):
    gp = f.get_concrete_function(*args)._global.plan
    return next(p for p in gp.op_plans.values() if p.op.type == "MatMul")


def test_look_ahead_produces_what_the_pinned_consumer_needs(monkeypatch):
    """x (4, 2) S(0) @ w (2, 256) B pinned to S(1): greedy alone runs S(0) x B and then moves the
    big product all-to-all; the look-ahead gathers the small x and runs B x S(1)."""
    from tensorweave.distribute import planner
    x, w = _arr(4, 2), _arr(2, 256)
    gx = tw.constant(x).to_global(placement=P2, sbp=S(0))
    gw = tw.constant(w).to_global(placement=P2, sbp=B)
    fn = lambda x, w: tw.matmul(x, w).to_global(sbp=S(1))  # noqa: E731
    f = tw.function(fn)
    assert _matmul_plan(f, gx, gw).in_nd == [(B,), (S(1),)]
    out = f(gx, gw)
    assert out.sbp == (S(1),)
    np.testing.assert_allclose(out.numpy(), x @ w, rtol=1e-5)
    real = planner.plan_graph
    monkeypatch.setattr(planner, "plan_graph", lambda *a, **k: real(*a, **dict(k, lookahead=False)))
    assert _matmul_plan(tw.function(fn), gx, gw).in_nd == [(S(0),), (B,)]


def test_global_closure_values_and_local_arguments_mix():
    c = tw.constant(_arr(5, 3)).to_global(placement=P3, sbp=S(1))
    x = _arr(4, 5)

    @tw.function
    def f(x, scale):
        return tw.matmul(x, c) * scale
    out = f(tw.constant(x).to_global(placement=P3, sbp=B), tw.constant(3.0))
    np.testing.assert_allclose(out.numpy(), x @ c.numpy() * 3.0, rtol=1e-5)


def test_an_outer_tape_on_a_planned_call_gives_the_gradient():
    value = _arr(3, 2)
    w = tw.constant(value).to_global(placement=P2, sbp=B)
    f = tw.function(lambda w: tw.reduce_sum(w * w))
    f(w)
    with tw.GradientTape() as tape:       # more in tests/test_plan13_tape.py
        tape.watch(w)
        loss = f(w)
    np.testing.assert_allclose(tape.gradient(loss, w).numpy(), 2 * value, rtol=1e-6)


@pytest.mark.parametrize("layout", ["dp2", "mp3"])
def test_tf1_session_graph_with_global_variables_trains_like_one_device(layout):
    placement, data_sbp, w_sbp = {"dp2": (P2, S(0), B), "mp3": (P3, B, S(1))}[layout]
    x_val, w_val = _arr(8, 4), _arr(4, 3)

    def run(glob):
        g = tw.Graph()
        with g.as_default():
            x = tw.compat.v1.placeholder(tw.float32, [8, 4])
            xg = x.to_global(placement=placement, sbp=data_sbp) if glob else x
            w = tw.Variable(w_val, placement=placement, sbp=w_sbp) if glob else tw.Variable(w_val)
            loss = tw.reduce_mean(tw.square(tw.matmul(xg, w)))
            train = tw.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, var_list=[w])
            init = tw.compat.v1.global_variables_initializer()
        with tw.compat.v1.Session(graph=g) as sess:
            sess.run(init)
            losses = [sess.run([loss, train], feed_dict={x: x_val})[0] for _ in range(5)]
        return losses, w.numpy()
    want, want_w = run(False)
    got, got_w = run(True)
    np.testing.assert_allclose(got, want, rtol=2e-5)
    np.testing.assert_allclose(got_w, want_w, rtol=2e-5, atol=1e-6)


# ---- training 20 steps inside tw.function == one device ---------------------------------------------
STEPS = 20
X = RNG.standard_normal((12, 6)).astype(np.float32)
Y = RNG.standard_normal((12, 3)).astype(np.float32)
INIT = {"w1": (RNG.standard_normal((6, 10)) * 0.4).astype(np.float32), "b1": np.full(10, 0.1, np.float32),
        "w2": (RNG.standard_normal((10, 3)) * 0.4).astype(np.float32), "b2": np.zeros(3, np.float32)}
TRAIN = {
    "data_parallel": (P2, S(0), {"w1": B, "b1": B, "w2": B, "b2": B}),
    "model_parallel": (P3, B, {"w1": S(1), "b1": S(0), "w2": S(0), "b2": B}),
    "hybrid_2x2": (MESH, (S(0), B), {"w1": (B, S(1)), "b1": (B, S(0)), "w2": (B, S(0)), "b2": (B, B)}),
    "zero_sharded": (P2, S(0), {"w1": S(0), "b1": S(0), "w2": S(0), "b2": S(0)}),
}


def _train(x, y, params, optimizer):
    names = sorted(params)

    @tw.function
    def step(x, y):
        with tw.GradientTape() as tape:
            h = tw.nn.relu(tw.matmul(x, params["w1"]) + params["b1"])
            out = tw.matmul(h, params["w2"]) + params["b2"]
            loss = tw.reduce_mean(tw.square(out - y))
        grads = tape.gradient(loss, [params[n] for n in names])
        optimizer.apply_gradients(zip(grads, [params[n] for n in names]))
        return loss
    losses = [float(step(x, y)) for _ in range(STEPS)]
    assert step.experimental_get_tracing_count() == 1
    return losses, {n: params[n].numpy() for n in names}


@pytest.fixture(scope="module")
def one_device():
    params = {n: tw.Variable(v) for n, v in INIT.items()}
    return _train(tw.constant(X), tw.constant(Y), params, tw.keras.optimizers.Adam(0.05))


@pytest.mark.parametrize("layout", sorted(TRAIN))
def test_training_step_in_tw_function_matches_one_device(layout, one_device):
    placement, data_sbp, weight_sbp = TRAIN[layout]
    x = tw.constant(X).to_global(placement=placement, sbp=data_sbp)
    y = tw.constant(Y).to_global(placement=placement, sbp=data_sbp)
    params = {n: tw.Variable(v, placement=placement, sbp=weight_sbp[n]) for n, v in INIT.items()}
    losses, final = _train(x, y, params, tw.keras.optimizers.Adam(0.05))
    want_losses, want = one_device
    np.testing.assert_allclose(losses, want_losses, rtol=2e-5)
    for n in want:
        np.testing.assert_allclose(final[n], want[n], rtol=2e-5, atol=1e-6, err_msg=n)


# ---- per-rank plan specs are data -------------------------------------------------------------------
def test_rank_specs_round_trip_through_plan_io(tmp_path):
    from tensorweave.distribute.ranks import RankComms, World
    from tensorweave.runtime import executor
    from tensorweave.runtime.runtime import Runtime
    from tensorweave.saving.plan_io import load_plan, save_plan
    v = tw.Variable(_arr(5, 3), placement=P3, sbp=S(1))
    x = tw.constant(_arr(7, 5)).to_global(placement=P3, sbp=S(0))

    @tw.function
    def f(x):
        y = tw.matmul(x, v)
        v.assign_add(tw.ones_like(v) * 0.5)
        return tw.reduce_sum(y, axis=0)
    f.get_concrete_function(x)
    planned = f.get_concrete_function(x)._global
    world = World()                     # fresh ranks standing in for other processes
    loaded = []
    for i in range(3):
        spec, live = planned.plan.rank_spec(i, RankComms(world, i))
        assert [d["kind"] for d in spec.resources] == ["communicator", "variable"]
        d = tmp_path / f"rank{i}"
        save_plan(executor.bind(spec, Runtime(f"src{i}"), live), str(d))
        rt = Runtime(f"worker{i}", rank=i)
        rt.add_resource("communicator", "world", RankComms(world, i))
        loaded.append(load_plan(str(d), rt))
    want_v = v.numpy()
    feeds = [[p] for p in x._pieces]
    got = world.run([0, 1, 2], lambda i: executor.run_plan(loaded[i], feeds[i]))
    pieces = [r[0] for r in got]
    want = f(x)
    from tensorweave.distribute.layout import assemble
    np.testing.assert_allclose(assemble(pieces, (3,), P3, want.sbp), want.numpy(), rtol=1e-5)
    # the loaded plans updated their own copies of the shards, not the live variable
    np.testing.assert_allclose(np.concatenate([loaded[i].resources[1]._read() for i in range(3)], axis=1),
                               want_v + 0.5, rtol=1e-6)
    world.shutdown()


# ---- bad input -----------------------------------------------------------------------------------------
def test_an_op_reading_two_placements_in_one_planned_function_is_a_clear_error():
    # several placements plan as segments (tests/test_plan13_placements.py); a move is the user's to_global, as eager
    a = tw.constant(_arr(4, 3)).to_global(placement=P2, sbp=S(0))
    b = tw.constant(_arr(4, 3)).to_global(placement=P3, sbp=B)
    with pytest.raises(tw.errors.InvalidArgumentError, match=r"different placements for 'AddV2' \(AddV2\).*ranks "
                                                             r"\[0, 1\].*ranks \[0, 1, 2\]"):
        tw.function(lambda a, b: a + b)(a, b)


def test_a_generator_draw_in_a_planned_function_is_refused_naming_it():
    # (seeded random ops are planned, tests/test_plan13b_random.py; a Generator's one stream object is not)
    x = tw.constant(_arr(4, 3)).to_global(placement=P2, sbp=S(0))
    g = tw.random.Generator.from_seed(1)
    with pytest.raises(tw.errors.UnimplementedError, match="RandomStandardNormal.*not planned for global tensors"):
        tw.function(lambda x: x + g.normal([4, 3]))(x)


def test_local_weights_train_on_a_global_batch_in_tw_function():
    """A Keras layer with local weights on a global batch: the updates of the local variables get
    the gradients' logical values and run once (as eager, where a local weight's gradient is local)."""
    x_val, labels = _arr(8, 4), np.arange(8) % 3

    def run(to_global):
        layer = tw.keras.layers.Dense(3, kernel_initializer="ones")
        x, y = tw.constant(x_val), tw.constant(labels)
        if to_global:
            x, y = (t.to_global(placement=P2, sbp=S(0)) for t in (x, y))
        opt = tw.keras.optimizers.SGD(0.1)

        @tw.function
        def step(x, y):
            with tw.GradientTape() as tape:
                loss = tw.reduce_mean(tw.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=layer(x)))
            opt.apply_gradients(zip(tape.gradient(loss, layer.trainable_variables), layer.trainable_variables))
            return loss
        losses = [float(step(x, y)) for _ in range(3)]
        return losses, layer.kernel.numpy()
    (want_losses, want), (losses, got) = run(False), run(True)
    np.testing.assert_allclose(losses, want_losses, rtol=2e-5)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-7)


def test_a_failing_rank_names_the_node_and_the_users_line():
    x = tw.constant(_arr(4, 3)).to_global(placement=P2, sbp=S(0))
    f = tw.function(lambda x: tw.gather(x, tw.constant([0, 7]), axis=1))
    line = test_a_failing_rank_names_the_node_and_the_users_line.__code__.co_firstlineno + 2
    with pytest.raises(tw.errors.InvalidArgumentError,
                       match=rf"(?s)not in \[0, 3\).*node GatherV2.*{__file__}:{line}") as e:
        f(x)
    assert e.value.rank in (0, 1)
