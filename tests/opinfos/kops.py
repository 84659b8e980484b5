"""OpInfos for the TF2/Keras names of issue 16's second ops pass (keras.activations, tf.nn,
tf.linalg and top-level tf names); each reference is written from the op's definition in NumPy."""
import numpy as np

import tensorweave as tw
from tensorweave.keras import activations
from opinfo import FLOATS, OpInfo, as_bf16_safe, unary_samples

HALF_TOL = {tw.float16: (2e-2, 2e-2), tw.bfloat16: (5e-2, 5e-2)}


def _same(fn):
    return as_bf16_safe(lambda *a, **k: np.asarray(fn(*a, **k)).astype(np.asarray(a[0]).dtype))


def _mish(x):
    x = x.astype(np.float64)
    return x * np.tanh(np.logaddexp(0.0, x))


OPS = [
    OpInfo("keras.activations.mish", activations.mish, _same(_mish), FLOATS, unary_samples(-4, 4), grad_order=2,
           tol=HALF_TOL),
]
