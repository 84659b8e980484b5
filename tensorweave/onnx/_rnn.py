"""Recurrent layers: LSTM, GRU, SimpleRNN (and ``RNN`` over their cells) and ``Bidirectional``.

Two lowerings give Keras' results:

* **ONNX's own LSTM/GRU/RNN op**, when the layer uses the ONNX default activations (sigmoid and
  tanh; tanh for SimpleRNN) and no mask reaches it: the form every runtime optimizes. Keras'
  weights are re-laid: ONNX stores ``W`` as ``[directions, gates * hidden, input]`` (the transpose
  of Keras' kernel) and orders an LSTM's gates ``i, o, f, c`` where Keras has ``i, f, c, o``;
  GRU's ``z, r, h`` order is the same in both, and Keras 3's ``reset_after=True`` is ONNX's
  ``linear_before_reset=1``. The sequence is transposed to ONNX's time-major order around the op:
  opset 14's ``layout=1`` would read Keras' batch-major order directly, but ONNX Runtime refuses
  it ("batchwise recurrent operations are not supported").
* **A Scan over time steps** with the cell's equations spelled out in ordinary ops, for anything
  else: a Keras mask (from ``Embedding(mask_zero=True)``: at a masked step the states carry over
  and the output repeats the previous one, which ONNX's ops cannot express), or other
  activations (ONNX's ``activations`` attribute is optional for runtimes to honour, so relying on
  it would export a model that runs differently in some of them).

``go_backwards`` follows Keras: the steps run last to first and the returned sequence is in the
order processed.
"""
import numpy as np

from tensorweave.onnx._graph import Value, helper, onnx_dtype
from tensorweave.onnx._layers import activation_name, emit_activation, unsupported

_NATIVE_OP = {"lstm": "LSTM", "gru": "GRU", "simple": "RNN"}
_GATES = {"lstm": 4, "gru": 3, "simple": 1}
# Keras (i, f, c, o) -> ONNX (i, o, f, c)
_LSTM_ORDER = (0, 3, 1, 2)


def register(converter):
    from tensorweave.keras.layers import rnn
    converter(rnn.LSTM, rnn.GRU, rnn.SimpleRNN, rnn.RNN, mask_aware=True)(_rnn_layer)
    converter(rnn.Bidirectional, mask_aware=True)(_bidirectional)


def _kind(layer):
    from tensorweave.keras.layers import rnn
    cell = layer.cell
    for kind, cls in (("lstm", rnn.LSTMCell), ("gru", rnn.GRUCell), ("simple", rnn.SimpleRNNCell)):
        if isinstance(cell, cls) and type(cell).call is cls.call:
            return kind
    raise unsupported(layer, f"its cell is {type(cell).__name__}; only LSTMCell, GRUCell and SimpleRNNCell "
                      "(not stacked or custom cells) are exported")


# ONNX's recurrent ops and Scan work time-major: sequences stay that way between layers
# (a Value's perm records it), so stacked recurrent layers need no Transposes in between
TIME_MAJOR = (1, 0, 2)


class _Run:
    """What one recurrent layer produced, as ONNX names: ``seq`` (time-major ``[T, B, U]``, see
    ``run``), ``last`` (``[B, U]``) and the final ``states``."""

    def __init__(self, seq, last, states):
        self.seq, self.last, self.states = seq, last, states


def _activations(layer, kind):
    cell = layer.cell
    act = activation_name(cell.activation)
    ract = activation_name(cell.recurrent_activation) if kind != "simple" else None
    for fn, name in ((cell.activation, act), (getattr(cell, "recurrent_activation", None), ract)):
        if fn is not None and name is None:
            raise unsupported(layer, f"its activation {getattr(fn, '__name__', fn)!r} has no ONNX equivalent")
    return act, ract


def run(g, layer, x, initial, mask, want_seq, reversed_seq=False):
    """Runs ``layer`` over the Value ``x``. ``seq`` is in the order the steps were processed
    (Keras' return_sequences), or in the reverse of that order with ``reversed_seq`` (what
    Bidirectional needs from its backward layer). ``initial``: Values of the initial states or
    None; ``mask``: a Value of booleans ``[B, T]`` or None."""
    kind = _kind(layer)
    act, ract = _activations(layer, kind)
    dt = x.dtype
    if initial is not None:
        initial = [g.keras(s) if s.dtype == dt else
                   g.op("Cast", [g.keras(s)], f"{layer.name}/state", to=onnx_dtype(dt)) for s in initial]
    default = act == "tanh" and (kind == "simple" or ract == "sigmoid")
    if mask is None and default:
        return _native(g, layer, kind, x, initial, want_seq, reversed_seq)
    return _scan(g, layer, kind, act, ract, x, initial, mask, want_seq, reversed_seq)


# ---- weights ------------------------------------------------------------------------------------------
def _onnx_weights(layer, kind, dt):
    """``W [1, G*U, F]``, ``R [1, G*U, U]``, ``B [1, 2*G*U]`` in ONNX's layout and gate order."""
    cell = layer.cell
    u = cell.units
    k = cell.kernel.numpy().astype(dt)
    rk = cell.recurrent_kernel.numpy().astype(dt)
    g = _GATES[kind]
    bias = cell.bias.numpy().astype(dt) if cell.bias is not None else None
    if kind == "gru":
        if bias is None:
            wb, rb = np.zeros(3 * u, dt), np.zeros(3 * u, dt)
        elif cell.reset_after:
            wb, rb = bias[0], bias[1]
        else:
            wb, rb = bias, np.zeros(3 * u, dt)  # Keras has no recurrent bias without reset_after
    else:
        wb = bias if bias is not None else np.zeros(g * u, dt)
        rb = np.zeros(g * u, dt)
    if kind == "lstm":
        def reorder(m):
            return np.concatenate([m[..., j * u:(j + 1) * u] for j in _LSTM_ORDER], axis=-1)
        k, rk, wb = reorder(k), reorder(rk), reorder(wb)
    w = np.ascontiguousarray(k.T[None])
    r = np.ascontiguousarray(rk.T[None])
    b = np.concatenate([wb, rb])[None]
    return w, r, b


def _native(g, layer, kind, x, initial, want_seq, reversed_seq):
    cell = layer.cell
    name = layer.name
    dt = x.dtype
    w, r, b = _onnx_weights(layer, kind, dt)
    X = g.layout(x, TIME_MAJOR)
    inputs = [X, g.const(w, f"{name}/W"), g.const(r, f"{name}/R"), g.const(b, f"{name}/B"), ""]
    if initial is not None:
        inputs += [g.unsqueeze(s, [0], f"{name}/initial_{i}") for i, s in enumerate(initial)]
    while inputs[-1] == "":
        inputs.pop()
    n_states = 2 if kind == "lstm" else 1
    outputs = [g.unique(f"{name}/Y") if want_seq else "", g.unique(f"{name}/Y_h")]
    if kind == "lstm":
        outputs.append(g.unique(f"{name}/Y_c"))
    attrs = {"hidden_size": cell.units, "direction": "reverse" if layer.go_backwards else "forward"}
    if kind == "gru":
        attrs["linear_before_reset"] = int(cell.reset_after)
    g.op(_NATIVE_OP[kind], inputs, name, outputs=outputs, **attrs)
    seq = None
    if want_seq:
        # Y is [time, directions, batch, hidden], in time order whatever the direction; Keras
        # returns the order processed
        seq = g.squeeze(outputs[0], [1], f"{name}/sequence")
        if layer.go_backwards != reversed_seq:
            seq = g.reverse(seq, 0, f"{name}/sequence_rev")
    states = [g.squeeze(o, [0], f"{name}/state_{i}") for i, o in enumerate(outputs[1:1 + n_states])]
    return _Run(seq, states[0], states)


# ---- the Scan lowering ----------------------------------------------------------------------------------
def _scan(g, layer, kind, act, ract, x, initial, mask, want_seq, reversed_seq):
    cell = layer.cell
    name = layer.name
    u = cell.units
    dt = x.dtype
    et = onnx_dtype(dt)
    xs = g.layout(x, TIME_MAJOR)
    k = cell.kernel.numpy().astype(dt)
    rk = cell.recurrent_kernel.numpy().astype(dt)
    bias = cell.bias.numpy().astype(dt) if cell.bias is not None else None
    in_bias = rec_bias = None
    if bias is not None:
        if kind == "gru" and cell.reset_after:
            in_bias, rec_bias = bias[0], bias[1]
        else:
            in_bias = bias
    # the input projection of every step at once, outside the loop
    xw = g.op("MatMul", [xs, g.const(k, f"{name}/kernel")], f"{name}/xw")
    if in_bias is not None:
        xw = g.op("Add", [xw, g.const(in_bias, f"{name}/bias")], f"{name}/xw_b")
    scan_inputs = [xw]
    if mask is not None:
        m = g.op("Transpose", [g.keras(mask)], f"{name}/mask_time_major", perm=[1, 0])
        scan_inputs.append(g.unsqueeze(m, [2], f"{name}/mask_steps"))
    if layer.go_backwards:
        scan_inputs = [g.reverse(s, 0, f"{s}_rev") for s in scan_inputs]
    n_states = 2 if kind == "lstm" else 1
    zeros = None
    if initial is None or mask is not None:
        zeros = g.zeros_like_batch(xs, 1, u, dt, f"{name}/zeros")
    states0 = list(initial) if initial is not None else [zeros] * n_states
    if mask is not None:
        # the output at a masked step repeats the previous output (zeros before the first)
        states0.append(zeros)

    body = g.subgraph()
    prev = [g.unique(f"{name}/h_prev"), g.unique(f"{name}/c_prev")][:n_states]
    y_prev = g.unique(f"{name}/y_prev") if mask is not None else None
    xw_t = g.unique(f"{name}/xw_t")
    m_t = g.unique(f"{name}/m_t") if mask is not None else None
    new = _cell_step(body, g, layer, kind, act, ract, prev, xw_t, rk, rec_bias, dt)
    out = new[0]
    if mask is not None:
        new = [body.op("Where", [m_t, n, p], f"{name}/keep_state{i}") for i, (n, p) in enumerate(zip(new, prev))]
        fill = body.const(np.zeros((), dt), "zero") if layer.zero_output_for_mask else y_prev
        out = body.op("Where", [m_t, new[0], fill], f"{name}/y_new")
        new.append(out)
    out = body.op("Identity", [out], f"{name}/y_t")
    state_shape = [None, u]
    body_inputs = [helper.make_tensor_value_info(n, et, state_shape) for n in prev]
    if y_prev is not None:
        body_inputs.append(helper.make_tensor_value_info(y_prev, et, state_shape))
    body_inputs.append(helper.make_tensor_value_info(xw_t, et, [None, _GATES[kind] * u]))
    if m_t is not None:
        body_inputs.append(helper.make_tensor_value_info(m_t, onnx_dtype(np.bool_), [None, 1]))
    body_outputs = [helper.make_tensor_value_info(n, et, state_shape) for n in new + [out]]
    graph = helper.make_graph(body.nodes, f"{name}_step", body_inputs, body_outputs)
    finals = [g.unique(f"{name}/final_{i}") for i in range(len(new))]
    ys = g.unique(f"{name}/ys")
    g.op("Scan", states0 + scan_inputs, f"{name}/scan", outputs=finals + [ys], body=graph,
         num_scan_inputs=len(scan_inputs))
    seq = None
    if want_seq:
        seq = g.reverse(ys, 0, f"{name}/sequence_rev") if reversed_seq else ys
    states = finals[:n_states]
    last = finals[-1] if mask is not None else states[0]
    return _Run(seq, last, states)


def _cell_step(b, g, layer, kind, act, ract, prev, xw_t, rk, rec_bias, dt):
    """One step of the cell in the body graph ``b``; returns the new states' names."""
    name = layer.name
    u = layer.cell.units

    def A(fn, v, hint):
        return emit_activation(b, fn, v, dt, f"{name}/{hint}")

    def split(v, n, hint):
        return b.op("Split", [v, b.ints([u] * n)], f"{name}/{hint}", n_out=n, axis=1)

    h = prev[0]
    if kind == "simple":
        z = b.op("Add", [xw_t, b.op("MatMul", [h, g.const(rk, f"{name}/recurrent_kernel")], f"{name}/hr")],
                 f"{name}/z")
        return [A(act, z, "h")]
    if kind == "lstm":
        z = b.op("Add", [xw_t, b.op("MatMul", [h, g.const(rk, f"{name}/recurrent_kernel")], f"{name}/hr")],
                 f"{name}/z")
        zi, zf, zc, zo = split(z, 4, "gates")
        i, f, o = A(ract, zi, "i"), A(ract, zf, "f"), A(ract, zo, "o")
        c = b.op("Add", [b.op("Mul", [f, prev[1]], f"{name}/fc"), b.op("Mul", [i, A(act, zc, "g")], f"{name}/ig")],
                 f"{name}/c")
        return [b.op("Mul", [o, A(act, c, "act_c")], f"{name}/h"), c]
    # GRU
    xz, xr, xh = split(xw_t, 3, "x_gates")
    reset_after = layer.cell.reset_after
    rk_used = rk if reset_after else rk[:, :2 * u]
    inner = b.op("MatMul", [h, g.const(np.ascontiguousarray(rk_used), f"{name}/recurrent_kernel")], f"{name}/hr")
    if rec_bias is not None:
        inner = b.op("Add", [inner, g.const(rec_bias, f"{name}/recurrent_bias")], f"{name}/hr_b")
    if reset_after:
        hz, hr, hh = split(inner, 3, "h_gates")
    else:
        hz, hr = split(inner, 2, "h_gates")
    z = A(ract, b.op("Add", [xz, hz], f"{name}/zz"), "z")
    r = A(ract, b.op("Add", [xr, hr], f"{name}/zr"), "r")
    if reset_after:
        rh = b.op("Mul", [r, hh], f"{name}/rh")
    else:
        rh = b.op("MatMul", [b.op("Mul", [r, h], f"{name}/r_h"),
                             g.const(np.ascontiguousarray(rk[:, 2 * u:]), f"{name}/recurrent_kernel_h")], f"{name}/rh")
    cand = A(act, b.op("Add", [xh, rh], f"{name}/zh"), "hh")
    one = g.const(np.ones((), dt), "one")
    new_h = b.op("Add", [b.op("Mul", [z, h], f"{name}/zh_prev"),
                         b.op("Mul", [b.op("Sub", [one, z], f"{name}/one_minus_z"), cand], f"{name}/zh_new")],
                 f"{name}/h")
    return [new_h]


# ---- converters ------------------------------------------------------------------------------------------
def _mask_of(g, layer, x, kwargs):
    mask = kwargs.get("mask")
    if isinstance(mask, (list, tuple)):  # the masks of several inputs: the sequence's comes first
        mask = mask[0] if mask else None
    if mask is None:
        return x.mask
    if mask.dtype != np.bool_:
        return Value(g.op("Cast", [g.keras(mask)], f"{layer.name}/mask", to=onnx_dtype(np.bool_)), mask.shape,
                     np.bool_)
    return mask


def _initial_states(layer, kwargs):
    init = kwargs.get("initial_state")
    if init is None:
        return None
    init = list(init) if isinstance(init, (list, tuple)) else [init]
    if not all(isinstance(s, Value) for s in init):
        raise unsupported(layer, "its initial_state is not a model tensor (a constant or a Python value)")
    return init


def _check_inputs(layer, inputs):
    if len(inputs) != 1:
        raise unsupported(layer, f"it is called on {len(inputs)} tensors; expected one sequence")
    if inputs[0].rank != 3:
        raise unsupported(layer, f"its input has shape {inputs[0].shape}; expected (batch, time, features)")


def _rnn_layer(g, layer, inputs, kwargs, outs):
    _check_inputs(layer, inputs)
    x = inputs[0]
    mask = _mask_of(g, layer, x, kwargs)
    res = run(g, layer, x, _initial_states(layer, kwargs), mask, layer.return_sequences)
    out_mask = x.mask if layer.return_sequences else None
    if layer.return_sequences:
        values = [Value(res.seq, outs[0][0], x.dtype, TIME_MAJOR, mask=out_mask)]
    else:
        values = [Value(res.last, outs[0][0], x.dtype)]
    if layer.return_state:
        values += [Value(s, spec[0], x.dtype) for s, spec in zip(res.states, outs[1:])]
    return values


def _bidirectional(g, layer, inputs, kwargs, outs):
    _check_inputs(layer, inputs)
    x = inputs[0]
    mask = _mask_of(g, layer, x, kwargs)
    init = _initial_states(layer, kwargs)
    fwd_init = bwd_init = None
    if init is not None:
        half = len(init) // 2
        fwd_init, bwd_init = init[:half], init[half:]
    seqs = layer.return_sequences
    fwd = run(g, layer.forward_layer, x, fwd_init, mask, seqs)
    # Keras reverses the backward layer's sequence so that both line up in time
    bwd = run(g, layer.backward_layer, x, bwd_init, mask, seqs, reversed_seq=True)
    y, y_rev = (fwd.seq, bwd.seq) if seqs else (fwd.last, bwd.last)
    name = layer.name
    mode = layer.merge_mode
    if mode == "concat":
        merged = [g.op("Concat", [y, y_rev], f"{name}/concat", axis=-1)]
    elif mode == "sum":
        merged = [g.op("Add", [y, y_rev], f"{name}/sum")]
    elif mode == "mul":
        merged = [g.op("Mul", [y, y_rev], f"{name}/mul")]
    elif mode == "ave":
        merged = [g.op("Div", [g.op("Add", [y, y_rev], f"{name}/sum"), g.const(np.asarray(2, x.dtype), "two")],
                       f"{name}/ave")]
    else:
        merged = [y, y_rev]
    out_mask = mask if seqs else None
    values = [Value(m, spec[0], x.dtype, TIME_MAJOR if seqs else None, mask=out_mask) for m, spec in zip(merged, outs)]
    if layer.return_state:
        states = fwd.states + bwd.states
        values += [Value(s, spec[0], x.dtype) for s, spec in zip(states, outs[len(merged):])]
    return values
