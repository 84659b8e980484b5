"""``tw.keras.metrics`` against hand-written NumPy references and scikit-learn (Keras 3 semantics)."""
import json

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, roc_auc_score

import tensorweave as tw
from tensorweave.keras import losses, metrics

EPS = 1e-7


def _softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.fixture
def batches():
    """Three batches of classification data with per-sample weights."""
    rng = np.random.default_rng(11)
    out = []
    for n in (8, 5, 11):
        logits = rng.standard_normal((n, 4))
        logits[0, 1] = logits[0, 2] = logits[0].max() + 1  # a tie, to pin down arg-max and top-k rules
        labels = rng.integers(0, 4, n)
        out.append({"logits": logits, "probs": _softmax(logits), "labels": labels, "onehot": np.eye(4)[labels],
                    "bin_true": rng.integers(0, 2, (n, 1)).astype(np.float64), "bin_prob": rng.uniform(0, 1, (n, 1)),
                    "reg_true": rng.standard_normal((n, 3)), "reg_pred": rng.standard_normal((n, 3)),
                    "w": rng.uniform(0, 2, n)})
    return out


def _weighted_mean(values, weights):
    values, weights = np.concatenate(values), np.concatenate(weights)
    return (values * weights).sum() / weights.sum()


# ---- NumPy references: one value per sample -----------------------------------------------------
def ref_binary_accuracy(y, p, threshold=0.5):
    return np.mean(y == (p > threshold), axis=-1)


def ref_categorical_accuracy(y, p):
    return (np.argmax(y, -1) == np.argmax(p, -1)).astype(float)


def ref_sparse_categorical_accuracy(y, p):
    return (np.reshape(y, -1) == np.argmax(p, -1)).astype(float)


def ref_in_top_k(labels, p, k):
    target = np.take_along_axis(p, np.reshape(labels, (-1, 1)), -1)
    return ((p > target).sum(-1) < k).astype(float)


def ref_top_k(y, p, k=5):
    return ref_in_top_k(np.argmax(y, -1), p, k)


ACCURACY_CASES = [  # (metric factory, reference, y key, p key, label transform)
    (lambda: metrics.BinaryAccuracy(), ref_binary_accuracy, "bin_true", "bin_prob", None),
    (lambda: metrics.BinaryAccuracy(threshold=0.7), lambda y, p: ref_binary_accuracy(y, p, 0.7), "bin_true",
     "bin_prob", None),
    (lambda: metrics.CategoricalAccuracy(), ref_categorical_accuracy, "onehot", "probs", None),
    (lambda: metrics.SparseCategoricalAccuracy(), ref_sparse_categorical_accuracy, "labels", "probs", None),
    (lambda: metrics.SparseCategoricalAccuracy(), ref_sparse_categorical_accuracy, "labels", "probs",
     lambda y: y[:, None].astype(np.float32)),
    (lambda: metrics.TopKCategoricalAccuracy(k=2), lambda y, p: ref_top_k(y, p, 2), "onehot", "probs", None),
    (lambda: metrics.SparseTopKCategoricalAccuracy(k=2), lambda y, p: ref_in_top_k(y, p, 2), "labels", "probs",
     None),
    (lambda: metrics.SparseTopKCategoricalAccuracy(k=1), lambda y, p: ref_in_top_k(y, p, 1), "labels", "logits",
     lambda y: y[:, None]),
    (lambda: metrics.MeanSquaredError(), lambda y, p: np.mean((y - p) ** 2, -1), "reg_true", "reg_pred", None),
    (lambda: metrics.MeanAbsoluteError(), lambda y, p: np.mean(np.abs(y - p), -1), "reg_true", "reg_pred", None),
    (lambda: metrics.CategoricalCrossentropy(from_logits=True),
     lambda y, p: -np.sum(y * np.log(_softmax(p)), -1), "onehot", "logits", None),
    (lambda: metrics.SparseCategoricalCrossentropy(),
     lambda y, p: -np.log(np.take_along_axis(p, y[:, None], -1)[:, 0]), "labels", "probs", None),
    (lambda: metrics.BinaryCrossentropy(),
     lambda y, p: -np.mean(y * np.log(p) + (1 - y) * np.log(1 - p), -1), "bin_true", "bin_prob", None),
    (lambda: metrics.KLDivergence(), lambda y, p: np.sum(y * np.log(y / p), -1), "probs", "probs", None),
]
ACC_IDS = ["binary", "binary_0.7", "categorical", "sparse", "sparse_column_float", "top2", "sparse_top2",
           "sparse_top1_column", "mse", "mae", "cce_logits", "scce", "bce", "kld"]


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("make,ref,yk,pk,transform", ACCURACY_CASES, ids=ACC_IDS)
def test_mean_metrics_accumulate_and_reset(batches, make, ref, yk, pk, transform, weighted):
    m = make()
    values, weights = [], []
    for b in batches:
        y = b[yk] if transform is None else transform(b[yk])
        w = b["w"] if weighted else None
        m.update_state(y, b[pk], sample_weight=w)
        values.append(ref(b[yk], b[pk]))
        weights.append(b["w"] if weighted else np.ones(len(b["w"])))
    assert m.result().dtype == tw.float32
    np.testing.assert_allclose(float(m.result()), _weighted_mean(values, weights), rtol=2e-5, atol=1e-6)
    m.reset_state()
    assert float(m.result()) == 0.0
    b = batches[0]
    value = m(b[yk] if transform is None else transform(b[yk]), b[pk])
    np.testing.assert_allclose(float(value), ref(b[yk], b[pk]).mean(), rtol=2e-5, atol=1e-6)


def test_accuracy_tie_and_top_k_rules():
    # Arg-max takes the first of tied maxima; in_top_k counts ties with the k-th value as in (TF).
    p = np.array([[0.1, 0.4, 0.4, 0.1]])
    assert float(metrics.sparse_categorical_accuracy([1], p)[0]) == 1.0
    assert float(metrics.sparse_categorical_accuracy([2], p)[0]) == 0.0
    assert float(metrics.sparse_top_k_categorical_accuracy([2], p, k=1)[0]) == 1.0
    assert float(metrics.sparse_top_k_categorical_accuracy([0], p, k=2)[0]) == 0.0
    assert float(metrics.sparse_top_k_categorical_accuracy([0], p, k=3)[0]) == 1.0
    assert float(metrics.sparse_top_k_categorical_accuracy([0], [[np.nan, 1.0, 0.0, 0.0]], k=4)[0]) == 0.0
    ids = np.array([[2, 1, 0], [0, 3, 1]])
    np.testing.assert_array_equal(metrics.sparse_top_k_categorical_accuracy([1, 1], ids, k=2, from_sorted_ids=True),
                                  [1.0, 0.0])


def test_accuracy_functions_shapes():
    # Rank-1 binary inputs average over the last axis (one value per batch, as Keras).
    assert metrics.binary_accuracy([1.0, 0.0, 1.0], [0.9, 0.2, 0.1]).shape.rank == 0
    assert metrics.binary_accuracy([1.0, 0.0, 1.0], [[0.9], [0.2], [0.1]]).numpy().tolist() == [1.0, 1.0, 0.0]
    np.testing.assert_allclose(metrics.accuracy([[1, 2], [3, 4]], [[1, 0], [3, 4]]).numpy(), [0.5, 1.0])
    # Sequence outputs: (batch, time, classes) with (batch, time) labels.
    p = _softmax(np.random.default_rng(0).standard_normal((2, 3, 4)))
    y = np.argmax(p, -1)
    y[0, 0] = (y[0, 0] + 1) % 4
    out = metrics.sparse_categorical_accuracy(y, p).numpy()
    assert out.shape == (2, 3) and out.sum() == 5
    assert metrics.top_k_categorical_accuracy(np.eye(4)[y], p, k=1).numpy().shape == (2, 3)
    m = metrics.SparseCategoricalAccuracy()
    m.update_state(y, p, sample_weight=[1.0, 0.0])
    assert float(m.result()) == pytest.approx(2 / 3, rel=1e-6)


def test_mean_and_sum_with_weights():
    m, s = metrics.Mean(), metrics.Sum()
    m.update_state([1.0, 3.0, 5.0, 7.0])
    m.update_state([[2.0, 4.0], [6.0, 8.0]], sample_weight=[0.5, 1.5])
    # Rows are averaged first: (3 * 0.5 + 7 * 1.5) + 16 over 4 + 2 weight.
    assert float(m.result()) == pytest.approx((16 + 3 * 0.5 + 7 * 1.5) / 6, rel=1e-6)
    m.update_state([[1.0, 2.0], [3.0, 4.0]], sample_weight=[[1.0, 0.0], [0.0, 1.0]])
    # Element weights: weighted values and weights are both averaged per row (Keras), adding
    # (1 + 4) / 2 to the total and (1 + 1) / 2 to the count.
    assert float(m.result()) == pytest.approx((16 + 12 + 2.5) / 7, rel=1e-6)
    s.update_state([1.0, 2.0], sample_weight=[2.0, 3.0])
    s.update_state(4.0)
    assert float(s.result()) == 12.0
    assert float(metrics.Mean()(5.0)) == 5.0
    empty = metrics.Mean()
    assert float(empty.result()) == 0.0  # no data: 0, not NaN
    with pytest.raises(ValueError, match=r"sample_weight of shape \(3,\) cannot be applied to metric values of "
                                         r"shape \(2,\)"):
        metrics.Mean().update_state([1.0, 2.0], sample_weight=[1.0, 2.0, 3.0])


def test_mean_metric_wrapper_custom_function(batches):
    def abs_err(y_true, y_pred, scale=1.0):
        return tw.reduce_mean(tw.abs(tw.cast(y_true, y_pred.dtype) - y_pred), axis=-1) * scale

    m = metrics.MeanMetricWrapper(abs_err, scale=2.0)
    assert m.name == "abs_err"
    for b in batches:
        m.update_state(b["reg_true"], b["reg_pred"], sample_weight=b["w"])
    expected = _weighted_mean([2 * np.abs(b["reg_true"] - b["reg_pred"]).mean(-1) for b in batches],
                              [b["w"] for b in batches])
    assert float(m.result()) == pytest.approx(expected, rel=1e-5)
    config = m.get_config()
    assert config["fn"] == "abs_err" and config["scale"] == 2.0
    again = metrics.deserialize(metrics.serialize(m), custom_objects={"abs_err": abs_err})
    assert again._fn is abs_err and again._fn_kwargs == {"scale": 2.0}


# ---- confusion-matrix metrics ---------------------------------------------------------------------
def ref_counts(y, p, thresholds, w=None):
    y, p = np.reshape(y, -1) != 0, np.reshape(p, -1)
    w = np.ones_like(p) if w is None else np.reshape(w, -1)
    out = {k: [] for k in ("tp", "fp", "tn", "fn")}
    for t in thresholds:
        pos = p > t
        out["tp"].append(np.sum(w * (y & pos)))
        out["fp"].append(np.sum(w * (~y & pos)))
        out["tn"].append(np.sum(w * (~y & ~pos)))
        out["fn"].append(np.sum(w * (y & ~pos)))
    return {k: np.array(v) for k, v in out.items()}


def _div(a, b):
    return np.where(b > 0, a / np.where(b > 0, b, 1), 0.0)


@pytest.fixture
def binary_batches():
    rng = np.random.default_rng(5)
    out = []
    for n in (40, 25, 35):
        y = rng.integers(0, 2, n)
        p = np.clip(rng.normal(0.5, 0.25, n) + 0.25 * (y - 0.5), 0, 1)
        out.append((y, p, rng.uniform(0, 2, n)))
    return out


@pytest.mark.parametrize("thresholds", [None, 0.3, [0.2, 0.5, 0.8]])
@pytest.mark.parametrize("weighted", [False, True])
def test_precision_recall_and_counts(binary_batches, thresholds, weighted):
    ms = {"precision": metrics.Precision(thresholds=thresholds), "recall": metrics.Recall(thresholds=thresholds),
          "tp": metrics.TruePositives(thresholds), "fp": metrics.FalsePositives(thresholds),
          "tn": metrics.TrueNegatives(thresholds), "fn": metrics.FalseNegatives(thresholds)}
    for y, p, w in binary_batches:
        for m in ms.values():
            m.update_state(y, p, sample_weight=w if weighted else None)
    y = np.concatenate([b[0] for b in binary_batches])
    p = np.concatenate([b[1] for b in binary_batches])
    w = np.concatenate([b[2] for b in binary_batches]) if weighted else None
    t = [0.5] if thresholds is None else np.atleast_1d(thresholds).tolist()
    c = ref_counts(y, p, t, w)
    expected = dict(c, precision=_div(c["tp"], c["tp"] + c["fp"]), recall=_div(c["tp"], c["tp"] + c["fn"]))
    for key, m in ms.items():
        out = m.result().numpy()
        assert out.shape == (() if len(t) == 1 else (len(t),))
        np.testing.assert_allclose(out, expected[key].reshape(out.shape), rtol=1e-5, err_msg=key)


def test_precision_recall_top_k_and_class_id(batches):
    prec_top = metrics.Precision(top_k=2)
    rec_cls = metrics.Recall(class_id=2)
    prec_cls_top = metrics.Precision(class_id=1, top_k=1, thresholds=0.2)
    tp = fp = fn = tp2 = fp2 = 0.0
    for b in batches:
        y, p, w = b["onehot"], b["probs"], b["w"]
        prec_top.update_state(y, p, sample_weight=w)
        rec_cls.update_state(y, p, sample_weight=w)
        prec_cls_top.update_state(y, p)
        ww = np.broadcast_to(w[:, None], y.shape)
        top2 = np.zeros_like(p, bool)
        np.put_along_axis(top2, np.argsort(-p, -1, kind="stable")[:, :2], True, -1)
        tp += np.sum(ww * ((y == 1) & top2))
        fp += np.sum(ww * ((y == 0) & top2))
        fn += np.sum(w * ((y[:, 2] == 1) & ~(p[:, 2] > 0.5)))
        tp2_b = (y[:, 2] == 1) & (p[:, 2] > 0.5)
        tp2 += np.sum(w * tp2_b)
        top1 = np.argmax(p, -1) == 1
        fp2 += np.sum((y[:, 1] == 0) & top1 & (p[:, 1] > 0.2))
    assert float(prec_top.result()) == pytest.approx(tp / (tp + fp), rel=1e-5)
    assert float(rec_cls.result()) == pytest.approx(_div(tp2, tp2 + fn), rel=1e-5)
    tp3 = sum(np.sum((b["onehot"][:, 1] == 1) & (np.argmax(b["probs"], -1) == 1) & (b["probs"][:, 1] > 0.2))
              for b in batches)
    assert float(prec_cls_top.result()) == pytest.approx(_div(tp3, tp3 + fp2), rel=1e-5)


def ref_keras_auc(y, p, w=None, num_thresholds=200, curve="ROC", summation="interpolation"):
    """Keras' AUC computed from scratch: confusion counts at the thresholds, then a Riemann sum."""
    t = [-EPS] + [(i + 1) / (num_thresholds - 1) for i in range(num_thresholds - 2)] + [1 + EPS]
    c = ref_counts(y, p, t, w)
    tp, fp, tn, fn = c["tp"], c["fp"], c["tn"], c["fn"]
    if curve == "PR" and summation == "interpolation":
        dtp = tp[:-1] - tp[1:]
        pp = tp + fp
        dp = pp[:-1] - pp[1:]
        slope = _div(dtp, np.maximum(dp, 0))
        intercept = tp[1:] - slope * pp[1:]
        ratio = np.where((pp[:-1] > 0) & (pp[1:] > 0), _div(pp[:-1], np.maximum(pp[1:], 0)), 1.0)
        return np.sum(_div(slope * (dtp + intercept * np.log(ratio)), np.maximum(tp[1:] + fn[1:], 0)))
    recall = _div(tp, tp + fn)
    x, yy = (_div(fp, fp + tn), recall) if curve == "ROC" else (recall, _div(tp, tp + fp))
    heights = {"interpolation": (yy[:-1] + yy[1:]) / 2, "minoring": np.minimum(yy[:-1], yy[1:]),
               "majoring": np.maximum(yy[:-1], yy[1:])}[summation]
    return np.sum((x[:-1] - x[1:]) * heights)


def _concat(batches):
    return [np.concatenate(v) for v in zip(*batches)]


@pytest.mark.parametrize("curve,summation", [("ROC", "interpolation"), ("ROC", "minoring"), ("ROC", "majoring"),
                                             ("PR", "interpolation"), ("PR", "minoring"), ("PR", "majoring")])
@pytest.mark.parametrize("weighted", [False, True])
def test_auc_matches_keras_reference(binary_batches, curve, summation, weighted):
    m = metrics.AUC(curve=curve, summation_method=summation)
    for y, p, w in binary_batches:
        m.update_state(y, p, sample_weight=w if weighted else None)
    y, p, w = _concat(binary_batches)
    expected = ref_keras_auc(y, p, w if weighted else None, curve=curve, summation=summation)
    assert float(m.result()) == pytest.approx(expected, rel=1e-4, abs=1e-6)


def test_auc_against_scikit_learn(binary_batches):
    y, p, w = _concat(binary_batches)
    # 200 thresholds: the ROC curve is sampled every 1/199, which here puts the estimate within 5e-3.
    assert float(metrics.AUC()(y, p)) == pytest.approx(roc_auc_score(y, p), abs=5e-3)
    assert float(metrics.AUC()(y, p, sample_weight=w)) == pytest.approx(roc_auc_score(y, p, sample_weight=w),
                                                                       abs=5e-3)
    assert float(metrics.AUC(curve="PR")(y, p)) == pytest.approx(average_precision_score(y, p), abs=2e-2)
    lo = float(metrics.AUC(summation_method="minoring")(y, p))
    hi = float(metrics.AUC(summation_method="majoring")(y, p))
    assert lo <= roc_auc_score(y, p) <= hi
    # More thresholds, closer to exact.
    fine = float(metrics.AUC(num_thresholds=2000)(y, p))
    assert fine == pytest.approx(roc_auc_score(y, p), abs=1e-3)
    # Logits.
    logit = np.log(np.clip(p, 1e-6, 1 - 1e-6) / (1 - np.clip(p, 1e-6, 1 - 1e-6)))
    assert float(metrics.AUC(from_logits=True)(y, logit)) == pytest.approx(roc_auc_score(y, p), abs=5e-3)


def test_auc_explicit_thresholds(binary_batches):
    y, p, _ = _concat(binary_batches)
    t = sorted(np.random.default_rng(1).uniform(0.01, 0.99, 150).tolist())
    m = metrics.AUC(thresholds=t)
    assert m.num_thresholds == 152 and not m._thresholds_distributed_evenly
    m.update_state(y, p)
    assert float(m.result()) == pytest.approx(roc_auc_score(y, p), abs=1e-2)
    assert m.get_config()["thresholds"] == t
    # Evenly spaced explicit thresholds take the bucketed update and give the same value.
    even = [(i + 1) / 199 for i in range(198)]
    assert float(metrics.AUC(thresholds=even)(y, p)) == pytest.approx(float(metrics.AUC()(y, p)), rel=1e-6)


def test_auc_multi_label():
    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, (200, 3))
    p = np.clip(rng.uniform(0, 1, (200, 3)) * 0.7 + 0.3 * y, 0, 1)
    per_label = [roc_auc_score(y[:, i], p[:, i]) for i in range(3)]
    m = metrics.AUC(multi_label=True)
    m.update_state(y[:120], p[:120])
    m.update_state(y[120:], p[120:])
    assert m.true_positives.shape.as_list() == [200, 3]
    assert float(m.result()) == pytest.approx(np.mean(per_label), abs=5e-3)
    lw = [1.0, 0.0, 3.0]
    mw = metrics.AUC(multi_label=True, num_labels=3, label_weights=lw)
    assert float(mw(y, p)) == pytest.approx(np.dot(per_label, lw) / 4, abs=5e-3)
    flat = metrics.AUC()(y, p)  # not multi-label: every entry is one sample
    assert float(flat) == pytest.approx(roc_auc_score(y.ravel(), p.ravel()), abs=5e-3)
    m.reset_state()
    assert float(m.result()) == 0.0


# ---- eager == tw.function == TF1 graph --------------------------------------------------------------
FACTORIES = {
    "mean": (lambda: metrics.Mean(), lambda b: (b["reg_pred"],)),
    "sparse_acc": (lambda: metrics.SparseCategoricalAccuracy(), lambda b: (b["labels"], b["probs"])),
    "top_k": (lambda: metrics.TopKCategoricalAccuracy(k=2), lambda b: (b["onehot"], b["probs"])),
    "mse": (lambda: metrics.MeanSquaredError(), lambda b: (b["reg_true"], b["reg_pred"])),
    "precision": (lambda: metrics.Precision(thresholds=[0.2, 0.6]), lambda b: (b["onehot"], b["probs"])),
    "recall_top_k": (lambda: metrics.Recall(top_k=1), lambda b: (b["onehot"], b["probs"])),
    "auc": (lambda: metrics.AUC(), lambda b: (b["onehot"], b["probs"])),
    "auc_pr_multi": (lambda: metrics.AUC(curve="PR", multi_label=True), lambda b: (b["onehot"], b["probs"])),
}


@pytest.mark.parametrize("name", list(FACTORIES))
def test_function_equals_eager(batches, name):
    make, args = FACTORIES[name]
    eager, traced = make(), make()

    @tw.function
    def step(*xs):
        sw = xs[-1]
        traced.update_state(*xs[:-1], sample_weight=sw)
        return traced.result()

    for b in batches:
        eager.update_state(*args(b), sample_weight=b["w"])
        a = [tw.constant(x, tw.float32) if np.asarray(x).dtype.kind == "f" else tw.constant(x) for x in args(b)]
        out = step(*a, tw.constant(b["w"], tw.float32))
    np.testing.assert_allclose(out.numpy(), eager.result().numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(traced.result().numpy(), eager.result().numpy(), rtol=1e-5, atol=1e-7)
    assert step.experimental_get_tracing_count() == 3  # one per batch size
    assert all(not v.trainable for v in traced.variables)
    # reset_state inside a traced function.
    tw.function(lambda: traced.reset_state())()
    assert all(float(np.abs(v.numpy()).sum()) == 0 for v in traced.variables)


def test_metric_in_tf1_graph(batches):
    g = tw.Graph()
    with g.as_default():
        acc = metrics.SparseCategoricalAccuracy()
        auc = metrics.AUC()
        y = tw.placeholder(tw.int32, [None])
        p = tw.placeholder(tw.float64, [None, 4])
        update = tw.group(acc.update_state(y, p), auc.update_state(tw.one_hot(y, 4), p))
        results = [acc.result(), auc.result()]
        value_now = acc(y, p)
        reset = acc.reset_state()
        with tw.Session(graph=g) as sess:
            sess.run(tw.compat.v1.global_variables_initializer())
            for b in batches:
                sess.run(update, {y: b["labels"], p: b["probs"]})
            acc_value, auc_value = sess.run(results)
            sess.run(reset)
            first = sess.run(value_now, {y: batches[0]["labels"], p: batches[0]["probs"]})
    eager_acc, eager_auc = metrics.SparseCategoricalAccuracy(), metrics.AUC()
    for b in batches:
        eager_acc.update_state(b["labels"], b["probs"])
        eager_auc.update_state(np.eye(4)[b["labels"]], b["probs"])
    assert acc_value == pytest.approx(float(eager_acc.result()), rel=1e-6)
    assert auc_value == pytest.approx(float(eager_auc.result()), rel=1e-6)
    assert first == pytest.approx(ref_sparse_categorical_accuracy(batches[0]["labels"], batches[0]["probs"]).mean())


# ---- base class --------------------------------------------------------------------------------
def test_metric_base():
    class Extremes(metrics.Metric):
        def __init__(self, name=None, dtype=None):
            super().__init__(name=name, dtype=dtype)
            self.low = self.add_variable((), initializer=1e9, name="low")
            self.high = self.add_variable((), initializer=lambda shape, dtype: tw.fill(shape, -1e9), name="high")
            self.seen = self.add_variable((2,), initializer="ones", dtype="int32", name="seen")

        def update_state(self, values):
            values = tw.cast(values, self.dtype)
            self.low.assign(tw.minimum(self.low, tw.reduce_min(values)))
            self.high.assign(tw.maximum(self.high, tw.reduce_max(values)))

        def result(self):
            return self.high - self.low

    m = Extremes(dtype="float64")
    assert m.name == "extremes" and m.dtype == "float64" and repr(m) == "<Extremes name=extremes>"
    assert [v.dtype for v in m.variables] == [tw.float64, tw.float64, tw.int32]
    assert m.seen.numpy().tolist() == [1, 1] and m.trainable_variables == []
    m.update_state([3.0, -1.0])
    assert float(m([5.0])) == 6.0
    m.reset_state()
    assert m.seen.numpy().tolist() == [0, 0]
    assert m.get_config() == {"name": "extremes", "dtype": "float64"}


# ---- get / compile resolution / config ----------------------------------------------------------------
@pytest.mark.parametrize("identifier,cls,name", [
    ("accuracy", metrics.Accuracy, "accuracy"), ("acc", metrics.Accuracy, "accuracy"),
    ("mse", metrics.MeanSquaredError, "mean_squared_error"), ("mae", metrics.MeanAbsoluteError, "mean_absolute_error"),
    ("auc", metrics.AUC, "auc"), ("AUC", metrics.AUC, "auc"), ("precision", metrics.Precision, "precision"),
    ("recall", metrics.Recall, "recall"), ("Recall", metrics.Recall, "recall"),
    ("top_k_categorical_accuracy", metrics.TopKCategoricalAccuracy, "top_k_categorical_accuracy"),
    ("sparse_top_k_categorical_accuracy", metrics.SparseTopKCategoricalAccuracy, "sparse_top_k_categorical_accuracy"),
    ("binary_accuracy", metrics.BinaryAccuracy, "binary_accuracy"),
    ("sparse_categorical_accuracy", metrics.SparseCategoricalAccuracy, "sparse_categorical_accuracy"),
    ("binary_crossentropy", metrics.BinaryCrossentropy, "binary_crossentropy"),
])
def test_get_strings(identifier, cls, name):
    m = metrics.get(identifier)
    assert type(m) is cls and m.name == name


def test_get_other_identifiers():
    m = metrics.Precision()
    assert metrics.get(m) is m
    assert isinstance(metrics.get(metrics.Recall), metrics.Recall)
    assert metrics.get(metrics.categorical_accuracy) is metrics.categorical_accuracy
    assert metrics.get(None) is None
    assert metrics.get({"class_name": "TopKCategoricalAccuracy", "config": {"k": 3}}).k == 3
    with pytest.raises(ValueError, match="Could not interpret metric identifier: 'acuracy'"):
        metrics.get("acuracy")


@pytest.mark.parametrize("loss,yt,yp,expected", [
    ("binary_crossentropy", (None, 10), (None, 10), metrics.BinaryAccuracy),      # multi-label
    (losses.BinaryCrossentropy(from_logits=True), None, None, metrics.BinaryAccuracy),
    ("sparse_categorical_crossentropy", None, None, metrics.SparseCategoricalAccuracy),
    (losses.sparse_categorical_crossentropy, None, None, metrics.SparseCategoricalAccuracy),
    (losses.SparseCategoricalCrossentropy, None, None, metrics.SparseCategoricalAccuracy),
    (losses.get_for_compile("categorical_crossentropy"), None, None, metrics.CategoricalAccuracy),
    ("mse", (None, 1), (None, 1), metrics.BinaryAccuracy),
    ("mse", (None,), (None, 10), metrics.SparseCategoricalAccuracy),
    (None, (None, 1), (None, 10), metrics.SparseCategoricalAccuracy),
    (None, (None, 10), (None, 10), metrics.CategoricalAccuracy),
    (lambda y, p: y - p, tw.TensorShape([None, 1]), tw.zeros([2, 5]), metrics.SparseCategoricalAccuracy),
])
def test_resolve_accuracy(loss, yt, yp, expected):
    m = metrics.resolve_accuracy(loss, yt, yp)
    assert type(m) is expected and m.name == "accuracy"


def test_get_for_compile():
    m = metrics.get_for_compile("accuracy", "categorical_crossentropy")
    assert type(m) is metrics.CategoricalAccuracy and m.name == "accuracy"
    m = metrics.get_for_compile("Acc", None, (None,), (None, 1))
    assert type(m) is metrics.BinaryAccuracy and m.name == "Acc"
    m = metrics.get_for_compile("ce", losses.SparseCategoricalCrossentropy(from_logits=True))
    assert type(m) is metrics.SparseCategoricalCrossentropy and m.from_logits and m.name == "ce"
    assert metrics.get_for_compile("mse").name == "mse"
    assert metrics.get_for_compile(metrics.AUC(name="roc")).name == "roc"

    def hits(y_true, y_pred):
        return tw.cast(tw.equal(y_true, y_pred), "float32")

    m = metrics.get_for_compile(hits)
    assert isinstance(m, metrics.MeanMetricWrapper) and m.name == "hits"
    assert float(m([1.0, 2.0], [1.0, 3.0])) == 0.5
    assert metrics.get_for_compile(None) is None


@pytest.mark.parametrize("metric", [
    metrics.Mean(name="m"), metrics.Sum(), metrics.MeanSquaredError(), metrics.MeanAbsoluteError(dtype="float64"),
    metrics.Accuracy(), metrics.BinaryAccuracy(threshold=0.3), metrics.CategoricalAccuracy(),
    metrics.SparseCategoricalAccuracy(), metrics.TopKCategoricalAccuracy(k=3),
    metrics.SparseTopKCategoricalAccuracy(k=2, from_sorted_ids=True), metrics.Precision(thresholds=[0.1, 0.9]),
    metrics.Recall(top_k=2, class_id=1), metrics.TruePositives(thresholds=0.4), metrics.FalseNegatives(),
    metrics.AUC(num_thresholds=50, curve="PR", summation_method="majoring", from_logits=True),
    metrics.AUC(multi_label=True, num_labels=2, label_weights=[1.0, 2.0]), metrics.AUC(thresholds=[0.1, 0.2, 0.7]),
    metrics.BinaryCrossentropy(from_logits=True, label_smoothing=0.1), metrics.CategoricalCrossentropy(axis=-1),
    metrics.SparseCategoricalCrossentropy(from_logits=True), metrics.KLDivergence(),
    metrics.MeanMetricWrapper(losses.huber, name="hub", delta=0.5),
])
def test_config_round_trip(metric):
    config = metric.get_config()
    assert config["name"] == metric.name and config["dtype"] == metric.dtype
    assert type(metric).from_config(config).get_config() == config
    serialized = metrics.serialize(metric)
    json.dumps(serialized)
    restored = metrics.deserialize(serialized)
    assert type(restored) is type(metric) and restored.get_config() == config


def test_keras_config_keys():
    assert metrics.Precision().get_config() == {"name": "precision", "dtype": "float32", "thresholds": None,
                                                "top_k": None, "class_id": None}
    assert metrics.BinaryAccuracy().get_config() == {"name": "binary_accuracy", "dtype": "float32",
                                                     "threshold": 0.5}
    assert metrics.AUC().get_config() == {"name": "auc", "dtype": "float32", "num_thresholds": 200, "curve": "ROC",
                                          "summation_method": "interpolation", "multi_label": False,
                                          "num_labels": None, "label_weights": None, "from_logits": False}


def test_directions():
    assert metrics.AUC()._direction == "up" and metrics.SparseCategoricalAccuracy()._direction == "up"
    assert metrics.MeanSquaredError()._direction == "down"
    assert metrics.MeanMetricWrapper(losses.mean_absolute_error)._direction == "down"


# ---- errors ------------------------------------------------------------------------------------------
def test_errors():
    with pytest.raises(ValueError, match=r"categorical_accuracy: .*y_true.shape=\(2,\), y_pred.shape=\(2, 3\)\. "
                                         r"Hint: integer class labels go with sparse_categorical_accuracy"):
        metrics.CategoricalAccuracy().update_state([0, 1], np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"sparse_categorical_accuracy: .*y_true.shape=\(3,\), "
                                         r"y_pred.shape=\(2, 3\)"):
        metrics.SparseCategoricalAccuracy().update_state([0, 1, 2], np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"precision: `y_true` and `y_pred` must have the same shape. Received: "
                                         r"y_true.shape=\(2, 3\), y_pred.shape=\(2, 4\)"):
        metrics.Precision().update_state(np.ones((2, 3)), np.ones((2, 4)))
    with pytest.raises(ValueError, match=r"binary_accuracy: .*incompatible shapes"):
        metrics.BinaryAccuracy().update_state(np.ones((2, 3)), np.ones((2, 4)))
    with pytest.raises(ValueError, match=r"Threshold values must be in \[0, 1\]. Received: \[1.5\]"):
        metrics.Recall(thresholds=[0.5, 1.5])
    with pytest.raises(ValueError, match="Invalid AUC curve value"):
        metrics.AUC(curve="DET")
    with pytest.raises(ValueError, match="Invalid AUC summation method"):
        metrics.AUC(summation_method="simpson")
    with pytest.raises(ValueError, match="num_thresholds` must be an integer > 1"):
        metrics.AUC(num_thresholds=1)
    with pytest.raises(ValueError, match="label_weights"):
        metrics.AUC(label_weights=[-1.0])
    with pytest.raises(ValueError, match="class_id=5 is out of range"):
        metrics.Precision(class_id=5).update_state(np.ones((2, 3)), np.ones((2, 3)))
    with pytest.raises(ValueError, match="threshold"):
        metrics.BinaryAccuracy(threshold=2.0)
