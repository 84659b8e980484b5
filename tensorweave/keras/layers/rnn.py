"""Recurrent layers (Keras 3 arguments, defaults, weights and equations): ``SimpleRNN``, ``LSTM``,
``GRU``, the generic ``RNN(cell)`` with ``SimpleRNNCell``/``LSTMCell``/``GRUCell`` (and
``StackedRNNCells``), and the ``Bidirectional`` wrapper.

A layer whose cell is one of the built-in cells, with activations the fused kernels know
(``tanh``, ``sigmoid``, ``relu``, ``linear``, ``hard_sigmoid``) and no recurrent dropout, runs the
whole sequence as one fused op (``ops/rnn_ops.py``: one node forward, one for backpropagation
through time). Anything else (custom cells or activations, ``recurrent_dropout``) runs the cell
step by step with ordinary ops, which needs a static number of time steps.

Masks (``mask=``, or the mask an ``Embedding(mask_zero=True)`` attaches) follow Keras: at a
masked step the states carry over and the output repeats the previous output (zeros with
``zero_output_for_mask``, which ``Bidirectional`` sets when returning sequences).

>>> import numpy as np
>>> from tensorweave.keras.layers.rnn import LSTM
>>> lstm = LSTM(4, return_sequences=True, return_state=True)
>>> seq, h, c = lstm(np.ones((2, 5, 3), np.float32))
>>> seq.shape, h.shape, c.shape
(TensorShape([2, 5, 4]), TensorShape([2, 4]), TensorShape([2, 4]))
>>> [w.shape.as_list() for w in lstm.weights]
[[3, 16], [4, 16], [16]]
"""
import copy

import tensorweave as tw
from tensorweave.keras import activations, initializers, regularizers
from tensorweave.keras.engine.layer import InputSpec, Layer, positive_int
from tensorweave.ops import rnn_ops

__all__ = ["RNN", "SimpleRNNCell", "LSTMCell", "GRUCell", "StackedRNNCells", "SimpleRNN", "LSTM", "GRU",
           "Bidirectional"]


def _serialize_constraint(c):
    if c is None:
        return None
    if hasattr(c, "get_config"):
        return {"class_name": type(c).__name__, "config": c.get_config()}
    raise ValueError(f"Cannot serialize the constraint {c!r}")


def _fused_name(fn):
    """The fused-kernel name of a Keras activation function, or None."""
    try:
        name = activations.serialize(fn)
    except ValueError:
        return None
    if name in rnn_ops.FUSED_ACTIVATIONS and activations.get(name) is fn:
        return name
    return None


def _rate(value):
    return min(1.0, max(0.0, float(value)))


def _batch_zeros(batch, size, dtype):
    """Zeros ``[batch, size]`` where ``batch`` is an int or a scalar tensor (static size kept)."""
    if isinstance(batch, int):
        return tw.zeros([batch, size], dtype)
    return tw.reshape(tw.zeros(tw.stack([batch, size]), dtype), [-1, size])


def _batch_size(x):
    b = x.shape[0]
    return b if b is not None else tw.shape(x)[0]


# ---- cells --------------------------------------------------------------------------------------
class DropoutRNNCell:
    """Dropout masks made once per sequence and reused at every step (Keras' ``DropoutRNNCell``)."""

    dropout_mask_count = None

    def _create_dropout_mask(self, step_input, rate):
        ones = tw.ones_like(step_input)
        if self.dropout_mask_count is None:
            return tw.nn.dropout(ones, rate, seed=self.seed)
        return [tw.nn.dropout(ones, rate, seed=self.seed) for _ in range(self.dropout_mask_count)]

    def get_dropout_mask(self, step_input):
        if getattr(self, "_dropout_mask", None) is None and self.dropout > 0:
            self._dropout_mask = self._create_dropout_mask(step_input, self.dropout)
        return getattr(self, "_dropout_mask", None)

    def get_recurrent_dropout_mask(self, step_input):
        if getattr(self, "_recurrent_dropout_mask", None) is None and self.recurrent_dropout > 0:
            self._recurrent_dropout_mask = self._create_dropout_mask(step_input, self.recurrent_dropout)
        return getattr(self, "_recurrent_dropout_mask", None)

    def reset_dropout_mask(self):
        self._dropout_mask = None

    def reset_recurrent_dropout_mask(self):
        self._recurrent_dropout_mask = None


class _CellBase(Layer, DropoutRNNCell):
    """What the three built-in cells share: arguments, weights' config, initial state."""

    _GATES = 1
    _FUSED_OP = None

    def __init__(self, units, activation="tanh", use_bias=True, kernel_initializer="glorot_uniform",
                 recurrent_initializer="orthogonal", bias_initializer="zeros", kernel_regularizer=None,
                 recurrent_regularizer=None, bias_regularizer=None, kernel_constraint=None,
                 recurrent_constraint=None, bias_constraint=None, dropout=0.0, recurrent_dropout=0.0, seed=None,
                 **kwargs):
        units = positive_int(units, "units")
        self.implementation = kwargs.pop("implementation", 2)
        super().__init__(**kwargs)
        self.units = int(units)
        self.activation = activations.get(activation)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = initializers.get(kernel_initializer)
        self.recurrent_initializer = initializers.get(recurrent_initializer)
        self.bias_initializer = initializers.get(bias_initializer)
        self.kernel_regularizer = regularizers.get(kernel_regularizer)
        self.recurrent_regularizer = regularizers.get(recurrent_regularizer)
        self.bias_regularizer = regularizers.get(bias_regularizer)
        self.kernel_constraint = kernel_constraint
        self.recurrent_constraint = recurrent_constraint
        self.bias_constraint = bias_constraint
        self.dropout = _rate(dropout)
        self.recurrent_dropout = _rate(recurrent_dropout)
        self.seed = seed
        self.output_size = self.units

    def _add_kernels(self, input_shape):
        input_dim = input_shape[-1]
        if input_dim is None:
            raise ValueError(f"The last dimension of the inputs to '{self.name}' must be known; got input shape "
                             f"{tuple(input_shape)}")
        n = self._GATES * self.units
        self.kernel = self.add_weight(shape=(input_dim, n), name="kernel", initializer=self.kernel_initializer,
                                      regularizer=self.kernel_regularizer, constraint=self.kernel_constraint)
        self.recurrent_kernel = self.add_weight(shape=(self.units, n), name="recurrent_kernel",
                                                initializer=self.recurrent_initializer,
                                                regularizer=self.recurrent_regularizer,
                                                constraint=self.recurrent_constraint)

    def _add_bias(self, shape, initializer=None):
        if not self.use_bias:
            self.bias = None
            return
        self.bias = self.add_weight(shape=shape, name="bias", initializer=initializer or self.bias_initializer,
                                    regularizer=self.bias_regularizer, constraint=self.bias_constraint)

    def get_initial_state(self, batch_size=None):
        sizes = self.state_size if isinstance(self.state_size, (list, tuple)) else [self.state_size]
        return [_batch_zeros(batch_size, s, self._dtype) for s in sizes]

    def _fused_activations(self):
        """The fused-kernel attrs for this cell's configuration, or None to run step by step."""
        if self.recurrent_dropout > 0 or type(self).call is not type(self)._BASE_CALL:
            return None
        act = _fused_name(self.activation)
        if act is None:
            return None
        out = {"activation": act}
        if hasattr(self, "recurrent_activation"):
            ract = _fused_name(self.recurrent_activation)
            if ract is None:
                return None
            out["recurrent_activation"] = ract
        return out

    def get_config(self):
        return {**super().get_config(), "units": self.units, "activation": activations.serialize(self.activation),
                "use_bias": self.use_bias,
                "kernel_initializer": initializers.serialize(self.kernel_initializer),
                "recurrent_initializer": initializers.serialize(self.recurrent_initializer),
                "bias_initializer": initializers.serialize(self.bias_initializer),
                "kernel_regularizer": regularizers.serialize(self.kernel_regularizer),
                "recurrent_regularizer": regularizers.serialize(self.recurrent_regularizer),
                "bias_regularizer": regularizers.serialize(self.bias_regularizer),
                "kernel_constraint": _serialize_constraint(self.kernel_constraint),
                "recurrent_constraint": _serialize_constraint(self.recurrent_constraint),
                "bias_constraint": _serialize_constraint(self.bias_constraint),
                "dropout": self.dropout, "recurrent_dropout": self.recurrent_dropout, "seed": self.seed}


def _apply_masks(x, masks, training, i=None):
    """``x * mask`` (or ``x * mask[i]`` for per-gate masks) while training."""
    if not training or masks is None:
        return x
    return x * (masks[i] if isinstance(masks, list) else masks)


class SimpleRNNCell(_CellBase):
    """One step of ``h = activation(x @ kernel + bias + h_prev @ recurrent_kernel)``.

    >>> import tensorweave as tw
    >>> cell = SimpleRNNCell(3)
    >>> out, [h] = cell(tw.ones([2, 4]), [tw.zeros([2, 3])])
    >>> out.shape
    TensorShape([2, 3])
    """

    _GATES = 1

    def __init__(self, units, activation="tanh", use_bias=True, kernel_initializer="glorot_uniform",
                 recurrent_initializer="orthogonal", bias_initializer="zeros", kernel_regularizer=None,
                 recurrent_regularizer=None, bias_regularizer=None, kernel_constraint=None,
                 recurrent_constraint=None, bias_constraint=None, dropout=0.0, recurrent_dropout=0.0, seed=None,
                 **kwargs):
        super().__init__(units, activation=activation, use_bias=use_bias, kernel_initializer=kernel_initializer,
                         recurrent_initializer=recurrent_initializer, bias_initializer=bias_initializer,
                         kernel_regularizer=kernel_regularizer, recurrent_regularizer=recurrent_regularizer,
                         bias_regularizer=bias_regularizer, kernel_constraint=kernel_constraint,
                         recurrent_constraint=recurrent_constraint, bias_constraint=bias_constraint, dropout=dropout,
                         recurrent_dropout=recurrent_dropout, seed=seed, **kwargs)
        self.state_size = self.units

    def build(self, input_shape):
        self._add_kernels(input_shape)
        self._add_bias((self.units,))
        self.built = True

    def call(self, sequence, states, training=False):
        prev = states[0] if isinstance(states, (list, tuple)) else states
        dp_mask = self.get_dropout_mask(sequence)
        rec_mask = self.get_recurrent_dropout_mask(prev)
        h = tw.matmul(_apply_masks(sequence, dp_mask, training), self.kernel)
        if self.bias is not None:
            h = h + self.bias
        output = self.activation(h + tw.matmul(_apply_masks(prev, rec_mask, training), self.recurrent_kernel))
        return output, ([output] if isinstance(states, (list, tuple)) else output)


class LSTMCell(_CellBase):
    """One LSTM step, gates in Keras' order ``(i, f, c, o)``; states ``[h, c]``.

    ``unit_forget_bias=True`` (the default) initializes the forget gate's bias to ones.

    >>> import tensorweave as tw
    >>> cell = LSTMCell(2)
    >>> out, (h, c) = cell(tw.ones([1, 3]), [tw.zeros([1, 2]), tw.zeros([1, 2])])
    >>> cell.bias.numpy().tolist()
    [0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    """

    _GATES = 4

    def __init__(self, units, activation="tanh", recurrent_activation="sigmoid", use_bias=True,
                 kernel_initializer="glorot_uniform", recurrent_initializer="orthogonal", bias_initializer="zeros",
                 unit_forget_bias=True, kernel_regularizer=None, recurrent_regularizer=None, bias_regularizer=None,
                 kernel_constraint=None, recurrent_constraint=None, bias_constraint=None, dropout=0.0,
                 recurrent_dropout=0.0, seed=None, **kwargs):
        super().__init__(units, activation=activation, use_bias=use_bias, kernel_initializer=kernel_initializer,
                         recurrent_initializer=recurrent_initializer, bias_initializer=bias_initializer,
                         kernel_regularizer=kernel_regularizer, recurrent_regularizer=recurrent_regularizer,
                         bias_regularizer=bias_regularizer, kernel_constraint=kernel_constraint,
                         recurrent_constraint=recurrent_constraint, bias_constraint=bias_constraint, dropout=dropout,
                         recurrent_dropout=recurrent_dropout, seed=seed, **kwargs)
        self.recurrent_activation = activations.get(recurrent_activation)
        self.unit_forget_bias = bool(unit_forget_bias)
        if self.recurrent_dropout != 0.0:
            self.implementation = 1
        if self.implementation == 1:
            self.dropout_mask_count = 4
        self.state_size = [self.units, self.units]

    def build(self, input_shape):
        self._add_kernels(input_shape)
        init = None
        if self.use_bias and self.unit_forget_bias:
            base, u = self.bias_initializer, self.units

            def init(shape, dtype=None):
                return tw.concat([base((u,), dtype=dtype), tw.ones((u,), dtype or tw.float32),
                                  base((2 * u,), dtype=dtype)], 0)
        self._add_bias((4 * self.units,), init)
        self.built = True

    def call(self, inputs, states, training=False):
        h_tm1, c_tm1 = states[0], states[1]
        u = self.units
        if self.implementation == 1:
            dp = self.get_dropout_mask(inputs)
            rdp = self.get_recurrent_dropout_mask(h_tm1)
            z = [tw.matmul(_apply_masks(inputs, dp, training, k), self.kernel[:, k * u:(k + 1) * u])
                 + tw.matmul(_apply_masks(h_tm1, rdp, training, k), self.recurrent_kernel[:, k * u:(k + 1) * u])
                 for k in range(4)]
            if self.bias is not None:
                z = [zk + self.bias[k * u:(k + 1) * u] for k, zk in enumerate(z)]
        else:
            x = _apply_masks(inputs, self.get_dropout_mask(inputs), training)
            zz = tw.matmul(x, self.kernel) + tw.matmul(h_tm1, self.recurrent_kernel)
            if self.bias is not None:
                zz = zz + self.bias
            z = tw.split(zz, 4, axis=1)
        i = self.recurrent_activation(z[0])
        f = self.recurrent_activation(z[1])
        c = f * c_tm1 + i * self.activation(z[2])
        o = self.recurrent_activation(z[3])
        h = o * self.activation(c)
        return h, [h, c]

    def get_config(self):
        return {**super().get_config(), "recurrent_activation": activations.serialize(self.recurrent_activation),
                "unit_forget_bias": self.unit_forget_bias}


class GRUCell(_CellBase):
    """One GRU step, gates in Keras' order ``(z, r, h)``. With ``reset_after=True`` (Keras 3's
    default) the bias is ``(2, 3 * units)``: input bias, then recurrent bias.

    >>> import tensorweave as tw
    >>> cell = GRUCell(2)
    >>> out, [h] = cell(tw.ones([1, 3]), [tw.zeros([1, 2])])
    >>> cell.bias.shape.as_list()
    [2, 6]
    """

    _GATES = 3

    def __init__(self, units, activation="tanh", recurrent_activation="sigmoid", use_bias=True,
                 kernel_initializer="glorot_uniform", recurrent_initializer="orthogonal", bias_initializer="zeros",
                 kernel_regularizer=None, recurrent_regularizer=None, bias_regularizer=None, kernel_constraint=None,
                 recurrent_constraint=None, bias_constraint=None, dropout=0.0, recurrent_dropout=0.0,
                 reset_after=True, seed=None, **kwargs):
        super().__init__(units, activation=activation, use_bias=use_bias, kernel_initializer=kernel_initializer,
                         recurrent_initializer=recurrent_initializer, bias_initializer=bias_initializer,
                         kernel_regularizer=kernel_regularizer, recurrent_regularizer=recurrent_regularizer,
                         bias_regularizer=bias_regularizer, kernel_constraint=kernel_constraint,
                         recurrent_constraint=recurrent_constraint, bias_constraint=bias_constraint, dropout=dropout,
                         recurrent_dropout=recurrent_dropout, seed=seed, **kwargs)
        self.recurrent_activation = activations.get(recurrent_activation)
        self.reset_after = bool(reset_after)
        if self.recurrent_dropout != 0.0:
            self.implementation = 1
        if self.implementation == 1:
            self.dropout_mask_count = 3
        self.state_size = self.units

    def build(self, input_shape):
        self._add_kernels(input_shape)
        self._add_bias((2, 3 * self.units) if self.reset_after else (3 * self.units,))
        self.built = True

    def _biases(self):
        if self.bias is None:
            return None, None
        if self.reset_after:
            return self.bias[0], self.bias[1]
        return self.bias, None

    def call(self, inputs, states, training=False):
        nested = isinstance(states, (list, tuple))
        h_tm1 = states[0] if nested else states
        u = self.units
        input_bias, recurrent_bias = self._biases()
        k, rk = self.kernel, self.recurrent_kernel
        if self.implementation == 1:
            dp = self.get_dropout_mask(inputs)
            rdp = self.get_recurrent_dropout_mask(h_tm1)
            xs = [tw.matmul(_apply_masks(inputs, dp, training, j), k[:, j * u:(j + 1) * u]) for j in range(3)]
            if input_bias is not None:
                xs = [xj + input_bias[j * u:(j + 1) * u] for j, xj in enumerate(xs)]
            hs = [_apply_masks(h_tm1, rdp, training, j) for j in range(3)]
            rz = tw.matmul(hs[0], rk[:, :u])
            rr = tw.matmul(hs[1], rk[:, u:2 * u])
            if self.reset_after and recurrent_bias is not None:
                rz = rz + recurrent_bias[:u]
                rr = rr + recurrent_bias[u:2 * u]
            z = self.recurrent_activation(xs[0] + rz)
            r = self.recurrent_activation(xs[1] + rr)
            if self.reset_after:
                rh = tw.matmul(hs[2], rk[:, 2 * u:])
                if recurrent_bias is not None:
                    rh = rh + recurrent_bias[2 * u:]
                rh = r * rh
            else:
                rh = tw.matmul(r * hs[2], rk[:, 2 * u:])
            hh = self.activation(xs[2] + rh)
        else:
            x = _apply_masks(inputs, self.get_dropout_mask(inputs), training)
            mx = tw.matmul(x, k)
            if input_bias is not None:
                mx = mx + input_bias
            x_z, x_r, x_h = tw.split(mx, 3, axis=-1)
            if self.reset_after:
                inner = tw.matmul(h_tm1, rk)
                if recurrent_bias is not None:
                    inner = inner + recurrent_bias
            else:
                inner = tw.matmul(h_tm1, rk[:, :2 * u])
            z = self.recurrent_activation(x_z + inner[:, :u])
            r = self.recurrent_activation(x_r + inner[:, u:2 * u])
            if self.reset_after:
                rh = r * inner[:, 2 * u:]
            else:
                rh = tw.matmul(r * h_tm1, rk[:, 2 * u:])
            hh = self.activation(x_h + rh)
        h = z * h_tm1 + (1 - z) * hh
        return h, ([h] if nested else h)

    def get_config(self):
        return {**super().get_config(), "recurrent_activation": activations.serialize(self.recurrent_activation),
                "reset_after": self.reset_after}


SimpleRNNCell._BASE_CALL = SimpleRNNCell.call
LSTMCell._BASE_CALL = LSTMCell.call
GRUCell._BASE_CALL = GRUCell.call


class StackedRNNCells(Layer):
    """Cells run one after the other within a step; the states are the cells' states in order.

    >>> import tensorweave as tw
    >>> layer = RNN(StackedRNNCells([SimpleRNNCell(3), SimpleRNNCell(2)]))
    >>> layer(tw.ones([1, 4, 5])).shape
    TensorShape([1, 2])
    """

    def __init__(self, cells, **kwargs):
        cells = list(cells)
        if kwargs.get("dtype") is None and cells and isinstance(cells[0], Layer):
            kwargs["dtype"] = cells[0].dtype
        super().__init__(**kwargs)
        self.autocast = False   # a container: each cell casts its own inputs
        for cell in cells:
            if "call" not in dir(cell) or not hasattr(cell, "state_size"):
                raise ValueError(f"All cells must have a `call` method and a `state_size` attribute; got {cell}")
        self.cells = cells

    @property
    def state_size(self):
        return [s for c in self.cells for s in _sizes(c.state_size)]

    @property
    def output_size(self):
        last = self.cells[-1]
        return getattr(last, "output_size", _sizes(last.state_size)[0])

    def build(self, input_shape):
        shape = tuple(input_shape)
        for cell in self.cells:
            if isinstance(cell, Layer) and not cell.built:
                cell.build(shape)
                cell.built = True
            shape = shape[:-1] + (getattr(cell, "output_size", _sizes(cell.state_size)[0]),)
        self.built = True

    def get_initial_state(self, batch_size=None):
        out = []
        for c in self.cells:
            fn = getattr(c, "get_initial_state", None)
            out.extend(fn(batch_size) if fn else [_batch_zeros(batch_size, s, self._dtype)
                                                  for s in _sizes(c.state_size)])
        return out

    def call(self, inputs, states, training=False):
        new_states, pos = [], 0
        for cell in self.cells:
            n = len(_sizes(cell.state_size))
            own = list(states[pos:pos + n])
            pos += n
            kwargs = {"training": training} if getattr(cell, "_call_has_training", False) else {}
            inputs, st = cell(inputs, own, **kwargs)
            new_states.extend(st if isinstance(st, (list, tuple)) else [st])
        return inputs, new_states

    def get_config(self):
        return {**super().get_config(), "cells": [_serialize(c) for c in self.cells]}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        cells = [_deserialize(c, custom_objects) for c in config.pop("cells")]
        return cls(cells, **config)


def _sizes(state_size):
    return list(state_size) if isinstance(state_size, (list, tuple)) else [state_size]


def _serialize(layer):
    return {"class_name": type(layer).__name__, "config": layer.get_config()}


def _deserialize(config, custom_objects=None):
    local = {c.__name__: c for c in (SimpleRNNCell, LSTMCell, GRUCell, StackedRNNCells, RNN, SimpleRNN, LSTM, GRU,
                                     Bidirectional)}
    cls = (custom_objects or {}).get(config["class_name"]) or local.get(config["class_name"])
    if cls is None:
        from tensorweave.keras.layers import deserialize
        return deserialize(config, custom_objects=custom_objects)
    try:
        return cls.from_config(dict(config["config"]), custom_objects=custom_objects)
    except TypeError:
        return cls.from_config(dict(config["config"]))


# ---- the RNN layer ------------------------------------------------------------------------------
def _split_states(sequences, args, kwargs):
    """``layer([x, *initial_states])`` (Keras 2's form, and how a functional model rebuilt from
    its config calls a layer that had ``initial_state=``) as ``layer(x, initial_state=[...])``."""
    if isinstance(sequences, (list, tuple)) and not args and kwargs.get("initial_state") is None:
        if len(sequences) > 1:
            kwargs = dict(kwargs, initial_state=list(sequences[1:]))
        sequences = sequences[0]
    return (sequences,) + tuple(args), kwargs


class RNN(Layer):
    """Runs ``cell`` over the time axis of ``(batch, time, features)`` inputs.

    ``cell`` has ``call(inputs, states) -> (output, new_states)`` and ``state_size`` (a list of
    cells is stacked). ``unroll`` is accepted and has no effect; ``stateful=True`` is not
    supported.

    >>> import tensorweave as tw
    >>> layer = RNN(LSTMCell(4), return_sequences=True)
    >>> layer(tw.ones([2, 3, 5])).shape
    TensorShape([2, 3, 4])
    """

    def __init__(self, cell, return_sequences=False, return_state=False, go_backwards=False, stateful=False,
                 unroll=False, zero_output_for_mask=False, **kwargs):
        if isinstance(cell, (list, tuple)):
            cell = StackedRNNCells(cell)
        if "call" not in dir(cell):
            raise ValueError(f"Argument `cell` should have a `call` method. Received: cell={cell}")
        if "state_size" not in dir(cell):
            raise ValueError("The RNN cell should have a `state_size` attribute (single integer or list of integers, "
                             f"one integer per RNN state). Received: cell={cell}")
        if stateful:
            raise NotImplementedError(
                f"{type(self).__name__}(stateful=True) is not supported by tensorweave. Hint: pass the final states "
                "of one batch as `initial_state=` of the next (return_state=True gives them)")
        super().__init__(**kwargs)
        self.zero_output_for_mask = bool(zero_output_for_mask)
        self.cell = cell
        self.return_sequences = bool(return_sequences)
        self.return_state = bool(return_state)
        self.go_backwards = bool(go_backwards)
        self.stateful = False
        self.unroll = bool(unroll)
        self.supports_masking = True
        self.input_spec = InputSpec(min_ndim=3)
        self.states = None
        state_size = getattr(cell, "state_size", None)
        if state_size is None:
            raise ValueError("state_size must be specified as property on the RNN cell.")
        self.single_state = isinstance(state_size, int)

    @property
    def state_size(self):
        return _sizes(self.cell.state_size)

    def __call__(self, sequences, *args, **kwargs):
        args, kwargs = _split_states(sequences, args, kwargs)
        return super().__call__(*args, **kwargs)

    def build(self, sequences_shape, initial_state_shape=None):
        shape = tuple(sequences_shape)
        if len(shape) < 3:
            raise ValueError(f"Layer '{self.name}' ({type(self).__name__}) expects inputs of shape (batch, time, "
                             f"features); got shape {shape}")
        step_shape = (shape[0],) + shape[2:]
        if isinstance(self.cell, Layer) and not self.cell.built:
            self.cell.build(step_shape)
            self.cell.built = True
        if shape[-1] is not None:   # a later call with another feature size names this layer
            self.input_spec = InputSpec(ndim=len(shape), axes={-1: shape[-1]})
        self.built = True

    def get_initial_state(self, batch_size):
        fn = getattr(self.cell, "get_initial_state", None)
        if fn is not None:
            init = fn(batch_size=batch_size)
            return list(init) if isinstance(init, (list, tuple)) else [init]
        return [_batch_zeros(batch_size, s, self._dtype) for s in self.state_size]

    def compute_mask(self, inputs, mask=None):
        while isinstance(mask, (list, tuple)):
            mask = mask[0] if mask else None
        output_mask = mask if self.return_sequences else None
        if self.return_state:
            return [output_mask] + [None] * len(self.state_size)
        return output_mask

    # -- call --
    def _prepare(self, sequences, initial_state, mask):
        x = sequences if isinstance(sequences, tw.Tensor) else tw.convert_to_tensor(sequences)
        if x.shape.rank is not None and x.shape.rank != 3:
            raise ValueError(f"Layer '{self.name}' ({type(self).__name__}) expects inputs of rank 3 (batch, time, "
                             f"features); got shape {tuple(x.shape.as_list())}")
        while isinstance(mask, (list, tuple)):   # masks of several inputs: the sequence's comes first
            mask = mask[0] if mask else None
        if mask is not None:
            mask = tw.convert_to_tensor(mask)
            if mask.dtype is not tw.bool:
                mask = tw.not_equal(mask, tw.zeros_like(mask))
        if initial_state is None:
            states = self.get_initial_state(_batch_size(x))
        else:
            states = list(initial_state) if isinstance(initial_state, (list, tuple)) else [initial_state]
            if len(states) != len(self.state_size):
                raise ValueError(f"Layer '{self.name}' expects {len(self.state_size)} initial state(s) (state_size "
                                 f"{self.state_size}) but received {len(states)}.")
            states = [s if isinstance(s, tw.Tensor) and s.dtype is x.dtype else
                      tw.cast(tw.convert_to_tensor(s), x.dtype) for s in states]
        return x, states, mask

    def call(self, sequences, initial_state=None, mask=None, training=None):
        x, states, mask = self._prepare(sequences, initial_state, mask)
        training = bool(training)
        fused = self._fused_attrs(training)
        if fused is not None:
            last_output, outputs, states = self._fused(x, states, mask, training, fused)
        else:
            last_output, outputs, states = self._loop(x, states, mask, training)
        output = outputs if self.return_sequences else last_output
        if self.return_state:
            return (output, *states)
        return output

    def _fused_attrs(self, training):
        if not isinstance(self.cell, (LSTMCell, GRUCell, SimpleRNNCell)):
            return None
        return self.cell._fused_activations()

    def _fused(self, x, states, mask, training, attrs):
        cell = self.cell
        if training and cell.dropout > 0:
            # one mask per sequence, the same at every step (as Keras)
            x = x * tw.nn.dropout(tw.ones_like(x[:, :1, :]), cell.dropout, seed=cell.seed)
        common = dict(mask=mask, go_backwards=self.go_backwards, zero_output_for_mask=self.zero_output_for_mask,
                      **attrs)
        dt = x.dtype
        if isinstance(cell, LSTMCell):
            bias = cell.bias if cell.bias is not None else tw.zeros([4 * cell.units], dt)
            outputs, h, c = rnn_ops.lstm_sequence(x, states[0], states[1], cell.kernel, cell.recurrent_kernel, bias,
                                                  **common)
            new_states = [h, c]
        elif isinstance(cell, GRUCell):
            zeros = tw.zeros([3 * cell.units], dt)
            ib, rb = cell._biases()
            outputs, h = rnn_ops.gru_sequence(x, states[0], cell.kernel, cell.recurrent_kernel,
                                              zeros if ib is None else ib, zeros if rb is None else rb,
                                              reset_after=cell.reset_after, **common)
            new_states = [h]
        else:
            bias = cell.bias if cell.bias is not None else tw.zeros([cell.units], dt)
            outputs, h = rnn_ops.simple_rnn_sequence(x, states[0], cell.kernel, cell.recurrent_kernel, bias,
                                                     **common)
            new_states = [h]
        last = h if mask is None else outputs[:, -1]
        return last, outputs, new_states

    def _loop(self, x, states, mask, training):
        t = x.shape[1]
        if t is None:
            raise ValueError(f"Layer '{self.name}' runs its cell ({type(self.cell).__name__}) step by step, which "
                             "needs a known number of time steps; got inputs of shape "
                             f"{tuple(x.shape.as_list())}. Hint: give keras.Input a fixed sequence length, or use "
                             "built-in cells with fused activations (tanh/sigmoid/relu/linear/hard_sigmoid) and no "
                             "recurrent_dropout")
        if t == 0:
            raise ValueError(f"Layer '{self.name}' got an input with 0 time steps")
        cell = self.cell
        steps = tw.unstack(x, axis=1)
        mask_steps = tw.unstack(mask, axis=1) if mask is not None else None
        order = list(range(t))[::-1] if self.go_backwards else list(range(t))
        kwargs = {"training": training} if getattr(cell, "_call_has_training", False) else {}
        self._config_dropout_masks(cell, steps[0], states)
        try:
            outputs, prev = [], None
            for i in order:
                out, new_states = cell(steps[i], states, **kwargs)
                new_states = list(new_states) if isinstance(new_states, (list, tuple)) else [new_states]
                if mask_steps is not None:
                    m = tw.expand_dims(mask_steps[i], -1)
                    new_states = [tw.where(m, n, s) for n, s in zip(new_states, states)]
                    fill = tw.zeros_like(out) if self.zero_output_for_mask or prev is None else prev
                    out = tw.where(m, out, fill)
                outputs.append(out)
                prev, states = out, new_states
        finally:
            self._reset_dropout_masks(cell)
        return outputs[-1], tw.stack(outputs, axis=1), states

    def _config_dropout_masks(self, cell, step, states):
        # made before the loop, so every step reuses them (stacked cells make theirs at step 0)
        if isinstance(cell, DropoutRNNCell):
            cell.get_dropout_mask(step)
            cell.get_recurrent_dropout_mask(states[0])

    def _reset_dropout_masks(self, cell):
        for c in (cell.cells if isinstance(cell, StackedRNNCells) else [cell]):
            if isinstance(c, DropoutRNNCell):
                c.reset_dropout_mask()
                c.reset_recurrent_dropout_mask()

    def reset_state(self):
        pass

    reset_states = reset_state

    def get_config(self):
        return {**super().get_config(), "return_sequences": self.return_sequences,
                "return_state": self.return_state, "go_backwards": self.go_backwards, "stateful": self.stateful,
                "unroll": self.unroll, "zero_output_for_mask": self.zero_output_for_mask,
                "cell": _serialize(self.cell)}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        cell = _deserialize(config.pop("cell"), custom_objects)
        return cls(cell, **config)


# ---- SimpleRNN, LSTM, GRU -----------------------------------------------------------------------
_LAYER_ARGS = ("name", "trainable", "dtype", "input_shape", "input_dim", "batch_input_shape", "batch_size",
               "zero_output_for_mask")


class _FusedRNN(RNN):
    """A recurrent layer that owns its cell (the cell's arguments are the layer's)."""

    _CELL = None
    _CELL_NAME = None

    def __init__(self, units, return_sequences=False, return_state=False, go_backwards=False, stateful=False,
                 unroll=False, activity_regularizer=None, use_cudnn="auto", **kwargs):
        if use_cudnn not in ("auto", True, False):
            raise ValueError(f"Invalid valid received for argument `use_cudnn`. Expected one of {{'auto', True, "
                             f"False}}. Received: use_cudnn={use_cudnn}")
        layer_kwargs = {k: kwargs.pop(k) for k in _LAYER_ARGS if k in kwargs}
        cell = self._CELL(units, dtype=layer_kwargs.get("dtype"), trainable=layer_kwargs.get("trainable", True),
                          name=self._CELL_NAME, **kwargs)
        super().__init__(cell, return_sequences=return_sequences, return_state=return_state,
                         go_backwards=go_backwards, stateful=stateful, unroll=unroll, **layer_kwargs)
        self.activity_regularizer = regularizers.get(activity_regularizer)
        self.use_cudnn = use_cudnn
        self.input_spec = InputSpec(ndim=3)

    def call(self, sequences, initial_state=None, mask=None, training=None):
        out = super().call(sequences, initial_state=initial_state, mask=mask, training=training)
        if self.activity_regularizer is not None:
            self.add_loss(self.activity_regularizer(out[0] if self.return_state else out))
        return out

    def __getattr__(self, name):
        # the cell's hyper-parameters read through the layer (layer.units, layer.activation, ...)
        if name.startswith("_") or name == "cell":
            raise AttributeError(name)
        cell = self.__dict__.get("cell")
        if cell is not None and name in cell.__dict__:
            return cell.__dict__[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def get_config(self):
        config = RNN.get_config(self)
        cell_config = dict(config.pop("cell")["config"])
        for k in ("name", "trainable", "dtype"):
            cell_config.pop(k, None)
        config.update(cell_config)
        config["activity_regularizer"] = regularizers.serialize(self.activity_regularizer)
        return config

    @classmethod
    def from_config(cls, config, custom_objects=None):
        return cls(**config)


class SimpleRNN(_FusedRNN):
    """Fully-connected RNN whose output is fed back as input (Keras 3 ``SimpleRNN``).

    >>> import numpy as np
    >>> SimpleRNN(3)(np.ones((2, 4, 5), np.float32)).shape
    TensorShape([2, 3])
    """

    _CELL = SimpleRNNCell
    _CELL_NAME = "simple_rnn_cell"

    def __init__(self, units, activation="tanh", use_bias=True, kernel_initializer="glorot_uniform",
                 recurrent_initializer="orthogonal", bias_initializer="zeros", kernel_regularizer=None,
                 recurrent_regularizer=None, bias_regularizer=None, activity_regularizer=None, kernel_constraint=None,
                 recurrent_constraint=None, bias_constraint=None, dropout=0.0, recurrent_dropout=0.0,
                 return_sequences=False, return_state=False, go_backwards=False, stateful=False, unroll=False,
                 seed=None, **kwargs):
        super().__init__(units, activation=activation, use_bias=use_bias, kernel_initializer=kernel_initializer,
                         recurrent_initializer=recurrent_initializer, bias_initializer=bias_initializer,
                         kernel_regularizer=kernel_regularizer, recurrent_regularizer=recurrent_regularizer,
                         bias_regularizer=bias_regularizer, activity_regularizer=activity_regularizer,
                         kernel_constraint=kernel_constraint, recurrent_constraint=recurrent_constraint,
                         bias_constraint=bias_constraint, dropout=dropout, recurrent_dropout=recurrent_dropout,
                         return_sequences=return_sequences, return_state=return_state, go_backwards=go_backwards,
                         stateful=stateful, unroll=unroll, seed=seed, **kwargs)


class LSTM(_FusedRNN):
    """Long Short-Term Memory layer (Keras 3 ``LSTM``); runs as one fused op for the default
    activations.

    >>> import numpy as np
    >>> LSTM(4)(np.ones((32, 10, 8), np.float32)).shape
    TensorShape([32, 4])
    """

    _CELL = LSTMCell
    _CELL_NAME = "lstm_cell"

    def __init__(self, units, activation="tanh", recurrent_activation="sigmoid", use_bias=True,
                 kernel_initializer="glorot_uniform", recurrent_initializer="orthogonal", bias_initializer="zeros",
                 unit_forget_bias=True, kernel_regularizer=None, recurrent_regularizer=None, bias_regularizer=None,
                 activity_regularizer=None, kernel_constraint=None, recurrent_constraint=None, bias_constraint=None,
                 dropout=0.0, recurrent_dropout=0.0, seed=None, return_sequences=False, return_state=False,
                 go_backwards=False, stateful=False, unroll=False, use_cudnn="auto", **kwargs):
        super().__init__(units, activation=activation, recurrent_activation=recurrent_activation, use_bias=use_bias,
                         kernel_initializer=kernel_initializer, recurrent_initializer=recurrent_initializer,
                         bias_initializer=bias_initializer, unit_forget_bias=unit_forget_bias,
                         kernel_regularizer=kernel_regularizer, recurrent_regularizer=recurrent_regularizer,
                         bias_regularizer=bias_regularizer, activity_regularizer=activity_regularizer,
                         kernel_constraint=kernel_constraint, recurrent_constraint=recurrent_constraint,
                         bias_constraint=bias_constraint, dropout=dropout, recurrent_dropout=recurrent_dropout,
                         seed=seed, return_sequences=return_sequences, return_state=return_state,
                         go_backwards=go_backwards, stateful=stateful, unroll=unroll, use_cudnn=use_cudnn, **kwargs)


class GRU(_FusedRNN):
    """Gated Recurrent Unit (Keras 3 ``GRU``, ``reset_after=True`` by default); runs as one fused
    op for the default activations.

    >>> import numpy as np
    >>> seq, h = GRU(4, return_sequences=True, return_state=True)(np.ones((2, 10, 8), np.float32))
    >>> seq.shape, h.shape
    (TensorShape([2, 10, 4]), TensorShape([2, 4]))
    """

    _CELL = GRUCell
    _CELL_NAME = "gru_cell"

    def __init__(self, units, activation="tanh", recurrent_activation="sigmoid", use_bias=True,
                 kernel_initializer="glorot_uniform", recurrent_initializer="orthogonal", bias_initializer="zeros",
                 kernel_regularizer=None, recurrent_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 kernel_constraint=None, recurrent_constraint=None, bias_constraint=None, dropout=0.0,
                 recurrent_dropout=0.0, seed=None, return_sequences=False, return_state=False, go_backwards=False,
                 stateful=False, unroll=False, reset_after=True, use_cudnn="auto", **kwargs):
        super().__init__(units, activation=activation, recurrent_activation=recurrent_activation, use_bias=use_bias,
                         kernel_initializer=kernel_initializer, recurrent_initializer=recurrent_initializer,
                         bias_initializer=bias_initializer, kernel_regularizer=kernel_regularizer,
                         recurrent_regularizer=recurrent_regularizer, bias_regularizer=bias_regularizer,
                         activity_regularizer=activity_regularizer, kernel_constraint=kernel_constraint,
                         recurrent_constraint=recurrent_constraint, bias_constraint=bias_constraint, dropout=dropout,
                         recurrent_dropout=recurrent_dropout, seed=seed, return_sequences=return_sequences,
                         return_state=return_state, go_backwards=go_backwards, stateful=stateful, unroll=unroll,
                         reset_after=reset_after, use_cudnn=use_cudnn, **kwargs)


# ---- Bidirectional ------------------------------------------------------------------------------
def _removeprefix(s, prefix):
    return s[len(prefix):] if s.startswith(prefix) else s


class Bidirectional(Layer):
    """Runs ``layer`` forwards and a copy backwards over the sequence and merges the outputs
    (``merge_mode``: ``"concat"`` (default), ``"sum"``, ``"mul"``, ``"ave"``, or None for a pair).

    The forward layer is rebuilt from ``layer``'s config (its weights are not reused); the
    backward one too unless ``backward_layer`` is given. When returning sequences, masked steps
    output zeros in both directions (as Keras).

    >>> import numpy as np
    >>> Bidirectional(LSTM(3))(np.ones((2, 5, 4), np.float32)).shape
    TensorShape([2, 6])
    """

    def __init__(self, layer, merge_mode="concat", weights=None, backward_layer=None, **kwargs):
        if not isinstance(layer, Layer):
            raise ValueError(f"Please initialize `Bidirectional` layer with a `keras.layers.Layer` instance. "
                             f"Received: {layer}")
        if backward_layer is not None and not isinstance(backward_layer, Layer):
            raise ValueError(f"`backward_layer` need to be a `keras.layers.Layer` instance. Received: {backward_layer}")
        if merge_mode not in ("sum", "mul", "ave", "concat", None):
            raise ValueError(f"Invalid merge mode. Received: {merge_mode}. Merge mode should be one of "
                             '{"sum", "mul", "ave", "concat", None}')
        super().__init__(**kwargs)
        config = _serialize(layer)
        config["config"]["name"] = "forward_" + _removeprefix(layer.name, "forward_")
        if kwargs.get("dtype") is not None:   # an explicit dtype applies to the wrapped layers too
            config["config"]["dtype"] = self.dtype
        self.forward_layer = _deserialize(config)
        if backward_layer is None:
            config = copy.deepcopy(config)
            config["config"]["go_backwards"] = not layer.go_backwards
            config["config"]["name"] = "backward_" + _removeprefix(layer.name, "backward_")
            self.backward_layer = _deserialize(config)
        else:
            self.backward_layer = backward_layer
        self._verify_layer_config()
        for lyr in (self.forward_layer, self.backward_layer):
            if getattr(lyr, "zero_output_for_mask", None) is not None:
                lyr.zero_output_for_mask = lyr.return_sequences
        self.merge_mode = merge_mode
        self._initial_weights = weights
        self.stateful = layer.stateful
        self.return_sequences = layer.return_sequences
        self.return_state = layer.return_state
        self.supports_masking = True
        self.input_spec = layer.input_spec

    def __call__(self, sequences, *args, **kwargs):
        args, kwargs = _split_states(sequences, args, kwargs)
        return super().__call__(*args, **kwargs)

    def _verify_layer_config(self):
        if self.forward_layer.go_backwards == self.backward_layer.go_backwards:
            raise ValueError("Forward layer and backward layer should have different `go_backwards` value. Received: "
                             f"forward_layer.go_backwards {self.forward_layer.go_backwards}, "
                             f"backward_layer.go_backwards={self.backward_layer.go_backwards}")
        for a in ("stateful", "return_sequences", "return_state"):
            fv, bv = getattr(self.forward_layer, a), getattr(self.backward_layer, a)
            if fv != bv:
                raise ValueError(f'Forward layer and backward layer are expected to have the same value for attribute '
                                 f'"{a}", got "{fv}" for forward layer and "{bv}" for backward layer')

    def build(self, sequences_shape, initial_state_shape=None):
        if not self.forward_layer.built:
            self.forward_layer.build(sequences_shape)
            self.forward_layer.built = True
        if not self.backward_layer.built:
            self.backward_layer.build(sequences_shape)
            self.backward_layer.built = True
        self.built = True
        if self._initial_weights:
            self.set_weights(self._initial_weights)
            self._initial_weights = None

    def call(self, sequences, initial_state=None, mask=None, training=None):
        kwargs = {}
        if self.forward_layer._call_has_training:
            kwargs["training"] = training
        if self.forward_layer._call_has_mask and mask is not None:
            kwargs["mask"] = mask
        forward_state = backward_state = None
        if initial_state is not None:
            half = len(initial_state) // 2
            forward_state, backward_state = list(initial_state[:half]), list(initial_state[half:])
        y = self.forward_layer(sequences, initial_state=forward_state, **kwargs)
        y_rev = self.backward_layer(sequences, initial_state=backward_state, **kwargs)
        states = ()
        if self.return_state:
            states = tuple(y[1:]) + tuple(y_rev[1:])
            y, y_rev = y[0], y_rev[0]
        if self.return_sequences:
            y_rev = tw.reverse(y_rev, [1])
        if self.merge_mode == "concat":
            output = tw.concat([y, y_rev], axis=-1)
        elif self.merge_mode == "sum":
            output = y + y_rev
        elif self.merge_mode == "ave":
            output = (y + y_rev) / 2
        elif self.merge_mode == "mul":
            output = y * y_rev
        else:
            output = (y, y_rev)
        if self.return_state:
            return (output + states) if self.merge_mode is None else (output,) + states
        return output

    def compute_mask(self, inputs, mask=None):
        while isinstance(mask, (list, tuple)):
            mask = mask[0] if mask else None
        if self.return_sequences:
            output_mask = [mask, mask] if not self.merge_mode else mask
        else:
            output_mask = [None, None] if not self.merge_mode else None
        if self.return_state:
            n = len(self.forward_layer.state_size) * 2
            head = output_mask if isinstance(output_mask, list) else [output_mask]
            return head + [None] * n
        return output_mask

    def reset_state(self):
        raise AttributeError("Layer must be stateful.")

    reset_states = reset_state

    def get_config(self):
        return {**super().get_config(), "merge_mode": self.merge_mode, "layer": _serialize(self.forward_layer),
                "backward_layer": _serialize(self.backward_layer)}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        config["layer"] = _deserialize(config["layer"], custom_objects)
        if config.get("backward_layer") is not None:
            config["backward_layer"] = _deserialize(config["backward_layer"], custom_objects)
        return cls(**config)
