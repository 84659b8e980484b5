"""``tf.compat.v1.metrics`` against TensorFlow 2.21's ``tf.compat.v1.metrics``.

The same three batches stream through every metric here and through TensorFlow (graph mode, in the
benchmark venv: ``_batches``/``_build``/``_run`` below, with ``tf`` being ``tensorflow.compat.v1``);
TF_FINAL holds TensorFlow's values after the three updates, TF_FIRST_UPDATE what each update op
returned on the first batch.
"""
import numpy as np
import pytest

import tensorweave.compat.v1 as tf

TF_FINAL = {
    'accuracy': 0.8333333134651184,
    'accuracy_w': 0.8233645558357239,
    'mean': 0.4323885440826416,
    'mean_w': 0.44801637530326843,
    'mse': 0.07365605235099792,
    'mae': 0.24491073191165924,
    'rmse': 0.2713964879512787,
    'precision': 0.8571428656578064,
    'recall': 1.0,
    'tp': 12.0,
    'fp': 2.0,
    'tn': 9.0,
    'fn': 1.0,
    'auc': 0.8881118297576904,
    'auc_w': 0.8947668075561523,
    'auc_pr': 0.9309136271476746,
    'auc_minoring': 0.8881118297576904,
    'prec_thr': [0.5652173757553101, 0.6111111044883728, 1.0],
    'rec_thr': [1.0, 0.8461538553237915, 0.6153846383094788],
    'tp_thr': [13.0, 11.0, 8.0],
    'mean_iou': 0.4888888895511627,
    'mean_per_class_accuracy': 0.5501165390014648,
    'percentage_below': 0.4583333432674408,
    'sens_at_spec': 0.8461538553237915,
    'spec_at_sens': 1.0,
}
TF_FIRST_UPDATE = {
    'accuracy': 0.75,
    'accuracy_w': 1.0,
    'mean': 0.39581364393234253,
    'mean_w': 0.3724479675292969,
    'mse': 0.0864248126745224,
    'mae': 0.19634023308753967,
    'rmse': 0.29398098587989807,
    'precision': 0.75,
    'recall': 1.0,
    'tp': 3.0,
    'fp': 1.0,
    'tn': 3.0,
    'fn': 1.0,
    'auc': 0.7499998807907104,
    'auc_w': 0.9999992251396179,
    'auc_pr': 0.8660712242126465,
    'auc_minoring': 0.7499998807907104,
    'prec_thr': [0.5, 0.4285714328289032, 1.0],
    'rec_thr': [1.0, 0.75, 0.5],
    'tp_thr': [4.0, 3.0, 2.0],
    'mean_iou': [[3.0, 1.0, 0.0], [1.0, 3.0, 0.0], [0.0, 0.0, 0.0]],
    'mean_per_class_accuracy': [0.75, 0.75, 0.0],
    'percentage_below': 0.5,
    'sens_at_spec': 0.75,
    'spec_at_sens': 1.0,
}




def _batches():
    rng = np.random.RandomState(1)
    out = []
    for _ in range(3):
        labels = rng.randint(0, 3, size=8)
        preds = np.where(rng.rand(8) < 0.6, labels, rng.randint(0, 3, size=8))
        probs = (0.3 * (labels == 1) + 0.7 * rng.rand(8)).astype(np.float32)
        y = rng.rand(8).astype(np.float32)
        yhat = (y + 0.3 * rng.randn(8)).astype(np.float32)
        w = (rng.rand(8) > 0.2).astype(np.float32) * rng.rand(8).astype(np.float32)
        out.append(dict(labels=labels, preds=preds, probs=probs, y=y, yhat=yhat, w=w))
    return out


def _build(tf):
    ph = dict(labels=tf.placeholder(tf.int64, [None]), preds=tf.placeholder(tf.int64, [None]),
              probs=tf.placeholder(tf.float32, [None]), y=tf.placeholder(tf.float32, [None]),
              yhat=tf.placeholder(tf.float32, [None]), w=tf.placeholder(tf.float32, [None]))
    is1 = tf.equal(ph["labels"], 1)
    pred1 = tf.equal(ph["preds"], 1)
    m = {
        "accuracy": tf.metrics.accuracy(ph["labels"], ph["preds"]),
        "accuracy_w": tf.metrics.accuracy(ph["labels"], ph["preds"], weights=ph["w"]),
        "mean": tf.metrics.mean(ph["y"]),
        "mean_w": tf.metrics.mean(ph["y"], weights=ph["w"]),
        "mse": tf.metrics.mean_squared_error(ph["y"], ph["yhat"]),
        "mae": tf.metrics.mean_absolute_error(ph["y"], ph["yhat"], weights=ph["w"]),
        "rmse": tf.metrics.root_mean_squared_error(ph["y"], ph["yhat"]),
        "precision": tf.metrics.precision(is1, pred1),
        "recall": tf.metrics.recall(is1, pred1, weights=ph["w"]),
        "tp": tf.metrics.true_positives(is1, pred1),
        "fp": tf.metrics.false_positives(is1, pred1),
        "tn": tf.metrics.true_negatives(is1, pred1),
        "fn": tf.metrics.false_negatives(is1, pred1),
        "auc": tf.metrics.auc(is1, ph["probs"]),
        "auc_w": tf.metrics.auc(is1, ph["probs"], weights=ph["w"], num_thresholds=50),
        "auc_pr": tf.metrics.auc(is1, ph["probs"], curve="PR"),
        "auc_minoring": tf.metrics.auc(is1, ph["probs"], summation_method="minoring"),
        "prec_thr": tf.metrics.precision_at_thresholds(is1, ph["probs"], [0.2, 0.5, 0.8]),
        "rec_thr": tf.metrics.recall_at_thresholds(is1, ph["probs"], [0.2, 0.5, 0.8]),
        "tp_thr": tf.metrics.true_positives_at_thresholds(is1, ph["probs"], [0.2, 0.5, 0.8]),
        "mean_iou": tf.metrics.mean_iou(ph["labels"], ph["preds"], num_classes=3),
        "mean_per_class_accuracy": tf.metrics.mean_per_class_accuracy(ph["labels"], ph["preds"], num_classes=3),
        "percentage_below": tf.metrics.percentage_below(ph["y"], 0.4),
        "sens_at_spec": tf.metrics.sensitivity_at_specificity(is1, ph["probs"], 0.7),
        "spec_at_sens": tf.metrics.specificity_at_sensitivity(is1, ph["probs"], 0.7),
    }
    return ph, m


def _run(tf, sess, ph, m):
    """Per batch, the update ops' values; then the value tensors."""
    sess.run(tf.local_variables_initializer())
    updates = []
    for b in _batches():
        ups = sess.run({k: v[1] for k, v in m.items()}, {ph[k]: b[k] for k in ph})
        updates.append(ups)
    final = sess.run({k: v[0] for k, v in m.items()})
    return updates, final


def _streamed():
    g = tf.Graph()
    with g.as_default():
        ph, m = _build(tf)
        with tf.Session(graph=g) as sess:
            return g, m, _run(tf, sess, ph, m)


def test_metrics_match_tensorflow_compat_v1():
    _, _, (updates, final) = _streamed()
    assert set(final) == set(TF_FINAL)
    for key, want in TF_FINAL.items():
        np.testing.assert_allclose(final[key], want, rtol=2e-5, atol=1e-6, err_msg=key)
    for key, want in TF_FIRST_UPDATE.items():
        np.testing.assert_allclose(updates[0][key], want, rtol=2e-5, atol=1e-6, err_msg=key)


def test_metric_variables_are_local_and_reset_by_the_local_initializer():
    g = tf.Graph()
    with g.as_default():
        acc, update = tf.metrics.accuracy([1, 0], [1, 1], name="my_acc")
        assert [v.name for v in tf.local_variables()] == ["my_acc/total:0", "my_acc/count:0"]
        assert tf.trainable_variables() == [] and tf.global_variables() == []
        assert len(tf.get_collection("metric_variables")) == 2
        init = tf.local_variables_initializer()
    with tf.Session(graph=g) as sess:
        sess.run(init)
        assert sess.run(acc) == 0.0
        assert [sess.run(update) for _ in range(2)] == [0.5, 0.5]
        sess.run(init)
        assert sess.run(acc) == 0.0


def test_metrics_and_updates_collections():
    g = tf.Graph()
    with g.as_default():
        value, update = tf.metrics.mean([1.0, 2.0], metrics_collections=["m"], updates_collections=["u"])
        assert tf.get_collection("m") == [value] and tf.get_collection("u") == [update]


def test_metrics_raise_in_eager_mode_and_on_mismatched_shapes():
    with pytest.raises(RuntimeError, match="tf.metrics.accuracy is not supported when eager execution"):
        tf.metrics.accuracy([1], [1])
    g = tf.Graph()
    with g.as_default():
        with pytest.raises(ValueError, match=r"tf.metrics.accuracy: labels shape \(4,\) and predictions shape "
                                             r"\(4, 3\) are incompatible.*tf.argmax"):
            tf.metrics.accuracy(np.zeros(4, np.int64), np.zeros((4, 3), np.int64))
        with pytest.raises(ValueError, match="curve must be 'ROC' or 'PR'"):
            tf.metrics.auc([True], [0.5], curve="XY")


# ---- ranking metrics and the rest, against TF 2.21 (same recording procedure, _batches2/_build2/_run2) ----
TF_FINAL_RANKING = {
    'precision_at_2': 0.2916666666666667,
    'recall_at_2': 0.3684210526315789,
    'precision_at_3_single_w': 0.26893037438594497,
    'recall_at_1_single': 0.16666666666666666,
    'precision_at_2_class1': 0.42857142857142855,
    'recall_at_2_class3': 0.5,
    'precision_at_top_2': 0.2916666666666667,
    'average_precision_at_3': 0.2708333333333333,
    'average_precision_at_2_w': 0.4823221771681009,
    'mean_relative_error': 0.14733120799064636,
    'mean_cosine_distance': 0.033558189868927,
    'mean_tensor': [[0.47112175822257996, 0.46184512972831726, 0.16816630959510803], [0.1858995258808136, 0.7957957983016968, 0.38206467032432556], [0.42310816049575806, 0.20457467436790466, 0.18639618158340454], [0.6555860042572021, 0.7391353249549866, 0.5765717625617981], [0.6339097023010254, 0.43258851766586304, 0.4240706264972687], [0.2818053960800171, 0.6559305787086487, 0.8574730753898621]],
    'fn_thr': [5.0, 5.0],
    'fp_thr': [3.0, 2.0],
    'tn_thr': [0.44438424706459045, 0.8253477811813354],
}



def _batches2():
    rng = np.random.RandomState(5)
    out = []
    for _ in range(2):
        logits = rng.randn(6, 5).astype(np.float32)
        labels = rng.randint(0, 5, size=(6, 2)).astype(np.int64)
        labels[0, 1] = labels[0, 0]
        single = rng.randint(0, 5, size=6).astype(np.int64)
        y = rng.rand(6, 3).astype(np.float32)
        p = (y + 0.2 * rng.randn(6, 3)).astype(np.float32)
        norm = (rng.rand(6, 3) + 0.5).astype(np.float32)
        probs = rng.rand(6).astype(np.float32)
        is_pos = rng.rand(6) > 0.5
        w = rng.rand(6).astype(np.float32)
        out.append(dict(logits=logits, labels=labels, single=single, y=y, p=p, norm=norm, probs=probs, is_pos=is_pos,
                        w=w))
    return out


def _build2(tf):
    ph = dict(logits=tf.placeholder(tf.float32, [6, 5]), labels=tf.placeholder(tf.int64, [None, 2]),
              single=tf.placeholder(tf.int64, [None]), y=tf.placeholder(tf.float32, [6, 3]),
              p=tf.placeholder(tf.float32, [None, 3]), norm=tf.placeholder(tf.float32, [None, 3]),
              probs=tf.placeholder(tf.float32, [None]), is_pos=tf.placeholder(tf.bool, [None]),
              w=tf.placeholder(tf.float32, [None]))
    unit = lambda t: tf.nn.l2_normalize(t, 1)  # noqa: E731
    m = {
        "precision_at_2": tf.metrics.precision_at_k(ph["labels"], ph["logits"], 2),
        "recall_at_2": tf.metrics.recall_at_k(ph["labels"], ph["logits"], 2),
        "precision_at_3_single_w": tf.metrics.precision_at_k(ph["single"], ph["logits"], 3, weights=ph["w"]),
        "recall_at_1_single": tf.metrics.recall_at_k(ph["single"], ph["logits"], 1),
        "precision_at_2_class1": tf.metrics.precision_at_k(ph["labels"], ph["logits"], 2, class_id=1),
        "recall_at_2_class3": tf.metrics.recall_at_k(ph["labels"], ph["logits"], 2, class_id=3),
        "precision_at_top_2": tf.metrics.precision_at_top_k(ph["labels"], tf.nn.top_k(ph["logits"], 2).indices, 2),
        "average_precision_at_3": tf.metrics.average_precision_at_k(ph["labels"], ph["logits"], 3),
        "average_precision_at_2_w": tf.metrics.average_precision_at_k(ph["single"], ph["logits"], 2,
                                                                      weights=ph["w"]),
        "mean_relative_error": tf.metrics.mean_relative_error(ph["y"], ph["p"], ph["norm"]),
        "mean_cosine_distance": tf.metrics.mean_cosine_distance(unit(ph["y"]), unit(ph["p"]), 1),
        "mean_tensor": tf.metrics.mean_tensor(ph["y"]),
        "fn_thr": tf.metrics.false_negatives_at_thresholds(ph["is_pos"], ph["probs"], [0.3, 0.7]),
        "fp_thr": tf.metrics.false_positives_at_thresholds(ph["is_pos"], ph["probs"], [0.3, 0.7]),
        "tn_thr": tf.metrics.true_negatives_at_thresholds(ph["is_pos"], ph["probs"], [0.3, 0.7], weights=ph["w"]),
    }
    return ph, m


def _run2(tf, sess, ph, m):
    sess.run(tf.local_variables_initializer())
    for b in _batches2():
        sess.run({k: v[1] for k, v in m.items()}, {ph[k]: b[k] for k in ph})
    return sess.run({k: v[0] for k, v in m.items()})


def test_ranking_and_remaining_metrics_match_tensorflow_compat_v1():
    g = tf.Graph()
    with g.as_default():
        ph, m = _build2(tf)
        with tf.Session(graph=g) as sess:
            final = _run2(tf, sess, ph, m)
    assert set(final) == set(TF_FINAL_RANKING)
    for key, want in TF_FINAL_RANKING.items():
        np.testing.assert_allclose(final[key], want, rtol=2e-5, atol=1e-6, err_msg=key)
