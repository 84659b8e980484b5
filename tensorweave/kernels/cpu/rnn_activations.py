"""Compiled building blocks of the fused recurrent kernels (``lstm_kernels.py``,
``gru_kernels.py``, ``simple_rnn_kernels.py``): activations, their derivatives, row copies.

An activation is named by a small integer code (``CODES``) so that one compiled step
function serves every combination; each helper branches on the code *outside* its loop, so
every loop body is branch-free and LLVM vectorizes it.

float32 ``tanh`` (and the sigmoid built on it) uses Eigen's clamped rational approximation
(error under 3e-7, well inside float32 test tolerances): numba has no vectorized ``tanh``
without Intel's SVML, and the scalar libm call costs ~35 ns, which would make the activations
cost more than the GEMMs. float64 keeps libm's ``math.tanh``, so float64 results (the ones
finite-difference gradient checks use) stay exact. NaN propagates through both.

The derivatives are functions of the activation's *output*, as backpropagation reads the
saved gate activations.

>>> import numpy as np
>>> from tensorweave.kernels.cpu.rnn_activations import CODES, activate
>>> v = np.array([-1.0, 0.0, 2.0], np.float32)
>>> activate(CODES["relu"], v, 0, 3)
>>> v.tolist()
[0.0, 0.0, 2.0]
"""
import math

import numpy as np
from numba.core import types
from numba.extending import overload

from tensorweave.kernels.cpu.jit import njit

TANH, SIGMOID, RELU, LINEAR, HARD_SIGMOID = range(5)
CODES = {"tanh": TANH, "sigmoid": SIGMOID, "relu": RELU, "linear": LINEAR, "hard_sigmoid": HARD_SIGMOID}

_CLAMP32 = np.float32(7.90531110763549805)   # tanh rounds to +-1 in float32 beyond this


def tanh(x):
    """``tanh`` inside compiled code: the rational approximation for float32, libm otherwise."""
    return math.tanh(x)


def _tanh_f32(x):
    # written as ifs, not min/max, so that NaN passes through unclamped
    if x > _CLAMP32:
        x = _CLAMP32
    if x < -_CLAMP32:
        x = -_CLAMP32
    x2 = x * x
    p = x2 * np.float32(-2.76076847742355e-16) + np.float32(2.00018790482477e-13)
    p = x2 * p + np.float32(-8.60467152213735e-11)
    p = x2 * p + np.float32(5.12229709037114e-08)
    p = x2 * p + np.float32(1.48572235717979e-05)
    p = x2 * p + np.float32(6.37261928875436e-04)
    p = x2 * p + np.float32(4.89352455891786e-03)
    q = x2 * np.float32(1.19825839466702e-06) + np.float32(1.18534705686654e-04)
    q = x2 * q + np.float32(2.26843463243900e-03)
    q = x2 * q + np.float32(4.89352518554385e-03)
    return x * p / q


@overload(tanh)
def _tanh_overload(x):
    if x == types.float32:
        return _tanh_f32
    return lambda x: math.tanh(x)


@njit
def activate(code, v, lo, hi):
    """``v[lo:hi] = act(v[lo:hi])`` in place (``v`` one-dimensional)."""
    # loops run over a slice from 0: an index numba cannot prove non-negative gets a
    # wraparound check that keeps LLVM from vectorizing the loop
    w = v[lo:hi]
    half = v.dtype.type(0.5)
    zero = v.dtype.type(0)
    one = v.dtype.type(1)
    if code == TANH:
        for j in range(w.size):
            w[j] = tanh(w[j])
    elif code == SIGMOID:                      # 0.5 tanh(x / 2) + 0.5, as the NumPy kernels
        for j in range(w.size):
            w[j] = half * tanh(half * w[j]) + half
    elif code == RELU:
        for j in range(w.size):
            x = w[j]
            w[j] = zero if x < zero else x     # NaN stays NaN, as np.maximum
    elif code == HARD_SIGMOID:
        sixth = v.dtype.type(1.0 / 6.0)
        for j in range(w.size):
            x = w[j] * sixth + half
            if x < zero:
                x = zero
            if x > one:
                x = one
            w[j] = x


@njit
def derivative(code, y, out):
    """``out = act'`` as a function of the activation's outputs ``y`` (same length)."""
    one = y.dtype.type(1)
    zero = y.dtype.type(0)
    if code == TANH:
        for j in range(y.size):
            v = y[j]
            out[j] = one - v * v
    elif code == SIGMOID:
        for j in range(y.size):
            v = y[j]
            out[j] = (one - v) * v
    elif code == RELU:
        for j in range(y.size):
            out[j] = one if y[j] > zero else zero
    elif code == HARD_SIGMOID:
        sixth = y.dtype.type(1.0 / 6.0)
        for j in range(y.size):
            v = y[j]
            out[j] = sixth if (v > zero and v < one) else zero
    else:
        for j in range(y.size):
            out[j] = one


# ---- row copies ---------------------------------------------------------------------------------
# numba lowers a slice assignment ``a[:] = b`` to a generic strided loop that first checks
# whether the two overlap (copying through a temporary if so); these plain loops vectorize.
@njit
def copy_into(dst, src):
    """``dst[:] = src`` for one-dimensional arrays of equal length that do not overlap."""
    for j in range(dst.size):
        dst[j] = src[j]


@njit
def fill(dst, value):
    """``dst[:] = value`` for a one-dimensional array."""
    v = dst.dtype.type(value)
    for j in range(dst.size):
        dst[j] = v


# ---- masked steps, shared by the three recurrences ------------------------------------------------
@njit
def repeat_output(ob, out, b, s, zero_output):
    """Output of a masked step: zeros, or the previous output repeated (Keras' rule)."""
    if zero_output or s == 0:
        fill(ob, 0)
    else:
        copy_into(ob, out[b, s - 1])


@njit
def output_gradient(dht, dout, dhb, cy, masked, zero_output):
    """Gradient reaching a step's output state. A masked step passes its output gradient
    on to the step whose output it repeated (``cy`` accumulates it) and returns False; an
    unmasked one writes ``dht = dout + dh (+ carried)`` and returns True."""
    if masked:
        if not zero_output:
            for j in range(cy.size):
                cy[j] += dout[j]
        return False
    if zero_output:
        for j in range(dht.size):
            dht[j] = dout[j] + dhb[j]
    else:
        for j in range(dht.size):
            dht[j] = dout[j] + dhb[j] + cy[j]
        fill(cy, 0)
    return True
