"""``tw.math``: elementwise math, reductions, scans and segment ops under TensorFlow's ``tf.math`` names."""
from tensorweave.ops.math_ops import (abs, add, add_n, atan, atan2, ceil, cos, divide, divide as truediv,  # noqa: F401,A004
                                      div_no_nan, div_no_nan as divide_no_nan, equal, erf, exp, expm1, floor,
                                      floordiv, floormod, greater, greater_equal, is_finite, is_inf, is_nan, less,
                                      less_equal, log, log1p, logical_and, logical_not, logical_or, logical_xor,
                                      maximum, minimum, multiply, multiply_no_nan, negative, not_equal, pow,
                                      reciprocal, rint, round, rsqrt, sigmoid, sign, sin, softplus, sqrt, square,
                                      squared_difference, subtract, tan, tanh, truncatediv, truncatemod, xdivy,
                                      xlog1py, xlogy)
from tensorweave.ops.math_ops import floormod as mod  # noqa: F401
from tensorweave.ops.reduce_ops import (argmax, argmin, count_nonzero, reduce_all, reduce_any,  # noqa: F401
                                        reduce_euclidean_norm, reduce_logsumexp, reduce_max, reduce_mean,
                                        reduce_min, reduce_prod, reduce_std, reduce_sum, reduce_variance)
from tensorweave.ops.nn_ops import l2_normalize, log_softmax, softmax  # noqa: F401
from tensorweave.ops.array_ops import unsorted_segment_sum  # noqa: F401
from tensorweave.ops.special_ops import *  # noqa: F401,F403
from tensorweave.ops.segment_ops import *  # noqa: F401,F403
from tensorweave.ops.sort_ops import *  # noqa: F401,F403
from tensorweave.ops.math_extra_ops import *  # noqa: F401,F403
from tensorweave.ops.misc_ops import scalar_mul  # noqa: F401
from tensorweave.ops.nn_extra_ops import approx_max_k, approx_min_k  # noqa: F401
from tensorweave.ops.complex_ops import angle, conj, imag, real  # noqa: E402,F401

from tensorweave.core.signatures import check_namespace as _check_namespace  # noqa: E402
_check_namespace(globals())
