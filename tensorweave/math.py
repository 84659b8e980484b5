"""``tw.math``: elementwise math and reductions under TensorFlow's ``tf.math`` names."""
from tensorweave.ops.math_ops import (abs, add, add_n, atan, ceil, cos, divide, divide as truediv,  # noqa: F401,A004
                                      div_no_nan, equal, erf, exp, expm1, floor, floordiv, floormod,
                                      greater, greater_equal, is_finite, is_inf, is_nan, less, less_equal,
                                      log, log1p, logical_and, logical_not, logical_or, logical_xor,
                                      maximum, minimum, multiply, negative, not_equal, pow, reciprocal,
                                      round, rsqrt, sigmoid, sign, sin, softplus, sqrt, square,
                                      squared_difference, subtract, tan, tanh)
from tensorweave.ops.math_ops import floormod as mod  # noqa: F401
from tensorweave.ops.reduce_ops import (argmax, argmin, count_nonzero, reduce_all, reduce_any,  # noqa: F401
                                        reduce_logsumexp, reduce_max, reduce_mean, reduce_min,
                                        reduce_prod, reduce_std, reduce_sum, reduce_variance)
from tensorweave.ops.nn_ops import log_softmax, softmax  # noqa: F401
from tensorweave.ops.sort_ops import *  # noqa: F401,F403
from tensorweave.ops.complex_ops import angle, conj, imag, real  # noqa: E402,F401

from tensorweave.core.signatures import check_namespace as _check_namespace  # noqa: E402
_check_namespace(globals())
