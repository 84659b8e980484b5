"""Fused recurrent ops: a whole sequence of LSTM, GRU or simple-RNN steps in one node.

Each primitive runs every time step inside one kernel (the input projection ``x @ kernel``
for all steps as one GEMM, then per step only ``h @ recurrent_kernel`` and the gate math),
and its gradient is a second primitive (``...SequenceGrad``) that runs backpropagation
through time in one kernel too. The forward op leaves what the backward needs (gate
activations and the state sequence) in an opaque ``reserve_space`` output of bytes (as
cuDNN does; ``[batch, time, bytes]``, so a batch split splits it too); being integer-typed it
never receives a gradient, so autodiff allocates no zeros for it.

The equations and conventions are Keras 3's:

* LSTM, gate order ``(i, f, c, o)``: ``z = x @ W + h @ U + b``; ``i, f, o = ract(z_i, z_f, z_o)``;
  ``c' = f * c + i * act(z_c)``; ``h' = o * act(c')``.
* GRU, gate order ``(z, r, h)``, two bias vectors (``bias[0]`` input, ``bias[1]`` recurrent):
  ``z, r = ract(x W_zr + b_zr + h U_zr + rb_zr)``; with ``reset_after`` (Keras 3's default)
  ``hh = act(x W_h + b_h + r * (h U_h + rb_h))``, else ``hh = act(x W_h + b_h + (r * h) U_h + rb_h)``
  (Keras has no recurrent bias then: pass zeros); ``h' = z * h + (1 - z) * hh``.
* SimpleRNN: ``h' = act(x @ W + b + h @ U)``.
* ``mask`` (``[batch, time]``, True = use the step): at a masked step the states carry over
  and the output repeats the previous output (zeros before the first one), or is zero with
  ``zero_output_for_mask`` (as ``keras.layers.RNN``).
* ``go_backwards`` processes the time steps last to first; outputs are in processed order.

The activations a fused kernel supports are ``tanh``, ``sigmoid``, ``relu``, ``linear`` and
``hard_sigmoid`` (their derivatives follow from their outputs); layers fall back to a
step-by-step loop of ordinary ops for anything else.

>>> import numpy as np, tensorweave as tw
>>> from tensorweave.ops.rnn_ops import lstm_sequence
>>> x = tw.ones([2, 5, 3])
>>> h0 = c0 = tw.zeros([2, 4])
>>> out, h, c = lstm_sequence(x, h0, c0, tw.ones([3, 16]) * 0.1, tw.zeros([4, 16]), tw.zeros([16]))
>>> out.shape, h.shape, bool(np.allclose(out.numpy()[:, -1], h.numpy()))
(TensorShape([2, 5, 4]), TensorShape([2, 4]), True)
"""
from tensorweave.core import dtypes as _dt
from tensorweave.core import sbp_rules
from tensorweave.core.convert import convert_like, convert_to_tensor
from tensorweave.core.dispatch import execute
from tensorweave.core.registry import get_op, register_op
from tensorweave.core.sbp import B, P, S
from tensorweave.core.shape import TensorShape, fmt
from tensorweave.core.tensor import Tensor

__all__ = ["lstm_sequence", "gru_sequence", "simple_rnn_sequence", "FUSED_ACTIVATIONS"]

FUSED_ACTIVATIONS = ("tanh", "sigmoid", "relu", "linear", "hard_sigmoid")
_FLOAT = (_dt.float16, _dt.bfloat16, _dt.float32, _dt.float64)

# Columns of the reserve space per unit (one row per time step and batch element).
LSTM_RESERVE = 7   # i, f, g, o (activated), act(c'), and the c and h states entering the step
GRU_RESERVE = 5    # z, r, hh, h @ U_h + rb_h (reset_after) or r * h, and the h state entering the step
SIMPLE_RESERVE = 2  # the activation, and the h state entering the step


def work_dtype(dtype):
    """The dtype a kernel computes in: float32 for float16/bfloat16."""
    return _dt.float32 if dtype in (_dt.float16, _dt.bfloat16) else dtype


# ---- shape rules ------------------------------------------------------------------------------
class _Dims:
    """Collects named dimensions from several inputs and reports the first conflict."""

    def __init__(self, op):
        self.op = op
        self.values = {}
        self.sources = {}

    def see(self, name, value, source):
        if value is None:
            return
        old = self.values.get(name)
        if old is not None and old != value:
            raise ValueError(f"{self.op}: {self.sources[name]} says {name}={old} but {source} says "
                             f"{name}={value}")
        self.values[name] = value
        self.sources.setdefault(name, source)

    def get(self, name):
        return self.values.get(name)


def _check_rank(t, rank, what, op):
    if t.shape.rank is not None and t.shape.rank != rank:
        raise ValueError(f"{op}: {what} must have rank {rank}, got shape {fmt(t.shape)}")
    return t.shape.as_list() if t.shape.rank is not None else [None] * rank


def _gates_dim(d, n):
    return None if d is None else (d // n if d % n == 0 else -1)


def _infer_common(op, inputs, n_gates, names, n_states):
    """Checks the forward op's inputs. ``names`` labels inputs after ``x`` and the states."""
    x = inputs[0]
    if x.dtype not in _FLOAT:
        raise TypeError(f"{op} does not support dtype {x.dtype.name}; expected one of: "
                        f"{', '.join(d.name for d in _FLOAT)}")
    d = _Dims(op)
    b, t, f = _check_rank(x, 3, "x ([batch, time, features])", op)
    d.see("batch", b, "x")
    d.see("time", t, "x")
    d.see("features", f, "x")
    for i in range(1, 1 + n_states):
        s = inputs[i]
        bs, us = _check_rank(s, 2, f"{names[i]} ([batch, units])", op)
        d.see("batch", bs, names[i])
        d.see("units", us, names[i])
    rest = inputs[1 + n_states:]
    kernel, rec = rest[0], rest[1]
    kf, kg = _check_rank(kernel, 2, f"kernel ([features, {n_gates} * units])", op)
    d.see("features", kf, "kernel")
    ug = _gates_dim(kg, n_gates)
    if ug == -1:
        raise ValueError(f"{op}: kernel's second dimension ({kg}) must be {n_gates} * units")
    d.see("units", ug, "kernel")
    ru, rg = _check_rank(rec, 2, f"recurrent_kernel ([units, {n_gates} * units])", op)
    d.see("units", ru, "recurrent_kernel")
    rug = _gates_dim(rg, n_gates)
    if rug == -1:
        raise ValueError(f"{op}: recurrent_kernel's second dimension ({rg}) must be {n_gates} * units")
    d.see("units", rug, "recurrent_kernel")
    for t_ in [x] + list(inputs[1:1 + n_states]) + [kernel, rec]:
        if t_.dtype is not x.dtype:
            raise TypeError(f"{op}: all inputs but the mask must have x's dtype {x.dtype.name}, got "
                            f"{t_.dtype.name}")
    return d, rest[2:]


def _check_bias(d, op, bias, n_gates, what="bias"):
    (g,) = _check_rank(bias, 1, f"{what} ([{n_gates} * units])", op)
    u = _gates_dim(g, n_gates)
    if u == -1:
        raise ValueError(f"{op}: {what} must have {n_gates} * units elements, got {g}")
    d.see("units", u, what)


def _check_mask(d, op, extra):
    if not extra:
        return
    mask = extra[0]
    if mask.dtype is not _dt.bool_:
        raise TypeError(f"{op}: mask must be bool, got {mask.dtype.name}")
    b, t = _check_rank(mask, 2, "mask ([batch, time])", op)
    d.see("batch", b, "mask")
    d.see("time", t, "mask")


def _outputs(d, x, n_states, reserve):
    b, t, u = d.get("batch"), d.get("time"), d.get("units")
    dt, wd = x.dtype, work_dtype(x.dtype)
    width = None if u is None else u * reserve * wd.size
    return ([(TensorShape([b, t, u]), dt)] + [(TensorShape([b, u]), dt)] * n_states
            + [(TensorShape([b, t, width]), _dt.uint8)])


def _infer_lstm(inputs, attrs):
    d, extra = _infer_common("LSTMSequence", inputs, 4, ["x", "h0", "c0"], 2)
    _check_bias(d, "LSTMSequence", extra[0], 4)
    _check_mask(d, "LSTMSequence", extra[1:])
    return _outputs(d, inputs[0], 2, LSTM_RESERVE)


def _infer_gru(inputs, attrs):
    d, extra = _infer_common("GRUSequence", inputs, 3, ["x", "h0"], 1)
    _check_bias(d, "GRUSequence", extra[0], 3, "input_bias")
    _check_bias(d, "GRUSequence", extra[1], 3, "recurrent_bias")
    _check_mask(d, "GRUSequence", extra[2:])
    return _outputs(d, inputs[0], 1, GRU_RESERVE)


def _infer_simple(inputs, attrs):
    d, extra = _infer_common("SimpleRNNSequence", inputs, 1, ["x", "h0"], 1)
    _check_bias(d, "SimpleRNNSequence", extra[0], 1)
    _check_mask(d, "SimpleRNNSequence", extra[1:])
    return _outputs(d, inputs[0], 1, SIMPLE_RESERVE)


def _infer_grad(n_states, n_biases, n_gates):
    """Gradient ops take (x, states..., kernel, recurrent_kernel, reserve, grads..., [mask]) and
    return the gradients of (x, states..., kernel, recurrent_kernel, biases...)."""
    def infer(inputs, attrs):
        x = inputs[0]
        specs = [(t.shape, t.dtype) for t in inputs[:3 + n_states]]
        g = inputs[2 + n_states].shape
        bias = TensorShape([g[1] if g.rank == 2 else None])
        return specs + [(bias, x.dtype)] * n_biases
    return infer


# ---- gradients --------------------------------------------------------------------------------
def _grad_rule(grad_op, n_states, n_biases):
    def grad(op, *grads):
        n_in = 3 + n_states + n_biases      # x, states, kernel, recurrent kernel, biases
        inputs = list(op.inputs)
        mask = inputs[n_in:]
        reserve = op.outputs[-1]
        out_grads = list(grads[:1 + n_states])
        args = inputs[:1 + n_states] + inputs[1 + n_states:3 + n_states] + [reserve] + out_grads + mask
        res = execute(get_op(grad_op), args, op.attrs)
        return list(res) + [None] * len(mask)
    return grad


def _no_second_order(op_name):
    def no_second_order(op, *grads):
        raise LookupError(f"{op_name} (backpropagation through time of a fused recurrent op) has no gradient of "
                          "its own, so second derivatives of fused RNN layers are not available. Hint: build the "
                          "recurrence from ordinary ops (keras.layers.RNN over a cell with a custom activation) "
                          "for higher-order derivatives.")
    return no_second_order


# ---- SBP rules (core/sbp.py) ------------------------------------------------------------------
# Batch elements are independent: a batch split (x, states, mask, the reserve and the output
# gradients S(0), weights B) runs each rank's rows, uneven ones too (the reserve is
# [batch, time, columns * itemsize] bytes); the weight gradients are sums over the batch (P).
# Units are not split (each step's h @ recurrent_kernel needs all of h), nor time (the
# recurrence is sequential); P does not pass (the gates are not linear).
def _sequence_sbp(n_states, n_biases):
    def fn(inputs, attrs):
        n_mask = len(inputs) - (3 + n_states + n_biases)
        yield ([S(0)] * (1 + n_states) + [B] * (2 + n_biases) + [S(0)] * n_mask, [S(0)] * (2 + n_states))
    return sbp_rules.signatures(fn, 2 + n_states)


def _sequence_grad_sbp(n_states, n_biases):
    def fn(inputs, attrs):
        n_mask = len(inputs) - (5 + 2 * n_states)
        yield ([S(0)] * (1 + n_states) + [B, B] + [S(0)] * (2 + n_states + n_mask),
               [S(0)] * (1 + n_states) + [P] * (2 + n_biases))
    return sbp_rules.signatures(fn, 3 + n_states + n_biases)


register_op("LSTMSequence", infer=_infer_lstm, num_outputs=4, heavy=True,
            grad=_grad_rule("LSTMSequenceGrad", 2, 1), sbp=_sequence_sbp(2, 1))
register_op("LSTMSequenceGrad", infer=_infer_grad(2, 1, 4), num_outputs=6, heavy=True,
            grad=_no_second_order("LSTMSequenceGrad"), sbp=_sequence_grad_sbp(2, 1))
register_op("GRUSequence", infer=_infer_gru, num_outputs=3, heavy=True,
            grad=_grad_rule("GRUSequenceGrad", 1, 2), sbp=_sequence_sbp(1, 2))
register_op("GRUSequenceGrad", infer=_infer_grad(1, 2, 3), num_outputs=6, heavy=True,
            grad=_no_second_order("GRUSequenceGrad"), sbp=_sequence_grad_sbp(1, 2))
register_op("SimpleRNNSequence", infer=_infer_simple, num_outputs=3, heavy=True,
            grad=_grad_rule("SimpleRNNSequenceGrad", 1, 1), sbp=_sequence_sbp(1, 1))
register_op("SimpleRNNSequenceGrad", infer=_infer_grad(1, 1, 1), num_outputs=5, heavy=True,
            grad=_no_second_order("SimpleRNNSequenceGrad"), sbp=_sequence_grad_sbp(1, 1))


# ---- public functions -------------------------------------------------------------------------
def _activation(name, what):
    if name is None:
        name = "linear"
    if name not in FUSED_ACTIVATIONS:
        raise ValueError(f"Fused recurrent ops support the {what} {', '.join(FUSED_ACTIVATIONS)}; got {name!r}. "
                         "Hint: keras.layers.RNN over a cell runs any activation step by step")
    return name


def _inputs(x, tensors, mask):
    x = convert_to_tensor(x)
    out = [x]
    for t in tensors:
        # variables read as tensors; Python and NumPy values take x's dtype
        out.append(convert_to_tensor(t) if isinstance(t, Tensor) or getattr(t, "_is_variable", False)
                   else convert_like(t, x))
    if mask is not None:
        from tensorweave.ops import math_ops as m
        mask = convert_to_tensor(mask)
        if mask.dtype is not _dt.bool_:
            mask = m.not_equal(mask, m.cast(convert_to_tensor(0), mask.dtype))
        out.append(mask)
    return out


def _attrs(activation, go_backwards, zero_output_for_mask, **extra):
    a = {"activation": _activation(activation, "activations"), "go_backwards": bool(go_backwards),
         "zero_output_for_mask": bool(zero_output_for_mask)}
    a.update(extra)
    return a


def lstm_sequence(x, h0, c0, kernel, recurrent_kernel, bias, mask=None, activation="tanh",
                  recurrent_activation="sigmoid", go_backwards=False, zero_output_for_mask=False, name=None):
    """Runs an LSTM over ``x`` (``[batch, time, features]``); returns ``(outputs, h, c)``:
    every step's output ``[batch, time, units]`` (in processed order) and the final states.

    ``kernel`` is ``[features, 4 * units]``, ``recurrent_kernel`` ``[units, 4 * units]``,
    ``bias`` ``[4 * units]``, gates in Keras' order ``(i, f, c, o)``.

    >>> import tensorweave as tw
    >>> out, h, c = lstm_sequence(tw.ones([1, 2, 1]), tw.zeros([1, 1]), tw.zeros([1, 1]),
    ...                           tw.ones([1, 4]), tw.zeros([1, 4]), tw.zeros([4]))
    >>> round(float(c[0, 0]), 4)   # i = f = o = sigmoid(1), g = tanh(1); c = f * (i * g) + i * g
    0.9638
    """
    inputs = _inputs(x, [h0, c0, kernel, recurrent_kernel, bias], mask)
    attrs = _attrs(activation, go_backwards, zero_output_for_mask,
                   recurrent_activation=_activation(recurrent_activation, "recurrent activations"))
    out, h, c, _ = execute(get_op("LSTMSequence"), inputs, attrs, name)
    return out, h, c


def gru_sequence(x, h0, kernel, recurrent_kernel, input_bias, recurrent_bias, mask=None, activation="tanh",
                 recurrent_activation="sigmoid", reset_after=True, go_backwards=False, zero_output_for_mask=False,
                 name=None):
    """Runs a GRU over ``x`` (``[batch, time, features]``); returns ``(outputs, h)``.

    ``kernel`` is ``[features, 3 * units]``, ``recurrent_kernel`` ``[units, 3 * units]``, the
    biases ``[3 * units]`` each, gates in Keras' order ``(z, r, h)``.

    >>> import tensorweave as tw
    >>> out, h = gru_sequence(tw.ones([1, 3, 2]), tw.zeros([1, 2]), tw.ones([2, 6]) * 0.1,
    ...                       tw.zeros([2, 6]), tw.zeros([6]), tw.zeros([6]))
    >>> out.shape
    TensorShape([1, 3, 2])
    """
    inputs = _inputs(x, [h0, kernel, recurrent_kernel, input_bias, recurrent_bias], mask)
    attrs = _attrs(activation, go_backwards, zero_output_for_mask, reset_after=bool(reset_after),
                   recurrent_activation=_activation(recurrent_activation, "recurrent activations"))
    out, h, _ = execute(get_op("GRUSequence"), inputs, attrs, name)
    return out, h


def simple_rnn_sequence(x, h0, kernel, recurrent_kernel, bias, mask=None, activation="tanh", go_backwards=False,
                        zero_output_for_mask=False, name=None):
    """Runs ``h = activation(x_t @ kernel + h @ recurrent_kernel + bias)`` over ``x``
    (``[batch, time, features]``); returns ``(outputs, h)``.

    >>> import tensorweave as tw
    >>> out, h = simple_rnn_sequence(tw.ones([1, 2, 1]), tw.zeros([1, 1]), tw.ones([1, 1]),
    ...                              tw.ones([1, 1]), tw.zeros([1]), activation="linear")
    >>> out.numpy().ravel().tolist()
    [1.0, 2.0]
    """
    inputs = _inputs(x, [h0, kernel, recurrent_kernel, bias], mask)
    out, h, _ = execute(get_op("SimpleRNNSequence"), inputs,
                        _attrs(activation, go_backwards, zero_output_for_mask), name)
    return out, h
