"""An optimizer argument of a canned estimator: a name, a TF1 optimizer, or a callable returning one."""
import math

from tensorweave.compat import v1_train

_BY_NAME = {
    "Adagrad": lambda lr: v1_train.AdagradOptimizer(lr),
    "Adam": lambda lr: v1_train.AdamOptimizer(lr),
    "Ftrl": lambda lr: v1_train.FtrlOptimizer(lr),
    "RMSProp": lambda lr: v1_train.RMSPropOptimizer(lr),
    "SGD": lambda lr: v1_train.GradientDescentOptimizer(lr),
}


def linear_learning_rate(num_feature_columns):
    """TF1's default learning rate of a linear model's Ftrl: ``min(0.2, 1 / sqrt(#columns))``."""
    return min(0.2, 1.0 / math.sqrt(num_feature_columns))


def get_optimizer(opt, learning_rate, what):
    """The TF1 optimizer ``opt`` stands for (names use ``learning_rate``)."""
    if isinstance(opt, str):
        if opt not in _BY_NAME:
            raise ValueError(f"{what}: unsupported optimizer name {opt!r}; use one of {sorted(_BY_NAME)} or an "
                             f"optimizer instance")
        return _BY_NAME[opt](learning_rate)
    if callable(opt) and not isinstance(opt, v1_train.Optimizer):
        opt = opt()
    if not isinstance(opt, v1_train.Optimizer):
        raise ValueError(f"{what}: the optimizer must be a name, a tf.train.Optimizer or a callable returning one, "
                         f"got {type(opt).__name__}")
    return opt
