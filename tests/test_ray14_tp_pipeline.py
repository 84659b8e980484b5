"""Tensor-parallel pipeline stages on Ray workers at one call per worker per step: a stage whose
variables are split over its workers runs as planned functions bound on them (forward; backward
recomputing the forward; the last stage's loss and gradients at once), inside the step's one
call per worker; training equals one device (float32, rtol 2e-5)."""
import numpy as np
import pytest

ray = pytest.importorskip("ray")

import tensorweave as tw  # noqa: E402
from tensorweave.distribute.ray import cluster as ray_cluster  # noqa: E402

SIZES = (6, 8, 5, 3)
RNG = np.random.default_rng(1414)
X = RNG.standard_normal((11, SIZES[0])).astype(np.float32)       # 11 rows: uneven micro-batches
Y = RNG.integers(0, SIZES[-1], 11).astype(np.int32)
PARAMS = [(RNG.standard_normal((a, b)).astype(np.float32) * 0.5, RNG.standard_normal(b).astype(np.float32) * 0.1)
          for a, b in zip(SIZES, SIZES[1:])]


@pytest.fixture(scope="module")
def cluster():
    c = ray_cluster.connect(num_workers=3, timeout=60)
    yield c
    ray_cluster.shutdown()


class Stage(tw.Module):
    def __init__(self, params, last, rate=0.0):
        super().__init__()
        self.params = [(tw.Variable(w), tw.Variable(b)) for w, b in params]
        self.last, self.rate = last, rate

    def __call__(self, h):
        for i, (w, b) in enumerate(self.params):
            h = tw.matmul(h, w) + b
            if not (self.last and i == len(self.params) - 1):
                h = tw.nn.relu(h)
        return tw.nn.dropout(h, self.rate) if self.rate else h


def loss_fn(labels, logits):
    return tw.reduce_mean(tw.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))


def _megatron(variable):
    """Megatron's pair: a kernel by columns and its bias split, the next kernel by rows."""
    shape = tuple(variable.shape.as_list())
    return {(6, 8): tw.sbp.split(1), (8,): tw.sbp.split(0), (8, 5): tw.sbp.split(0),
            (5, 3): tw.sbp.split(1), (3,): tw.sbp.split(0)}.get(shape, tw.sbp.broadcast)


def _one_device(steps, opt=None, rate=0.0, seed=None):
    if seed is not None:
        tw.random.set_seed(seed)
    stage = Stage(PARAMS, True)
    variables = [v for pair in stage.params for v in pair]
    opt = opt or tw.keras.optimizers.Adam(0.05)
    losses, grads = [], []
    for _ in range(steps):
        with tw.GradientTape() as tape:
            h = tw.constant(X)
            for i, (w, b) in enumerate(stage.params):
                h = tw.matmul(h, w) + b
                if i < 2:
                    h = tw.nn.relu(h)
                if i == 0 and rate:
                    h = tw.nn.dropout(h, rate)
            loss = loss_fn(tw.constant(Y), h)
        g = tape.gradient(loss, variables)
        opt.apply_gradients(zip(g, variables))
        losses.append(float(loss))
        grads.append([t.numpy() for t in g])
    return losses, grads, [v.numpy() for v in variables]


def _pipeline(schedule, tp_stage=1, micro_batches=4, rate=0.0):
    """Stage 0 (layer 1) and stage 1 (layers 2-3); the tensor-parallel one on two workers."""
    ranks = ([0, 1], [2]) if tp_stage == 0 else ([0], [1, 2])
    p0, p1 = tw.placement("cpu", ranks=ranks[0]), tw.placement("cpu", ranks=ranks[1])
    first, second = Stage(PARAMS[:1], False, rate), Stage(PARAMS[1:], True)
    (first if tp_stage == 0 else second).to_global(p0 if tp_stage == 0 else p1, _megatron)
    return tw.distribute.pipeline([(first, p0), (second, p1)], micro_batches=micro_batches, schedule=schedule,
                                  loss=loss_fn)


def _train(pipe, steps):
    opt = tw.keras.optimizers.Adam(0.05)
    losses, grads = [], []
    for _ in range(steps):
        loss, g, variables = pipe.forward_backward(X, Y)
        opt.apply_gradients(zip(g, variables))
        losses.append(float(loss))
        grads.append([t.numpy() for t in g])
    return losses, grads, [v.numpy() for v in pipe.trainable_variables]


def _same(got, want):
    np.testing.assert_allclose(got[0], want[0], rtol=2e-5)
    for step_got, step_want in zip(got[1], want[1]):
        for a, b in zip(step_got, step_want):
            np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)
    for a, b in zip(got[2], want[2]):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)


def _count_calls(monkeypatch, cluster):
    calls = []
    real = cluster.run_each

    def counting(fn, per_rank_args, ranks=None, **kw):
        name = getattr(per_rank_args[0][1], "__name__", "?")
        if name.startswith("w_"):           # the pipeline's calls (not the driver's optimizer's eager ops)
            calls.append((name, tuple(ranks or ())))
        return real(fn, per_rank_args, ranks, **kw)
    monkeypatch.setattr(cluster, "run_each", counting)
    return calls


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_a_tensor_parallel_last_stage_trains_like_one_device_at_one_call_per_worker_per_step(cluster, monkeypatch,
                                                                                              schedule):
    pipe = _pipeline(schedule)
    calls = _count_calls(monkeypatch, cluster)
    got = _train(pipe, 3)
    _same(got, _one_device(3))
    assert pipe.walked_because is None and pipe._ray.tp == {1}
    # bound once (the stages, then stage 1's plans for 3-row and 2-row micro-batches), then one call per worker
    assert calls == [("w_bind", (0, 1, 2)), ("w_bind_plans", (1, 2))] + [("w_step", (0, 1, 2))] * 3
    assert pipe.held_activations == pipe.peak_activations
    _, grads, variables = pipe.forward_backward(X, Y)
    assert [g.sbp for g in grads] == [v.sbp for v in variables]      # laid out as their variables, no P
    assert [str(v.sbp[0]) for v in variables] == ["B", "B", "S(0)", "B", "S(1)", "S(0)"]
    assert [tuple(p.shape) for p in pipe.stages[1].params[1][0]._locals] == [(5, 2), (5, 1)]


def test_a_tensor_parallel_first_stage_trains_with_the_update_and_clip_on_the_workers_and_infers(cluster,
                                                                                                 monkeypatch):
    pipe = _pipeline("1f1b", tp_stage=0, micro_batches=3)
    calls = _count_calls(monkeypatch, cluster)
    opt = tw.keras.optimizers.Adam(0.05, global_clipnorm=0.3)
    losses = [float(pipe.train_step(X, Y, opt)) for _ in range(2)]
    want = _one_device(2, tw.keras.optimizers.Adam(0.05, global_clipnorm=0.3))
    np.testing.assert_allclose(losses, want[0], rtol=2e-5)
    for a, b in zip(pipe.trainable_variables, want[2]):
        np.testing.assert_allclose(a.numpy(), b, rtol=2e-5, atol=1e-6)
    assert [name for name, _ in calls].count("w_step") == 2 and pipe.walked_because is None
    ref = Stage(PARAMS, True)
    for v, w in zip([v for pair in ref.params for v in pair], want[2]):
        v.assign(w)
    np.testing.assert_allclose(pipe(X).numpy(), ref(tw.constant(X)).numpy(), rtol=2e-5, atol=1e-6)


def test_the_driver_random_state_moves_as_one_device_with_draws_before_a_tensor_parallel_stage(cluster):
    # stage 0 (on worker 0) drops out under the global seed; tracing the stages for their shapes
    # makes no draw on the driver, so the step and a draw after it equal the one-device program's
    tw.random.set_seed(7)
    pipe = _pipeline("1f1b", rate=0.5)
    got = _train(pipe, 2)
    after = tw.random.uniform([4]).numpy()
    want = _one_device(2, rate=0.5, seed=7)
    _same(got, want)
    np.testing.assert_array_equal(after, tw.random.uniform([4]).numpy())
    assert pipe.walked_because is None


class NoisyStage(tw.Module):
    """One column-split layer plus uniform noise drawn without any seed (TF's rule 1)."""

    def __init__(self, w, b):
        super().__init__()
        self.w, self.b = tw.Variable(w), tw.Variable(b)

    def __call__(self, h):
        h = tw.matmul(h, self.w) + self.b
        return h + tw.random.uniform(tw.shape(h))


def _noisy_pipeline(w):
    p0, p1 = tw.placement("cpu", ranks=[0]), tw.placement("cpu", ranks=[1, 2])
    second = NoisyStage(w, PARAMS[1][1])
    # kernel S(1), bias S(0) (5 columns: 3 and 2): each worker adds the noise to its columns
    second.to_global(p1, lambda v: tw.sbp.split(v.shape.rank - 1))
    return tw.distribute.pipeline([(Stage(PARAMS[:1], False), p0), (second, p1)], micro_batches=2, loss="mse")


def test_a_tensor_parallel_stage_that_draws_without_any_seed_runs_planned_with_one_value_on_its_workers(
        cluster, monkeypatch):
    # each worker's OS entropy would give the stage's workers different values of one replicated tensor;
    # the step's entropy comes from the driver, so the gathered output is one draw (micro-batch m's k-th
    # from the stream keyed (entropy, stage, m, k)), whichever worker holds which columns
    from tensorweave.distribute import pipeline_random
    from tensorweave.distribute.ray.pipeline_tp_worker import redraw
    tw.random.set_seed(None)
    monkeypatch.setattr(pipeline_random, "step_entropy", lambda: 12345)
    pipe = _noisy_pipeline(np.zeros_like(PARAMS[1][0]))         # the stage's output: its bias plus the noise
    calls = _count_calls(monkeypatch, cluster)
    got = pipe(X).numpy()
    assert pipe.walked_because is None and [name for name, _ in calls].count("w_step") == 1
    want, draws = [], pipeline_random.MicroBatchDraws(len(X), entropy=12345)
    for m, rows in enumerate((6, 5)):
        record = ("RandomUniform", [np.array([rows, 5], np.int32)], {"dtype": "float32"}, "float32", None, True)
        want.append(PARAMS[1][1] + redraw(record, draws.unseeded_key(1, m, 0)))
    np.testing.assert_array_equal(got, np.concatenate(want))


def test_unseeded_draws_in_a_tensor_parallel_stage_are_new_each_step_and_train_planned(cluster, monkeypatch):
    tw.random.set_seed(None)
    pipe = _noisy_pipeline(PARAMS[1][0])
    calls = _count_calls(monkeypatch, cluster)
    first, second = (float(pipe.forward_backward(X, np.zeros((11, 5), np.float32))[0]) for _ in range(2))
    assert np.isfinite(first) and first != second        # same weights, a fresh draw per step
    assert pipe.walked_because is None and [name for name, _ in calls].count("w_step") == 2


def test_the_unseeded_key_differs_per_step_stage_micro_batch_and_draw():
    from tensorweave.distribute import pipeline_random
    a, b = pipeline_random.MicroBatchDraws(4, entropy=1), pipeline_random.MicroBatchDraws(4, entropy=2)
    keys = {a.unseeded_key(1, 0, 0), a.unseeded_key(2, 0, 0), a.unseeded_key(1, 1, 0), a.unseeded_key(1, 0, 1),
            b.unseeded_key(1, 0, 0)}
    assert len(keys) == 5 and a.unseeded_key(1, 0, 0) == pipeline_random.MicroBatchDraws(9, entropy=1).unseeded_key(
        1, 0, 0)
    assert pipeline_random.MicroBatchDraws(4).unseeded_key(1, 0, 0) is None
    assert 0 <= pipeline_random.step_entropy() < 2 ** 63


# ---- random draws inside a tensor-parallel stage (tp19) ----------------------------------------------
class DrawingStage(tw.Module):
    """Layers ``params`` with ReLUs between; after the first layer a seeded dropout (an op seed)
    and Gaussian noise under the global seed only (TF's rule 2: the one-device op-call counter);
    ``noise_first``: a rule-2 dropout before anything (the counter moves before the TP stage's)."""

    def __init__(self, params, last, noise_first=False):
        super().__init__()
        self.params = [(tw.Variable(w), tw.Variable(b)) for w, b in params]
        self.last, self.noise_first = last, noise_first

    def __call__(self, h):
        if self.noise_first:
            h = tw.nn.dropout(h, 0.5)
        for i, (w, b) in enumerate(self.params):
            h = tw.matmul(h, w) + b
            if not (self.last and i == len(self.params) - 1):
                h = tw.nn.relu(h)
            if i == 0 and len(self.params) > 1:
                h = tw.nn.dropout(h, 0.25, seed=11)
                h = h + tw.random.normal(tw.shape(h), stddev=0.1)
        return h


def _one_device_drawing(steps, tp_stage):
    """The unpipelined one-device program of :func:`_drawing_pipeline`'s stages, whole batch."""
    tw.random.set_seed(21)
    stages = _drawing_stages(tp_stage)
    variables = [v for st in stages for pair in st.params for v in pair]
    opt, losses, grads = tw.keras.optimizers.Adam(0.05), [], []
    for _ in range(steps):
        with tw.GradientTape() as tape:
            loss = loss_fn(tw.constant(Y), stages[1](stages[0](tw.constant(X))))
        g = tape.gradient(loss, variables)
        opt.apply_gradients(zip(g, variables))
        losses.append(float(loss))
        grads.append([t.numpy() for t in g])
    return (losses, grads, [v.numpy() for v in variables]), tw.random.uniform([4]).numpy(), stages


def _drawing_stages(tp_stage):
    if tp_stage == 1:       # layer 1 on worker 0 (a rule-2 dropout first), layers 2-3 split over workers 1, 2
        return DrawingStage(PARAMS[:1], False, noise_first=True), DrawingStage(PARAMS[1:], True)
    return DrawingStage(PARAMS[:2], False), DrawingStage(PARAMS[2:], True)   # layers 1-2 split, 3 on worker 2


def _drawing_pipeline(schedule, tp_stage, micro_batches=3):
    ranks = ([0, 1], [2]) if tp_stage == 0 else ([0], [1, 2])
    placements = [tw.placement("cpu", ranks=r) for r in ranks]
    stages = _drawing_stages(tp_stage)
    stages[tp_stage].to_global(placements[tp_stage], _megatron)
    return tw.distribute.pipeline(list(zip(stages, placements)), micro_batches=micro_batches, schedule=schedule,
                                  loss=loss_fn)


@pytest.mark.parametrize("schedule,tp_stage", [("1f1b", 1), ("gpipe", 1), ("1f1b", 0)])
def test_draws_in_a_tensor_parallel_stage_equal_the_unpipelined_one_device_run(cluster, monkeypatch, schedule,
                                                                               tp_stage):
    # the TP stage's seeded dropout and rule-2 noise: each worker of it draws the whole batch's
    # draw from the op's stream as one device does and feeds the micro-batch's rows to its plans
    # (forward and the recomputing backward see the same mask); the driver's streams go on as one device's
    want, after, _ = _one_device_drawing(2, tp_stage)
    tw.random.set_seed(21)
    pipe = _drawing_pipeline(schedule, tp_stage)
    calls = _count_calls(monkeypatch, cluster)
    got = _train(pipe, 2)
    _same(got, want)
    np.testing.assert_array_equal(tw.random.uniform([4]).numpy(), after)
    assert pipe.walked_because is None and pipe._ray.tp == {tp_stage}
    assert [name for name, _ in calls].count("w_step") == 2
    tw.random.set_seed(None)


def test_inference_with_draws_in_a_tensor_parallel_stage_equals_one_device(cluster):
    tw.random.set_seed(4)
    pipe = _drawing_pipeline("1f1b", 1, micro_batches=2)
    got = pipe(X).numpy()
    tw.random.set_seed(4)
    first, second = _drawing_stages(1)
    np.testing.assert_allclose(got, second(first(tw.constant(X))).numpy(), rtol=2e-5, atol=1e-6)
    assert pipe.walked_because is None
    tw.random.set_seed(None)


# ---- interleaved 1F1B with tensor-parallel virtual stages (tp19) --------------------------------------
SIZES4 = (6, 8, 6, 8, 3)
PARAMS4 = [(RNG.standard_normal((a, b)).astype(np.float32) * 0.5, RNG.standard_normal(b).astype(np.float32) * 0.1)
           for a, b in zip(SIZES4, SIZES4[1:])]


def _column_split(variable):
    """A one-layer tensor-parallel stage: its kernel by columns, its bias split alike."""
    return tw.sbp.split(variable.shape.rank - 1)


def _interleaved_stages():
    """Four one-layer chunks; chunks 1 and 3 drop out (seeded) after their ReLU."""
    return [DrawingChunk(PARAMS4[c], last=c == 3, seed=5 + c if c % 2 else None) for c in range(4)]


class DrawingChunk(tw.Module):
    def __init__(self, params, last, seed=None):
        super().__init__()
        self.w, self.b = tw.Variable(params[0]), tw.Variable(params[1])
        self.last, self.seed = last, seed

    def __call__(self, h):
        h = tw.matmul(h, self.w) + self.b
        if not self.last:
            h = tw.nn.relu(h)
        return tw.nn.dropout(h, 0.25, seed=self.seed) if self.seed is not None else h


def test_interleaved_1f1b_with_tensor_parallel_virtual_stages_equals_one_device(cluster, monkeypatch):
    # workers 1 and 2 hold chunks 1 and 3 split by columns (two virtual stages each), worker 0
    # chunks 0 and 2: one call per worker per step, == the unpipelined one-device run
    tw.random.set_seed(8)
    ref = _interleaved_stages()
    variables = [v for c in ref for v in c.trainable_variables]      # the pipeline's order
    opt, want = tw.keras.optimizers.Adam(0.05), ([], [], None)
    for _ in range(2):
        with tw.GradientTape() as tape:
            h = tw.constant(X)
            for c in ref:
                h = c(h)
            loss = loss_fn(tw.constant(Y), h)
        g = tape.gradient(loss, variables)
        opt.apply_gradients(zip(g, variables))
        want[0].append(float(loss))
        want[1].append([t.numpy() for t in g])
    want = (want[0], want[1], [v.numpy() for v in variables])
    tw.random.set_seed(8)
    chunks = _interleaved_stages()
    p0, p1 = tw.placement("cpu", ranks=[0]), tw.placement("cpu", ranks=[1, 2])
    for c in (1, 3):
        chunks[c].to_global(p1, _column_split)
    pipe = tw.distribute.pipeline([(c, (p0, p1)[i % 2]) for i, c in enumerate(chunks)], micro_batches=4,
                                  schedule="interleaved_1f1b", loss=loss_fn)
    calls = _count_calls(monkeypatch, cluster)
    got = _train(pipe, 2)
    _same(got, want)
    assert pipe.walked_because is None and pipe._ray.tp == {1, 3} and pipe.virtual_stages == 2
    assert [name for name, _ in calls].count("w_step") == 2
    assert pipe.bubble_fraction == pytest.approx(1 / 9)        # (p - 1) / (v m + p - 1), p = 2, v = 2, m = 4
    assert 0.0 <= pipe.measured_idle_fraction < 1.0 and set(pipe.last_step["workers"]) == {0, 1, 2}
    tw.random.set_seed(None)
