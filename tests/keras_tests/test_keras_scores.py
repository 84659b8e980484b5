"""Focal/Dice/Tversky/CTC losses and IoU/F-score/R² metrics against the values Keras 3.15 computes
on the same inputs (keras_scores_reference.py, recorded by keras_scores_cases.py), in eager mode
and inside a tw.function; their configs round-trip and they work in compile/fit."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave import keras

from keras_tests.keras_scores_cases import CASES, D, run
from keras_tests.keras_scores_reference import REFERENCE


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_equals_keras(case):
    np.testing.assert_allclose(run(keras, case), REFERENCE[case[0]], rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("case", [c for c in CASES if c[0] in ("bfce_balanced_logits", "cfce", "dice_axis",
                                                                "tversky", "ctc", "meaniou", "r2", "f1_micro")],
                         ids=lambda c: c[0])
def test_inside_a_function(case):
    _, kind, cls, kwargs, batches = case
    if kind == "loss":
        fn = getattr(keras.losses, cls)(**kwargs)
        y_true, y_pred, sw = batches[0]
        step = tw.function(lambda t, p: fn(t, p, sample_weight=sw))
        value = step(tw.constant(y_true), tw.constant(y_pred))
    else:
        metric = getattr(keras.metrics, cls)(**kwargs)
        step = tw.function(lambda t, p, w: metric.update_state(t, p, sample_weight=w))
        for y_true, y_pred, sw in batches:
            if sw is None:      # a weight of one per label (IoU) or per sample (the others)
                sw = np.ones(np.shape(y_true) if "IoU" in cls else np.shape(y_true)[:1], "int64")
            step(tw.constant(y_true), tw.constant(y_pred), tw.constant(sw))
        value = metric.result()
    np.testing.assert_allclose(value.numpy(), REFERENCE[case[0]], rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_config_round_trip(case):
    _, kind, cls, kwargs, batches = case
    module = keras.losses if kind == "loss" else keras.metrics
    obj = getattr(module, cls)(**kwargs)
    again = module.deserialize(module.serialize(obj))
    assert type(again) is type(obj) and again.get_config() == obj.get_config()
    if kind == "loss":
        assert type(module.get(cls)) is type(obj)


def test_metric_state_accumulates_and_resets():
    m = keras.metrics.MeanIoU(num_classes=3)
    m.update_state(D["seg_true"], D["seg_pred"])
    first = float(m.result())
    m.reset_state()
    assert float(m.result()) == 0.0
    m.update_state(D["seg_true"], D["seg_pred"])
    assert float(m.result()) == pytest.approx(first)
    assert m.name == "mean_io_u" and m.dtype == "int64" and m.variables[0].shape.as_list() == [3, 3]
    with pytest.warns(UserWarning, match="passing weight as `float`, but dtype is `int`"):
        m.update_state([0, 1], [0, 1], sample_weight=[0.5, 1.0])


def test_bad_arguments_name_the_problem():
    with pytest.raises(ValueError, match=r"Target class id 3 is out of range, which is \[0, 3\)"):
        keras.metrics.IoU(num_classes=3, target_class_ids=[3])
    with pytest.raises(ValueError, match="Invalid `beta` argument value. It should be a Python float"):
        keras.metrics.FBetaScore(beta=1)
    with pytest.raises(ValueError, match="Invalid `average` argument value"):
        keras.metrics.F1Score(average="samples")
    with pytest.raises(ValueError, match=r"F1Score expects 2D inputs with shape \(batch_size, output_dim\)"):
        keras.metrics.F1Score().update_state([1.0, 0.0], [0.3, 0.2])
    with pytest.raises(ValueError, match="Invalid value for argument `class_aggregation`"):
        keras.metrics.R2Score(class_aggregation="median")
    with pytest.raises(ValueError, match=r"Targets `y_true` are expected to be a tensor of shape"):
        keras.losses.ctc(np.zeros((2, 3, 1), "int32"), D["ctc_pred"])
    with pytest.raises(ValueError, match=r"`label_smoothing` must be in \[0, 1\]"):
        keras.losses.BinaryFocalCrossentropy(label_smoothing=2.0)


def test_training_with_focal_loss_and_new_metrics():
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 5)).astype("float32")
    y = (x[:, :1] + x[:, 1:2] > 0).astype("float32")
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(8, activation="relu"),
                              keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss=keras.losses.BinaryFocalCrossentropy(gamma=2.0),
                  metrics=[keras.metrics.BinaryIoU(target_class_ids=[1]), keras.metrics.F1Score(threshold=0.5),
                           keras.metrics.R2Score()])
    history = model.fit(x, y, epochs=8, batch_size=16, verbose=0).history
    assert history["loss"][-1] < history["loss"][0]
    assert history["binary_io_u"][-1] > 0.6 and history["r2_score"][-1] > history["r2_score"][0]
    f1 = history["f1_score"][-1]          # per class (average=None): an array in the logs, as in Keras
    assert isinstance(f1, np.ndarray) and f1.shape == (1,) and f1[0] > 0.7
    model.evaluate(x, y, verbose=1)       # the progress bar prints the array


def test_function_forms_match_the_classes_and_metrics_export_the_loss_functions():
    L = keras.losses
    M = keras.metrics
    y, p, logits = D["binary"], D["probs"], D["logits"]
    for fn, cls in ((L.binary_focal_crossentropy, L.BinaryFocalCrossentropy),
                    (L.categorical_focal_crossentropy, L.CategoricalFocalCrossentropy), (L.dice, L.Dice),
                    (L.tversky, L.Tversky)):
        np.testing.assert_allclose(np.mean(fn(y, p).numpy()), cls()(y, p).numpy(), rtol=1e-6)
    np.testing.assert_allclose(np.mean(L.ctc(D["ctc_true"], D["ctc_pred"]).numpy()), REFERENCE["ctc"], rtol=2e-5)
    np.testing.assert_allclose(L.categorical_focal_crossentropy(D["onehot"], logits, from_logits=True).numpy(),
                               L.categorical_focal_crossentropy(D["onehot"], tw.nn.softmax(logits)).numpy(), rtol=1e-5)
    for name in ("binary_focal_crossentropy", "categorical_focal_crossentropy", "categorical_hinge", "hinge", "huber",
                 "log_cosh", "mean_absolute_percentage_error", "mean_squared_logarithmic_error", "poisson",
                 "squared_hinge"):
        assert getattr(M, name) is getattr(L, name)
    assert M.hinge is L.hinge and M.poisson is L.poisson and M.squared_hinge is L.squared_hinge
    assert M.categorical_hinge is L.categorical_hinge and M.log_cosh is L.log_cosh and M.huber is L.huber
    assert M.mean_squared_logarithmic_error is L.mean_squared_logarithmic_error
    np.testing.assert_allclose(np.mean(M.pearson_correlation(D["reg_true"], D["reg_pred"]).numpy()),
                               REFERENCE["pearson"], rtol=1e-5)
    np.testing.assert_allclose(np.mean(M.concordance_correlation(D["reg_true"], D["reg_pred"]).numpy()),
                               float(M.ConcordanceCorrelation()(D["reg_true"], D["reg_pred"])), rtol=1e-5)
    one_hot = M.OneHotIoU(num_classes=4, target_class_ids=[1])
    one_hot_mean = M.OneHotMeanIoU(num_classes=4, sparse_y_pred=True)
    one_hot.update_state(D["onehot"], D["probs"])
    one_hot_mean.update_state(D["onehot"], np.argmax(D["probs"], -1))
    assert 0.0 <= float(one_hot.result()) <= 1.0
    np.testing.assert_allclose(float(one_hot_mean.result()), REFERENCE["onehot_meaniou"], rtol=1e-5)


def test_string_identifiers_resolve_to_the_new_classes():
    # compile(metrics=["pearson_correlation"]) and losses by name, as Keras resolves them
    for name, cls in (("PearsonCorrelation", keras.metrics.PearsonCorrelation),
                      ("concordance_correlation", keras.metrics.ConcordanceCorrelation),
                      ("r2_score", keras.metrics.R2Score), ("F1Score", keras.metrics.F1Score)):
        assert type(keras.metrics.get(name)) is cls
    for name, cls in (("Dice", keras.losses.Dice), ("Tversky", keras.losses.Tversky), ("CTC", keras.losses.CTC),
                      ("CategoricalFocalCrossentropy", keras.losses.CategoricalFocalCrossentropy),
                      ("BinaryFocalCrossentropy", keras.losses.BinaryFocalCrossentropy)):
        assert type(keras.losses.get(name)) is cls
    assert keras.losses.get("dice") is keras.losses.dice and keras.losses.get("ctc") is keras.losses.ctc
    assert keras.losses.get("tversky") is keras.losses.tversky
    assert keras.losses.get("cosine_similarity") is keras.losses.cosine_similarity
    for cls in (keras.metrics.SensitivityAtSpecificity, keras.metrics.SpecificityAtSensitivity,
                keras.metrics.PrecisionAtRecall, keras.metrics.RecallAtPrecision):
        m = cls(0.5, num_thresholds=3)
        assert m.get_config()["num_thresholds"] == 3 and type(cls.from_config(m.get_config())) is cls
    with pytest.raises(ValueError, match="Argument `recall` must be in the range"):
        keras.metrics.PrecisionAtRecall(1.5)
    assert keras.metrics.pearson_correlation is not None and keras.metrics.concordance_correlation is not None
    assert keras.metrics.OneHotIoU(3, [0]).name == "one_hot_io_u" and keras.metrics.OneHotMeanIoU(3).num_classes == 3
