"""``tf.compat.v1.nn.rnn_cell`` and TF1's RNN drivers (``dynamic_rnn``, ``static_rnn``,
``bidirectional_dynamic_rnn``, ``static_bidirectional_rnn``).

The cells keep TF1's variables, names and equations: one ``kernel`` over ``[inputs, h]`` and a
``bias`` in the cell's variable scope (``rnn/basic_lstm_cell/kernel:0``), LSTM gates in TF1's
order ``(i, j, f, o)`` with ``forget_bias`` added to ``f``, GRU ``gates``/``candidate`` sub-scopes.

The drivers run a whole sequence on the fused sequence kernels (``tw.nn.lstm_sequence``,
``gru_sequence``, ``simple_rnn_sequence``: one node for all time steps, and one for its
gradient) whenever the cell allows it: basic LSTM/GRU/RNN cells with a fused activation,
stacks of them (``MultiRNNCell``), and ``DropoutWrapper`` with input/output dropout only. The
TF1 kernel is split into the input and recurrent parts and its gate columns reordered to Keras'
order inside the graph, so gradients reach the TF1 variables. ``sequence_length`` becomes the
kernels' mask: outputs past a sequence's end are zero and its final state is the one at its
last step, as in TF1. Other cells (peepholes, projections, state dropout, custom cells) run
step by step over a static number of time steps.

>>> import numpy as np, tensorweave.compat.v1 as tf
>>> g = tf.Graph()
>>> with g.as_default():
...     x = tf.placeholder(tf.float32, [None, 5, 3])
...     cell = tf.nn.rnn_cell.BasicLSTMCell(4)
...     outputs, state = tf.nn.dynamic_rnn(cell, x, sequence_length=[5, 2], dtype=tf.float32)
>>> [v.name for v in g.get_collection("trainable_variables")]
['rnn/basic_lstm_cell/kernel:0', 'rnn/basic_lstm_cell/bias:0']
>>> with tf.Session(graph=g) as sess:
...     sess.run(tf.variables_initializer(g.get_collection("variables")))
...     out, st = sess.run([outputs, state], {x: np.ones((2, 5, 3), np.float32)})
>>> out.shape, bool((out[1, 2:] == 0).all()), bool(np.allclose(st.h[1], out[1, 1]))
((2, 5, 4), True, True)
"""
import collections

import tensorweave as tw
from tensorweave.compat.v1_layers import _TF1Scoped
from tensorweave.compat.v1_variable_scope import get_variable_scope, variable_scope
from tensorweave.core import nest
from tensorweave.core.shape import TensorShape
from tensorweave.core.tensor import Tensor
from tensorweave.keras import layers as _kl
from tensorweave.ops import rnn_ops

__all__ = ["RNNCell", "LSTMStateTuple", "BasicRNNCell", "BasicLSTMCell", "LSTMCell", "GRUCell", "MultiRNNCell",
           "DropoutWrapper", "ResidualWrapper", "DeviceWrapper", "dynamic_rnn", "static_rnn",
           "bidirectional_dynamic_rnn", "static_bidirectional_rnn", "reverse_sequence", "raw_rnn"]


class LSTMStateTuple(collections.namedtuple("LSTMStateTuple", ("c", "h"))):
    """An LSTM state ``(c, h)``."""

    __slots__ = ()

    @property
    def dtype(self):
        if self.c.dtype != self.h.dtype:
            raise TypeError(f"Inconsistent internal state: {self.c.dtype} vs {self.h.dtype}")
        return self.c.dtype


def _activation_name(fn):
    """The fused kernels' name for ``fn`` (None: not fusable)."""
    if fn is None:
        return "tanh"
    for name in rnn_ops.FUSED_ACTIVATIONS:
        ref = {"linear": None, "hard_sigmoid": None}.get(name, getattr(tw.nn, name, None))
        if ref is not None and (fn is ref or getattr(fn, "__wrapped__", None) is getattr(ref, "__wrapped__", ref)
                                or getattr(fn, "__name__", "") == name and getattr(fn, "__module__", "").startswith(
                                    "tensorweave")):
            return name
    return None


def _zeros(batch_size, n, dtype):
    if isinstance(batch_size, Tensor):
        z = tw.zeros(tw.stack([tw.cast(batch_size, tw.int32), n]), dtype=dtype)
        if hasattr(z, "set_shape"):
            z.set_shape([None, n])   # the state size is static: step-by-step cells concatenate along it
        return z
    return tw.zeros([batch_size, n], dtype=dtype)


class RNNCell(_TF1Scoped, _kl.Layer):
    """Base of TF1 cells: ``cell(inputs, state) -> (output, new_state)`` with variables in the cell's scope."""

    def __init__(self, trainable=True, name=None, dtype=None, reuse=None, **kwargs):
        super().__init__(trainable=trainable, name=name, dtype=dtype, _reuse=reuse, **kwargs)
        self._dtype_given = dtype is not None

    def _adopt_dtype(self, dtype):
        """As TF1's layers: without a dtype, a cell makes its variables in its first input's dtype."""
        if not getattr(self, "built", True) and not getattr(self, "_dtype_given", True) and dtype.is_floating:
            self._dtype = dtype
        for inner in list(getattr(self, "_cells", ())) + [getattr(self, "_cell", None)]:
            if isinstance(inner, RNNCell):
                inner._adopt_dtype(dtype)

    @property
    def state_size(self):
        raise NotImplementedError

    @property
    def output_size(self):
        raise NotImplementedError

    def zero_state(self, batch_size, dtype):
        return nest.map_structure(lambda n: _zeros(batch_size, n, dtype), self.state_size)

    def get_initial_state(self, inputs=None, batch_size=None, dtype=None):
        if inputs is not None:
            batch_size = inputs.shape[0] if inputs.shape[0] is not None else tw.shape(inputs)[0]
            dtype = dtype or inputs.dtype
        return self.zero_state(batch_size, dtype)

    def __call__(self, inputs, state, scope=None, **kwargs):
        if scope is not None and self._tf1_scope is None:
            self._tf1_scope_name = scope.name if hasattr(scope, "name") else scope
        if isinstance(inputs, Tensor):
            self._adopt_dtype(inputs.dtype)
        return super().__call__(inputs, state, **kwargs)

    def _ensure_built(self, input_depth):
        """Creates the variables (as the first call would) without computing a step."""
        if self._tf1_scope is None:
            self._capture_scope()
        if not self.built:
            with variable_scope(self._tf1_scope, reuse=self._tf1_reuse):
                self.build((None, input_depth))
            self.built = True

    # A cell that can run a whole sequence in one fused kernel returns (outputs, final state).
    def _fused(self, x, state, mask):
        return None


class BasicRNNCell(RNNCell):
    """``h' = activation([x, h] @ kernel + bias)``."""

    def __init__(self, num_units, activation=None, reuse=None, name=None, dtype=None, **kwargs):
        super().__init__(name=name, dtype=dtype, reuse=reuse, **kwargs)
        self._num_units, self._activation = num_units, activation or tw.tanh

    state_size = property(lambda self: self._num_units)
    output_size = property(lambda self: self._num_units)

    def build(self, input_shape):
        depth = input_shape[-1]
        self.kernel = self.add_weight("kernel", [depth + self._num_units, self._num_units])
        self.bias = self.add_weight("bias", [self._num_units], initializer="zeros")
        self.built = True

    def call(self, inputs, state):
        out = self._activation(tw.matmul(tw.concat([inputs, state], 1), self.kernel) + self.bias)
        return out, out

    def _fused(self, x, state, mask):
        act = _activation_name(self._activation)
        if act is None:
            return None
        d = x.shape[-1]
        self._ensure_built(d)
        k = self.kernel.value()
        out, h = rnn_ops.simple_rnn_sequence(x, state, k[:d], k[d:], self.bias.value(), mask=mask, activation=act,
                                             zero_output_for_mask=True)
        return out, h


class BasicLSTMCell(RNNCell):
    """TF1's basic LSTM: gates ``(i, j, f, o)`` from ``[x, h] @ kernel + bias``, ``forget_bias`` added to ``f``."""

    def __init__(self, num_units, forget_bias=1.0, state_is_tuple=True, activation=None, reuse=None, name=None,
                 dtype=None, **kwargs):
        super().__init__(name=name, dtype=dtype, reuse=reuse, **kwargs)
        self._num_units, self._forget_bias = num_units, forget_bias
        self._state_is_tuple, self._activation = state_is_tuple, activation or tw.tanh

    @property
    def state_size(self):
        n = self._num_units
        return LSTMStateTuple(n, n) if self._state_is_tuple else 2 * n

    output_size = property(lambda self: self._num_units)

    def zero_state(self, batch_size, dtype):
        if self._state_is_tuple:
            n = self._num_units
            return LSTMStateTuple(_zeros(batch_size, n, dtype), _zeros(batch_size, n, dtype))
        return _zeros(batch_size, 2 * self._num_units, dtype)

    def _rows_in(self, depth):
        return depth + self._num_units

    def build(self, input_shape):
        depth = input_shape[-1]
        self.kernel = self.add_weight("kernel", [self._rows_in(depth), 4 * self._num_units])
        self.bias = self.add_weight("bias", [4 * self._num_units], initializer="zeros")
        self.built = True

    def _split_state(self, state):
        if self._state_is_tuple:
            return state
        return tw.split(state, 2, axis=1)

    def _join_state(self, c, h):
        return LSTMStateTuple(c, h) if self._state_is_tuple else tw.concat([c, h], 1)

    def call(self, inputs, state):
        c, h = self._split_state(state)
        gates = tw.matmul(tw.concat([inputs, h], 1), self.kernel) + self.bias
        i, j, f, o = tw.split(gates, 4, axis=1)
        new_c = c * tw.sigmoid(f + self._forget_bias) + tw.sigmoid(i) * self._activation(j)
        new_h = self._activation(new_c) * tw.sigmoid(o)
        return new_h, self._join_state(new_c, new_h)

    def _fusable(self):
        return _activation_name(self._activation)

    def _fused(self, x, state, mask):
        act = self._fusable()
        if act is None:
            return None
        d = x.shape[-1]
        self._ensure_built(d)
        k, b = self.kernel.value(), self.bias.value()
        # TF1's gate columns (i, j, f, o) -> the kernels' (i, f, c=j, o); forget_bias joins f's bias.
        i, j, f, o = tw.split(k, 4, axis=1)
        k = tw.concat([i, f, j, o], 1)
        bi, bj, bf, bo = tw.split(b, 4, axis=0)
        b = tw.concat([bi, bf + self._forget_bias, bj, bo], 0)
        c0, h0 = self._split_state(state)
        out, h, c = rnn_ops.lstm_sequence(x, h0, c0, k[:d], k[d:], b, mask=mask, activation=act,
                                          zero_output_for_mask=True)
        return out, self._join_state(c, h)


class LSTMCell(BasicLSTMCell):
    """TF1's LSTM cell with optional peepholes, cell clipping and an output projection."""

    def __init__(self, num_units, use_peepholes=False, cell_clip=None, initializer=None, num_proj=None,
                 proj_clip=None, num_unit_shards=None, num_proj_shards=None, forget_bias=1.0, state_is_tuple=True,
                 activation=None, reuse=None, name=None, dtype=None, **kwargs):
        super().__init__(num_units, forget_bias=forget_bias, state_is_tuple=state_is_tuple, activation=activation,
                         reuse=reuse, name=name, dtype=dtype, **kwargs)
        self._use_peepholes, self._cell_clip, self._initializer = use_peepholes, cell_clip, initializer
        self._num_proj, self._proj_clip = num_proj, proj_clip

    @property
    def state_size(self):
        n, m = self._num_units, self._num_proj or self._num_units
        return LSTMStateTuple(n, m) if self._state_is_tuple else n + m

    output_size = property(lambda self: self._num_proj or self._num_units)

    def zero_state(self, batch_size, dtype):
        if self._state_is_tuple:
            return LSTMStateTuple(_zeros(batch_size, self._num_units, dtype),
                                  _zeros(batch_size, self._num_proj or self._num_units, dtype))
        return _zeros(batch_size, self._num_units + (self._num_proj or self._num_units), dtype)

    def _rows_in(self, depth):
        return depth + (self._num_proj or self._num_units)

    def build(self, input_shape):
        depth = input_shape[-1]
        self.kernel = self.add_weight("kernel", [self._rows_in(depth), 4 * self._num_units],
                                      initializer=self._initializer)
        self.bias = self.add_weight("bias", [4 * self._num_units], initializer="zeros")
        if self._use_peepholes:
            self.w_f_diag = self.add_weight("w_f_diag", [self._num_units], initializer=self._initializer)
            self.w_i_diag = self.add_weight("w_i_diag", [self._num_units], initializer=self._initializer)
            self.w_o_diag = self.add_weight("w_o_diag", [self._num_units], initializer=self._initializer)
        if self._num_proj is not None:
            with variable_scope("projection"):
                self.proj_kernel = self.add_weight("kernel", [self._num_units, self._num_proj],
                                                   initializer=self._initializer)
        self.built = True

    def _split_state(self, state):
        if self._state_is_tuple:
            return state
        return state[:, :self._num_units], state[:, self._num_units:]

    def call(self, inputs, state):
        c_prev, m_prev = self._split_state(state)
        gates = tw.matmul(tw.concat([inputs, m_prev], 1), self.kernel) + self.bias
        i, j, f, o = tw.split(gates, 4, axis=1)
        act = self._activation
        if self._use_peepholes:
            c = (tw.sigmoid(f + self._forget_bias + self.w_f_diag * c_prev) * c_prev +
                 tw.sigmoid(i + self.w_i_diag * c_prev) * act(j))
        else:
            c = tw.sigmoid(f + self._forget_bias) * c_prev + tw.sigmoid(i) * act(j)
        if self._cell_clip is not None:
            c = tw.clip_by_value(c, -self._cell_clip, self._cell_clip)
        m = tw.sigmoid(o + self.w_o_diag * c) * act(c) if self._use_peepholes else tw.sigmoid(o) * act(c)
        if self._num_proj is not None:
            m = tw.matmul(m, self.proj_kernel)
            if self._proj_clip is not None:
                m = tw.clip_by_value(m, -self._proj_clip, self._proj_clip)
        return m, self._join_state(c, m)

    def _fusable(self):
        if self._use_peepholes or self._cell_clip is not None or self._num_proj is not None:
            return None
        return super()._fusable()


class GRUCell(RNNCell):
    """TF1's GRU: ``r, u = sigmoid([x, h] @ gates/kernel + gates/bias)``,
    ``c = act([x, r * h] @ candidate/kernel + candidate/bias)``, ``h' = u * h + (1 - u) * c``."""

    def __init__(self, num_units, activation=None, reuse=None, kernel_initializer=None, bias_initializer=None,
                 name=None, dtype=None, **kwargs):
        super().__init__(name=name, dtype=dtype, reuse=reuse, **kwargs)
        self._num_units, self._activation = num_units, activation or tw.tanh
        self._kernel_initializer, self._bias_initializer = kernel_initializer, bias_initializer

    state_size = property(lambda self: self._num_units)
    output_size = property(lambda self: self._num_units)

    def build(self, input_shape):
        depth, n = input_shape[-1], self._num_units
        from tensorweave.compat.v1_initializers import constant_initializer
        with variable_scope("gates"):
            self.gate_kernel = self.add_weight("kernel", [depth + n, 2 * n], initializer=self._kernel_initializer)
            self.gate_bias = self.add_weight("bias", [2 * n], initializer=self._bias_initializer
                                             if self._bias_initializer is not None else constant_initializer(1.0))
        with variable_scope("candidate"):
            self.candidate_kernel = self.add_weight("kernel", [depth + n, n], initializer=self._kernel_initializer)
            self.candidate_bias = self.add_weight("bias", [n], initializer=self._bias_initializer
                                                  if self._bias_initializer is not None else "zeros")
        self.built = True

    def call(self, inputs, state):
        value = tw.sigmoid(tw.matmul(tw.concat([inputs, state], 1), self.gate_kernel) + self.gate_bias)
        r, u = tw.split(value, 2, axis=1)
        c = self._activation(tw.matmul(tw.concat([inputs, r * state], 1), self.candidate_kernel) +
                             self.candidate_bias)
        new_h = u * state + (1 - u) * c
        return new_h, new_h

    def _fused(self, x, state, mask):
        act = _activation_name(self._activation)
        if act is None:
            return None
        d = x.shape[-1]
        self._ensure_built(d)
        gk, gb = self.gate_kernel.value(), self.gate_bias.value()
        ck, cb = self.candidate_kernel.value(), self.candidate_bias.value()
        r_k, u_k = tw.split(gk, 2, axis=1)
        r_b, u_b = tw.split(gb, 2, axis=0)
        # Keras' GRU order (z, r, h) with z = TF1's u; reset before the recurrent matmul (reset_after=False).
        k = tw.concat([u_k, r_k, ck], 1)
        b = tw.concat([u_b, r_b, cb], 0)
        out, h = rnn_ops.gru_sequence(x, state, k[:d], k[d:], b, tw.zeros_like(b), mask=mask, activation=act,
                                      reset_after=False, zero_output_for_mask=True)
        return out, h


class MultiRNNCell(RNNCell):
    """Cells stacked: the output of cell ``i`` is the input of cell ``i + 1`` (scopes ``cell_0``, ``cell_1``...)."""

    def __init__(self, cells, state_is_tuple=True):
        super().__init__(name="multi_rnn_cell")
        if not cells:
            raise ValueError("Must specify at least one cell for MultiRNNCell.")
        if not state_is_tuple:
            raise NotImplementedError("MultiRNNCell(state_is_tuple=False) is deprecated in TF1 and not supported")
        self._cells = list(cells)

    state_size = property(lambda self: tuple(c.state_size for c in self._cells))
    output_size = property(lambda self: self._cells[-1].output_size)

    def zero_state(self, batch_size, dtype):
        return tuple(c.zero_state(batch_size, dtype) for c in self._cells)

    def build(self, input_shape):
        self.built = True

    def call(self, inputs, state):
        x, new_states = inputs, []
        for i, cell in enumerate(self._cells):
            with variable_scope(f"cell_{i}"):
                x, s = cell(x, state[i])
            new_states.append(s)
        return x, tuple(new_states)

    def _fused(self, x, state, mask):
        if self._tf1_scope is None:
            self._capture_scope()
        results = []
        with variable_scope(self._tf1_scope):
            for i, cell in enumerate(self._cells):
                with variable_scope(f"cell_{i}"):
                    r = cell._fused(x, state[i], mask)
                if r is None:
                    return None
                x = r[0]
                results.append(r[1])
        self.built = True
        return x, tuple(results)


class DropoutWrapper(RNNCell):
    """Dropout on a cell's inputs, outputs and (TF1) state, by keep probabilities."""

    def __init__(self, cell, input_keep_prob=1.0, output_keep_prob=1.0, state_keep_prob=1.0,
                 variational_recurrent=False, input_size=None, dtype=None, seed=None,
                 dropout_state_filter_visitor=None):
        super().__init__(name="dropout_wrapper")
        if variational_recurrent:
            raise NotImplementedError("DropoutWrapper(variational_recurrent=True) is not supported")
        self._cell, self._seed = cell, seed
        self._input_keep_prob, self._output_keep_prob = input_keep_prob, output_keep_prob
        self._state_keep_prob = state_keep_prob

    state_size = property(lambda self: self._cell.state_size)
    output_size = property(lambda self: self._cell.output_size)

    def zero_state(self, batch_size, dtype):
        return self._cell.zero_state(batch_size, dtype)

    @staticmethod
    def _keeps_all(p):
        return isinstance(p, (int, float)) and p == 1.0

    def _drop(self, x, keep_prob):
        if self._keeps_all(keep_prob):
            return x
        from tensorweave.compat.v1_nn import dropout
        return dropout(x, keep_prob=keep_prob, seed=self._seed)

    def build(self, input_shape):
        self.built = True

    def __call__(self, inputs, state, scope=None, **kwargs):
        # A wrapper has no variables: the wrapped cell makes its own scope inside the caller's.
        inputs = self._drop(inputs, self._input_keep_prob)
        out, new_state = self._cell(inputs, state, scope=scope)
        if not self._keeps_all(self._state_keep_prob):
            new_state = nest.map_structure(lambda s: self._drop(s, self._state_keep_prob), new_state)
        return self._drop(out, self._output_keep_prob), new_state

    def _fused(self, x, state, mask):
        if not self._keeps_all(self._state_keep_prob):
            return None
        r = self._cell._fused(self._drop(x, self._input_keep_prob), state, mask)
        if r is None:
            return None
        return self._drop(r[0], self._output_keep_prob), r[1]


class ResidualWrapper(DropoutWrapper):
    """The cell's output plus its input."""

    def __init__(self, cell, residual_fn=None):
        super().__init__(cell)
        self._residual_fn = residual_fn or (lambda i, o: i + o)

    def __call__(self, inputs, state, scope=None, **kwargs):
        out, new_state = self._cell(inputs, state, scope=scope)
        return self._residual_fn(inputs, out), new_state

    def _fused(self, x, state, mask):
        r = self._cell._fused(x, state, mask)
        return None if r is None else (self._residual_fn(x, r[0]), r[1])


class DeviceWrapper(DropoutWrapper):
    """Runs the cell under ``tf.device(device)``."""

    def __init__(self, cell, device):
        super().__init__(cell)
        self._device = device

    def __call__(self, inputs, state, scope=None, **kwargs):
        with tw.device(self._device):
            return self._cell(inputs, state, scope=scope)

    def _fused(self, x, state, mask):
        with tw.device(self._device):
            return self._cell._fused(x, state, mask)


# ---- drivers ----------------------------------------------------------------------------------------------
def reverse_sequence(input, seq_lengths, seq_axis=None, batch_axis=None, name=None, seq_dim=None, batch_dim=None):
    """Reverses the first ``seq_lengths[b]`` entries along ``seq_axis`` of each batch entry ``b``."""
    x = tw.convert_to_tensor(input)
    seq_axis = seq_axis if seq_axis is not None else seq_dim
    batch_axis = batch_axis if batch_axis is not None else (batch_dim if batch_dim is not None else 0)
    if seq_axis is None:
        raise ValueError("reverse_sequence: seq_axis is required")
    rank = x.shape.rank
    perm = None
    if (batch_axis % rank, seq_axis % rank) != (0, 1):
        rest = [a for a in range(rank) if a not in (batch_axis % rank, seq_axis % rank)]
        perm = [batch_axis % rank, seq_axis % rank] + rest
        x = tw.transpose(x, perm)
    n = x.shape[1] if x.shape[1] is not None else tw.shape(x)[1]
    t = tw.range(n)[None, :]
    lengths = tw.cast(tw.convert_to_tensor(seq_lengths), tw.int32)[:, None]
    idx = tw.where(t < lengths, lengths - 1 - t, t)
    out = tw.gather(x, idx, axis=1, batch_dims=1)
    if perm is not None:
        import numpy as np
        out = tw.transpose(out, list(np.argsort(perm)))
    return tw.identity(out, name=name) if name else out


def _leaf_where(keep, new, old):
    return nest.map_structure(lambda a, b: tw.where(keep, a, b), new, old)


def _cell_call(cell, inputs, state, scope):
    """One step of ``cell`` inside a loop body: its variables exist (made by the call before the
    loop), so the caller's variable scope is re-entered with ``reuse=True`` for cells that call
    ``get_variable`` themselves."""
    with variable_scope(scope, reuse=True):
        return cell(inputs, state)


def _while_core(cell, x, state, sequence_length):
    """TF1's ``_dynamic_rnn_loop``: ``cell`` over batch-major ``x`` in a ``while_loop`` over time
    (any number of steps, known or not), for cells without a fused kernel. The cell is called
    once before the loop on the first step, which makes its variables and gives the output's
    structure (those nodes never run: nothing reads them)."""
    xt = tw.transpose(x, [1, 0] + list(range(2, x.shape.rank)))
    steps = tw.shape(xt)[0]
    scope = get_variable_scope()
    out0, _ = cell(xt[0], state)
    outs0, states0 = nest.flatten(out0), nest.flatten(state)
    accs = []
    for o in outs0:
        a = tw.zeros(tw.concat([tw.reshape(steps, [1]), tw.shape(o)], 0), dtype=o.dtype)
        a.set_shape(TensorShape([x.shape[1]]).concatenate(o.shape))
        accs.append(a)
    n_out = len(accs)
    if sequence_length is not None:
        sequence_length = tw.cast(sequence_length, tw.int32)

    def body(t, *vals):
        old = nest.pack_sequence_as(state, list(vals[n_out:]))
        out, new = _cell_call(cell, tw.gather(xt, t), old, scope)
        flat_out, flat_new = nest.flatten(out), nest.flatten(new)
        if sequence_length is not None:
            valid = (t < sequence_length)[:, None]
            flat_out = [tw.where(valid, o, tw.zeros_like(o)) for o in flat_out]
            flat_new = [tw.where(valid, n, s) for n, s in zip(flat_new, vals[n_out:])]
        idx = tw.reshape(t, [1, 1])
        written = [tw.tensor_scatter_nd_update(a, idx, o[None]) for a, o in zip(vals[:n_out], flat_out)]
        for n, s in zip(flat_new, vals[n_out:]):
            if n.shape.is_compatible_with(s.shape) and hasattr(n, "set_shape"):
                n.set_shape(s.shape)      # (a cell may lose static dimensions that the loop keeps)
        return [t + 1] + written + flat_new
    res = tw.while_loop(lambda t, *_: t < steps, body, [tw.constant(0)] + accs + states0)
    outputs = [tw.transpose(a, [1, 0] + list(range(2, a.shape.rank))) for a in res[1:1 + n_out]]
    return (nest.pack_sequence_as(out0, outputs), nest.pack_sequence_as(state, list(res[1 + n_out:])))


def _core(cell, x, state, sequence_length, unroll=False):
    """(outputs [batch, time, units], final state) of ``cell`` over batch-major ``x``: the fused
    kernels where the cell allows, else a while loop (``unroll``: step by step, as ``static_rnn``)."""
    mask = None
    if sequence_length is not None:
        n = x.shape[1] if x.shape[1] is not None else tw.shape(x)[1]
        mask = tw.sequence_mask(sequence_length, maxlen=n)
    if isinstance(cell, RNNCell):
        cell._adopt_dtype(x.dtype)
    fused = cell._fused(x, state, mask) if hasattr(cell, "_fused") else None
    if fused is not None:
        return fused
    steps = x.shape[1]
    if not unroll or steps is None:
        return _while_core(cell, x, state, sequence_length)
    outputs = []
    for t in range(steps):
        out, new_state = cell(x[:, t], state)
        if sequence_length is not None:
            valid = mask[:, t][:, None]
            out = tw.where(valid, out, tw.zeros_like(out))
            new_state = _leaf_where(valid, new_state, state)
        outputs.append(out)
        state = new_state
    return tw.stack(outputs, axis=1), state


def _initial(cell, initial_state, batch, dtype):
    if initial_state is not None:
        return initial_state
    if dtype is None:
        raise ValueError("If there is no initial_state, you must give a dtype.")
    return cell.zero_state(batch, dtype)


def _batch_size(x):
    return x.shape[0] if x.shape[0] is not None else tw.shape(x)[0]


def dynamic_rnn(cell, inputs, sequence_length=None, initial_state=None, dtype=None, parallel_iterations=None,
                swap_memory=False, time_major=False, scope=None, _unroll=False):
    """Runs ``cell`` over ``inputs`` (``[batch, time, depth]``, or time-major); returns ``(outputs, state)``."""
    x = tw.convert_to_tensor(inputs)
    with variable_scope(scope or "rnn"):
        if time_major:
            x = tw.transpose(x, [1, 0] + list(range(2, x.shape.rank)))
        state = _initial(cell, initial_state, _batch_size(x), dtype)
        outputs, state = _core(cell, x, state, sequence_length, _unroll)
        if time_major:
            outputs = nest.map_structure(lambda o: tw.transpose(o, [1, 0] + list(range(2, o.shape.rank))), outputs)
    return outputs, state


def static_rnn(cell, inputs, initial_state=None, dtype=None, sequence_length=None, scope=None):
    """``dynamic_rnn`` over a list of ``[batch, depth]`` inputs, unrolled (one cell call per input, as
    TF1); returns ``(list of outputs, state)``."""
    if not isinstance(inputs, (list, tuple)) or not inputs:
        raise TypeError("inputs must be a non-empty list of tensors")
    x = tw.stack([tw.convert_to_tensor(i) for i in inputs], axis=1)
    outputs, state = dynamic_rnn(cell, x, sequence_length, initial_state, dtype, scope=scope, _unroll=True)
    return tw.unstack(outputs, axis=1), state


def raw_rnn(cell, loop_fn, parallel_iterations=None, swap_memory=False, scope=None):
    """TF1's ``raw_rnn``: ``loop_fn(time, cell_output, cell_state, loop_state)`` returns
    ``(finished, next_input, next_cell_state, emit_output, next_loop_state)``; the cell runs in a
    while loop until every batch entry is finished. Finished entries emit zeros and keep their
    state. Returns ``(emit_ta, final_state, final_loop_state)`` with ``emit_ta`` a TensorArray of
    the emitted outputs (``emit_ta.stack()``: ``[time, batch, ...]``)."""
    from tensorweave.compat.v1_tensor_array import TensorArray
    if not callable(loop_fn):
        raise TypeError("raw_rnn: loop_fn must be a callable")
    with variable_scope(scope or "rnn") as vs:
        time = tw.constant(0, dtype=tw.int32)
        finished, next_input, state, emit_structure, loop_state = loop_fn(time, None, None, None)
        finished = tw.convert_to_tensor(finished)
        out0, _ = cell(next_input, state)           # the cell's variables and output structure
        emit0 = out0 if emit_structure is None else emit_structure
        flat_emit0 = [tw.convert_to_tensor(e) for e in nest.flatten(emit0)]
        accs = []
        for e in flat_emit0:
            a = tw.zeros(tw.concat([[0], tw.shape(e)], 0), dtype=e.dtype)
            a.set_shape(TensorShape([None]).concatenate(e.shape))
            accs.append(a)
        has_loop_state = loop_state is not None
        parts = [nest.flatten(next_input), nest.flatten(state), accs, nest.flatten(loop_state) if has_loop_state else []]
        sizes = [len(p) for p in parts]

        def split(vals):
            out, k = [], 0
            for n in sizes:
                out.append(list(vals[k:k + n]))
                k += n
            return out

        def cond(t, done, *vals):
            return tw.logical_not(tw.reduce_all(done))

        def body(t, done, *vals):
            inp, st, acc, ls = split(vals)
            inp = nest.pack_sequence_as(next_input, inp)
            st = nest.pack_sequence_as(state, st)
            ls = nest.pack_sequence_as(loop_state, ls) if has_loop_state else None
            out, cell_state = _cell_call(cell, inp, st, vs)
            nxt_done, nxt_in, nxt_state, emit, nxt_ls = loop_fn(t + 1, out, cell_state, ls)
            emit = out if emit is None else emit
            keep = done[:, None]
            flat_state = [tw.where(tw.reshape(done, [-1] + [1] * (a.shape.rank - 1)), a, b)
                          for a, b in zip(nest.flatten(st), nest.flatten(nxt_state))]
            flat_emit = [tw.where(tw.reshape(done, [-1] + [1] * (e.shape.rank - 1)), tw.zeros_like(e), e)
                         if e.shape.rank else e for e in map(tw.convert_to_tensor, nest.flatten(emit))]
            del keep
            acc = [tw.concat([a, e[None]], 0) for a, e in zip(acc, flat_emit)]
            new_done = tw.logical_or(done, tw.convert_to_tensor(nxt_done))
            return ([t + 1, new_done] + nest.flatten(nxt_in) + flat_state + acc
                    + (nest.flatten(nxt_ls) if has_loop_state else []))

        loop_vars = [time, finished] + [v for p in parts for v in p]
        invariants = [v.shape for v in loop_vars]
        k = 2 + sizes[0] + sizes[1]
        for i in range(sizes[2]):
            invariants[k + i] = TensorShape([None]).concatenate(loop_vars[k + i].shape[1:])
        res = tw.while_loop(cond, body, loop_vars, shape_invariants=invariants)
        _, final_state, emitted, final_ls = split(res[2:])
        emit_ta = nest.pack_sequence_as(emit0, [TensorArray(e.dtype, dynamic_size=True, _value=e) for e in emitted])
        return (emit_ta, nest.pack_sequence_as(state, final_state),
                nest.pack_sequence_as(loop_state, final_ls) if has_loop_state else None)


def _reverse(x, sequence_length):
    if sequence_length is None:
        return tw.reverse(x, [1])
    return reverse_sequence(x, sequence_length, seq_axis=1, batch_axis=0)


def bidirectional_dynamic_rnn(cell_fw, cell_bw, inputs, sequence_length=None, initial_state_fw=None,
                              initial_state_bw=None, dtype=None, parallel_iterations=None, swap_memory=False,
                              time_major=False, scope=None):
    """Forward and backward ``dynamic_rnn``; returns ``((out_fw, out_bw), (state_fw, state_bw))``."""
    x = tw.convert_to_tensor(inputs)
    if time_major:
        x = tw.transpose(x, [1, 0] + list(range(2, x.shape.rank)))
    with variable_scope(scope or "bidirectional_rnn"):
        with variable_scope("fw") as fw_scope:
            out_fw, st_fw = dynamic_rnn(cell_fw, x, sequence_length, initial_state_fw, dtype, scope=fw_scope)
        with variable_scope("bw") as bw_scope:
            rev, st_bw = dynamic_rnn(cell_bw, _reverse(x, sequence_length), sequence_length, initial_state_bw, dtype,
                                     scope=bw_scope)
            out_bw = _reverse(rev, sequence_length)
    if time_major:
        out_fw, out_bw = tw.transpose(out_fw, [1, 0, 2]), tw.transpose(out_bw, [1, 0, 2])
    return (out_fw, out_bw), (st_fw, st_bw)


def static_bidirectional_rnn(cell_fw, cell_bw, inputs, initial_state_fw=None, initial_state_bw=None, dtype=None,
                             sequence_length=None, scope=None):
    """Returns ``(outputs, state_fw, state_bw)`` with each output the concatenation of both directions."""
    if not isinstance(inputs, (list, tuple)) or not inputs:
        raise TypeError("inputs must be a non-empty list of tensors")
    x = tw.stack([tw.convert_to_tensor(i) for i in inputs], axis=1)
    (out_fw, out_bw), (st_fw, st_bw) = bidirectional_dynamic_rnn(
        cell_fw, cell_bw, x, sequence_length, initial_state_fw, initial_state_bw, dtype, scope=scope)
    return tw.unstack(tw.concat([out_fw, out_bw], 2), axis=1), st_fw, st_bw
