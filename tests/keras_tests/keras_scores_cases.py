"""Inputs of the loss/metric comparisons with Keras (test_keras_scores.py), written against any
``keras`` module. Run under TensorFlow 2.21 / Keras 3.15 it prints the reference table:

    ~/.cache/tensorweave/bench-tf-venv/bin/python tests/keras_tests/keras_scores_cases.py \\
        > tests/keras_tests/keras_scores_reference.py
"""
import numpy as np


def _data():
    rng = np.random.default_rng(7)
    probs = rng.random((6, 4)).astype("float32")
    onehot = np.eye(4, dtype="float32")[rng.integers(0, 4, 6)]
    binary = rng.integers(0, 2, (6, 4)).astype("float32")
    logits = rng.normal(size=(6, 4)).astype("float32") * 2
    weights = rng.random(6).astype("float32")
    reg_true = rng.normal(size=(8, 3)).astype("float32")
    reg_pred = (reg_true + rng.normal(size=(8, 3)) * 0.5).astype("float32")
    seg_true = rng.integers(0, 3, (2, 5, 5))
    seg_pred = np.where(rng.random((2, 5, 5)) < 0.7, seg_true, rng.integers(0, 3, (2, 5, 5)))
    ctc_true = np.array([[1, 2, 2, 0], [3, 1, 0, 0]], dtype="int32")
    ctc_pred = rng.normal(size=(2, 7, 5)).astype("float32")
    return locals()


D = _data()
W = D["weights"]

# (id, "loss" | "metric", class name, kwargs, [(y_true, y_pred, sample_weight), ...])
CASES = [
    ("bfce", "loss", "BinaryFocalCrossentropy", {}, [(D["binary"], D["probs"], None)]),
    ("bfce_balanced_logits", "loss", "BinaryFocalCrossentropy",
     {"apply_class_balancing": True, "alpha": 0.3, "gamma": 1.5, "from_logits": True, "label_smoothing": 0.1},
     [(D["binary"], D["logits"], W)]),
    ("cfce", "loss", "CategoricalFocalCrossentropy", {}, [(D["onehot"], D["probs"], None)]),
    ("cfce_logits", "loss", "CategoricalFocalCrossentropy",
     {"alpha": 0.5, "gamma": 3.0, "from_logits": True, "label_smoothing": 0.2}, [(D["onehot"], D["logits"], W)]),
    ("dice", "loss", "Dice", {}, [(D["binary"], D["probs"], None)]),
    ("dice_axis", "loss", "Dice", {"axis": -1}, [(D["binary"], D["probs"], W)]),
    ("tversky", "loss", "Tversky", {"alpha": 0.7, "beta": 0.3}, [(D["binary"], D["probs"], None)]),
    ("tversky_axis", "loss", "Tversky", {"alpha": 0.2, "beta": 0.8, "axis": 1}, [(D["binary"], D["probs"], W[:6])]),
    ("ctc", "loss", "CTC", {}, [(D["ctc_true"], D["ctc_pred"], None)]),
    ("ctc_none", "loss", "CTC", {"reduction": None}, [(D["ctc_true"], D["ctc_pred"], None)]),
    ("meaniou", "metric", "MeanIoU", {"num_classes": 3}, [(D["seg_true"][0], D["seg_pred"][0], None),
                                                           (D["seg_true"][1], D["seg_pred"][1], None)]),
    ("meaniou_ignore", "metric", "MeanIoU", {"num_classes": 3, "ignore_class": 1},
     [(D["seg_true"], D["seg_pred"], (D["seg_true"] % 2 + 1).astype("int64"))]),
    ("iou", "metric", "IoU", {"num_classes": 3, "target_class_ids": [0, 2]}, [(D["seg_true"], D["seg_pred"], None)]),
    ("binary_iou", "metric", "BinaryIoU", {"target_class_ids": [1], "threshold": 0.4},
     [(D["binary"], D["probs"], None)]),
    ("onehot_iou", "metric", "OneHotIoU", {"num_classes": 4, "target_class_ids": [1, 3]},
     [(D["onehot"], D["probs"], None)]),
    ("onehot_meaniou", "metric", "OneHotMeanIoU", {"num_classes": 4}, [(D["onehot"], D["probs"], None)]),
    ("r2", "metric", "R2Score", {}, [(D["reg_true"][:4], D["reg_pred"][:4], None),
                                     (D["reg_true"][4:], D["reg_pred"][4:], None)]),
    ("r2_weighted_raw", "metric", "R2Score", {"class_aggregation": None},
     [(D["reg_true"], D["reg_pred"], np.linspace(0.5, 2, 8).astype("float32"))]),
    ("r2_variance_adjusted", "metric", "R2Score", {"class_aggregation": "variance_weighted_average",
                                                   "num_regressors": 2}, [(D["reg_true"], D["reg_pred"], None)]),
    ("f1", "metric", "F1Score", {}, [(D["onehot"], D["probs"], None)]),
    ("f1_micro", "metric", "F1Score", {"average": "micro", "threshold": 0.5}, [(D["binary"], D["probs"], W)]),
    ("f1_macro", "metric", "F1Score", {"average": "macro", "threshold": 0.3}, [(D["binary"], D["probs"], None)]),
    ("pearson", "metric", "PearsonCorrelation", {}, [(D["reg_true"], D["reg_pred"], None)]),
    ("pearson_axis0", "metric", "PearsonCorrelation", {"axis": 0}, [(D["reg_true"], D["reg_pred"], None)]),
    ("concordance", "metric", "ConcordanceCorrelation", {}, [(D["reg_true"][:4], D["reg_pred"][:4], None),
                                                             (D["reg_true"][4:], D["reg_pred"][4:], W[:4])]),
    ("sens_at_spec", "metric", "SensitivityAtSpecificity", {"specificity": 0.6},
     [(D["binary"], D["probs"], None)]),
    ("spec_at_sens", "metric", "SpecificityAtSensitivity", {"sensitivity": 0.8, "num_thresholds": 50},
     [(D["binary"], D["probs"], W[:, None] * np.ones((1, 4), "float32"))]),
    ("prec_at_recall", "metric", "PrecisionAtRecall", {"recall": 0.7, "class_id": 2},
     [(D["onehot"], D["probs"], None)]),
    ("recall_at_prec", "metric", "RecallAtPrecision", {"precision": 0.5, "num_thresholds": 1},
     [(D["binary"], D["probs"], None)]),
    ("fbeta_weighted", "metric", "FBetaScore", {"average": "weighted", "beta": 2.0},
     [(D["binary"][:3], D["probs"][:3], None), (D["binary"][3:], D["probs"][3:], W[3:])]),
]


def run(keras, case):
    """The value Keras (or tensorweave) gives for one case, as a NumPy array."""
    _, kind, cls, kwargs, batches = case
    if kind == "loss":
        y_true, y_pred, sw = batches[0]
        return np.asarray(getattr(keras.losses, cls)(**kwargs)(y_true, y_pred, sample_weight=sw))
    metric = getattr(keras.metrics, cls)(**kwargs)
    for y_true, y_pred, sw in batches:
        metric.update_state(y_true, y_pred, sample_weight=sw)
    return np.asarray(metric.result())


if __name__ == "__main__":
    import os
    import warnings
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    warnings.simplefilter("ignore")
    import keras
    print('"""Losses and metrics of keras_scores_cases.py as Keras %s (TensorFlow backend) computes them."""'
          % keras.__version__)
    print("REFERENCE = {")
    for case in CASES:
        print(f"    {case[0]!r}: {np.asarray(run(keras, case), dtype='float64').round(7).tolist()!r},")
    print("}")
