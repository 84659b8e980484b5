"""``tf.estimator.Estimator`` with a hand-written ``model_fn``: train/evaluate/predict, checkpoints,
resuming, RunConfig, hooks, train_and_evaluate, and the errors a TF1 user sees."""
import os

import numpy as np
import pytest

import tensorweave as tw
import tensorweave.compat.v1 as tf


def _data(n=200, seed=0):
    rng = np.random.RandomState(seed)
    x = rng.randn(n, 2).astype(np.float32)
    y = (x[:, 0] + 2 * x[:, 1] > 0).astype(np.int64)
    return x, y


def _model_fn(features, labels, mode, params):
    w = tf.Variable(tf.zeros([2, 2]), name="w")
    b = tf.Variable(tf.zeros([2]), name="b")
    logits = tf.matmul(features["x"], w) + b
    classes = tf.argmax(logits, 1)
    if mode == tf.estimator.ModeKeys.PREDICT:
        return tf.estimator.EstimatorSpec(mode, predictions={"classes": classes,
                                                             "probabilities": tf.nn.softmax(logits)})
    loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
    train_op = tf.train.GradientDescentOptimizer(params["lr"]).minimize(
        loss, global_step=tf.train.get_or_create_global_step())
    metrics = {"accuracy": tf.metrics.accuracy(labels, classes)}
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op, eval_metric_ops=metrics)


def _input(x, y, epochs=None, shuffle=True, batch=32):
    return tf.estimator.inputs.numpy_input_fn({"x": x}, y, batch_size=batch, num_epochs=epochs, shuffle=shuffle)


def test_train_evaluate_predict_and_resume(tmp_path):
    x, y = _data()
    est = tf.estimator.Estimator(_model_fn, model_dir=str(tmp_path), params={"lr": 0.5})
    est.train(_input(x, y), steps=40)
    assert est.get_variable_value("global_step") == 40
    metrics = est.evaluate(_input(x, y, 1, False))
    assert metrics["global_step"] == 40
    assert metrics["accuracy"] > 0.95 and metrics["loss"] < 0.3
    # A second call resumes from the checkpoint: 40 more steps, lower loss.
    est.train(_input(x, y), steps=40)
    again = est.evaluate(_input(x, y, 1, False))
    assert again["global_step"] == 80 and again["loss"] < metrics["loss"]
    # max_steps already reached: nothing runs.
    est.train(_input(x, y), max_steps=50)
    assert est.get_variable_value("global_step") == 80
    preds = list(est.predict(tf.estimator.inputs.numpy_input_fn({"x": x[:5]}, shuffle=False)))
    assert len(preds) == 5 and sorted(preds[0]) == ["classes", "probabilities"]
    np.testing.assert_array_equal([p["classes"] for p in preds], y[:5])
    only = list(est.predict(tf.estimator.inputs.numpy_input_fn({"x": x[:3]}, shuffle=False),
                            predict_keys="classes", yield_single_examples=False))
    assert len(only) == 1 and list(only[0]) == ["classes"]


def test_input_ends_the_training_and_a_new_estimator_resumes(tmp_path):
    x, y = _data(64)
    est = tf.estimator.Estimator(_model_fn, model_dir=str(tmp_path), params={"lr": 0.1})
    est.train(_input(x, y, epochs=2, batch=16))
    assert est.get_variable_value("global_step") == 8
    other = tf.estimator.Estimator(_model_fn, model_dir=str(tmp_path), params={"lr": 0.1})
    np.testing.assert_array_equal(other.get_variable_value("w"), est.get_variable_value("w"))
    assert "w" in other.get_variable_names() and "global_step" in other.get_variable_names()


def test_checkpoints_every_n_steps_and_keep_max(tmp_path):
    x, y = _data(64)
    config = tf.estimator.RunConfig(save_checkpoints_steps=5, keep_checkpoint_max=2)
    est = tf.estimator.Estimator(_model_fn, model_dir=str(tmp_path), config=config, params={"lr": 0.1})
    saved = []

    class Listener:
        def begin(self):
            pass

        def before_save(self, session, step):
            pass

        def after_save(self, session, step):
            saved.append(step)

        def end(self, session, step):
            pass
    est.train(_input(x, y), steps=12, saving_listeners=[Listener()])
    assert saved == [5, 10, 12]
    files = sorted(f for f in os.listdir(tmp_path) if f.startswith("model.ckpt-"))
    assert files == ["model.ckpt-10.meta", "model.ckpt-10.safetensors", "model.ckpt-12.meta",
                     "model.ckpt-12.safetensors"]     # a Saver's checkpoints, with their meta graphs (as TF)
    assert tw.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-12")


def test_dataset_input_fn_with_params_and_hooks(tmp_path):
    x, y = _data(96)

    def input_fn(params):
        ds = tf.estimator.inputs.numpy_input_fn({"x": x}, y, batch_size=params["batch"], shuffle=False)()
        return ds.repeat()
    seen = []

    class CountHook(tf.estimator.SessionRunHook):
        def before_run(self, run_context):
            return tf.estimator.SessionRunArgs(tf.train.get_global_step())

        def after_run(self, run_context, run_values):
            seen.append(int(run_values.results))
    est = tf.estimator.Estimator(_model_fn, model_dir=str(tmp_path), params={"lr": 0.3, "batch": 24})
    est.train(input_fn, steps=6, hooks=[CountHook(), tf.estimator.StopAtStepHook(last_step=4)])
    assert seen == [0, 1, 2, 3]
    assert est.get_variable_value("global_step") == 4


def test_train_and_evaluate_evaluates_after_each_checkpoint(tmp_path):
    x, y = _data()
    evals = []

    class Spy(tf.estimator.SessionRunHook):
        def end(self, session):
            evals.append(int(session.run(tf.train.get_global_step())))
    config = tf.estimator.RunConfig(save_checkpoints_steps=10)
    est = tf.estimator.Estimator(_model_fn, model_dir=str(tmp_path), config=config, params={"lr": 0.5})
    metrics, exports = tf.estimator.train_and_evaluate(
        est, tf.estimator.TrainSpec(_input(x, y), max_steps=25),
        tf.estimator.EvalSpec(_input(x, y, 1, False), steps=None, hooks=[Spy()]))
    assert evals == [10, 20, 25]
    assert metrics["global_step"] == 25 and metrics["accuracy"] > 0.9 and exports == []


def test_nan_loss_stops_training_with_a_clear_error(tmp_path):
    def model_fn(features, labels, mode):
        w = tf.Variable(1.0)
        loss = tf.reduce_mean(tf.log(features * 0.0 - w))
        step = tf.train.get_or_create_global_step()
        return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=tf.assign_add(step, 1))
    est = tf.estimator.Estimator(model_fn, model_dir=str(tmp_path))
    with pytest.raises(tf.estimator.NanLossDuringTrainingError, match="NaN loss during training"):
        est.train(tf.estimator.inputs.numpy_input_fn(np.ones(4, np.float32), shuffle=False), steps=1)


def test_errors_a_tf1_user_sees(tmp_path):
    x, y = _data(8)
    with pytest.raises(ValueError, match="shuffle must be provided explicitly"):
        tf.estimator.inputs.numpy_input_fn({"x": x}, y)
    with pytest.raises(ValueError, match="must have one length"):
        tf.estimator.inputs.numpy_input_fn({"x": x}, y[:3], shuffle=False)
    with pytest.raises(ValueError, match="TRAIN needs both loss and train_op"):
        tf.estimator.EstimatorSpec(tf.estimator.ModeKeys.TRAIN, loss=tf.constant(1.0))
    with pytest.raises(ValueError, match="cannot both be set"):
        tf.estimator.RunConfig(save_checkpoints_steps=1, save_checkpoints_secs=1)
    est = tf.estimator.Estimator(_model_fn, model_dir=str(tmp_path), params={"lr": 0.1})
    with pytest.raises(ValueError, match="can not provide both steps and max_steps"):
        est.train(_input(x, y), steps=1, max_steps=1)
    with pytest.raises(ValueError, match="could not find a trained model"):
        next(est.predict(_input(x, y, 1, False)))
    with pytest.raises(TypeError, match="must return a tf.estimator.EstimatorSpec, got dict"):
        tf.estimator.Estimator(lambda features, labels, mode: {}, model_dir=str(tmp_path)).train(
            _input(x, y), steps=1)


def test_estimator_inside_another_default_graph(tmp_path):
    # init_scope kept the outermost graph: the optimizer's slots went into the outer graph and the
    # Estimator's session found them uninitialized.
    x, y = _data(40)
    with tf.Graph().as_default():
        est = tf.estimator.Estimator(_model_fn, model_dir=str(tmp_path), params={"lr": 0.1})

        def model_fn(features, labels, mode):
            spec = _model_fn(features, labels, mode, {"lr": 0.1})
            opt = tf.train.AdagradOptimizer(0.1)
            train_op = opt.minimize(spec.loss, global_step=tf.train.get_or_create_global_step())
            return tf.estimator.EstimatorSpec(mode, loss=spec.loss, train_op=train_op)
        tf.estimator.Estimator(model_fn, model_dir=str(tmp_path / "adagrad")).train(_input(x, y), steps=2)
        est.train(_input(x, y), steps=2)
    assert est.get_variable_value("global_step") == 2


def test_warm_start_copies_the_chosen_variables(tmp_path):
    x, y = _data(64)
    first = tf.estimator.Estimator(_model_fn, model_dir=str(tmp_path / "a"), params={"lr": 0.5})
    first.train(_input(x, y), steps=20)
    settings = tf.estimator.WarmStartSettings(str(tmp_path / "a"), vars_to_warm_start="w")
    second = tf.estimator.Estimator(_model_fn, model_dir=str(tmp_path / "b"), params={"lr": 0.0},
                                    warm_start_from=settings)
    second.train(_input(x, y), steps=1)
    np.testing.assert_array_equal(second.get_variable_value("w"), first.get_variable_value("w"))
    np.testing.assert_array_equal(second.get_variable_value("b"), np.zeros(2))
    assert second.get_variable_value("global_step") == 1


def test_exporters_in_train_and_evaluate(tmp_path):
    def model_fn(features, labels, mode):
        spec = _model_fn(features, labels, mode, {"lr": 0.5})
        return spec if mode != tf.estimator.ModeKeys.PREDICT else tf.estimator.EstimatorSpec(
            mode, predictions={"classes": spec.predictions["classes"]})
    x, y = _data(64)
    receiver = tf.estimator.export.build_raw_serving_input_receiver_fn({"x": tf.TensorSpec([None, 2], tf.float32)})
    est = tf.estimator.Estimator(model_fn, model_dir=str(tmp_path),
                                 config=tf.estimator.RunConfig(save_checkpoints_steps=5))
    latest = tf.estimator.LatestExporter("latest", receiver, exports_to_keep=2)
    final = tf.estimator.FinalExporter("final", receiver)
    _, exports = tf.estimator.train_and_evaluate(est, tf.estimator.TrainSpec(_input(x, y), max_steps=10),
                                                 tf.estimator.EvalSpec(_input(x, y, 1, False), exporters=[latest,
                                                                                                          final]))
    assert len(exports) == 2 and all(isinstance(p, bytes) for p in exports)
    assert len(os.listdir(tmp_path / "export" / "final")) == 1


def test_add_metrics(tmp_path):
    x, y = _data(64)
    est = tf.estimator.Estimator(_model_fn, model_dir=str(tmp_path), params={"lr": 0.5})
    est.train(_input(x, y), steps=10)

    def metric_fn(labels, features):
        return {"label_mean": tf.metrics.mean(tf.cast(labels, tf.float32)), "x_mean": tf.metrics.mean(features["x"])}
    both = tf.estimator.add_metrics(est, metric_fn).evaluate(_input(x, y, 1, False))
    assert {"accuracy", "label_mean", "x_mean", "loss", "global_step"} <= set(both)
    assert both["label_mean"] == pytest.approx(y.mean()) and both["x_mean"] == pytest.approx(x.mean(), abs=1e-6)
