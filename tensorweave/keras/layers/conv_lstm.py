"""Convolutional LSTMs: ConvLSTM1D, ConvLSTM2D, ConvLSTM3D (Keras 3's arguments, weights and gate
order i, f, c, o). The input-to-state transform is a convolution with the layer's strides, padding
and dilation; the state-to-state one a stride-1 "same" convolution. Time steps run as an unrolled
loop (the sequence length must be known), masked steps carry the states over.

>>> import numpy as np
>>> from tensorweave import keras
>>> keras.layers.ConvLSTM2D(4, 3, padding="same")(np.zeros((2, 5, 8, 8, 3), "float32")).shape
TensorShape([2, 8, 8, 4])
"""

import tensorweave as tw
from tensorweave.keras import activations, initializers, regularizers
from tensorweave.keras.engine.layer import InputSpec, Layer
from tensorweave.keras.layers.reshaping import _data_format, _tuple


class _ConvLSTM(Layer):
    nd = None

    def __init__(self, filters, kernel_size, strides=1, padding="valid", data_format=None, dilation_rate=1,
                 activation="tanh", recurrent_activation="sigmoid", use_bias=True, kernel_initializer="glorot_uniform",
                 recurrent_initializer="orthogonal", bias_initializer="zeros", unit_forget_bias=True,
                 kernel_regularizer=None, recurrent_regularizer=None, bias_regularizer=None,
                 activity_regularizer=None, kernel_constraint=None, recurrent_constraint=None, bias_constraint=None,
                 dropout=0.0, recurrent_dropout=0.0, seed=None, return_sequences=False, return_state=False,
                 go_backwards=False, stateful=False, **kwargs):
        super().__init__(**kwargs)
        name = type(self).__name__
        self.filters = int(filters)
        self.kernel_size = _tuple(kernel_size, self.nd, "kernel_size", name)
        self.strides = _tuple(strides, self.nd, "strides", name)
        self.dilation_rate = _tuple(dilation_rate, self.nd, "dilation_rate", name)
        self.padding = str(padding).lower()
        if self.padding not in ("valid", "same"):
            raise ValueError(f"{name}: padding must be 'valid' or 'same', got {padding!r}")
        self.data_format = _data_format(data_format)
        self.activation = activations.get(activation)
        self.recurrent_activation = activations.get(recurrent_activation)
        self.use_bias = use_bias
        self.kernel_initializer = initializers.get(kernel_initializer)
        self.recurrent_initializer = initializers.get(recurrent_initializer)
        self.bias_initializer = initializers.get(bias_initializer)
        self.unit_forget_bias = unit_forget_bias
        self.kernel_regularizer = regularizers.get(kernel_regularizer)
        self.recurrent_regularizer = regularizers.get(recurrent_regularizer)
        self.bias_regularizer = regularizers.get(bias_regularizer)
        self.activity_regularizer = regularizers.get(activity_regularizer)
        self.kernel_constraint, self.recurrent_constraint, self.bias_constraint = \
            kernel_constraint, recurrent_constraint, bias_constraint
        self.dropout = float(dropout)
        self.recurrent_dropout = float(recurrent_dropout)
        self.seed = seed
        self.return_sequences = return_sequences
        self.return_state = return_state
        self.go_backwards = go_backwards
        if stateful:
            raise ValueError(f"{name}: stateful=True is not supported by tensorweave's ConvLSTM layers")
        self.stateful = False
        self.input_spec = InputSpec(ndim=self.nd + 3)
        self.supports_masking = True

    def _channel_axis(self):
        return 2 if self.data_format == "channels_first" else -1

    def build(self, input_shape):
        channels = input_shape[self._channel_axis()]
        if channels is None:
            raise ValueError(f"{type(self).__name__} layer '{self.name}' needs a known channel dimension; got "
                             f"input shape {tuple(input_shape)}")
        f = self.filters
        self.kernel = self.add_weight(shape=self.kernel_size + (channels, 4 * f), initializer=self.kernel_initializer,
                                      regularizer=self.kernel_regularizer, constraint=self.kernel_constraint,
                                      name="kernel")
        self.recurrent_kernel = self.add_weight(shape=self.kernel_size + (f, 4 * f),
                                                initializer=self.recurrent_initializer,
                                                regularizer=self.recurrent_regularizer,
                                                constraint=self.recurrent_constraint, name="recurrent_kernel")
        if self.use_bias:
            if self.unit_forget_bias:
                base = self.bias_initializer

                def bias_init(shape, dtype=None):
                    return tw.concat([base((f,), dtype=dtype), tw.ones((f,), dtype or tw.float32),
                                      base((2 * f,), dtype=dtype)], 0)
                init = bias_init
            else:
                init = self.bias_initializer
            self.bias = self.add_weight(shape=(4 * f,), initializer=init, regularizer=self.bias_regularizer,
                                        constraint=self.bias_constraint, name="bias")
        else:
            self.bias = None
        self.built = True

    def _fmt(self):
        return {1: "NWC", 2: "NHWC", 3: "NDHWC"}[self.nd]

    def _conv(self, x, w, strides, padding, dilations):
        return tw.nn.convolution(x, w, strides=list(strides), padding=padding.upper(), data_format=self._fmt(),
                                 dilations=list(dilations))

    def call(self, inputs, mask=None, training=None, initial_state=None):
        x = inputs
        cf = self.data_format == "channels_first"
        if cf:  # compute channels-last: [B, T, C, ...] -> [B, T, ..., C]
            x = tw.transpose(x, [0, 1] + list(range(3, self.nd + 3)) + [2])
        steps = x.shape.as_list()[1]
        if steps is None:
            raise ValueError(f"{type(self).__name__} layer '{self.name}' needs a known number of time steps; got "
                             f"input shape {tuple(inputs.shape.as_list())}")
        k_i, k_f, k_c, k_o = tw.split(self.kernel, 4, axis=-1)
        r_i, r_f, r_c, r_o = tw.split(self.recurrent_kernel, 4, axis=-1)
        b = tw.split(self.bias, 4) if self.use_bias else [None] * 4
        if initial_state is not None:
            h, c = [tw.convert_to_tensor(s) for s in initial_state]
        else:
            probe = self._conv(x[:, 0], k_i, self.strides, self.padding, self.dilation_rate)
            h = tw.zeros_like(probe)
            c = tw.zeros_like(probe)
        drop_x = drop_h = None
        if training and self.dropout > 0:
            drop_x = [tw.nn.dropout(tw.ones_like(x[:, 0]), self.dropout, seed=self.seed) for _ in range(4)]
        if training and self.recurrent_dropout > 0:
            drop_h = [tw.nn.dropout(tw.ones_like(h), self.recurrent_dropout, seed=self.seed) for _ in range(4)]
        order = range(steps - 1, -1, -1) if self.go_backwards else range(steps)
        outputs = []
        for t in order:
            xt = x[:, t]
            xs = [xt * d for d in drop_x] if drop_x else [xt] * 4
            hs = [h * d for d in drop_h] if drop_h else [h] * 4
            gates = []
            for xg, hg, kg, rg, bg in zip(xs, hs, (k_i, k_f, k_c, k_o), (r_i, r_f, r_c, r_o), b):
                z = self._conv(xg, kg, self.strides, self.padding, self.dilation_rate)
                if bg is not None:
                    z = tw.nn.bias_add(z, bg)
                gates.append(z + self._conv(hg, rg, [1] * self.nd, "same", [1] * self.nd))
            i = self.recurrent_activation(gates[0])
            fg = self.recurrent_activation(gates[1])
            c_new = fg * c + i * self.activation(gates[2])
            o = self.recurrent_activation(gates[3])
            h_new = o * self.activation(c_new)
            if mask is not None:
                keep = tw.reshape(tw.cast(mask[:, t], h.dtype), [-1] + [1] * (self.nd + 1))
                h_new = keep * h_new + (1 - keep) * h
                c_new = keep * c_new + (1 - keep) * c
            h, c = h_new, c_new
            outputs.append(h)
        out = tw.stack(outputs, axis=1) if self.return_sequences else h
        if cf:
            def to_cf(t, seq):
                lead = [0, 1] if seq else [0]
                r = t.shape.rank
                return tw.transpose(t, lead + [r - 1] + list(range(len(lead), r - 1)))
            out = to_cf(out, self.return_sequences)
            h, c = to_cf(h, False), to_cf(c, False)
        if self.activity_regularizer is not None:
            self.add_loss(self.activity_regularizer(out))
        return [out, h, c] if self.return_state else out

    def compute_mask(self, inputs, mask=None):
        if mask is None or not self.return_sequences:
            return [None, None, None] if self.return_state else None
        return [mask, None, None] if self.return_state else mask

    def get_config(self):
        return {**super().get_config(), "filters": self.filters, "kernel_size": list(self.kernel_size),
                "strides": list(self.strides), "padding": self.padding, "data_format": self.data_format,
                "dilation_rate": list(self.dilation_rate), "activation": activations.serialize(self.activation),
                "recurrent_activation": activations.serialize(self.recurrent_activation), "use_bias": self.use_bias,
                "kernel_initializer": initializers.serialize(self.kernel_initializer),
                "recurrent_initializer": initializers.serialize(self.recurrent_initializer),
                "bias_initializer": initializers.serialize(self.bias_initializer),
                "unit_forget_bias": self.unit_forget_bias,
                "kernel_regularizer": regularizers.serialize(self.kernel_regularizer),
                "recurrent_regularizer": regularizers.serialize(self.recurrent_regularizer),
                "bias_regularizer": regularizers.serialize(self.bias_regularizer),
                "activity_regularizer": regularizers.serialize(self.activity_regularizer),
                "dropout": self.dropout, "recurrent_dropout": self.recurrent_dropout, "seed": self.seed,
                "return_sequences": self.return_sequences, "return_state": self.return_state,
                "go_backwards": self.go_backwards, "stateful": self.stateful}


class ConvLSTM1D(_ConvLSTM):
    nd = 1


class ConvLSTM2D(_ConvLSTM):
    nd = 2


class ConvLSTM3D(_ConvLSTM):
    nd = 3



