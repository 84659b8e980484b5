"""Keras 3's "X at Y" metrics: the best value of one rate among the thresholds where another
rate reaches a constraint: ``SensitivityAtSpecificity``, ``SpecificityAtSensitivity``,
``PrecisionAtRecall``, ``RecallAtPrecision``. Counts are kept at ``num_thresholds`` evenly
spaced thresholds in [0, 1] (one, 0.5, when ``num_thresholds=1``) by the confusion-matrix
helper the other confusion metrics use.

>>> m = PrecisionAtRecall(recall=0.5)
>>> m.update_state([0, 0, 1, 1], [0.1, 0.6, 0.4, 0.9])
>>> round(float(m.result()), 4)
1.0
"""
from tensorweave.keras.metrics.confusion_metrics import FN, FP, TN, TP, update_confusion_matrix_variables
from tensorweave.keras.metrics.metric import Metric, updates
from tensorweave.ops import array_ops as A
from tensorweave.ops import math_ops as M
from tensorweave.ops import reduce_ops as R


class _ConstrainedBase(Metric):
    _direction = "up"
    _value_name = None          # the constructor argument holding the constraint

    def __init__(self, value, num_thresholds=200, class_id=None, name=None, dtype=None):
        if not 0 <= value <= 1:
            raise ValueError(f"Argument `{self._value_name}` must be in the range [0, 1]. "
                             f"Received: {self._value_name}={value}")
        if num_thresholds <= 0:
            raise ValueError(f"Argument `num_thresholds` must be an integer > 0. Received: num_thresholds={num_thresholds}")
        super().__init__(name=name, dtype=dtype)
        self.value, self.num_thresholds, self.class_id = value, num_thresholds, class_id
        if num_thresholds == 1:
            self.thresholds, self._evenly = [0.5], False
        else:
            self.thresholds = [0.0] + [(i + 1) / (num_thresholds - 1) for i in range(num_thresholds - 2)] + [1.0]
            self._evenly = True
        n = len(self.thresholds)
        self.true_positives = self.add_variable((n,), name="true_positives")
        self.false_positives = self.add_variable((n,), name="false_positives")
        self.true_negatives = self.add_variable((n,), name="true_negatives")
        self.false_negatives = self.add_variable((n,), name="false_negatives")

    def update_state(self, y_true, y_pred, sample_weight=None):
        cells = {TP: self.true_positives, FP: self.false_positives, TN: self.true_negatives,
                 FN: self.false_negatives}
        return updates(*update_confusion_matrix_variables(cells, y_true, y_pred, self.thresholds,
                                                          class_id=self.class_id, sample_weight=sample_weight,
                                                          thresholds_distributed_evenly=self._evenly, name=self.name))

    def _rates(self):
        tp, fp = self.true_positives.value(), self.false_positives.value()
        tn, fn = self.true_negatives.value(), self.false_negatives.value()
        return {"sensitivity": M.div_no_nan(tp, tp + fn), "specificity": M.div_no_nan(tn, tn + fp),
                "precision": M.div_no_nan(tp, tp + fp)}

    def _best(self, constrained, dependent):
        feasible = M.greater_equal(constrained, self.value)
        return M.maximum(R.reduce_max(M.where(feasible, dependent, A.zeros_like(dependent))), 0.0)

    def get_config(self):
        return {**super().get_config(), "class_id": self.class_id, "num_thresholds": self.num_thresholds,
                self._value_name: self.value}


class SensitivityAtSpecificity(_ConstrainedBase):
    """The best sensitivity (recall) where specificity >= ``specificity``."""
    _value_name = "specificity"

    def __init__(self, specificity, num_thresholds=200, class_id=None, name=None, dtype=None):
        super().__init__(specificity, num_thresholds, class_id, name, dtype)

    def result(self):
        r = self._rates()
        return self._best(r["specificity"], r["sensitivity"])


class SpecificityAtSensitivity(_ConstrainedBase):
    """The best specificity where sensitivity >= ``sensitivity``."""
    _value_name = "sensitivity"

    def __init__(self, sensitivity, num_thresholds=200, class_id=None, name=None, dtype=None):
        super().__init__(sensitivity, num_thresholds, class_id, name, dtype)

    def result(self):
        r = self._rates()
        return self._best(r["sensitivity"], r["specificity"])


class PrecisionAtRecall(_ConstrainedBase):
    """The best precision where recall >= ``recall``."""
    _value_name = "recall"

    def __init__(self, recall, num_thresholds=200, class_id=None, name=None, dtype=None):
        super().__init__(recall, num_thresholds, class_id, name, dtype)

    def result(self):
        r = self._rates()
        return self._best(r["sensitivity"], r["precision"])


class RecallAtPrecision(_ConstrainedBase):
    """The best recall where precision >= ``precision``."""
    _value_name = "precision"

    def __init__(self, precision, num_thresholds=200, class_id=None, name=None, dtype=None):
        super().__init__(precision, num_thresholds, class_id, name, dtype)

    def result(self):
        r = self._rates()
        return self._best(r["precision"], r["sensitivity"])
