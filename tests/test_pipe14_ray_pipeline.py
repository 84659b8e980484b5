"""Pipelines across Ray worker processes: each worker runs its stages' part of the schedule
(bound once, then one call per worker per step), activations and gradients go worker to worker,
and training equals unpipelined one-device training (float32, rtol 2e-5)."""
import warnings

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import tensorweave as tw  # noqa: E402
from tensorweave.core import errors  # noqa: E402
from tensorweave.distribute.ray import cluster as ray_cluster  # noqa: E402
from tensorweave.distribute.ray.pieces import RemotePiece, RemoteVariable  # noqa: E402

SIZES = (6, 8, 5, 3)
RNG = np.random.default_rng(14)
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
    def __init__(self, params, last):
        super().__init__()
        self.params = [(tw.Variable(w), tw.Variable(b)) for w, b in params]
        self.last = last

    def __call__(self, h):
        for i, (w, b) in enumerate(self.params):
            h = tw.matmul(h, w) + b
            if not (self.last and i == len(self.params) - 1):
                h = tw.nn.relu(h)
        return h


def loss_fn(labels, logits):
    return tw.reduce_mean(tw.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))


def _one_device(steps):
    """The same MLP unpipelined on the driver: per step the loss and gradients, then the weights."""
    stage = Stage(PARAMS, True)
    variables = [v for pair in stage.params for v in pair]
    opt = tw.keras.optimizers.Adam(0.05)
    losses, grads = [], []
    for _ in range(steps):
        with tw.GradientTape() as tape:
            loss = loss_fn(tw.constant(Y), stage(tw.constant(X)))
        g = tape.gradient(loss, variables)
        opt.apply_gradients(zip(g, variables))
        losses.append(float(loss))
        grads.append([t.numpy() for t in g])
    return losses, grads, [v.numpy() for v in variables]


def _pipeline(schedule, ranks=([0], [1]), micro_batches=4):
    stages = [(Stage(PARAMS[:1], False), tw.placement("cpu", ranks=list(ranks[0]))),
              (Stage(PARAMS[1:], True), tw.placement("cpu", ranks=list(ranks[1])))]
    return tw.distribute.pipeline(stages, micro_batches=micro_batches, schedule=schedule, loss=loss_fn)


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
        calls.append(getattr(per_rank_args[0][1], "__name__", "?"))
        return real(fn, per_rank_args, ranks, **kw)
    monkeypatch.setattr(cluster, "run_each", counting)
    return calls


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_two_stages_four_micro_batches_on_two_workers_equal_one_device(cluster, schedule):
    want = _one_device(4)
    pipe = _pipeline(schedule)
    assert all(isinstance(p, RemoteVariable) for v in pipe.trainable_variables for p in v._locals)
    got = _train(pipe, 4)
    _same(got, want)
    assert pipe.bubble_fraction == pytest.approx(0.2)
    assert pipe.held_activations == pipe.peak_activations == ([2, 1] if schedule == "1f1b" else [4, 4])
    step = pipe.last_step                 # what is reported, not how long it took (no timing in tests)
    assert set(step) == {"seconds", "workers", "measured_idle_fraction"} and isinstance(step["seconds"], float)
    assert set(step["workers"]) == {0, 1}
    assert all(set(w) == {"busy_s", "wait_s", "held"} for w in step["workers"].values())
    # the bubble as the workers saw it (tp19): over the longest step call, each worker's share not computing
    busy = [w["busy_s"] for w in step["workers"].values()]
    span = max(w["busy_s"] + w["wait_s"] for w in step["workers"].values())
    assert pipe.measured_idle_fraction == pytest.approx(max(0.0, 1 - sum(busy) / (2 * span)))


def test_a_step_is_one_call_per_worker_after_one_bind_and_gradients_stay_on_the_workers(cluster, monkeypatch):
    pipe = _pipeline("1f1b")
    calls = _count_calls(monkeypatch, cluster)
    loss, grads, _ = pipe.forward_backward(X, Y)
    assert calls == ["w_bind", "w_step"]          # without the worker-side schedule: calls per op
    assert all(isinstance(p, RemotePiece) for g in grads for p in g._pieces)
    assert [g.placement.ranks for g in grads] == [(0,), (0,), (1,), (1,), (1,), (1,)]
    pipe.forward_backward(X, Y)
    assert calls == ["w_bind", "w_step", "w_step"]


def test_data_parallel_stage_piped_into_one_worker_equals_one_device(cluster):
    # stage 0 data parallel on workers 0 and 1 (each micro-batch split between them, gradients P),
    # stage 1 on worker 2: hand-offs gather 2 slices into 1 and split the gradient back
    want = _one_device(3)
    pipe = _pipeline("1f1b", ranks=([0, 1], [2]), micro_batches=2)
    got = _train(pipe, 3)
    _same(got, want)
    assert set(pipe.last_step["workers"]) == {0, 1, 2}      # each worker ran its part of the schedule
    loss, grads, _ = pipe.forward_backward(X, Y)
    assert [str(g.sbp[0]) for g in grads] == ["P", "P", "B", "B", "B", "B"]


def test_inference_and_keras_layers_as_stages_equal_one_device(cluster):
    tw.keras.utils.set_random_seed(3)
    model = tw.keras.Sequential([tw.keras.Input((SIZES[0],)), tw.keras.layers.Dense(8, activation="relu"),
                                 tw.keras.layers.Dense(3)])
    want = model(tw.constant(X)).numpy()
    weights = model.get_weights()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe = tw.distribute.pipeline([(model.layers[:1], tw.placement("cpu", ranks=[1])),
                                       (model.layers[1:], tw.placement("cpu", ranks=[2]))],
                                      micro_batches=3, schedule="gpipe", loss="sparse_categorical_crossentropy")
    out = pipe(X)
    assert out.placement.ranks == (2,) and set(pipe.last_step["workers"]) == {1, 2}
    np.testing.assert_allclose(out.numpy(), want, rtol=2e-5, atol=1e-6)
    loss = pipe.train_step(X, Y, tw.keras.optimizers.SGD(0.1))
    ref = tw.keras.Sequential([tw.keras.Input((SIZES[0],)), tw.keras.layers.Dense(8, activation="relu"),
                               tw.keras.layers.Dense(3)])
    ref.set_weights(weights)
    ref.compile(optimizer=tw.keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
    want_loss = ref.train_on_batch(X, Y)
    np.testing.assert_allclose(float(loss), float(want_loss), rtol=2e-5)
    for a, b in zip(model.get_weights(), ref.get_weights()):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)


def bad_stage(h):
    return tw.matmul(h, tw.ones((4, 2)))          # h has 5 columns: a shape error on worker 1


def test_a_failing_stage_raises_its_error_with_the_rank_action_and_line_and_the_cluster_goes_on(cluster):
    first = Stage(PARAMS[:2], False)
    pipe = tw.distribute.pipeline([(first, tw.placement("cpu", ranks=[0])),
                                   (bad_stage, tw.placement("cpu", ranks=[1]))], micro_batches=2, loss=loss_fn)
    with pytest.raises(errors.InvalidArgumentError) as info:
        pipe.forward_backward(X, Y)
    text = str(info.value) + "\n".join(getattr(info.value, "__notes__", []))
    assert info.value.rank == 1
    assert "MatMul" in text and "test_pipe14_ray_pipeline.py" in text
    assert "pipeline stage 1, forward of micro-batch 0" in text
    _same(_train(_pipeline("1f1b"), 1), _one_device(1))       # the cluster keeps working


def _megatron(variable):
    """Stage 1's tensor-parallel layout: first kernel by columns, its bias split, second kernel by rows."""
    shape = tuple(variable.shape.as_list())
    return {(8, 5): tw.sbp.split(1), (5,): tw.sbp.split(0), (5, 3): tw.sbp.split(0)}.get(shape, tw.sbp.broadcast)


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_a_tensor_parallel_stage_on_two_workers_trains_like_one_device(cluster, schedule):
    # stage 0 on worker 0, stage 1 split over workers 1 and 2 (Dense kernel S(1), then S(0)): stage 1
    # runs as planned functions on its workers inside the step's one call per worker (pipeline_tp.py)
    p0, p1 = tw.placement("cpu", ranks=[0]), tw.placement("cpu", ranks=[1, 2])
    split = Stage(PARAMS[1:], True)
    split.to_global(p1, _megatron)
    pipe = tw.distribute.pipeline([(Stage(PARAMS[:1], False), p0), (split, p1)], micro_batches=4, schedule=schedule,
                                  loss=loss_fn)
    assert [str(v.sbp[0]) for v in pipe.trainable_variables] == ["B", "B", "S(1)", "S(0)", "S(0)", "B"]
    assert all(isinstance(p, RemoteVariable) for v in pipe.trainable_variables for p in v._locals)
    _same(_train(pipe, 3), _one_device(3))
    assert pipe.bubble_fraction == pytest.approx(0.2)
    assert pipe.held_activations == pipe.peak_activations and isinstance(pipe.last_step["seconds"], float)
    # the kernel never sits whole on a worker: each holds its columns
    assert [tuple(p.shape) for p in split.params[0][0]._locals] == [(8, 3), (8, 2)]
    assert pipe.walked_because is None
    opt = tw.keras.optimizers.Adam(0.05, global_clipnorm=0.3)         # train_step: the update on the workers
    ref_stage = Stage(PARAMS, True)
    ref_vars = [v for pair in ref_stage.params for v in pair]
    ref_opt = tw.keras.optimizers.Adam(0.05, global_clipnorm=0.3)
    for v, want in zip(ref_vars, [v.numpy() for v in pipe.trainable_variables]):
        v.assign(want)
    with tw.GradientTape() as tape:
        ref_loss = loss_fn(tw.constant(Y), ref_stage(tw.constant(X)))
    ref_grads = tape.gradient(ref_loss, ref_vars)
    assert float(tw.linalg.global_norm(ref_grads)) > 0.3          # the clip acts
    ref_opt.apply_gradients(zip(ref_grads, ref_vars))
    np.testing.assert_allclose(float(pipe.train_step(X, Y, opt)), float(ref_loss), rtol=2e-5)
    for a, b in zip(pipe.trainable_variables, ref_vars):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=2e-5, atol=1e-6)


def test_unsupported_stages_say_what_to_do(cluster):
    p0, p1 = tw.placement("cpu", ranks=[0, 1]), tw.placement("cpu", ranks=[2])
    unbuilt = tw.distribute.pipeline([(Stage(PARAMS[:1], False), p1), (tw.keras.layers.Dense(3), p0)], loss=loss_fn)
    with pytest.raises(errors.FailedPreconditionError, match=r"stage 1 is not built.*Hint: build it"):
        unbuilt.forward_backward(X, Y)
    with pytest.raises(ValueError, match="11 rows for 6 micro-batches over stage 0's 2 workers"):
        _pipeline("1f1b", ranks=([0, 1], [2]), micro_batches=6).forward_backward(X, Y)


def scale(h):
    return h * 2.0 - h          # a stage without variables (the identity, through two ops)


def test_interleaved_virtual_stages_on_two_workers_equal_one_device(cluster):
    p0, p1 = tw.placement("cpu", ranks=[0]), tw.placement("cpu", ranks=[1])
    stages = [(Stage(PARAMS[:1], False), p0), (Stage(PARAMS[1:2], False), p1), (Stage(PARAMS[2:], True), p0),
              (scale, p1)]
    pipe = tw.distribute.pipeline(stages, micro_batches=4, schedule="interleaved_1f1b", loss=loss_fn)
    _same(_train(pipe, 2), _one_device(2))
    assert pipe.bubble_fraction == pytest.approx(1 / 9) and set(pipe.last_step["workers"]) == {0, 1}


# ---- the optimizer's update inside the step call (pps14) ----------------------------------------------
def _one_device_steps(steps, make_opt, before_step=None):
    """Losses and final weights of ``steps`` unpipelined steps; ``before_step(opt, i)`` may change the rate."""
    stage = Stage(PARAMS, True)
    variables = [v for pair in stage.params for v in pair]
    opt = make_opt()
    losses = []
    for i in range(steps):
        if before_step:
            before_step(opt, i)
        with tw.GradientTape() as tape:
            loss = loss_fn(tw.constant(Y), stage(tw.constant(X)))
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
        losses.append(float(loss))
    return losses, [v.numpy() for v in variables]


def _pipeline_steps(pipe, steps, make_opt, before_step=None):
    opt = make_opt()
    losses = []
    for i in range(steps):
        if before_step:
            before_step(opt, i)
        losses.append(float(pipe.train_step(X, Y, opt)))
    return losses, [v.numpy() for v in pipe.trainable_variables], opt


def _same_training(got, want):
    np.testing.assert_allclose(got[0], want[0], rtol=2e-5)
    for a, b in zip(got[1], want[1]):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("ranks", [([0], [1]), ([0, 1], [2])], ids=["two-workers", "dp-stage"])
def test_train_step_updates_on_the_workers_in_its_one_call_per_worker_and_equals_one_device(cluster, monkeypatch,
                                                                                           ranks):
    def adam():
        return tw.keras.optimizers.Adam(0.05)
    want = _one_device_steps(4, adam)
    pipe = _pipeline("1f1b", ranks=ranks, micro_batches=2)
    calls = _count_calls(monkeypatch, cluster)
    opt = adam()
    losses = [float(pipe.train_step(X, Y, opt))]
    assert calls[0] == "w_bind" and calls[-2:] == ["w_bind_optimizer", "w_step"]
    del calls[:]
    losses += [float(pipe.train_step(X, Y, opt)) for _ in range(3)]
    assert calls == ["w_step"] * 3                 # the update travels in the step's call: nothing else
    _same_training((losses, [v.numpy() for v in pipe.trainable_variables]), want)
    assert int(opt.iterations.numpy()) == 4
    # the slots the workers updated are the driver's optimizer's: one more step from the driver matches
    loss, grads, variables = pipe.forward_backward(X, Y)
    opt.apply_gradients(zip(grads, variables))
    more = _one_device_steps(5, adam)
    _same_training(([], [v.numpy() for v in pipe.trainable_variables]), ([], more[1]))


def _lower_rate(opt, i):
    if i == 2:
        opt.learning_rate = 0.01


@pytest.mark.parametrize("make_opt, before_step", [
    (lambda: tw.keras.optimizers.Adam(0.05), _lower_rate),
    (lambda: tw.keras.optimizers.SGD(tw.keras.optimizers.schedules.ExponentialDecay(0.2, 1, 0.5), momentum=0.9),
     None)], ids=["set-rate", "schedule"])
def test_train_step_on_the_workers_follows_rate_changes_and_schedules(cluster, make_opt, before_step):
    want = _one_device_steps(4, make_opt, before_step)
    got = _pipeline_steps(_pipeline("gpipe"), 4, make_opt, before_step)
    _same_training(got[:2], want)


def _adamw_without_decay_on_biases(variables):
    opt = tw.keras.optimizers.AdamW(0.05, weight_decay=0.5)
    opt.exclude_from_weight_decay(var_list=variables[1::2])         # the biases: by object, the driver's
    return opt


@pytest.mark.parametrize("make_opt", [
    lambda variables: tw.keras.optimizers.Adam(0.05, global_clipnorm=0.3),
    lambda variables: tw.keras.optimizers.SGD(0.8, global_clipnorm=0.1, loss_scale_factor=2.0),
    lambda variables: tw.keras.optimizers.SGD(0.2, momentum=0.5, use_ema=True, ema_momentum=0.6,
                                              ema_overwrite_frequency=3),
    _adamw_without_decay_on_biases,
    lambda variables: tw.keras.optimizers.AdamW(0.05, weight_decay=0.5)],
    ids=["global-clipnorm", "clipnorm-loss-scale", "ema", "decay-exclusions", "decay-all"])
@pytest.mark.parametrize("ranks", [([0], [1]), ([0, 1], [2])], ids=["two-workers", "dp-stage"])
def test_train_step_on_the_workers_with_global_clipnorm_ema_and_decay_exclusions_equals_one_device(cluster, make_opt,
                                                                                                   ranks):
    stage = Stage(PARAMS, True)
    variables = [v for pair in stage.params for v in pair]
    opt = make_opt(variables)
    losses = []
    for _ in range(4):
        with tw.GradientTape() as tape:
            loss = loss_fn(tw.constant(Y), stage(tw.constant(X)))
        grads = tape.gradient(loss, variables)
        if opt.global_clipnorm:     # the test means something: the norm is clipped at every step
            assert float(tw.linalg.global_norm(grads)) / (opt.loss_scale_factor or 1) > opt.global_clipnorm
        opt.apply_gradients(zip(grads, variables))
        losses.append(float(loss))
    opt.finalize_variable_values(variables)         # EMA: the averages (else the weights again)
    want = (losses, [v.numpy() for v in variables])
    pipe = _pipeline("1f1b", ranks=ranks, micro_batches=2)
    p_opt = make_opt(pipe.trainable_variables)
    got = [float(pipe.train_step(X, Y, p_opt)) for _ in range(4)]
    p_opt.finalize_variable_values(pipe.trainable_variables)
    _same_training((got, [v.numpy() for v in pipe.trainable_variables]), want)


# ---- seeded random ops in stages (pps14) ------------------------------------------------------------------
class NoisyStage(Stage):
    """Dropout and Gaussian noise on the stage's input (seeded: the one-device run draws the same)."""

    def __call__(self, h):
        h = tw.nn.dropout(h, 0.25, seed=7 + 10 * self.last)
        h = h + tw.random.normal(tw.shape(h), stddev=0.1, seed=9 + 10 * self.last)
        return super().__call__(h)


def _noisy_one_device(steps):
    s0, s1 = NoisyStage(PARAMS[:1], False), NoisyStage(PARAMS[1:], True)
    variables = [v for st in (s0, s1) for pair in st.params for v in pair]
    opt = tw.keras.optimizers.Adam(0.05)
    losses = []
    for _ in range(steps):
        with tw.GradientTape() as tape:
            loss = loss_fn(tw.constant(Y), s1(s0(tw.constant(X))))
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
        losses.append(float(loss))
    return losses, [v.numpy() for v in variables]


@pytest.mark.parametrize("ranks, micro_batches", [(([0], [1]), 4), (([0, 1], [2]), 2)], ids=["two-workers", "dp-stage"])
def test_seeded_dropout_and_noise_in_stages_equal_the_unpipelined_one_device_run(cluster, ranks, micro_batches):
    tw.random.set_seed(5)
    want = _noisy_one_device(3)
    tw.random.set_seed(5)
    stages = [(NoisyStage(PARAMS[:1], False), tw.placement("cpu", ranks=list(ranks[0]))),
              (NoisyStage(PARAMS[1:], True), tw.placement("cpu", ranks=list(ranks[1])))]
    pipe = tw.distribute.pipeline(stages, micro_batches=micro_batches, schedule="1f1b", loss=loss_fn)
    opt = tw.keras.optimizers.Adam(0.05)
    losses = [float(pipe.train_step(X, Y, opt)) for _ in range(3)]     # the streams continue from step to step
    _same_training((losses, [v.numpy() for v in pipe.trainable_variables]), want)
    tw.random.set_seed(None)


def _dropout_model():
    tw.keras.utils.set_random_seed(3)
    return tw.keras.Sequential([tw.keras.Input((SIZES[0],)), tw.keras.layers.Dense(8, activation="relu"),
                                tw.keras.layers.Dropout(0.4, seed=2), tw.keras.layers.Dense(3)])


def test_keras_dropout_in_a_stage_is_on_while_training_and_equals_train_on_batch(cluster):
    ref = _dropout_model()
    ref.compile(optimizer=tw.keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
    want = [float(ref.train_on_batch(X, Y)) for _ in range(2)]
    model = _dropout_model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe = tw.distribute.pipeline([(model.layers[:2], tw.placement("cpu", ranks=[0])),
                                       (model.layers[2:], tw.placement("cpu", ranks=[1]))],
                                      micro_batches=3, schedule="gpipe", loss="sparse_categorical_crossentropy")
    opt = tw.keras.optimizers.SGD(0.1)
    np.testing.assert_allclose([float(pipe.train_step(X, Y, opt)) for _ in range(2)], want, rtol=2e-5)
    for a, b in zip(model.get_weights(), ref.get_weights()):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(pipe(X).numpy(), ref.predict_on_batch(X), rtol=2e-5, atol=1e-6)   # off in inference


# ---- one seed in two stages, unseeded draws, categorical (pps14) -------------------------------------------
class DrawingStage(Stage):
    """Dropout with one seed in both stages (one device continues one stream through both), Gaussian
    noise without an op seed (the rule-2 counter), categorical picks (seeded in stage 0, not in 1)."""

    def __call__(self, h):
        h = tw.nn.dropout(h, 0.25, seed=7)
        h = h + tw.random.normal(tw.shape(h), stddev=0.1)
        picks = tw.random.categorical(h, 2, seed=None if self.last else 3)
        h = h * (1.0 + tw.one_hot(picks[:, 0], tw.shape(h)[1]) + tw.one_hot(picks[:, 1], tw.shape(h)[1]))
        return super().__call__(h)


def _drawing_one_device(steps):
    s0, s1 = DrawingStage(PARAMS[:1], False), DrawingStage(PARAMS[1:], True)
    variables = [v for st in (s0, s1) for pair in st.params for v in pair]
    opt = tw.keras.optimizers.Adam(0.05)
    losses = []
    for _ in range(steps):
        with tw.GradientTape() as tape:
            loss = loss_fn(tw.constant(Y), s1(s0(tw.constant(X))))
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
        losses.append(float(loss))
    return losses, [v.numpy() for v in variables]


@pytest.mark.parametrize("ranks, micro_batches", [(([0], [1]), 4), (([0, 1], [2]), 2)], ids=["two-workers", "dp-stage"])
def test_one_seed_in_two_stages_unseeded_draws_and_categorical_equal_the_one_device_run(cluster, ranks, micro_batches):
    tw.random.set_seed(5)
    want = _drawing_one_device(3)
    after = (tw.random.uniform([3], seed=7).numpy(), tw.random.normal([2]).numpy())    # the streams go on
    tw.random.set_seed(5)
    stages = [(DrawingStage(PARAMS[:1], False), tw.placement("cpu", ranks=list(ranks[0]))),
              (DrawingStage(PARAMS[1:], True), tw.placement("cpu", ranks=list(ranks[1])))]
    pipe = tw.distribute.pipeline(stages, micro_batches=micro_batches, schedule="1f1b", loss=loss_fn)
    opt = tw.keras.optimizers.Adam(0.05)
    losses = [float(pipe.train_step(X, Y, opt)) for _ in range(3)]
    _same_training((losses, [v.numpy() for v in pipe.trainable_variables]), want)
    # the driver's streams and counter moved as one device's did: its next draws are one device's
    np.testing.assert_array_equal(tw.random.uniform([3], seed=7).numpy(), after[0])
    np.testing.assert_array_equal(tw.random.normal([2]).numpy(), after[1])
    tw.random.set_seed(None)


def _noise(h):
    return tw.random.uniform(tw.shape(h))        # no seed at all: OS entropy on each worker


def test_draws_without_any_seed_differ_per_call_and_per_worker(cluster):
    tw.random.set_seed(None)
    pipe = tw.distribute.pipeline([(tw.identity, tw.placement("cpu", ranks=[0])),
                                   (_noise, tw.placement("cpu", ranks=[1, 2]))], micro_batches=2, loss=loss_fn)
    first, second = pipe(X).numpy(), pipe(X).numpy()
    assert first.shape == X.shape and np.unique(first).size == first.size       # workers 1 and 2 never repeat
    assert not np.array_equal(first, second)                                     # nor do two calls
    assert not np.array_equal(first[0:3], first[3:6])     # micro-batch 0's rows: 3 on worker 1, 3 on worker 2


def _shuffled(h):
    return tw.random.shuffle(h, seed=4)


def test_a_shuffle_of_the_micro_batch_rows_is_an_error_naming_the_op_and_the_hint(cluster):
    pipe = tw.distribute.pipeline([(Stage(PARAMS[:1], False), tw.placement("cpu", ranks=[0])),
                                   (_shuffled, tw.placement("cpu", ranks=[1]))], micro_batches=2, loss=loss_fn)
    with pytest.raises(errors.UnimplementedError, match=r"RandomShuffle of the micro-batch's 6 rows.*whole batch's 11 "
                                                        r"rows.*Hint: shuffle in the input pipeline"):
        pipe(X)


GENERATOR = tw.random.Generator.from_seed(1)


def _generated(h):
    return h + GENERATOR.uniform(tw.shape(h))


def test_a_generator_draw_in_a_stage_is_an_error_naming_the_op_and_the_hint(cluster):
    pipe = tw.distribute.pipeline([(Stage(PARAMS[:1], False), tw.placement("cpu", ranks=[0])),
                                   (_generated, tw.placement("cpu", ranks=[1]))], micro_batches=2, loss=loss_fn)
    with pytest.raises(errors.UnimplementedError, match=r"pipeline: a stage holds a tw.random.Generator; on Ray "
                                                        r"workers .*Hint: an op seed"):
        pipe(X)
