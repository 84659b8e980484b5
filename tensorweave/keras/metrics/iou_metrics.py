"""Intersection-over-union metrics of semantic segmentation (Keras 3's ``IoU``, ``MeanIoU``,
``BinaryIoU``, ``OneHotIoU``, ``OneHotMeanIoU``).

They accumulate one confusion matrix (``total_cm``, rows true class, columns predicted) over
all batches; ``result`` is the mean over the target classes of ``TP / (TP + FP + FN)``, classes
absent from both labels and predictions left out. As in Keras the state's dtype is ``int64``
by default, so float sample weights are truncated (a warning says so); entries whose label or
prediction is outside ``[0, num_classes)`` (or whose label is ``ignore_class``) count nothing.

>>> m = MeanIoU(num_classes=2)
>>> m.update_state([0, 0, 1, 1], [0, 1, 0, 1])
>>> float(m.result())          # (1/3 + 1/3) / 2
0.3333333432674408
"""
import warnings

import tensorweave as tw
from tensorweave.keras import backend
from tensorweave.keras.metrics.metric import Metric, updates


def _state_dtype(dtype):
    return "int64" if dtype in (None, "int", int) else dtype


class _IoUBase(Metric):
    _direction = "up"

    def __init__(self, num_classes, name=None, dtype=None, ignore_class=None, sparse_y_true=True,
                 sparse_y_pred=True, axis=-1):
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
            raise ValueError(f"{type(self).__name__}: `num_classes` must be a positive int. "
                             f"Received: num_classes={num_classes!r}")
        super().__init__(name=name, dtype=_state_dtype(dtype))
        self.num_classes = num_classes
        self.ignore_class = ignore_class
        self.sparse_y_true = sparse_y_true
        self.sparse_y_pred = sparse_y_pred
        self.axis = axis
        self.total_cm = self.add_variable(shape=(num_classes, num_classes), initializer="zeros",
                                          name="total_confusion_matrix")

    def update_state(self, y_true, y_pred, sample_weight=None):
        if not self.sparse_y_true:
            y_true = tw.argmax(y_true, axis=self.axis)
        if not self.sparse_y_pred:
            y_pred = tw.argmax(y_pred, axis=self.axis)
        y_true = tw.reshape(tw.cast(y_true, self.dtype), [-1])
        y_pred = tw.reshape(tw.cast(y_pred, self.dtype), [-1])
        if sample_weight is None:
            sample_weight = tw.ones_like(y_true)
        else:
            sample_weight = tw.convert_to_tensor(sample_weight)
            if sample_weight.dtype.is_floating and not self._dtype.is_floating:
                warnings.warn("You are passing weight as `float`, but dtype is `int`. This may result in an "
                              "incorrect weight due to type casting Consider using integer weights.", stacklevel=2)
            sample_weight = tw.broadcast_to(tw.reshape(tw.cast(sample_weight, self.dtype), [-1]), tw.shape(y_true))
        n = tw.cast(self.num_classes, self.dtype)
        zero = tw.zeros_like(y_true)
        valid = (y_true >= zero) & (y_true < n) & (y_pred >= zero) & (y_pred < n)
        if self.ignore_class is not None:
            valid = valid & tw.not_equal(y_true, tw.cast(self.ignore_class, self.dtype))
        y_true, y_pred = tw.where(valid, y_true, zero), tw.where(valid, y_pred, zero)
        sample_weight = tw.where(valid, sample_weight, tw.zeros_like(sample_weight))
        cm = tw.math.confusion_matrix(tw.cast(y_true, "int64"), tw.cast(y_pred, "int64"), self.num_classes,
                                      weights=sample_weight, dtype=self.dtype)
        return updates(self.total_cm.assign_add(cm, read_value=False))


class IoU(_IoUBase):
    """The mean IoU over ``target_class_ids`` (one id gives that class's IoU).

    >>> m = IoU(num_classes=2, target_class_ids=[0])
    >>> m.update_state([0, 0, 1, 1], [0, 1, 0, 1], sample_weight=[3, 2, 1, 1])
    >>> round(float(m.result()), 4)    # 3 / (3 + 2 + 1)
    0.5
    """

    def __init__(self, num_classes, target_class_ids, name=None, dtype=None, ignore_class=None, sparse_y_true=True,
                 sparse_y_pred=True, axis=-1):
        super().__init__(num_classes, name=name, dtype=dtype, ignore_class=ignore_class, sparse_y_true=sparse_y_true,
                         sparse_y_pred=sparse_y_pred, axis=axis)
        if max(target_class_ids) >= num_classes:
            raise ValueError(f"Target class id {max(target_class_ids)} is out of range, which is [0, {num_classes}).")
        self.target_class_ids = list(target_class_ids)

    def result(self):
        cm = tw.cast(self.total_cm, "float32")
        tp = tw.linalg.diag_part(cm)
        denominator = tw.reduce_sum(cm, axis=0) + tw.reduce_sum(cm, axis=1) - tp
        ids = tw.constant(self.target_class_ids, dtype="int32")
        tp, denominator = tw.gather(tp, ids), tw.gather(denominator, ids)
        valid = denominator > 1e-9
        iou = tw.where(valid, tp / (denominator + backend.epsilon()), tw.zeros_like(tp))
        return tw.reduce_sum(iou) / (tw.reduce_sum(tw.cast(valid, "float32")) + backend.epsilon())

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes, "target_class_ids": self.target_class_ids,
                "ignore_class": self.ignore_class, "sparse_y_true": self.sparse_y_true,
                "sparse_y_pred": self.sparse_y_pred, "axis": self.axis}


class BinaryIoU(IoU):
    """IoU of binary predictions thresholded at ``threshold`` (``>=``), over classes 0 and 1.

    >>> m = BinaryIoU(target_class_ids=[1], threshold=0.5)
    >>> m.update_state([0, 1, 1], [0.2, 0.6, 0.4])
    >>> round(float(m.result()), 4)
    0.5
    """

    def __init__(self, target_class_ids=(0, 1), threshold=0.5, name=None, dtype=None):
        super().__init__(num_classes=2, target_class_ids=target_class_ids, name=name, dtype=dtype)
        self.threshold = threshold

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_pred = tw.cast(tw.cast(y_pred, "float32") >= self.threshold, self.dtype)
        return super().update_state(tw.cast(y_true, self.dtype), y_pred, sample_weight)

    def get_config(self):
        return {"target_class_ids": self.target_class_ids, "threshold": self.threshold, "name": self.name,
                "dtype": self.dtype}


class MeanIoU(IoU):
    """The mean IoU over all ``num_classes`` classes."""

    def __init__(self, num_classes, name=None, dtype=None, ignore_class=None, sparse_y_true=True, sparse_y_pred=True,
                 axis=-1):
        super().__init__(num_classes, list(range(num_classes)), name=name, dtype=dtype, ignore_class=ignore_class,
                         sparse_y_true=sparse_y_true, sparse_y_pred=sparse_y_pred, axis=axis)

    def get_config(self):
        config = super().get_config()
        config.pop("target_class_ids")
        return config


class OneHotIoU(IoU):
    """:class:`IoU` of one-hot labels (and, unless ``sparse_y_pred``, per-class scores)."""

    def __init__(self, num_classes, target_class_ids, name=None, dtype=None, ignore_class=None, sparse_y_pred=False,
                 axis=-1):
        super().__init__(num_classes, target_class_ids, name=name, dtype=dtype, ignore_class=ignore_class,
                         sparse_y_true=False, sparse_y_pred=sparse_y_pred, axis=axis)

    def get_config(self):
        config = super().get_config()
        config.pop("sparse_y_true")
        return config


class OneHotMeanIoU(MeanIoU):
    """:class:`MeanIoU` of one-hot labels (and, unless ``sparse_y_pred``, per-class scores)."""

    def __init__(self, num_classes, name=None, dtype=None, ignore_class=None, sparse_y_pred=False, axis=-1):
        super().__init__(num_classes, name=name, dtype=dtype, ignore_class=ignore_class, sparse_y_true=False,
                         sparse_y_pred=sparse_y_pred, axis=axis)

    def get_config(self):
        config = super().get_config()
        config.pop("sparse_y_true")
        return config
