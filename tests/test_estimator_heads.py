"""TF2's estimator heads (``tf.estimator.BinaryClassHead`` ...) and the estimators that take one
(``LinearEstimator``, ``DNNEstimator``, ``DNNLinearCombinedEstimator``, ``BaselineEstimator``).

Head losses are TF 2.21's values of the same formulas (``tf.losses.compute_weighted_loss`` with
``SUM_OVER_BATCH_SIZE`` over ``sigmoid_cross_entropy_with_logits``, ``log_poisson_loss(...,
compute_full_loss=True)``, ``sparse_softmax_cross_entropy_with_logits``); TF 2.21 has no
``tf.estimator``. An estimator with a head trains as the canned model of that head does, so the
linear and baseline ones are checked against the TF references of those models."""
import numpy as np
import pytest

import tensorweave.compat.v1 as tf
from test_estimator_canned import _columns, _data as canned_data
from test_estimator_hooks_baseline import TF_BASELINE, TF_WIDE_REGRESSOR, _baseline_data, _fn

TF_HEADS = {"logistic": 0.9697353839874268,
            "logistic_pred": [0.5744425654411316, 0.2689414322376251, 0.8807970881462097, 0.5249791741371155],
            "poisson": 1.0904350280761719, "binary_weighted": 0.5234735012054443, "multiclass": 0.5108073353767395}


def _run(t):
    with tf.Session() as sess:
        return sess.run(t)


def test_head_losses_match_tensorflow():
    with tf.Graph().as_default():
        logistic = tf.estimator.LogisticRegressionHead()
        lg = tf.constant([[0.3], [-1.0], [2.0], [0.1]])
        loss = logistic.loss(tf.constant([[0.2], [0.9], [0.5], [0.0]]), lg)
        pred = logistic.predictions(lg, keys=["predictions"])["predictions"]
        poisson = tf.estimator.PoissonRegressionHead().loss(tf.constant([[1.0], [0.0], [3.0], [2.0]]),
                                                             tf.constant([[0.2], [-0.5], [1.1], [0.7]]))
        binary = tf.estimator.BinaryClassHead(weight_column="w").loss(
            tf.constant([1, 0, 1, 1]), tf.constant([[0.3], [-1.0], [2.0], [-0.4]]),
            features={"w": tf.constant([1.0, 2.0, 0.0, 1.0])})
        multi = tf.estimator.MultiClassHead(3).loss(tf.constant([2, 0, 0, 1]), tf.constant(
            [[0.3, -1.0, 2.0], [0.1, 0.2, -0.3], [1.5, 0.5, 0.0], [-1.0, 2.0, 1.0]]))
        got = _run({"logistic": loss, "logistic_pred": pred, "poisson": poisson, "binary_weighted": binary,
                    "multiclass": multi})
    for key, want in TF_HEADS.items():
        np.testing.assert_allclose(np.ravel(got[key]), want, rtol=1e-6, err_msg=key)
    assert isinstance(tf.estimator.RegressionHead(), tf.estimator.Head)
    with pytest.raises(ValueError, match="n_classes must be > 2"):
        tf.estimator.MultiClassHead(2)


def test_linear_and_wide_estimators_with_a_head_match_tensorflow(tmp_path):
    features, _, target = canned_data()
    head = tf.estimator.RegressionHead(loss_reduction=tf.losses.Reduction.SUM)
    train = tf.estimator.inputs.numpy_input_fn(features, target, batch_size=40, num_epochs=None, shuffle=False)
    evaluate = tf.estimator.inputs.numpy_input_fn(features, target, batch_size=40, shuffle=False)
    for i, est in enumerate([
            tf.estimator.LinearEstimator(head, list(_columns()), model_dir=str(tmp_path / "linear")),
            tf.estimator.DNNLinearCombinedEstimator(head, model_dir=str(tmp_path / "wide"),
                                                    linear_feature_columns=list(_columns()))]):
        est.train(train, steps=30)
        metrics = est.evaluate(evaluate)
        assert metrics["loss"] == pytest.approx(TF_WIDE_REGRESSOR["loss"], rel=1e-4), i
        assert metrics["average_loss"] == pytest.approx(TF_WIDE_REGRESSOR["average_loss"], rel=1e-4), i


def test_baseline_estimator_with_a_binary_head_matches_tensorflow(tmp_path):
    x, y, _ = _baseline_data()
    est = tf.estimator.BaselineEstimator(tf.estimator.BinaryClassHead(loss_reduction=tf.losses.Reduction.SUM),
                                         model_dir=str(tmp_path))
    est.train(_fn(x, y), steps=30)
    np.testing.assert_allclose(est.get_variable_value("baseline/bias"), [TF_BASELINE["classifier"]["bias"]],
                               rtol=1e-5)


def test_dnn_estimator_is_the_canned_classifier_of_its_head(tmp_path):
    features, y, _ = canned_data()
    x, color, age = _columns()
    columns = [x, tf.feature_column.indicator_column(color), age]
    config = tf.estimator.RunConfig(tf_random_seed=7)
    train = tf.estimator.inputs.numpy_input_fn(features, y, batch_size=40, num_epochs=None, shuffle=False)
    evaluate = tf.estimator.inputs.numpy_input_fn(features, y, batch_size=40, shuffle=False)
    results = []
    for est in (tf.estimator.DNNEstimator(tf.estimator.BinaryClassHead(loss_reduction=tf.losses.Reduction.SUM),
                                          [8], columns, model_dir=str(tmp_path / "a"), config=config),
                tf.estimator.DNNClassifier([8], columns, model_dir=str(tmp_path / "b"), config=config)):
        est.train(train, steps=20)
        results.append(est.evaluate(evaluate))
    assert results[0]["loss"] == pytest.approx(results[1]["loss"], rel=1e-6)
    assert results[0]["accuracy"] == results[1]["accuracy"] > 0.8
