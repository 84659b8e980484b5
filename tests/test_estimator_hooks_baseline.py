"""The stock session-run hooks, listeners and exporters of ``tf.estimator``, and the baseline models
against TensorFlow.

TensorFlow 2.21 has no ``tf.estimator``, so the baseline references come from the equivalent TF
compat.v1 graph run in the benchmark venv: one zero-initialized bias broadcast over the batch,
TF1's canned loss (sigmoid cross-entropy or squared error, ``Reduction.SUM``) and
``FtrlOptimizer(0.3)`` (the baselines' default), 30 steps on the same batch of 40.
"""
import json
import logging
import os

import numpy as np
import pytest

import tensorweave.compat.v1 as tf
from tensorweave.estimator import hooks as hooks_module

TF_BASELINE = {"classifier": {"bias": 0.7308751940727234, "loss": 25.22323989868164,
                              "average_loss": 0.6305810213088989},
               "regressor": {"bias": 1.8436813354492188, "loss": 44.69398498535156,
                             "average_loss": 1.117349624633789}}


def _baseline_data():
    rng = np.random.RandomState(5)
    x = rng.randn(40).astype(np.float32)
    y_cls = (rng.rand(40) < 0.7).astype(np.int64)
    y_reg = (2.0 + rng.randn(40)).astype(np.float32)
    return x, y_cls, y_reg


def _fn(x, y, epochs=None):
    return tf.estimator.inputs.numpy_input_fn({"x": x}, y, batch_size=40, num_epochs=epochs, shuffle=False)


@pytest.mark.parametrize("kind", ["classifier", "regressor"])
def test_baseline_matches_tensorflow(kind, tmp_path):
    x, y_cls, y_reg = _baseline_data()
    y = y_cls if kind == "classifier" else y_reg
    est = (tf.estimator.BaselineClassifier if kind == "classifier" else tf.estimator.BaselineRegressor)(
        model_dir=str(tmp_path))
    est.train(_fn(x, y), steps=30)
    ref = TF_BASELINE[kind]
    np.testing.assert_allclose(est.get_variable_value("baseline/bias"), [ref["bias"]], rtol=1e-5)
    metrics = est.evaluate(_fn(x, y, 1))
    assert metrics["loss"] == pytest.approx(ref["loss"], rel=1e-5)
    assert metrics["average_loss"] == pytest.approx(ref["average_loss"], rel=1e-5)
    if kind == "regressor":
        assert metrics["label/mean"] == pytest.approx(float(y.mean()), rel=1e-5)
    else:
        assert metrics["accuracy"] == pytest.approx(max(y.mean(), 1 - y.mean()))


def _data(n=64, seed=0):
    rng = np.random.RandomState(seed)
    x = rng.randn(n, 2).astype(np.float32)
    return x, (x[:, 0] + 2 * x[:, 1] > 0).astype(np.int64)


def _model_fn(features, labels, mode):
    w = tf.Variable(tf.zeros([2, 2]), name="w")
    logits = tf.matmul(features["x"], w)
    if mode == tf.estimator.ModeKeys.PREDICT:
        return tf.estimator.EstimatorSpec(mode, predictions={"classes": tf.argmax(logits, 1)})
    loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
    train_op = tf.train.GradientDescentOptimizer(0.5).minimize(loss, global_step=tf.train.get_or_create_global_step())
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op,
                                      eval_metric_ops={"accuracy": tf.metrics.accuracy(labels, tf.argmax(logits, 1))})


def _input(x, y, epochs=None):
    return tf.estimator.inputs.numpy_input_fn({"x": x}, y, batch_size=16, num_epochs=epochs, shuffle=False)


def test_run_context_values_and_feed_fn_hook(tmp_path):
    x, y = _data()
    scales, seen = [], []

    def model_fn(features, labels, mode):
        scales.append(tf.placeholder_with_default(1.0, [], name="scale"))
        return _model_fn(features, labels, mode)

    class Probe(tf.estimator.SessionRunHook):
        def before_run(self, run_context):
            assert isinstance(run_context, tf.estimator.SessionRunContext)
            return tf.estimator.SessionRunArgs({"step": tf.train.get_global_step(), "scale": scales[-1]})

        def after_run(self, run_context, run_values):
            assert isinstance(run_values, tf.estimator.SessionRunValues)
            seen.append((int(run_values.results["step"]), float(run_values.results["scale"])))
            if run_values.results["step"] == 2:
                run_context.request_stop()
                assert run_context.stop_requested
    feeds = iter([3.0, 4.0, 5.0, 6.0])
    est = tf.estimator.Estimator(model_fn, model_dir=str(tmp_path))
    est.train(_input(x, y), steps=10, hooks=[tf.estimator.FeedFnHook(lambda: {scales[-1]: next(feeds)}), Probe()])
    assert seen == [(0, 3.0), (1, 4.0), (2, 5.0)]     # FeedFnHook's feed reached the run; stopped after step 3
    assert est.get_variable_value("global_step") == 3


def test_logging_final_ops_and_nan_tensor_hooks(tmp_path, caplog):
    x, y = _data()
    est = tf.estimator.Estimator(_model_fn, model_dir=str(tmp_path))

    class Log(tf.estimator.SessionRunHook):
        def begin(self):
            self.inner = tf.estimator.LoggingTensorHook({"step": tf.train.get_global_step()}, every_n_iter=2)

        def before_run(self, run_context):
            return self.inner.before_run(run_context)

        def after_run(self, run_context, run_values):
            self.inner.after_run(run_context, run_values)
    with caplog.at_level(logging.INFO, logger="tensorweave.estimator"):
        est.train(_input(x, y), steps=5, hooks=[Log()])
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("step = ")]
    assert logged == ["step = 0", "step = 2", "step = 4"]

    class Final(tf.estimator.SessionRunHook):
        def begin(self):
            self.inner = tf.estimator.FinalOpsHook({"step": tf.train.get_global_step(),
                                                    "w": tf.get_default_graph().get_tensor_by_name("w:0")})

        def end(self, session):
            self.inner.end(session)
    final = Final()
    est.evaluate(_input(x, y, 1), hooks=[final])
    assert final.inner.final_ops_values["step"] == 5
    np.testing.assert_array_equal(final.inner.final_ops_values["w"], est.get_variable_value("w"))

    # fail_on_nan_loss=False: training stops at the NaN instead of raising.
    def nan_model_fn(features, labels, mode):
        w = tf.Variable(1.0, name="w")
        step = tf.train.get_or_create_global_step()
        loss = tf.cond(step >= 2, lambda: tf.log(-w), lambda: w * 1.0)
        hook = tf.estimator.NanTensorHook(loss, fail_on_nan_loss=False)
        return tf.estimator.EstimatorSpec(mode, loss=tf.constant(0.0), train_op=tf.assign_add(step, 1),
                                          training_hooks=[hook])
    nan_est = tf.estimator.Estimator(nan_model_fn, model_dir=str(tmp_path / "nan"))
    nan_est.train(_input(x, y), steps=10)
    assert nan_est.get_variable_value("global_step") == 3


def test_second_or_step_timer_and_step_counter(tmp_path, monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(hooks_module, "_now", lambda: clock[0])
    timer = tf.estimator.SecondOrStepTimer(every_steps=3)
    assert timer.should_trigger_for_step(0) and timer.update_last_triggered_step(0) == (None, None)
    assert not timer.should_trigger_for_step(2) and timer.should_trigger_for_step(3)
    clock[0] = 106.0
    assert timer.update_last_triggered_step(3) == (6.0, 3) and timer.last_triggered_step() == 3
    secs = tf.estimator.SecondOrStepTimer(every_secs=10)
    secs.update_last_triggered_step(0)
    assert not secs.should_trigger_for_step(1)
    clock[0] = 116.5
    assert secs.should_trigger_for_step(1)
    secs.reset()
    assert secs.last_triggered_step() is None
    with pytest.raises(ValueError, match="exactly one of every_secs and every_steps"):
        tf.estimator.SecondOrStepTimer(every_secs=1, every_steps=1)

    class Ticking(tf.estimator.StepCounterHook):
        def after_run(self, run_context, run_values):
            clock[0] += 0.5     # each step takes half a second
            super().after_run(run_context, run_values)
    x, y = _data()
    counter = Ticking(every_n_steps=2)
    tf.estimator.Estimator(_model_fn, model_dir=str(tmp_path)).train(_input(x, y), steps=7, hooks=[counter])
    assert counter.steps_per_sec == [2.0, 2.0, 2.0]


def test_saving_listener_and_custom_and_best_exporters(tmp_path):
    x, y = _data()
    events = []

    class Listener(tf.estimator.CheckpointSaverListener):
        def begin(self):
            events.append("begin")

        def after_save(self, session, global_step_value):
            events.append(global_step_value)

    class Recording(tf.estimator.Exporter):
        name = "recording"

        def export(self, estimator, export_path, checkpoint_path, eval_result, is_the_final_export):
            events.append(("export", eval_result["global_step"], is_the_final_export))
            return export_path.encode()
    config = tf.estimator.RunConfig(save_checkpoints_steps=4)
    est = tf.estimator.Estimator(_model_fn, model_dir=str(tmp_path), config=config)
    est.train(_input(x, y), steps=6, saving_listeners=[Listener()])
    assert events == ["begin", 4, 6]

    def predict_fn(features, labels, mode):
        return _model_fn(features, labels, mode)
    receiver = tf.estimator.export.build_raw_serving_input_receiver_fn({"x": tf.TensorSpec([None, 2], tf.float32)})
    losses = iter([0.5, 0.7, 0.3])      # the second evaluation is worse: BestExporter skips it
    best = tf.estimator.BestExporter("best", receiver,
                                     compare_fn=lambda best, cur: cur["fake"] < best["fake"])
    est2 = tf.estimator.Estimator(predict_fn, model_dir=str(tmp_path / "b"), config=config)

    def metric_fn(labels, features):
        return {"fake": (tf.constant(next(losses)), tf.no_op())}
    est2 = tf.estimator.add_metrics(est2, metric_fn)
    events.clear()
    _, exports = tf.estimator.train_and_evaluate(
        est2, tf.estimator.TrainSpec(_input(x, y), max_steps=12),
        tf.estimator.EvalSpec(_input(x, y, 1), exporters=[best, Recording()]))
    # every evaluation goes to the exporters (TF's train_and_evaluate), the last one as the final export
    assert events == [("export", 4, False), ("export", 8, False), ("export", 12, True)]
    # BestExporter wrote after the 1st (0.5) and 3rd (0.3) evaluations, not the 2nd (0.7)
    assert len(os.listdir(tmp_path / "b" / "export" / "best")) == 2
    assert exports[0] is not None and exports[1] == str(tmp_path / "b" / "export" / "recording").encode()


# The linear part of wide-and-deep alone is deterministic (zeros, Ftrl 0.2): TF's
# compat.v1.feature_column.linear_model under variable scope "linear", squared error summed over the
# batch, 30 steps over tests/test_estimator_canned.py's data in batches of 40, then the training set.
TF_WIDE_REGRESSOR = {"loss": 10.913200378417969, "average_loss": 0.2728300094604492}


def test_dnn_linear_combined_regressor_linear_part_matches_tensorflow(tmp_path):
    from test_estimator_canned import _columns, _data as canned_data
    features, _, target = canned_data()
    est = tf.estimator.DNNLinearCombinedRegressor(model_dir=str(tmp_path), linear_feature_columns=list(_columns()))
    est.train(tf.estimator.inputs.numpy_input_fn(features, target, batch_size=40, num_epochs=None, shuffle=False),
              steps=30)
    metrics = est.evaluate(tf.estimator.inputs.numpy_input_fn(features, target, batch_size=40, shuffle=False))
    assert metrics["loss"] == pytest.approx(TF_WIDE_REGRESSOR["loss"], rel=1e-4)
    assert metrics["average_loss"] == pytest.approx(TF_WIDE_REGRESSOR["average_loss"], rel=1e-4)


def test_profiler_hook_writes_tensorflows_timeline_files(tmp_path):
    # TF 2.21: tf.compat.v1.train.ProfilerHook(save_steps=2) over 6 steps writes timeline-2, -4 and -6.json
    x, y = _data()
    hook = tf.estimator.ProfilerHook(save_steps=2, output_dir=str(tmp_path / "prof"))
    tf.estimator.Estimator(_model_fn, model_dir=str(tmp_path / "m")).train(_input(x, y), steps=6, hooks=[hook])
    assert sorted(os.listdir(tmp_path / "prof")) == ["timeline-2.json", "timeline-4.json", "timeline-6.json"]
    with open(tmp_path / "prof" / "timeline-4.json") as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    assert any(e.get("name") == "w/Read/ReadVariableOp" or "MatMul" in str(e.get("args", e.get("name")))
               for e in events)
    with pytest.raises(ValueError, match="exactly one of every_secs and every_steps"):
        tf.train.ProfilerHook()
