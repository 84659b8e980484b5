"""Losses (``tw.keras.losses``), with Keras 3's names, arguments and numerics.

Each loss exists as a function returning one value per sample (``mean_squared_error(y_true,
y_pred)``) and as a class whose ``__call__(y_true, y_pred, sample_weight=None)`` weights and
reduces those values (``reduction``: ``"sum_over_batch_size"`` (default), ``"sum"``,
``"mean"``, ``"mean_with_sample_weight"``, ``"none"`` or ``None``). Everything is written in
tensorweave ops, so losses are differentiable and run eagerly, inside ``tw.function`` and in a
TF1 graph.

Numerics follow Keras: probabilities are clipped to ``[epsilon, 1 - epsilon]``
(``keras.backend.epsilon()``, 1e-7) before the log; with ``from_logits=True`` the stable
``tw.nn`` cross-entropy ops are used instead; ``y_true`` is cast to ``y_pred``'s dtype.

Dtype: a class with ``dtype=None`` computes in ``y_pred``'s dtype when ``y_pred`` is a
float32/float64 tensor (so a float64 model gets a float64 loss) and in
``keras.backend.floatx()`` otherwise (NumPy arrays, lists, half precision), as Keras does.

>>> import numpy as np
>>> from tensorweave.keras import losses
>>> y_true, y_pred = np.array([[0.0, 1.0], [0.0, 0.0]]), np.array([[1.0, 1.0], [1.0, 0.0]])
>>> float(losses.MeanSquaredError()(y_true, y_pred))
0.5
>>> losses.mean_squared_error(y_true, y_pred).numpy()
array([0.5, 0.5])
>>> round(float(losses.get("sparse_categorical_crossentropy")([1], [[0.5, 0.5]])[0]), 4)
0.6931
"""
import inspect
import re
import warnings

import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.graph import name_scope
from tensorweave.core.shape import TensorShape
from tensorweave.core.tensor import Tensor
from tensorweave.keras import backend
from tensorweave.ops import array_ops as A
from tensorweave.ops import math_ops as M
from tensorweave.ops import nn_ops as N
from tensorweave.ops import reduce_ops as R
from tensorweave.ops.variables import Variable

__all__ = ["Loss", "LossFunctionWrapper", "MeanSquaredError", "MeanAbsoluteError", "Huber", "BinaryCrossentropy",
           "CategoricalCrossentropy", "SparseCategoricalCrossentropy", "KLDivergence", "mean_squared_error",
           "mean_absolute_error", "huber", "binary_crossentropy", "categorical_crossentropy",
           "sparse_categorical_crossentropy", "kl_divergence", "mse", "MSE", "mae", "MAE", "kld", "KLD",
           "kullback_leibler_divergence", "get", "serialize", "deserialize", "squeeze_or_expand_to_same_rank",
           "reduce_weighted_values", "get_for_compile"]

_MODULE = "keras.losses"
REDUCTIONS = ("sum", "sum_over_batch_size", "mean", "mean_with_sample_weight", "none", None)
_FAST_FLOATS = (_dt.float32, _dt.float64)


# ---- helpers shared with keras.metrics ---------------------------------------------------------
def _rank(x):
    return x.shape.rank


def _cast(x, dtype):
    dtype = _dt.as_dtype(dtype)
    return x if x.dtype is dtype else M.cast(x, dtype)


def _tensor(x):
    return x.value() if isinstance(x, Variable) else convert_to_tensor(x)


def _convert(x, dtype):
    """``x`` as a tensor of ``dtype``; Python and NumPy values are converted directly (a list
    of floats becomes float64 without a float32 detour)."""
    dtype = _dt.as_dtype(dtype)
    if isinstance(x, (Tensor, Variable)):
        return _cast(_tensor(x), dtype)
    return convert_to_tensor(np.asarray(x).astype(dtype.np_dtype))


def _pred_tensor(y_pred, dtype=None):
    """``y_pred`` as a float tensor: ``dtype`` when given; else a float32/float64 tensor keeps
    its dtype and anything else is computed in floatx (Keras' default loss dtype)."""
    is_tensor = isinstance(y_pred, (Tensor, Variable))
    y_pred = _tensor(y_pred)
    if dtype is not None:
        return _cast(y_pred, dtype)
    if is_tensor and y_pred.dtype in _FAST_FLOATS:
        return y_pred
    return _cast(y_pred, backend.floatx())


def _fn_pred(y_pred):
    """Loss *functions* keep a float input's dtype (as ``ops.convert_to_tensor`` in Keras);
    integer or bool predictions are computed in floatx."""
    y_pred = _tensor(y_pred)
    return y_pred if y_pred.dtype.is_floating else _cast(y_pred, backend.floatx())


def _shape_str(x):
    """A shape as Keras prints it: ``(None, 3)``."""
    shape = getattr(x, "shape", x)
    if shape.rank is None:
        return "<unknown>"
    return str(tuple(shape.as_list()))


def squeeze_or_expand_to_same_rank(x1, x2, expand_rank_1=True):
    """Makes the ranks of ``x1`` and ``x2`` equal when they differ by a trailing 1 (Keras' rule):
    a rank-1 tensor gains a trailing axis (when ``expand_rank_1``), otherwise the size-1 axis is
    squeezed. Other shapes are returned unchanged (broadcasting decides).

    >>> import tensorweave as tw
    >>> a, b = squeeze_or_expand_to_same_rank(tw.zeros([4]), tw.zeros([4, 1]))
    >>> a.shape.as_list(), b.shape.as_list()
    ([4, 1], [4, 1])
    """
    r1, r2 = _rank(x1), _rank(x2)
    if r1 is None or r2 is None or r1 == r2:
        return x1, x2
    if r1 == r2 + 1 and x1.shape[-1] == 1:
        if r2 == 1 and expand_rank_1:
            x2 = A.expand_dims(x2, -1)
        else:
            x1 = A.squeeze(x1, [-1])
    elif r2 == r1 + 1 and x2.shape[-1] == 1:
        if r1 == 1 and expand_rank_1:
            x1 = A.expand_dims(x1, -1)
        else:
            x2 = A.squeeze(x2, [-1])
    return x1, x2


def _num_elements(x, dtype):
    n = x.shape.num_elements() if x.shape.is_fully_defined() else None
    return A.constant(float(n), dtype=dtype) if n is not None else M.cast(A.size(x), dtype)


def standardize_reduction(reduction):
    if reduction not in REDUCTIONS:
        raise ValueError(f"Invalid value for argument `reduction`. Expected one of {list(REDUCTIONS)}. "
                         f"Received: reduction={reduction!r}")
    return reduction


def reduce_values(values, sample_weight=None, reduction="sum_over_batch_size"):
    """Reduces (already weighted) per-sample ``values`` as ``reduction`` says."""
    if reduction is None or reduction == "none" or _rank(values) == 0:
        return values
    total = R.reduce_sum(values)
    if reduction == "sum":
        return total
    if reduction == "mean_with_sample_weight" and sample_weight is not None:
        divisor = _cast(R.reduce_sum(sample_weight), total.dtype)
    else:
        divisor = _num_elements(values, total.dtype)
    # An empty batch gives 0, not NaN.
    return M.div_no_nan(total, divisor)


def apply_mask(sample_weight, mask, dtype, reduction):
    """Merges a validity ``mask`` into ``sample_weight``. For the mean reductions valid entries
    get weight ``total / valid``, so the mean runs over valid entries only (as Keras)."""
    if mask is None:
        return sample_weight
    mask = _cast(mask, dtype)
    if reduction in ("mean", "sum_over_batch_size"):
        total = _num_elements(mask, dtype)
        valid = R.reduce_sum(mask)
        mask = mask * (total / (valid + backend.epsilon()))
    if sample_weight is None:
        return mask
    sample_weight = _cast(sample_weight, dtype)
    mask, sample_weight = squeeze_or_expand_to_same_rank(mask, sample_weight)
    return sample_weight * mask


def _match_weights(values, sample_weight, what="losses"):
    """``sample_weight`` shaped to multiply ``values``: Keras' squeeze/expand rule, then
    trailing axes added so that per-sample weights (N,) apply to (N, T) values."""
    values, sample_weight = squeeze_or_expand_to_same_rank(values, sample_weight)
    rv, rw = _rank(values), _rank(sample_weight)
    if rv is not None and rw is not None and 0 < rw < rv:
        for _ in range(rv - rw):
            sample_weight = A.expand_dims(sample_weight, -1)
    if rv is not None and rw is not None:
        try:
            _broadcast_shape(values.shape, sample_weight.shape)
        except ValueError:
            raise ValueError(f"sample_weight of shape {_shape_str(sample_weight)} cannot be applied to {what} of "
                             f"shape {_shape_str(values)}. Hint: pass one weight per sample, shape (batch_size,)"
                             ) from None
    return values, sample_weight


def _broadcast_shape(a, b):
    from tensorweave.core.shape import broadcast_static
    return broadcast_static(a, b)


def reduce_weighted_values(values, sample_weight=None, mask=None, reduction="sum_over_batch_size", dtype=None):
    """Multiplies ``values`` by ``sample_weight`` (and ``mask``) and reduces them.

    >>> import tensorweave as tw
    >>> float(reduce_weighted_values(tw.constant([1.0, 3.0]), tw.constant([1.0, 0.0])))
    0.5
    """
    reduction = standardize_reduction(reduction)
    values = _tensor(values)
    if dtype is not None:
        values = _cast(values, dtype)
    if sample_weight is not None:
        sample_weight = _convert(sample_weight, values.dtype)
    sample_weight = apply_mask(sample_weight, mask, values.dtype, reduction)
    if sample_weight is not None:
        values, sample_weight = _match_weights(values, sample_weight)
        values = values * sample_weight
    return reduce_values(values, sample_weight, reduction)


def _check_same_shape(loss, y_true, y_pred, hint=""):
    if _rank(y_true) is None or _rank(y_pred) is None:
        return
    if _rank(y_true) != _rank(y_pred) or not y_true.shape.is_compatible_with(y_pred.shape):
        raise ValueError(f"{loss}: `y_true` and `y_pred` must have the same shape. Received: "
                         f"y_true.shape={_shape_str(y_true)}, y_pred.shape={_shape_str(y_pred)}" + hint)


def _check_broadcastable(loss, y_true, y_pred):
    if _rank(y_true) is None or _rank(y_pred) is None:
        return
    try:
        _broadcast_shape(y_true.shape, y_pred.shape)
    except ValueError:
        raise ValueError(f"{loss}: `y_true` and `y_pred` have incompatible shapes. Received: "
                         f"y_true.shape={_shape_str(y_true)}, y_pred.shape={_shape_str(y_pred)}") from None


def _mean_last(x):
    return x if _rank(x) == 0 else R.reduce_mean(x, axis=-1)


# ---- loss functions -------------------------------------------------------------------------------
def _regression_inputs(name, y_true, y_pred):
    y_pred = _fn_pred(y_pred)
    y_true = _convert(y_true, y_pred.dtype)
    y_true, y_pred = squeeze_or_expand_to_same_rank(y_true, y_pred)
    _check_broadcastable(name, y_true, y_pred)
    return y_true, y_pred


def mean_squared_error(y_true, y_pred):
    """``mean(square(y_true - y_pred), axis=-1)``.

    >>> mean_squared_error([[0.0, 2.0]], [[1.0, 0.0]]).numpy()
    array([2.5], dtype=float32)
    """
    y_true, y_pred = _regression_inputs("mean_squared_error", y_true, y_pred)
    return _mean_last(M.square(y_true - y_pred))


def mean_absolute_error(y_true, y_pred):
    """``mean(abs(y_true - y_pred), axis=-1)``.

    >>> mean_absolute_error([[0.0, 2.0]], [[1.0, 0.0]]).numpy()
    array([1.5], dtype=float32)
    """
    y_true, y_pred = _regression_inputs("mean_absolute_error", y_true, y_pred)
    return _mean_last(M.abs(y_true - y_pred))


def huber(y_true, y_pred, delta=1.0):
    """Huber loss: ``0.5 * e**2`` where ``|e| <= delta``, else ``delta * (|e| - 0.5 * delta)``,
    averaged over the last axis.

    >>> huber([[0.0, 0.0]], [[0.5, 3.0]]).numpy()
    array([1.3125], dtype=float32)
    """
    y_true, y_pred = _regression_inputs("huber", y_true, y_pred)
    delta = A.constant(delta, dtype=y_pred.dtype)
    error = y_pred - y_true
    abs_error = M.abs(error)
    half = A.constant(0.5, dtype=y_pred.dtype)
    quadratic = half * M.square(error)
    linear = delta * abs_error - half * M.square(delta)
    return _mean_last(M.where(abs_error <= delta, quadratic, linear))


def kl_divergence(y_true, y_pred):
    """Kullback-Leibler divergence ``sum(y_true * log(y_true / y_pred), axis=-1)``, both
    clipped to ``[epsilon, 1]``.

    >>> kl_divergence([[0.5, 0.5]], [[0.25, 0.75]]).numpy().round(4)
    array([0.1438], dtype=float32)
    """
    y_true, y_pred = _regression_inputs("kl_divergence", y_true, y_pred)
    eps = backend.epsilon()
    y_true = M.clip_by_value(y_true, eps, 1.0)
    y_pred = M.clip_by_value(y_pred, eps, 1.0)
    return R.reduce_sum(y_true * M.log(y_true / y_pred), axis=-1)


def _check_axis(loss, axis):
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise ValueError(f"{loss}: `axis` must be an int. Received: axis={axis!r}")


def binary_crossentropy(y_true, y_pred, from_logits=False, label_smoothing=0.0, axis=-1):
    """Binary cross-entropy, averaged over ``axis``.

    With ``from_logits=False`` ``y_pred`` holds probabilities, clipped to ``[eps, 1 - eps]``;
    with ``True`` it holds logits and the stable ``tw.nn.sigmoid_cross_entropy_with_logits``
    is used. ``label_smoothing`` moves the labels towards 0.5:
    ``y_true * (1 - label_smoothing) + 0.5 * label_smoothing``.

    >>> binary_crossentropy([[1.0, 0.0]], [[0.5, 0.5]]).numpy().round(4)
    array([0.6931], dtype=float32)
    >>> binary_crossentropy([[1.0, 0.0]], [[0.0, 0.0]], from_logits=True).numpy().round(4)
    array([0.6931], dtype=float32)
    """
    _check_axis("binary_crossentropy", axis)
    y_pred = _fn_pred(y_pred)
    y_true = _convert(y_true, y_pred.dtype)
    _check_same_shape("binary_crossentropy", y_true, y_pred)
    if label_smoothing:
        y_true = y_true * (1.0 - label_smoothing) + 0.5 * label_smoothing
    if from_logits:
        bce = N.sigmoid_cross_entropy_with_logits(labels=y_true, logits=y_pred)
    else:
        eps = backend.epsilon()
        p = M.clip_by_value(y_pred, eps, 1.0 - eps)
        bce = -(y_true * M.log(p) + (1.0 - y_true) * M.log(1.0 - p))
    return bce if _rank(bce) == 0 else R.reduce_mean(bce, axis=axis)


def categorical_crossentropy(y_true, y_pred, from_logits=False, label_smoothing=0.0, axis=-1):
    """Cross-entropy between one-hot (or soft) ``y_true`` and ``y_pred`` over ``axis``.

    Probabilities are first renormalised to sum to 1 along ``axis`` and clipped to
    ``[eps, 1 - eps]``; logits use ``tw.nn.softmax_cross_entropy_with_logits``.
    ``label_smoothing`` mixes the labels with the uniform distribution over the classes.

    >>> categorical_crossentropy([[0.0, 1.0]], [[0.5, 0.5]]).numpy().round(4)
    array([0.6931], dtype=float32)
    """
    _check_axis("categorical_crossentropy", axis)
    y_pred = _fn_pred(y_pred)
    y_true = _convert(y_true, y_pred.dtype)
    hint = ""
    if _rank(y_true) is not None and _rank(y_pred) is not None and _rank(y_true) < _rank(y_pred):
        hint = (". Hint: integer class labels go with sparse_categorical_crossentropy "
                "(or one-hot encode them with tw.one_hot)")
    _check_same_shape("categorical_crossentropy", y_true, y_pred, hint)
    if _rank(y_pred) == 0:
        raise ValueError("categorical_crossentropy: `y_pred` must have rank >= 1 (the class axis), got a scalar")
    if y_pred.shape[-1] == 1:
        warnings.warn("In loss categorical_crossentropy, expected y_pred.shape to be (batch_size, num_classes) "
                      f"with num_classes > 1. Received: y_pred.shape={_shape_str(y_pred)}. Consider using "
                      "'binary_crossentropy' if you only have 2 classes.", SyntaxWarning, stacklevel=2)
    if label_smoothing:
        n = y_true.shape[axis]
        num_classes = (A.constant(float(n), dtype=y_pred.dtype) if n is not None
                       else M.cast(A.shape(y_true)[axis], y_pred.dtype))
        y_true = y_true * (1.0 - label_smoothing) + label_smoothing / num_classes
    if from_logits:
        return N.softmax_cross_entropy_with_logits(labels=y_true, logits=y_pred, axis=axis)
    eps = backend.epsilon()
    p = y_pred / R.reduce_sum(y_pred, axis=axis, keepdims=True)
    p = M.clip_by_value(p, eps, 1.0 - eps)
    return -R.reduce_sum(y_true * M.log(p), axis=axis)


def _sparse_labels(loss, y_true, y_pred):
    """Integer labels of shape ``y_pred.shape[:-1]`` (a trailing size-1 axis is squeezed)."""
    y_true = _tensor(y_true)
    rt, rp = _rank(y_true), _rank(y_pred)
    if rp == 0:
        raise ValueError(f"{loss}: `y_pred` must have rank >= 1 (the class axis), got a scalar")
    if rt is not None and rp is not None and rt == rp and y_true.shape[-1] == 1:
        y_true = A.squeeze(y_true, [-1])
        rt -= 1
    if rt is not None and rp is not None:
        if rt != rp - 1 or not y_true.shape.is_compatible_with(TensorShape(y_pred.shape.as_list()[:-1])):
            hint = (". Hint: one-hot labels go with categorical_crossentropy"
                    if rt == rp and y_true.shape.is_compatible_with(y_pred.shape) else "")
            raise ValueError(f"{loss}: `y_true` must hold one integer class per sample, with shape "
                             f"y_pred.shape[:-1] or y_pred.shape[:-1] + (1,). Received: "
                             f"y_true.shape={_shape_str(y_true)}, y_pred.shape={_shape_str(y_pred)}{hint}")
    if y_true.dtype not in (_dt.int32, _dt.int64):
        y_true = M.cast(y_true, _dt.int32)
    return y_true


def sparse_categorical_crossentropy(y_true, y_pred, from_logits=False, ignore_class=None, axis=-1):
    """Cross-entropy with integer labels ``y_true`` (shape ``(N,)`` or ``(N, 1)``) against
    ``y_pred`` of shape ``(N, num_classes)``.

    Probabilities are clipped to ``[eps, 1 - eps]`` and their log goes through the stable
    ``tw.nn.sparse_softmax_cross_entropy_with_logits`` (which also renormalises them, as
    Keras' TensorFlow backend). Entries whose label equals ``ignore_class`` give 0 (and the
    class form averages over the other entries only).

    >>> sparse_categorical_crossentropy([1, 0], [[0.25, 0.75], [0.5, 0.5]]).numpy().round(4)
    array([0.2877, 0.6931], dtype=float32)
    >>> sparse_categorical_crossentropy([1, -1], [[0.25, 0.75], [0.5, 0.5]], ignore_class=-1).numpy().round(4)
    array([0.2877, 0.    ], dtype=float32)
    """
    losses, _ = _sparse_xent(y_true, y_pred, from_logits, ignore_class, axis)
    return losses


def _sparse_xent(y_true, y_pred, from_logits, ignore_class, axis):
    loss = "sparse_categorical_crossentropy"
    _check_axis(loss, axis)
    y_pred = _fn_pred(y_pred)
    if axis != -1 and (_rank(y_pred) is None or axis != _rank(y_pred) - 1):
        raise ValueError(f"{loss}: only axis=-1 is supported. Received: axis={axis}")
    labels = _sparse_labels(loss, y_true, y_pred)
    valid = None
    if ignore_class is not None:
        valid = M.not_equal(labels, A.constant(ignore_class, dtype=labels.dtype))
        # Ignored entries get label 0 and neutral predictions, so nothing out of range or
        # non-finite reaches the cross-entropy op (or its gradient).
        labels = labels * M.cast(valid, labels.dtype)
        y_pred = y_pred * M.cast(A.expand_dims(valid, -1), y_pred.dtype)
    if from_logits:
        logits = y_pred
    else:
        eps = backend.epsilon()
        logits = M.log(M.clip_by_value(y_pred, eps, 1.0 - eps))
    res = N.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    if valid is not None:
        res = M.where(valid, res, A.zeros_like(res))
    return res, valid


mse = MSE = mean_squared_error
mae = MAE = mean_absolute_error
kld = KLD = kullback_leibler_divergence = kl_divergence


def _scope_name(name):
    # Graph scope names allow fewer characters than loss names ("<lambda>").
    return re.sub(r"[^A-Za-z0-9_.\-]", "_", str(name)).lstrip("_.-") or "loss"


# ---- classes ----------------------------------------------------------------------------------------
class Loss:
    """Base class of the loss classes: ``__call__`` converts the inputs, calls :meth:`call`
    (per-sample values) and applies ``sample_weight`` and ``reduction``.

    Subclass and implement ``call(y_true, y_pred)``; ``y_true`` arrives cast to ``y_pred``'s
    float dtype.

    >>> import tensorweave as tw
    >>> class Cubed(Loss):
    ...     def call(self, y_true, y_pred):
    ...         return tw.reduce_mean((y_true - y_pred) ** 3, axis=-1)
    >>> float(Cubed(reduction="sum")([[2.0], [1.0]], [[0.0], [0.0]]))
    9.0
    """

    # Sparse losses take integer labels: ``__call__`` leaves their dtype alone.
    _integer_labels = False

    def __init__(self, name=None, reduction="sum_over_batch_size", dtype=None):
        self.name = name or backend.snake_case(type(self).__name__)
        self.reduction = standardize_reduction(reduction)
        self._dtype = None if dtype is None else _dt.as_dtype(dtype)

    @property
    def dtype(self):
        """The compute dtype's name; ``None`` when it follows ``y_pred`` (see the module doc)."""
        return None if self._dtype is None else self._dtype.name

    def __call__(self, y_true, y_pred, sample_weight=None):
        with name_scope(_scope_name(self.name)):
            y_pred = _pred_tensor(y_pred, self._dtype)
            y_true = _tensor(y_true) if self._integer_labels else _convert(y_true, y_pred.dtype)
            losses, mask = self._call_with_mask(y_true, y_pred)
            return reduce_weighted_values(losses, sample_weight=sample_weight, mask=mask,
                                          reduction=self.reduction, dtype=y_pred.dtype)

    def _call_with_mask(self, y_true, y_pred):
        # A loss may mark entries as invalid (SparseCategoricalCrossentropy's ignore_class);
        # the mean reductions then divide by the number of valid entries.
        return self.call(y_true, y_pred), None

    def call(self, y_true, y_pred):
        raise NotImplementedError(f"{type(self).__name__} must implement call(y_true, y_pred)")

    def get_config(self):
        config = {"name": self.name, "reduction": self.reduction}
        if self._dtype is not None:
            config["dtype"] = self._dtype.name
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def __repr__(self):
        return f"<{type(self).__name__} name={self.name}>"


class LossFunctionWrapper(Loss):
    """A :class:`Loss` around a function ``fn(y_true, y_pred, **kwargs)`` returning per-sample
    values (``compile(loss="mse")`` trains with ``LossFunctionWrapper(mean_squared_error)``).

    >>> float(LossFunctionWrapper(mean_absolute_error)([[1.0], [3.0]], [[0.0], [0.0]]))
    2.0
    """

    def __init__(self, fn, reduction="sum_over_batch_size", name=None, dtype=None, **kwargs):
        if not callable(fn):
            raise ValueError(f"LossFunctionWrapper: `fn` must be callable, got {fn!r}")
        super().__init__(name=name or getattr(fn, "__name__", None) or "loss", reduction=reduction, dtype=dtype)
        self.fn = fn
        self._fn_kwargs = kwargs

    def call(self, y_true, y_pred):
        y_true, y_pred = squeeze_or_expand_to_same_rank(y_true, y_pred)
        return self.fn(y_true, y_pred, **self._fn_kwargs)

    def get_config(self):
        config = super().get_config()
        config["fn"] = _function_name(self.fn)
        config.update(self._fn_kwargs)
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if "fn" in config and isinstance(config["fn"], str):
            fn = _FUNCTIONS.get(config["fn"])
            if fn is None:
                raise ValueError(f"Unknown loss function '{config['fn']}'. Hint: pass custom_objects to "
                                 "keras.losses.deserialize")
            config["fn"] = fn
        return cls(**config)


class _BuiltinOptions:
    """Mixin of the built-in function wrappers (losses here, mean metrics in keras.metrics):
    their class fixes ``fn``, so they serialise their options (``_options``) on top of
    ``_config_base``'s config, not ``fn``, and expose the options as attributes."""
    _options = ()
    _config_base = None

    def get_config(self):
        config = self._config_base.get_config(self)
        config.update({k: self._fn_kwargs[k] for k in self._options})
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config.pop("fn", None)
        return cls(**config)

    def __getattr__(self, item):
        kwargs = self.__dict__.get("_fn_kwargs", {})
        if item in kwargs:
            return kwargs[item]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{item}'")


class _BuiltinWrapper(_BuiltinOptions, LossFunctionWrapper):
    _config_base = Loss


class MeanSquaredError(_BuiltinWrapper):
    """Mean of squares of errors between labels and predictions.

    >>> float(MeanSquaredError()([[0.0, 1.0]], [[1.0, 1.0]]))
    0.5
    """

    def __init__(self, reduction="sum_over_batch_size", name="mean_squared_error", dtype=None):
        super().__init__(mean_squared_error, reduction=reduction, name=name, dtype=dtype)


class MeanAbsoluteError(_BuiltinWrapper):
    """Mean of absolute errors between labels and predictions.

    >>> float(MeanAbsoluteError(reduction="sum")([[0.0], [2.0]], [[1.0], [1.0]]))
    2.0
    """

    def __init__(self, reduction="sum_over_batch_size", name="mean_absolute_error", dtype=None):
        super().__init__(mean_absolute_error, reduction=reduction, name=name, dtype=dtype)


class Huber(_BuiltinWrapper):
    """Huber loss (quadratic for errors up to ``delta``, linear beyond).

    >>> float(Huber(delta=1.0)([[0.0, 0.0]], [[0.5, 3.0]]))
    1.3125
    """
    _options = ("delta",)

    def __init__(self, delta=1.0, reduction="sum_over_batch_size", name="huber_loss", dtype=None):
        super().__init__(huber, reduction=reduction, name=name, dtype=dtype, delta=delta)


class KLDivergence(_BuiltinWrapper):
    """Kullback-Leibler divergence between distributions ``y_true`` and ``y_pred``.

    >>> round(float(KLDivergence()([[0.5, 0.5]], [[0.25, 0.75]])), 4)
    0.1438
    """

    def __init__(self, reduction="sum_over_batch_size", name="kl_divergence", dtype=None):
        super().__init__(kl_divergence, reduction=reduction, name=name, dtype=dtype)


class BinaryCrossentropy(_BuiltinWrapper):
    """Binary cross-entropy (``from_logits``, ``label_smoothing`` in [0, 1], ``axis``).

    >>> round(float(BinaryCrossentropy(from_logits=True)([[1.0], [0.0]], [[0.0], [0.0]])), 4)
    0.6931
    """
    _options = ("from_logits", "label_smoothing", "axis")

    def __init__(self, from_logits=False, label_smoothing=0.0, axis=-1, reduction="sum_over_batch_size",
                 name="binary_crossentropy", dtype=None):
        _check_smoothing(label_smoothing)
        super().__init__(binary_crossentropy, reduction=reduction, name=name, dtype=dtype, from_logits=from_logits,
                         label_smoothing=label_smoothing, axis=axis)


class CategoricalCrossentropy(_BuiltinWrapper):
    """Cross-entropy between one-hot labels and predicted class probabilities (or logits).

    >>> round(float(CategoricalCrossentropy()([[0.0, 1.0]], [[0.5, 0.5]])), 4)
    0.6931
    """
    _options = ("from_logits", "label_smoothing", "axis")

    def __init__(self, from_logits=False, label_smoothing=0.0, axis=-1, reduction="sum_over_batch_size",
                 name="categorical_crossentropy", dtype=None):
        _check_smoothing(label_smoothing)
        super().__init__(categorical_crossentropy, reduction=reduction, name=name, dtype=dtype,
                         from_logits=from_logits, label_smoothing=label_smoothing, axis=axis)


class SparseCategoricalCrossentropy(_BuiltinWrapper):
    """Cross-entropy between integer labels and predicted class probabilities (or logits).

    With ``ignore_class`` set, entries with that label contribute nothing and
    ``"sum_over_batch_size"`` averages over the remaining entries.

    >>> loss = SparseCategoricalCrossentropy(from_logits=True, ignore_class=-1)
    >>> round(float(loss([0, -1], [[0.0, 0.0], [9.0, 0.0]])), 4)
    0.6931
    """
    _options = ("from_logits", "ignore_class")
    _integer_labels = True

    def __init__(self, from_logits=False, ignore_class=None, reduction="sum_over_batch_size",
                 name="sparse_categorical_crossentropy", dtype=None):
        super().__init__(sparse_categorical_crossentropy, reduction=reduction, name=name, dtype=dtype,
                         from_logits=from_logits, ignore_class=ignore_class)

    def call(self, y_true, y_pred):
        return self._call_with_mask(y_true, y_pred)[0]

    def _call_with_mask(self, y_true, y_pred):
        k = self._fn_kwargs
        return _sparse_xent(y_true, y_pred, k["from_logits"], k["ignore_class"], -1)


def _check_smoothing(label_smoothing):
    if not 0 <= float(label_smoothing) <= 1:
        raise ValueError(f"`label_smoothing` must be in [0, 1]. Received: label_smoothing={label_smoothing}")


# ---- lookup and serialisation --------------------------------------------------------------------
_CLASSES = {c.__name__: c for c in (Loss, LossFunctionWrapper, MeanSquaredError, MeanAbsoluteError, Huber,
                                     BinaryCrossentropy, CategoricalCrossentropy, SparseCategoricalCrossentropy,
                                     KLDivergence)}
_FUNCTIONS = {f.__name__: f for f in (mean_squared_error, mean_absolute_error, huber, binary_crossentropy,
                                       categorical_crossentropy, sparse_categorical_crossentropy, kl_divergence)}
_ALIASES = {"mse": mean_squared_error, "MSE": mean_squared_error, "mae": mean_absolute_error,
            "MAE": mean_absolute_error, "kld": kl_divergence, "KLD": kl_divergence,
            "kullback_leibler_divergence": kl_divergence, "bce": binary_crossentropy, "BCE": binary_crossentropy,
            "huber_loss": huber}
ALL_OBJECTS_DICT = {**_CLASSES, **_FUNCTIONS, **_ALIASES}

from tensorweave.keras import more_losses as _more  # noqa: E402 - builds on the helpers above
from tensorweave.keras.more_losses import (CategoricalHinge, CosineSimilarity, Hinge, LogCosh,  # noqa: E402,F401
                                           MeanAbsolutePercentageError, MeanSquaredLogarithmicError, Poisson,
                                           Reduction, SquaredHinge, categorical_hinge, cosine_similarity, hinge,
                                           log_cosh, mean_absolute_percentage_error, mean_squared_logarithmic_error,
                                           poisson, squared_hinge)
mape = MAPE = mean_absolute_percentage_error
msle = MSLE = mean_squared_logarithmic_error
logcosh = log_cosh
_CLASSES.update({c.__name__: c for c in _more.CLASSES})
_FUNCTIONS.update({f.__name__: f for f in _more.FUNCTIONS})
_ALIASES.update(_more.ALIASES)
ALL_OBJECTS_DICT.update({**_CLASSES, **_FUNCTIONS, **_ALIASES})
__all__ += [c.__name__ for c in _more.CLASSES] + [f.__name__ for f in _more.FUNCTIONS] + [
    "Reduction", "mape", "MAPE", "msle", "MSLE", "logcosh"]

from tensorweave.keras import imbalance_losses as _imb  # noqa: E402 - builds on the helpers above
from tensorweave.keras.imbalance_losses import (CTC, BinaryFocalCrossentropy,  # noqa: E402,F401
                                                CategoricalFocalCrossentropy, Dice, Tversky,
                                                binary_focal_crossentropy, categorical_focal_crossentropy, ctc,
                                                dice, tversky)
_CLASSES.update({c.__name__: c for c in _imb.CLASSES})
_FUNCTIONS.update({f.__name__: f for f in _imb.FUNCTIONS})
ALL_OBJECTS_DICT.update({**_CLASSES, **_FUNCTIONS})
__all__ += [c.__name__ for c in _imb.CLASSES] + [f.__name__ for f in _imb.FUNCTIONS]


def _function_name(fn):
    for name, f in _FUNCTIONS.items():
        if f is fn:
            return name
    return getattr(fn, "__name__", repr(fn))


def serialize(loss):
    """A JSON-compatible description of ``loss`` (a Loss instance or a built-in function).

    >>> serialize(Huber(delta=2.0))["config"]["delta"]
    2.0
    >>> serialize(mean_squared_error)["config"]
    'mean_squared_error'
    """
    if isinstance(loss, Loss):
        cls = type(loss)
        registered = None if _CLASSES.get(cls.__name__) is cls else cls.__name__
        return {"module": _MODULE, "class_name": cls.__name__, "config": loss.get_config(),
                "registered_name": registered}
    if callable(loss):
        name = _function_name(loss)
        return {"module": _MODULE, "class_name": "function", "config": name, "registered_name": "function"}
    raise ValueError(f"serialize: expected a Loss or a loss function, got {loss!r}")


def deserialize(config, custom_objects=None):
    """The loss described by :func:`serialize`'s output (or by a name).

    >>> deserialize(serialize(BinaryCrossentropy(label_smoothing=0.1))).label_smoothing
    0.1
    """
    table = dict(ALL_OBJECTS_DICT)
    table.update(custom_objects or {})
    if isinstance(config, str):
        obj = table.get(config)
        if obj is None:
            raise ValueError(_unknown(config))
        return obj
    if not isinstance(config, dict) or "class_name" not in config:
        raise ValueError(f"deserialize: expected a dict with 'class_name' and 'config', got {config!r}")
    if config["class_name"] == "function":
        return deserialize(config["config"], custom_objects)
    name = config["class_name"]
    cls = table.get(name) or table.get(config.get("registered_name") or "")
    if cls is None or not inspect.isclass(cls):
        raise ValueError(_unknown(name))
    cfg = dict(config.get("config") or {})
    if issubclass(cls, LossFunctionWrapper) and not issubclass(cls, _BuiltinWrapper) and isinstance(cfg.get("fn"), str):
        fn = table.get(cfg["fn"])
        if fn is None or inspect.isclass(fn):
            raise ValueError(f"Unknown loss function '{cfg['fn']}'. Hint: pass custom_objects={{'{cfg['fn']}': fn}}")
        cfg["fn"] = fn
    return cls.from_config(cfg)


def _unknown(identifier):
    known = sorted(k for k in ALL_OBJECTS_DICT if k not in ("Loss", "LossFunctionWrapper"))
    return f"Could not interpret loss identifier: {identifier!r}. Known names: {known}"


def get(identifier):
    """A loss from a name (a function, e.g. ``"mse"``; a class name gives an instance), a
    config dict, a Loss class (instantiated), a Loss instance or any callable (returned as is).

    >>> get("mse") is mean_squared_error
    True
    >>> get("BinaryCrossentropy").name
    'binary_crossentropy'
    >>> get(None) is None
    True
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
    raise ValueError(f"Could not interpret loss identifier: {identifier!r}")


def get_for_compile(identifier):
    """A :class:`Loss` instance for ``compile(loss=identifier)``: what :func:`get` returns,
    with functions (built-in or your own ``fn(y_true, y_pred)``) wrapped in
    :class:`LossFunctionWrapper` (reduction "sum_over_batch_size"), named by the string
    given or by the function's name, as Keras' compile does. ``None`` stays ``None``.

    >>> loss = get_for_compile("mse")
    >>> type(loss).__name__, loss.name
    ('LossFunctionWrapper', 'mse')
    >>> float(loss([[1.0], [3.0]], [[0.0], [0.0]], sample_weight=[1.0, 0.0]))
    0.5
    >>> get_for_compile(CategoricalCrossentropy(from_logits=True)).name
    'categorical_crossentropy'
    """
    obj = get(identifier)
    if obj is None or isinstance(obj, Loss):
        return obj
    name = identifier if isinstance(identifier, str) else getattr(obj, "__name__", None) or "loss"
    return LossFunctionWrapper(obj, name=name)
