"""The same SBP programs on in-process ranks and on Ray workers: global tensors whose pieces live
on the workers, eager ops op by op there, planned tw.functions shipped once and run with one call
per worker per step, errors that come back as the original type with the rank, node and line.
Every test that takes ``backend`` runs on both and compares with one device."""
import gc

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import tensorweave as tw  # noqa: E402
from tensorweave.core.sbp import B, P, S  # noqa: E402
from tensorweave.distribute.ray import cluster as ray_cluster  # noqa: E402
from tensorweave.distribute.ray.pieces import RemotePiece  # noqa: E402

P2 = tw.placement("cpu", ranks=[0, 1])
RNG = np.random.default_rng(14)


def _arr(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.fixture(scope="module")
def cluster():
    c = ray_cluster.connect(num_workers=2, timeout=60)
    yield c
    ray_cluster.shutdown()


@pytest.fixture(params=["in_process", "ray"])
def backend(request, cluster):
    if request.param == "ray":
        yield request.param
    else:
        with tw.distribute.in_process():
            yield request.param


def _on(backend, t):
    """The pieces of ``t`` live where the backend says (on the workers for Ray)."""
    remote = [isinstance(p, RemotePiece) for p in t._pieces]
    assert all(remote) if backend == "ray" else not any(remote)


def mlp_block(x, w, b):
    h = tw.nn.relu(tw.matmul(x, w) + b)
    return tw.reduce_sum(h * h, axis=1) - tw.reduce_mean(h)


def reshapes(x, w, b):
    y = tw.reshape(tw.matmul(x, w), [-1])
    return tw.concat([y * 2.0, tw.tanh(y)], axis=0) + tw.reduce_max(b)


def grads(x, w, b):
    with tw.GradientTape() as tape:
        tape.watch([w, b])
        loss = tw.reduce_mean(tw.square(tw.matmul(x, w) + b))
    gw, gb = tape.gradient(loss, [w, b])
    return gw, gb, loss


FUNCS = {"mlp_block": mlp_block, "reshapes": reshapes, "grads": grads}
# x (7, 5): uneven over 2 ranks; w (5, 3), b (3,)
LAYOUTS = {"data_parallel": (S(0), B, B), "contract": (S(1), S(0), B), "model_parallel": (B, S(1), S(0)),
           "partial": (S(0), B, P)}


def _flat(out):
    return list(out) if isinstance(out, (list, tuple)) else [out]


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("name", sorted(FUNCS))
def test_eager_and_planned_equal_one_device(backend, name, layout):
    fn, sbps = FUNCS[name], LAYOUTS[layout]
    x, w, b = _arr(7, 5), _arr(5, 3), _arr(3)
    want = _flat(fn(tw.constant(x), tw.constant(w), tw.constant(b)))
    args = [tw.constant(v).to_global(placement=P2, sbp=s) for v, s in zip((x, w, b), sbps)]
    for a in args:
        _on(backend, a)
    planned_fn = tw.function(fn)
    for got in (_flat(fn(*args)), _flat(planned_fn(*args)), _flat(planned_fn(*args))):
        assert len(got) == len(want)
        for g, o in zip(got, want):
            _on(backend, g)
            np.testing.assert_allclose(g.numpy(), o.numpy(), rtol=2e-5, atol=1e-5)
    assert planned_fn.experimental_get_tracing_count() == 1


# ---- 10 Adam steps of data-parallel training inside tw.function == one device ----------------------
X, Y = _arr(16, 6), _arr(16, 3)
INIT = {"w1": _arr(6, 8) * 0.4, "b1": np.full(8, 0.1, np.float32), "w2": _arr(8, 3) * 0.4,
        "b2": np.zeros(3, np.float32)}


def _train(x, y, params):
    names, opt = sorted(params), tw.keras.optimizers.Adam(0.05)

    @tw.function
    def step(x, y):
        with tw.GradientTape() as tape:
            h = tw.nn.relu(tw.matmul(x, params["w1"]) + params["b1"])
            loss = tw.reduce_mean(tw.square(tw.matmul(h, params["w2"]) + params["b2"] - y))
        opt.apply_gradients(zip(tape.gradient(loss, [params[n] for n in names]), [params[n] for n in names]))
        return loss
    losses = [float(step(x, y)) for _ in range(10)]
    assert step.experimental_get_tracing_count() == 1
    return losses, {n: params[n].numpy() for n in names}, int(opt.iterations.numpy())


def test_data_parallel_adam_in_tw_function_equals_one_device(backend):
    want_losses, want, _ = _train(tw.constant(X), tw.constant(Y), {n: tw.Variable(v) for n, v in INIT.items()})
    x, y = (tw.constant(v).to_global(placement=P2, sbp=S(0)) for v in (X, Y))
    params = {n: tw.Variable(v, placement=P2, sbp=B) for n, v in INIT.items()}
    _on(backend, params["w1"].handle)
    losses, got, iterations = _train(x, y, params)
    np.testing.assert_allclose(losses, want_losses, rtol=2e-5)
    for n in want:
        np.testing.assert_allclose(got[n], want[n], rtol=2e-5, atol=1e-6, err_msg=n)
    assert iterations == 10          # the optimizer's local step counter is the driver's, updated


def test_a_local_variable_is_the_drivers_state_between_planned_steps(backend):
    counter = tw.Variable(0.0)                        # local: the driver's, updated once per step
    x = tw.constant(np.arange(4.0, dtype=np.float32)).to_global(placement=P2, sbp=S(0))

    @tw.function
    def step(x):
        counter.assign_add(1.0)
        return tw.reduce_sum(x) + counter.read_value()
    assert [float(step(x)) for _ in range(2)] == [7.0, 8.0]
    assert float(counter.numpy()) == 2.0
    counter.assign(10.0)                              # changed on the driver between steps
    assert float(step(x)) == 17.0 and float(counter.numpy()) == 11.0


# ---- Ray only: where things run and what comes back -----------------------------------------------
def _count_calls(monkeypatch, cluster):
    calls = []
    real = cluster.run_each

    def counting(fn, per_rank_args, ranks=None, **kw):
        calls.append((per_rank_args[0][1].__name__, tuple(ranks)))
        return real(fn, per_rank_args, ranks, **kw)
    monkeypatch.setattr(cluster, "run_each", counting)
    real_post = cluster.post_each

    def counting_posts(fn, per_rank_args, ranks, check=None):      # a step posted ahead: one call per worker too
        made = []
        posted = real_post(fn, lambda: made.append(per_rank_args()) or made[0], ranks, check)
        if posted:
            calls.append((made[0][0][1].__name__, tuple(ranks)))
        return posted
    monkeypatch.setattr(cluster, "post_each", counting_posts)
    return calls


def test_a_planned_step_is_shipped_once_then_one_call_per_worker(cluster, monkeypatch):
    v = tw.Variable(_arr(5, 3), placement=P2, sbp=B)
    x = tw.constant(_arr(6, 5)).to_global(placement=P2, sbp=S(0))

    @tw.function
    def step(x):
        loss = tw.reduce_sum(tw.matmul(x, v))
        v.assign_sub(0.01 * tw.ones_like(v))
        return loss
    calls = _count_calls(monkeypatch, cluster)
    step(x)
    step(x)
    step(x)
    assert calls == [("_w_bind_plan", (0, 1))] + [("_w_run_plan", (0, 1))] * 3


def test_one_planned_function_runs_where_its_placement_means_at_each_call(cluster):
    f = tw.function(mlp_block)
    x, w, b = _arr(6, 5), _arr(5, 3), _arr(3)
    want = mlp_block(tw.constant(x), tw.constant(w), tw.constant(b)).numpy()
    with tw.distribute.in_process():
        args = [tw.constant(v).to_global(placement=P2, sbp=s) for v, s in zip((x, w, b), (S(0), B, B))]
        here = f(*args)
    there = f(*args)                  # the same plan, now shipped to the workers (values travel inline)
    _on("in_process", here)
    _on("ray", there)
    for got in (here, there):
        np.testing.assert_allclose(got.numpy(), want, rtol=2e-5, atol=1e-5)
    assert f.experimental_get_tracing_count() == 1
    with tw.distribute.in_process():
        with pytest.raises(tw.errors.FailedPreconditionError, match=r"(?s)pieces live on the Ray workers.*'AddV2'"
                                                                     r".*in_process\(\) block"):
            there + 1.0
        moved = there.to_global(sbp=B)                     # boxing brings the pieces over
    _on("in_process", moved)
    np.testing.assert_allclose(moved.numpy(), want, rtol=2e-5, atol=1e-5)


def test_pieces_dropped_by_the_driver_are_freed_on_the_workers(cluster):
    x = tw.constant(_arr(64, 4)).to_global(placement=P2, sbp=S(0))
    gc.collect()
    x * 1.0                           # a call to each worker frees what earlier tests dropped
    sizes = []
    for _ in range(4):
        y = tw.tanh(x) * 2.0 + 1.0
        del y
        sizes.append(cluster.run(lambda w: len(w.store)))
    assert sizes[1:] == sizes[:-1]    # no growth: each step's intermediates went with their handles


def test_a_failing_worker_raises_the_original_type_with_rank_node_and_line(cluster):
    x = tw.constant(_arr(4, 3)).to_global(placement=P2, sbp=S(0))
    f = tw.function(lambda x: tw.gather(x, tw.constant([0, 7]), axis=1))
    line = test_a_failing_worker_raises_the_original_type_with_rank_node_and_line.__code__.co_firstlineno + 2
    with pytest.raises(tw.errors.InvalidArgumentError,
                       match=rf"(?s)not in \[0, 3\).*node GatherV2.*{__file__}:{line}") as e:
        f(x)
    assert e.value.rank in (0, 1)
    assert "Ray cluster" in "".join(getattr(e.value, "__notes__", []))
    # eager: the op, the signature and the user's line; the cluster keeps working afterwards
    with pytest.raises(tw.errors.InvalidArgumentError,
                       match=rf"(?s)rank [01] failed .*not in \[0, 3\) for 'GatherV2'.*{__file__}:{line + 10}"):
        tw.gather(x, tw.constant([0, 7]), axis=1)
    np.testing.assert_allclose((x * 2.0).numpy(), x.numpy() * 2.0)


def test_a_placement_beyond_the_workers_says_how_many_there_are(cluster):
    with pytest.raises(tw.errors.InvalidArgumentError, match=r"names rank 2 but the connected Ray cluster has 2 "
                                                               r"workers.*num_workers=3"):
        tw.constant(_arr(3, 2)).to_global(placement=tw.placement("cpu", ranks=[0, 1, 2]), sbp=B)


def test_the_main_job_trains_data_parallel_on_the_workers(cluster, capsys):
    from tensorweave.cli import main
    assert main(["--workers", "2", "--epochs", "1", "--batch-size", "256", "--verbose", "1"]) == 0
    out = capsys.readouterr().out
    assert "data-parallel on 2 Ray workers" in out
    assert "collectives per step:" in out and "all_reduce" in out          # the plan's gradient all-reduce
    assert "examples/s (" in out and "per worker)" in out
    accuracy = float(out.split("test accuracy ")[1].split()[0])
    assert 0.5 < accuracy <= 1.0
    assert tw.distribute.current() is cluster                               # the test's cluster stays up


def test_random_draws_in_a_planned_function_equal_one_device(backend):
    # Each worker gets its rank's copy of the op's stream with the spec and continues it per call.
    x = np.arange(56, dtype=np.float32).reshape(7, 8) / 10.0

    def body(x):
        return x + tw.random.uniform([7, 8], seed=3), tw.nn.dropout(x, 0.5, seed=5)

    tw.random.set_seed(11)
    local = tw.function(body)
    want = [[t.numpy() for t in local(tw.constant(x))] for _ in range(2)]
    tw.random.set_seed(11)
    planned = tw.function(body)
    xg = tw.constant(x).to_global(placement=P2, sbp=tw.sbp.split(0))
    for w_call in want:
        got = planned(xg)
        for w, g in zip(w_call, got):
            _on(backend, g)
            np.testing.assert_array_equal(g.numpy(), w)
    tw.random.set_seed(None)
