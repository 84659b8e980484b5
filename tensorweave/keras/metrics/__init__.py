"""Metrics (``tw.keras.metrics``), with Keras 3's names, arguments and results.

A metric is a stateful object: ``update_state(y_true, y_pred, sample_weight=None)`` folds a
batch into its state variables, ``result()`` returns the value so far, ``reset_state()``
starts again, and ``metric(y_true, y_pred)`` updates and returns the result. Updates are
tensorweave ops on non-trainable variables, so they run eagerly and inside the
``tw.function`` of a training step.

``get`` turns the strings of ``compile(metrics=[...])`` into metrics; plain "accuracy" /
"acc" depends on the loss and shapes: :func:`resolve_accuracy` (and :func:`get_for_compile`,
which ``compile`` uses for every entry) pick the variant the way Keras does.

>>> import tensorweave as tw
>>> from tensorweave.keras import metrics
>>> m = metrics.get("auc")
>>> type(m).__name__, m.num_thresholds
('AUC', 200)
>>> acc = metrics.resolve_accuracy("sparse_categorical_crossentropy")
>>> type(acc).__name__, acc.name
('SparseCategoricalAccuracy', 'accuracy')
>>> step = tw.function(lambda y, p: acc(y, p))
>>> float(step(tw.constant([1, 0]), tw.constant([[0.2, 0.8], [0.3, 0.7]])))
0.5
"""
import inspect

from tensorweave.keras import backend
from tensorweave.keras import losses as _losses
from tensorweave.keras.metrics.accuracy_metrics import (Accuracy, BinaryAccuracy, CategoricalAccuracy,
                                                        SparseCategoricalAccuracy, SparseTopKCategoricalAccuracy,
                                                        TopKCategoricalAccuracy, accuracy, binary_accuracy,
                                                        categorical_accuracy, in_top_k, sparse_categorical_accuracy,
                                                        sparse_top_k_categorical_accuracy, top_k_categorical_accuracy)
from tensorweave.keras.metrics.confusion_metrics import (AUC, FalseNegatives, FalsePositives, Precision, Recall,
                                                         TrueNegatives, TruePositives)
from tensorweave.keras.metrics.iou_metrics import BinaryIoU, IoU, MeanIoU, OneHotIoU, OneHotMeanIoU
from tensorweave.keras.metrics.metric import Metric
from tensorweave.keras.metrics.probabilistic_metrics import (BinaryCrossentropy, CategoricalCrossentropy,
                                                             KLDivergence, SparseCategoricalCrossentropy)
from tensorweave.keras.metrics.reduction_metrics import Mean, MeanMetricWrapper, Sum
from tensorweave.keras.metrics.regression_metrics import (CategoricalHinge, CosineSimilarity, Hinge,  # noqa: F401
                                                          LogCoshError, MeanAbsoluteError, MeanAbsolutePercentageError,
                                                          MeanSquaredError, MeanSquaredLogarithmicError, Poisson,
                                                          RootMeanSquaredError, SquaredHinge)
from tensorweave.keras.metrics.score_metrics import F1Score, FBetaScore, R2Score
from tensorweave.keras.metrics.constrained_metrics import (PrecisionAtRecall, RecallAtPrecision,
                                                           SensitivityAtSpecificity, SpecificityAtSensitivity)
from tensorweave.keras.metrics.correlation_metrics import (ConcordanceCorrelation, PearsonCorrelation,
                                                           concordance_correlation, pearson_correlation)
# Keras exports these loss functions under keras.metrics too (the same objects).
from tensorweave.keras.losses import (binary_focal_crossentropy, categorical_focal_crossentropy,  # noqa: F401
                                      categorical_hinge, hinge, huber, log_cosh, mean_absolute_percentage_error,
                                      mean_squared_logarithmic_error, poisson, squared_hinge)
from tensorweave.keras.losses import (binary_crossentropy, categorical_crossentropy, kl_divergence,
                                      mean_absolute_error, mean_squared_error, sparse_categorical_crossentropy)

__all__ = ["Metric", "Mean", "Sum", "MeanMetricWrapper", "MeanSquaredError", "MeanAbsoluteError", "Accuracy",
           "BinaryAccuracy", "CategoricalAccuracy", "SparseCategoricalAccuracy", "TopKCategoricalAccuracy",
           "SparseTopKCategoricalAccuracy", "Precision", "Recall", "AUC", "TruePositives", "FalsePositives",
           "TrueNegatives", "FalseNegatives", "BinaryCrossentropy", "CategoricalCrossentropy",
           "SparseCategoricalCrossentropy", "KLDivergence", "accuracy", "binary_accuracy", "categorical_accuracy",
           "sparse_categorical_accuracy", "top_k_categorical_accuracy", "sparse_top_k_categorical_accuracy",
           "in_top_k", "mean_squared_error", "mean_absolute_error", "binary_crossentropy",
           "categorical_crossentropy", "sparse_categorical_crossentropy", "kl_divergence", "get", "serialize",
           "deserialize", "resolve_accuracy", "get_for_compile", "MeanAbsolutePercentageError",
           "MeanSquaredLogarithmicError", "RootMeanSquaredError", "CosineSimilarity", "LogCoshError", "Poisson",
           "Hinge", "SquaredHinge", "CategoricalHinge", "IoU", "MeanIoU", "BinaryIoU", "OneHotIoU", "OneHotMeanIoU",
           "F1Score", "FBetaScore", "R2Score", "PearsonCorrelation", "ConcordanceCorrelation", "pearson_correlation",
           "concordance_correlation", "PrecisionAtRecall", "RecallAtPrecision", "SensitivityAtSpecificity",
           "SpecificityAtSensitivity", "binary_focal_crossentropy", "categorical_focal_crossentropy",
           "categorical_hinge", "hinge", "huber", "log_cosh", "mean_absolute_percentage_error",
           "mean_squared_logarithmic_error", "poisson", "squared_hinge"]

_MODULE = "keras.metrics"
_CLASSES = [Mean, Sum, MeanMetricWrapper, MeanSquaredError, MeanAbsoluteError, Accuracy, BinaryAccuracy,
            CategoricalAccuracy, SparseCategoricalAccuracy, TopKCategoricalAccuracy, SparseTopKCategoricalAccuracy,
            Precision, Recall, AUC, TruePositives, FalsePositives, TrueNegatives, FalseNegatives,
            BinaryCrossentropy, CategoricalCrossentropy, SparseCategoricalCrossentropy, KLDivergence,
            MeanAbsolutePercentageError, MeanSquaredLogarithmicError, RootMeanSquaredError, CosineSimilarity,
            LogCoshError, Poisson, Hinge, SquaredHinge, CategoricalHinge, IoU, MeanIoU, BinaryIoU, OneHotIoU,
            OneHotMeanIoU, F1Score, FBetaScore, R2Score, PearsonCorrelation, ConcordanceCorrelation,
            PrecisionAtRecall, RecallAtPrecision, SensitivityAtSpecificity, SpecificityAtSensitivity]
# As Keras: class names, their snake_case forms ("auc", "top_k_categorical_accuracy"), and aliases.
ALL_OBJECTS_DICT = {c.__name__: c for c in _CLASSES}
ALL_OBJECTS_DICT.update({backend.snake_case(c.__name__): c for c in _CLASSES})
ALL_OBJECTS_DICT.update({"mse": MeanSquaredError, "MSE": MeanSquaredError, "mae": MeanAbsoluteError,
                         "MAE": MeanAbsoluteError, "acc": Accuracy, "bce": BinaryCrossentropy,
                         "BCE": BinaryCrossentropy, "kld": KLDivergence, "KLD": KLDivergence,
                         "mape": MeanAbsolutePercentageError, "MAPE": MeanAbsolutePercentageError,
                         "msle": MeanSquaredLogarithmicError, "MSLE": MeanSquaredLogarithmicError,
                         "rmse": RootMeanSquaredError, "logcosh": LogCoshError})

# Per-sample functions, for MeanMetricWrapper configs.
_FUNCTIONS = {f.__name__: f for f in (accuracy, binary_accuracy, categorical_accuracy, sparse_categorical_accuracy,
                                       top_k_categorical_accuracy, sparse_top_k_categorical_accuracy)}
_FUNCTIONS.update(_losses._FUNCTIONS)
_FUNCTIONS.update({f.__name__: f for f in (pearson_correlation, concordance_correlation)})


def _function_name(fn):
    for name, f in _FUNCTIONS.items():
        if f is fn:
            return name
    return getattr(fn, "__name__", repr(fn))


def _resolve_function(name, custom_objects=None):
    fn = (custom_objects or {}).get(name) or _FUNCTIONS.get(name) or _losses.ALL_OBJECTS_DICT.get(name)
    if fn is None:
        raise ValueError(f"Unknown metric function '{name}'. Hint: pass custom_objects to keras.metrics.deserialize")
    return fn


def _unknown(identifier):
    return (f"Could not interpret metric identifier: {identifier!r}. Known names: "
            f"{sorted(k for k in ALL_OBJECTS_DICT if k not in ('Metric', 'MeanMetricWrapper'))}")


def serialize(metric):
    """A JSON-compatible dict describing ``metric`` (Keras' format).

    >>> serialize(Precision(thresholds=[0.3, 0.7]))["config"]["thresholds"]
    [0.3, 0.7]
    """
    if not isinstance(metric, Metric):
        raise ValueError(f"serialize: expected a Metric, got {metric!r}")
    cls = type(metric)
    registered = None if ALL_OBJECTS_DICT.get(cls.__name__) is cls else cls.__name__
    return {"module": _MODULE, "class_name": cls.__name__, "config": metric.get_config(),
            "registered_name": registered}


def deserialize(config, custom_objects=None):
    """The metric described by :func:`serialize`'s dict (``custom_objects`` maps names of your
    own classes or functions to them).

    >>> deserialize(serialize(AUC(curve="PR"))).curve
    'PR'
    """
    table = dict(ALL_OBJECTS_DICT)
    table.update(custom_objects or {})
    if isinstance(config, str):
        obj = table.get(config)
        if obj is None:
            raise ValueError(_unknown(config))
        return obj() if inspect.isclass(obj) else obj
    if not isinstance(config, dict) or "class_name" not in config:
        raise ValueError(f"deserialize: expected a dict with 'class_name' and 'config', got {config!r}")
    name = config["class_name"]
    cls = table.get(name) or table.get(config.get("registered_name") or "")
    if cls is None or not inspect.isclass(cls):
        raise ValueError(_unknown(name))
    cfg = dict(config.get("config") or {})
    if isinstance(cfg.get("fn"), str) and issubclass(cls, MeanMetricWrapper) and "fn" in \
            inspect.signature(cls.__init__).parameters:
        cfg["fn"] = _resolve_function(cfg["fn"], custom_objects)
    return cls.from_config(cfg)


def get(identifier):
    """A metric from a name ("auc", "precision", "mse", "top_k_categorical_accuracy",
    "Recall", ...; a class name gives a new instance), a config dict, a Metric class or
    instance, or a function ``fn(y_true, y_pred)`` (returned as is).

    "accuracy"/"acc" give plain :class:`Accuracy` here (exact equality, as ``keras.metrics.get``);
    ``compile`` resolves them with :func:`get_for_compile` instead.

    >>> get("precision").name
    'precision'
    >>> get("mse").name
    'mean_squared_error'
    """
    if identifier is None:
        return None
    if isinstance(identifier, dict):
        obj = deserialize(identifier)
    elif isinstance(identifier, str):
        obj = ALL_OBJECTS_DICT.get(identifier)
        if obj is None:
            raise ValueError(_unknown(identifier))
    else:
        obj = identifier
    if inspect.isclass(obj):
        obj = obj()
    if callable(obj):
        return obj
    raise ValueError(f"Could not interpret metric identifier: {identifier!r}")


# ---- compile-time resolution --------------------------------------------------------------------
def _loss_kind(loss):
    """"binary", "categorical", "sparse" for the cross-entropy losses (any form), else None."""
    if loss is None:
        return None
    if isinstance(loss, str):
        try:
            loss = _losses.get(loss)
        except ValueError:
            return None
    if inspect.isclass(loss):
        try:
            loss = loss()
        except TypeError:
            return None
    fn = loss.fn if isinstance(loss, _losses.LossFunctionWrapper) else loss
    if isinstance(loss, _losses.BinaryCrossentropy) or fn is _losses.binary_crossentropy:
        return "binary"
    if isinstance(loss, _losses.SparseCategoricalCrossentropy) or fn is _losses.sparse_categorical_crossentropy:
        return "sparse"
    if isinstance(loss, _losses.CategoricalCrossentropy) or fn is _losses.categorical_crossentropy:
        return "categorical"
    return None


def _shape(s):
    if s is None:
        return None
    s = getattr(s, "shape", s)
    if hasattr(s, "rank"):
        return None if s.rank is None else tuple(s.as_list())
    return tuple(None if d is None else int(d) for d in s)


def _kind_from_shapes(y_true_shape, y_pred_shape):
    """Keras 3's rule: a last y_pred axis of 1 means binary; labels of lower rank, or a trailing
    label axis of 1 against several classes, mean sparse; otherwise categorical."""
    yt, yp = _shape(y_true_shape), _shape(y_pred_shape)
    if yp is None or len(yp) == 0:
        return "binary"
    if yp[-1] == 1:
        return "binary"
    if yt is not None and (len(yt) < len(yp) or (len(yt) > 0 and yt[-1] == 1 and (yp[-1] or 2) > 1)):
        return "sparse"
    return "categorical"


def _accuracy_kind(loss, y_true_shape, y_pred_shape):
    return _loss_kind(loss) or _kind_from_shapes(y_true_shape, y_pred_shape)


def resolve_accuracy(loss=None, y_true_shape=None, y_pred_shape=None, name="accuracy"):
    """The accuracy metric that ``compile(metrics=["accuracy"])`` means, named ``name``.

    The loss decides first (as ``tf.keras``): binary cross-entropy gives
    :class:`BinaryAccuracy` (also for multi-label outputs), sparse categorical cross-entropy
    :class:`SparseCategoricalAccuracy`, categorical cross-entropy :class:`CategoricalAccuracy`.
    Any other loss (or none) falls back to Keras 3's shape rule: ``y_pred.shape[-1] == 1`` is
    binary; labels of lower rank than the predictions, or with a trailing axis of 1 against
    several classes, are sparse; otherwise categorical. ``loss`` may be a name, function,
    class or instance; shapes may be tuples, ``TensorShape``\\ s or tensors.

    >>> type(resolve_accuracy("binary_crossentropy")).__name__
    'BinaryAccuracy'
    >>> type(resolve_accuracy("mse", (None, 1), (None, 10))).__name__
    'SparseCategoricalAccuracy'
    >>> type(resolve_accuracy(None, (None, 10), (None, 10))).__name__
    'CategoricalAccuracy'
    """
    kind = _accuracy_kind(loss, y_true_shape, y_pred_shape)
    cls = {"binary": BinaryAccuracy, "sparse": SparseCategoricalAccuracy, "categorical": CategoricalAccuracy}[kind]
    return cls(name=name)


def resolve_crossentropy(loss=None, y_true_shape=None, y_pred_shape=None, name="crossentropy"):
    """The cross-entropy metric that the strings "crossentropy"/"ce" mean (same rule as
    :func:`resolve_accuracy`; a from_logits loss gives a from_logits metric).

    >>> type(resolve_crossentropy("categorical_crossentropy")).__name__
    'CategoricalCrossentropy'
    """
    kind = _accuracy_kind(loss, y_true_shape, y_pred_shape)
    from_logits = bool(getattr(loss, "_fn_kwargs", {}).get("from_logits", False))
    cls = {"binary": BinaryCrossentropy, "sparse": SparseCategoricalCrossentropy,
           "categorical": CategoricalCrossentropy}[kind]
    return cls(name=name, from_logits=from_logits)


def get_for_compile(identifier, loss=None, y_true_shape=None, y_pred_shape=None):
    """One entry of ``compile(metrics=[...])`` as a :class:`Metric` ready for the training step.

    "accuracy"/"acc" (any case) go through :func:`resolve_accuracy` and "crossentropy"/"ce"
    through :func:`resolve_crossentropy`; other strings through :func:`get`; a plain function
    is wrapped in :class:`MeanMetricWrapper`. As in Keras, a metric given by a string is named
    by that string (``"mse"`` logs as ``mse``); other metrics keep their names.

    >>> m = get_for_compile("acc", "sparse_categorical_crossentropy")
    >>> type(m).__name__, m.name
    ('SparseCategoricalAccuracy', 'acc')
    >>> get_for_compile("mse").name
    'mse'
    >>> get_for_compile(lambda y, p: y - p).name
    '<lambda>'
    """
    if identifier is None:
        return None
    if isinstance(identifier, str) and identifier.lower() in ("accuracy", "acc"):
        return resolve_accuracy(loss, y_true_shape, y_pred_shape, name=identifier)
    if isinstance(identifier, str) and identifier.lower() in ("crossentropy", "ce"):
        return resolve_crossentropy(loss, y_true_shape, y_pred_shape, name=identifier)
    metric = get(identifier)
    if not isinstance(metric, Metric):
        metric = MeanMetricWrapper(metric, name=getattr(metric, "name", None) or getattr(metric, "__name__", None))
    if isinstance(identifier, str):
        metric.name = identifier
    return metric
