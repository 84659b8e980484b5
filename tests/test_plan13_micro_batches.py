"""Micro-batching inside one planned function on several placements (plan_pipeline.py):
``tw.distribute.pipeline(fn, micro_batches=k, schedule=...)`` runs the function's forward and
backward segments per micro-batch by the schedule, one controller per stage; loss, gradients and
Adam steps equal the unpipelined function and one device; the bubble is reported."""
import threading

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core import errors
from tensorweave.core.sbp import B, S
from tensorweave.distribute import plan_placements
from tensorweave.distribute.plan_pipeline import PipelineStats

RNG = np.random.default_rng(1313)
X = RNG.standard_normal((7, 4)).astype(np.float32)         # 7 rows: uneven micro-batches and shards
Y = RNG.standard_normal((7, 3)).astype(np.float32)
W1 = RNG.standard_normal((4, 5)).astype(np.float32)
B1 = (RNG.standard_normal(5) * 0.1).astype(np.float32)
W2 = RNG.standard_normal((5, 3)).astype(np.float32)
P1 = tw.placement("cpu", ranks=[0, 1])
P2 = tw.placement("cpu", ranks=[2, 3, 4])


def _model(glob):
    if glob:
        variables = [tw.Variable(W1, placement=P1, sbp=S(1)), tw.Variable(B1, placement=P1, sbp=S(0)),
                     tw.Variable(W2, placement=P2, sbp=B)]
    else:
        variables = [tw.Variable(W1), tw.Variable(B1), tw.Variable(W2)]
    w1, b1, w2 = variables

    def loss_fn(x, y):
        h = tw.nn.relu(tw.matmul(x, w1) + b1)
        if glob:
            h = h.to_global(placement=P2, sbp=S(0))
        return tw.reduce_mean(tw.square(tw.tanh(tw.matmul(h, w2)) - y))
    return variables, loss_fn


def _batch(glob):
    if not glob:
        return tw.constant(X), tw.constant(Y)
    return tw.constant(X).to_global(placement=P1, sbp=S(0)), tw.constant(Y).to_global(placement=P2, sbp=S(0))


def _one_device():
    variables, loss_fn = _model(False)
    with tw.GradientTape() as tape:
        loss = loss_fn(*_batch(False))
    return loss, tape.gradient(loss, variables)


def _unpipelined():
    variables, loss_fn = _model(True)

    @tw.function
    def step(x, y):
        with tw.GradientTape() as tape:
            loss = loss_fn(x, y)
        return loss, tape.gradient(loss, variables)
    return step(*_batch(True))


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_loss_and_gradients_equal_the_unpipelined_function_and_one_device(schedule):
    want_loss, want = _one_device()
    plain_loss, plain = _unpipelined()
    variables, loss_fn = _model(True)
    pipe = tw.distribute.pipeline(loss_fn, micro_batches=3, schedule=schedule)
    loss, grads, got_vars = pipe.forward_backward(*_batch(True))
    assert [id(v) for v in got_vars] == [id(v) for v in variables]
    assert loss.placement == P2
    for ref_loss, ref in ((want_loss, want), (plain_loss, plain)):
        np.testing.assert_allclose(loss.numpy(), ref_loss.numpy(), rtol=2e-5)
        for g, r in zip(grads, ref):
            np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=2e-5, atol=1e-6)
    assert [g.placement for g in grads] == [P1, P1, P2]
    # the loss alone (forwards only) is the same
    np.testing.assert_allclose(pipe(*_batch(True)).numpy(), want_loss.numpy(), rtol=2e-5)


def test_three_adam_steps_equal_one_device():
    ref_vars, ref_fn = _model(False)
    ref_opt = tw.keras.optimizers.Adam(0.05)
    want = []
    for _ in range(3):
        with tw.GradientTape() as tape:
            loss = ref_fn(*_batch(False))
        ref_opt.apply_gradients(zip(tape.gradient(loss, ref_vars), ref_vars))
        want.append(float(loss))
    variables, loss_fn = _model(True)
    pipe = tw.distribute.pipeline(tw.function(loss_fn), micro_batches=4, schedule="1f1b")
    opt = tw.keras.optimizers.Adam(0.05)
    got = [float(pipe.train_step(*_batch(True), optimizer=opt)) for _ in range(2)]
    got.append(float(pipe.train_step(*_batch(True), opt)))            # the stage pipeline's (x, y, optimizer)
    assert pipe.held_activations == pipe.peak_activations == [2, 1]    # 1F1B: p - s micro-batches held
    np.testing.assert_allclose(got, want, rtol=2e-5)
    for v, r in zip(variables, ref_vars):
        np.testing.assert_allclose(v.numpy(), r.numpy(), rtol=2e-5, atol=1e-6)


def test_a_model_and_a_loss_name_as_for_stage_pipelines():
    variables, loss_fn = _model(True)
    w1, b1, w2 = variables

    def model(x):
        h = tw.nn.relu(tw.matmul(x, w1) + b1).to_global(placement=P2, sbp=S(0))
        return tw.tanh(tw.matmul(h, w2))
    pipe = tw.distribute.pipeline(model, micro_batches=2, schedule="gpipe", loss="mse")
    want_loss, want = _one_device()
    loss, grads, _ = pipe.forward_backward(*_batch(True))
    np.testing.assert_allclose(loss.numpy(), want_loss.numpy(), rtol=2e-5)
    for g, r in zip(grads, want):
        np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=2e-5, atol=1e-6)


def test_stages_run_their_micro_batches_at_the_same_time_on_their_own_controllers(monkeypatch):
    """1F1B slot 1: stage 0's forward of micro-batch 1 and stage 1's forward of micro-batch 0;
    both wait at a barrier inside, which only passes when the two run at once."""
    variables, loss_fn = _model(True)
    pipe = tw.distribute.pipeline(loss_fn, micro_batches=3, schedule="1f1b")
    pipe.forward_backward(*_batch(True))              # planned and bound
    barrier, seen = threading.Barrier(2, timeout=60), []
    run_segment = plan_placements.run_segment
    ranks_of = {P1.ranks: 0, P2.ranks: 1}

    def watched(seg, values):
        seen.append((threading.current_thread().name, ranks_of[seg.placement.ranks]))
        if seg.plan.label.endswith("forward/segment0") and len([s for s in seen if s[1] == 0]) == 2:
            barrier.wait()                          # stage 0, its second forward
        if seg.plan.label.endswith("forward/segment1") and len([s for s in seen if s[1] == 1]) == 1:
            barrier.wait()                          # stage 1, its first forward
        return run_segment(seg, values)
    monkeypatch.setattr(plan_placements, "run_segment", watched)
    loss, _, _ = pipe.forward_backward(*_batch(True))
    np.testing.assert_allclose(loss.numpy(), _one_device()[0].numpy(), rtol=2e-5)
    threads = {stage: {name for name, s in seen if s == stage} for stage in (0, 1)}
    assert threads == {0: {"tw-pipeline-device0"}, 1: {"tw-pipeline-device1"}}


def test_bubble_fraction_in_stats_and_explain():
    variables, loss_fn = _model(True)
    pipe = tw.distribute.pipeline(loss_fn, micro_batches=4, schedule="gpipe")
    with pytest.raises(ValueError, match="known once it is planned"):
        pipe.bubble_fraction
    e = tw.distribute.explain(pipe, *_batch(True))
    d = e.to_dict()
    assert d["pipeline"]["bubble_fraction"] == pytest.approx(1 / 5)        # (p - 1) / (k + p - 1)
    assert d["pipeline"]["stages"] == [[0, 1], [2, 3, 4]] and d["pipeline"]["schedule"] == "gpipe"
    assert [s["placement"]["ranks"] for s in d["segments"]] == [[0, 1], [2, 3, 4], [2, 3, 4], [0, 1]]
    assert "pipeline: 2 stages x 4 micro-batches, gpipe: bubble fraction 0.200" in str(e)
    assert "stage 1: .. F0 F1 F2 F3 B0 B1 B2 B3 .." in str(e)
    pipe.forward_backward(*_batch(True))
    st = pipe.stats
    assert st.bubble_fraction == pytest.approx(0.2) == pipe.bubble_fraction
    assert st.micro_batches == 4 and st.stages == [[0, 1], [2, 3, 4]] and len(st.busy_seconds) == 2
    # the measured idle share comes from wall-clock readings: its formula is checked below with fixed figures
    assert isinstance(st.measured_idle_fraction, float) and st.held == [4, 4]     # GPipe holds every micro-batch
    assert pipe.last_step["bubble_fraction"] == st.bubble_fraction
    fixed = PipelineStats("1f1b", 4, [[0], [1]], 0.2, 0.5, [0.3, 0.2], [2, 1])      # idle: 1 - 0.5 / (2 x 0.5)
    assert repr(fixed) == ("<PipelineStats 1f1b 2 stages x 4 micro-batches: bubble 0.200, measured idle 0.500, "
                           "500.0 ms>")
    assert fixed.to_dict()["measured_idle_fraction"] == 0.5 and fixed.to_dict()["busy_seconds"] == [0.3, 0.2]
    assert PipelineStats("gpipe", 2, [[0], [1]], 0.5, 0.0, [0.0, 0.0], [2, 2]).measured_idle_fraction == 0.0


def test_bad_input_is_refused_with_the_shapes_and_a_hint():
    variables, loss_fn = _model(True)
    x, y = _batch(True)
    pipe = tw.distribute.pipeline(loss_fn, micro_batches=3)
    with pytest.raises(errors.InvalidArgumentError,
                       match=r"different row counts: shapes \[\[7, 4\], \[6, 3\]\](.|\n)*test_plan13_micro_batches.py"
                             r"(.|\n)*Hint"):
        pipe.forward_backward(x, tw.constant(Y[:6]).to_global(placement=P2, sbp=S(0)))
    with pytest.raises(errors.InvalidArgumentError, match=r"argument 0 of shape \[7, 4\] has 7 rows for 8 micro-batches"):
        tw.distribute.pipeline(loss_fn, micro_batches=8).forward_backward(x, y)
    one = tw.distribute.pipeline(lambda x: tw.reduce_sum(tw.matmul(tw.matmul(x, variables[0]), tw.ones((5, 3)))),
                                 micro_batches=2)
    with pytest.raises(errors.InvalidArgumentError, match=r"holds one placement(.|\n)*Hint: put the layers"):
        one.forward_backward(x)
    vec = tw.distribute.pipeline(lambda x: tw.matmul(tw.matmul(x, variables[0]).to_global(placement=P2, sbp=S(0)),
                                                     variables[2]), micro_batches=2)
    with pytest.raises(errors.InvalidArgumentError, match=r"must return one floating scalar, the loss; it returns "
                                                          r"float32\[4, 3\](.|\n)*Hint: return tw.reduce_mean"):
        vec.forward_backward(x)
    def back_and_forth(x):       # stage 1 -> stage 2 -> stage 1 again: not a chain of stages
        h = tw.matmul(x, variables[0]).to_global(placement=P2, sbp=S(0))
        return tw.reduce_mean(tw.matmul(h, variables[2]).to_global(placement=P1, sbp=S(0)))
    with pytest.raises(errors.InvalidArgumentError, match=r"returns to placement\(type=\"cpu\", ranks=\[0, 1\]\) "
                       r"after another placement \(segments on \[\[0, 1\], \[2, 3, 4\], \[0, 1\]\]\)(.|\n)*Hint"):
        tw.distribute.pipeline(back_and_forth, micro_batches=2).forward_backward(x)
    opt = tw.keras.optimizers.SGD(0.1)

    def train(x, y):             # a whole training step: its update would run once per micro-batch
        with tw.GradientTape() as tape:
            loss = loss_fn(x, y)
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss
    with pytest.raises(errors.InvalidArgumentError, match=r"'train' updates a variable \('[^']+' \([A-Za-z]+\) "
                       r"at .*test_plan13_micro_batches.py:\d+\)(.|\n)*Hint: return the loss"):
        tw.distribute.pipeline(train, micro_batches=2).forward_backward(x, y)
    with pytest.raises(ValueError, match="schedule 'interleaved_1f1b' for a planned function"):
        tw.distribute.pipeline(loss_fn, micro_batches=2, schedule="interleaved_1f1b")
