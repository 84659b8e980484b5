"""Recurrent layers: forward values against NumPy re-implementations of Keras' equations (the
references of tests/opinfos/rnn.py) given the same weights, on both the fused path and the
step-by-step path; the fused ops' gradients against the step-by-step composite of tw ops;
masks (explicit and from Embedding(mask_zero=True)); Bidirectional merge modes; the layer
harness (config round trip, tw.function == eager, float64 gradients); PyTorch parity when
torch is installed."""
import json

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import keras
from tensorweave.keras.layers import rnn as R
from tensorweave.keras.layers.embedding import Embedding

from keras_tests.layer_harness import layer_test
from opinfos.rnn import ref_gru, ref_lstm, ref_simple


def _x(rng, b=3, t=5, f=4, dtype=np.float32):
    return rng.uniform(-1, 1, size=(b, t, f)).astype(dtype)


def _mask(b, t):
    m = np.ones((b, t), bool)
    m[0, :2] = False          # leading padding
    m[1, -2:] = False         # trailing padding
    if b > 2:
        m[2, 2] = False       # a hole
    return m


def _step_by_step(layer):
    """Forces the cell-by-cell loop of ordinary ops (the composite the fused ops must match)."""
    layer.cell._fused_activations = lambda: None
    return layer


def _np(t):
    return np.asarray(t.numpy() if hasattr(t, "numpy") else t)


def _ref(layer, x, mask=None, initial_state=None):
    """The NumPy reference for ``layer`` (LSTM, GRU or SimpleRNN) with its weights:
    (full output sequence in processed order, final states)."""
    cell = layer.cell
    w = [v.numpy().astype(np.float64) for v in cell.weights]
    b, u = x.shape[0], cell.units
    kw = dict(mask=mask, go_backwards=layer.go_backwards, zero_output_for_mask=layer.zero_output_for_mask)
    if isinstance(cell, R.LSTMCell):
        h0, c0 = initial_state if initial_state is not None else (np.zeros((b, u)), np.zeros((b, u)))
        bias = w[2] if cell.use_bias else np.zeros(4 * u)
        out, h, c = ref_lstm(x.astype(np.float64), h0, c0, w[0], w[1], bias,
                             activation=R.activations.serialize(cell.activation),
                             recurrent_activation=R.activations.serialize(cell.recurrent_activation), **kw)
        return out, [h, c]
    if isinstance(cell, R.GRUCell):
        h0 = initial_state[0] if initial_state is not None else np.zeros((b, u))
        if not cell.use_bias:
            ib = rb = np.zeros(3 * u)
        elif cell.reset_after:
            ib, rb = w[2][0], w[2][1]
        else:
            ib, rb = w[2], np.zeros(3 * u)
        out, h = ref_gru(x.astype(np.float64), h0, w[0], w[1], ib, rb,
                         activation=R.activations.serialize(cell.activation),
                         recurrent_activation=R.activations.serialize(cell.recurrent_activation),
                         reset_after=cell.reset_after, **kw)
        return out, [h]
    h0 = initial_state[0] if initial_state is not None else np.zeros((b, u))
    bias = w[2] if cell.use_bias else np.zeros(u)
    out, h = ref_simple(x.astype(np.float64), h0, w[0], w[1], bias,
                        activation=R.activations.serialize(cell.activation), **kw)
    return out, [h]


def _check_against_ref(layer, x, mask=None, initial_state=None, tol=2e-5):
    call = {}
    if mask is not None:
        call["mask"] = mask
    if initial_state is not None:
        call["initial_state"] = [s.astype(np.float32) for s in initial_state]
    got = layer(x, **call)
    seq, states = _ref(layer, x, mask, initial_state)
    got = list(got) if isinstance(got, (tuple, list)) else [got]
    want_out = seq if layer.return_sequences else seq[:, -1]
    np.testing.assert_allclose(_np(got[0]), want_out, rtol=tol, atol=tol)
    if layer.return_state:
        assert len(got) == 1 + len(states)
        for g, s in zip(got[1:], states):
            np.testing.assert_allclose(_np(g), s, rtol=tol, atol=tol)
    return got


LAYER_CASES = [
    (R.LSTM, {}),
    (R.LSTM, {"return_sequences": True, "return_state": True}),
    (R.LSTM, {"go_backwards": True, "return_sequences": True}),
    (R.LSTM, {"use_bias": False, "unit_forget_bias": False, "return_state": True}),
    (R.LSTM, {"activation": "relu", "recurrent_activation": "hard_sigmoid", "return_sequences": True}),
    (R.GRU, {}),
    (R.GRU, {"return_sequences": True, "return_state": True, "go_backwards": True}),
    (R.GRU, {"reset_after": False, "return_sequences": True}),
    (R.GRU, {"use_bias": False, "return_state": True}),
    (R.SimpleRNN, {"return_sequences": True}),
    (R.SimpleRNN, {"activation": "relu", "go_backwards": True, "return_state": True}),
]


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "step_by_step"])
@pytest.mark.parametrize("cls,kwargs", LAYER_CASES, ids=lambda v: getattr(v, "__name__", None) or
                         "-".join(f"{k}={v}" for k, v in sorted(v.items())) or "defaults")
def test_layer_matches_numpy(cls, kwargs, fused, rng):
    layer = cls(3, **kwargs)
    if not fused:
        _step_by_step(layer)
    x = _x(rng)
    _check_against_ref(layer, x)
    # random (not initial) weights, masks and an initial state
    layer.set_weights([rng.uniform(-0.6, 0.6, size=w.shape).astype(np.float32) for w in layer.get_weights()])
    n_states = 2 if cls is R.LSTM else 1
    init = [rng.uniform(-1, 1, size=(3, 3)) for _ in range(n_states)]
    _check_against_ref(layer, x, mask=_mask(3, 5), initial_state=init)
    layer.zero_output_for_mask = True
    _check_against_ref(layer, x, mask=_mask(3, 5))


def test_lstm_defaults_and_weights():
    layer = R.LSTM(4)
    layer(np.zeros((1, 2, 3), np.float32))
    cfg = layer.get_config()
    assert cfg["kernel_initializer"]["class_name"] == "GlorotUniform"
    assert cfg["recurrent_initializer"]["class_name"] == "Orthogonal"
    assert cfg["unit_forget_bias"] is True and cfg["activation"] == "tanh" and cfg["recurrent_activation"] == "sigmoid"
    k, rk, b = layer.get_weights()
    assert k.shape == (3, 16) and rk.shape == (4, 16) and b.shape == (16,)
    np.testing.assert_array_equal(b, [0] * 4 + [1] * 4 + [0] * 8)
    np.testing.assert_allclose(rk @ rk.T, np.eye(4), atol=1e-5)   # orthogonal rows
    gru = R.GRU(2)
    gru(np.zeros((1, 2, 3), np.float32))
    assert [w.shape for w in gru.get_weights()] == [(3, 6), (2, 6), (2, 6)]
    assert gru.reset_after is True and gru.units == 2


# ---- gradients: fused ops vs the step-by-step composite -------------------------------------------
@pytest.mark.parametrize("cls,kwargs", [
    (R.LSTM, {"return_sequences": True}),
    (R.LSTM, {"go_backwards": True, "return_state": True}),
    (R.GRU, {"return_sequences": True, "go_backwards": True}),
    (R.GRU, {"reset_after": False, "return_state": True}),
    (R.SimpleRNN, {"return_sequences": True, "activation": "sigmoid"}),
])
@pytest.mark.parametrize("masked", [False, True], ids=["nomask", "mask"])
def test_fused_gradients_match_composite(cls, kwargs, masked, rng):
    x = _x(rng, dtype=np.float64)
    mask = _mask(3, 5) if masked else None
    fused = cls(3, dtype="float64", **kwargs)
    comp = _step_by_step(cls(3, dtype="float64", **kwargs))
    fused(x)
    comp(x)
    weights = [rng.uniform(-0.6, 0.6, size=w.shape) for w in fused.get_weights()]
    fused.set_weights(weights)
    comp.set_weights(weights)
    n_states = 2 if cls is R.LSTM else 1
    init = [rng.uniform(-1, 1, size=(3, 3)) for _ in range(n_states)]

    def grads(layer):
        xt = tw.constant(x)
        st = [tw.constant(s) for s in init]
        with tw.GradientTape() as tape:
            tape.watch(xt)
            for s in st:
                tape.watch(s)
            out = layer(xt, initial_state=st, mask=mask)
            outs = list(out) if isinstance(out, tuple) else [out]
            loss = sum(tw.reduce_sum(o * tw.constant(np.cos(np.arange(int(np.prod(o.shape.as_list())))).reshape(
                o.shape.as_list()))) for o in outs)
        return [_np(o) for o in outs], [_np(g) for g in tape.gradient(loss, [xt] + st + layer.trainable_weights)]
    out_f, g_f = grads(fused)
    out_c, g_c = grads(comp)
    for a, b in zip(out_f, out_c):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    assert len(g_f) == len(g_c) == 1 + n_states + 3 - (0 if fused.use_bias else 1)
    for a, b in zip(g_f, g_c):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-11)


def test_fused_path_is_one_node_each_way():
    layer = R.LSTM(3, return_sequences=True)
    fn = tw.function(lambda x: layer(x))
    g = fn.get_concrete_function(tw.TensorSpec([2, 5, 4], tw.float32)).graph
    types = [op.type for op in g.get_operations()]
    assert types.count("LSTMSequence") == 1 and "While" not in types
    with tw.GradientTape() as tape:
        y = tw.reduce_sum(layer(tw.ones([2, 5, 4])))
    assert [g.shape.as_list() for g in tape.gradient(y, layer.trainable_weights)] == [[4, 12], [3, 12], [12]]


# ---- masks --------------------------------------------------------------------------------------------
def test_mask_from_embedding_in_sequential_and_functional(rng):
    ids = np.array([[3, 5, 1, 0, 0], [2, 0, 4, 7, 0], [1, 2, 3, 4, 5]], np.int32)
    emb = Embedding(10, 4, mask_zero=True)
    lstm = R.LSTM(3, return_sequences=True)
    seq = keras.Sequential([keras.Input((5,), dtype="int32"), emb, lstm])
    got_seq = _np(seq(ids))
    vectors = _np(emb(ids))
    want, _ = _ref(lstm, vectors.astype(np.float64), mask=ids != 0)
    np.testing.assert_allclose(got_seq, want, rtol=2e-5, atol=2e-5)
    # functional, with the last output and a second layer receiving the mask
    inp = keras.Input((5,), dtype="int32")
    h = emb(inp)
    h = lstm(h)
    last = R.GRU(2)
    out = last(h)
    model = keras.Model(inp, out)
    got = _np(model(ids))
    want_seq, _ = _ref(lstm, vectors.astype(np.float64), mask=ids != 0)
    want_last, _ = _ref(last, want_seq, mask=ids != 0)
    np.testing.assert_allclose(got, want_last[:, -1], rtol=2e-5, atol=2e-5)
    # eager: the mask rides on the embedding's output tensor
    e = emb(ids)
    np.testing.assert_allclose(_np(lstm(e)), want_seq, rtol=2e-5, atol=2e-5)
    assert _np(lstm(e)._keras_mask).tolist() == (ids != 0).tolist()
    assert getattr(R.LSTM(2)(e), "_keras_mask", None) is None   # return_sequences=False drops it


def test_masked_training_step_in_tw_function(rng):
    ids = rng.integers(0, 8, size=(4, 6)).astype(np.int32)
    ids[:, 4:] = 0
    model = keras.Sequential([keras.Input((6,), dtype="int32"), Embedding(8, 5, mask_zero=True), R.LSTM(4),
                              keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    y = rng.standard_normal((4, 1)).astype(np.float32)
    losses = [float(np.asarray(model.train_on_batch(ids, y))) for _ in range(15)]
    assert np.isfinite(losses).all() and losses[-1] < losses[0]


# ---- Bidirectional ---------------------------------------------------------------------------------
@pytest.mark.parametrize("merge_mode", ["concat", "sum", "mul", "ave", None])
def test_bidirectional_merge_modes(merge_mode, rng):
    x = _x(rng)
    mask = _mask(3, 5)
    bi = R.Bidirectional(R.LSTM(3, return_sequences=True, return_state=True), merge_mode=merge_mode)
    out = bi(x, mask=mask)
    fw, bw = bi.forward_layer, bi.backward_layer
    assert bw.go_backwards and not fw.go_backwards and fw.zero_output_for_mask and bw.zero_output_for_mask
    seq_f, st_f = _ref(fw, x, mask)
    seq_b, st_b = _ref(bw, x, mask)
    seq_b = seq_b[:, ::-1]
    merged = {"concat": np.concatenate([seq_f, seq_b], -1), "sum": seq_f + seq_b, "mul": seq_f * seq_b,
              "ave": (seq_f + seq_b) / 2, None: None}[merge_mode]
    if merge_mode is None:
        assert len(out) == 2 + 4
        np.testing.assert_allclose(_np(out[0]), seq_f, rtol=2e-5, atol=2e-5)
        np.testing.assert_allclose(_np(out[1]), seq_b, rtol=2e-5, atol=2e-5)
        states = out[2:]
    else:
        assert len(out) == 1 + 4
        np.testing.assert_allclose(_np(out[0]), merged, rtol=2e-5, atol=2e-5)
        states = out[1:]
    for g, w in zip(states, st_f + st_b):
        np.testing.assert_allclose(_np(g), w, rtol=2e-5, atol=2e-5)
    # masked steps are zeros in both directions
    assert np.all(_np(out[0])[~mask] == 0)
    assert len(bi.weights) == 6 and bi.weights[0].shape.as_list() == [4, 12]


def test_bidirectional_last_output_backward_layer_and_config(rng):
    x = _x(rng)
    fwd = R.GRU(2)
    bwd = R.GRU(2, go_backwards=True, activation="relu")
    bi = R.Bidirectional(fwd, backward_layer=bwd)
    y = _np(bi(x))
    want = np.concatenate([_ref(bi.forward_layer, x)[0][:, -1], _ref(bwd, x)[0][:, -1]], -1)
    np.testing.assert_allclose(y, want, rtol=2e-5, atol=2e-5)
    cfg = json.loads(json.dumps(bi.get_config()))
    again = R.Bidirectional.from_config(cfg)
    again(x)
    again.set_weights(bi.get_weights())
    np.testing.assert_allclose(_np(again(x)), y, rtol=1e-6, atol=1e-6)
    assert again.backward_layer.activation is keras.activations.relu
    with pytest.raises(ValueError, match="go_backwards"):
        R.Bidirectional(R.GRU(2), backward_layer=R.GRU(2))
    with pytest.raises(ValueError, match="merge mode"):
        R.Bidirectional(R.GRU(2), merge_mode="max")


# ---- generic RNN over cells ----------------------------------------------------------------------------
class MinimalCell(keras.layers.Layer):
    """The cell of Keras' RNN docstring (``output = x @ W + h @ U``)."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.state_size = units

    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(input_shape[-1], self.units), initializer="uniform", name="kernel")
        self.recurrent_kernel = self.add_weight(shape=(self.units, self.units), initializer="uniform",
                                                name="recurrent_kernel")

    def call(self, inputs, states):
        out = tw.matmul(inputs, self.kernel) + tw.matmul(states[0], self.recurrent_kernel)
        return out, [out]

    def get_config(self):
        return {**super().get_config(), "units": self.units}


def test_rnn_with_custom_cell_and_stacked_cells(rng):
    x = _x(rng)
    layer = R.RNN(MinimalCell(3), return_sequences=True, go_backwards=True)
    got = _np(layer(x))
    w, u = (v.numpy().astype(np.float64) for v in layer.weights)
    want, _ = ref_simple(x, np.zeros((3, 3)), w, u, np.zeros(3), activation="linear", go_backwards=True)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    # a custom cell round-trips through its config with custom_objects
    cfg = json.loads(json.dumps(layer.get_config()))
    again = R.RNN.from_config(cfg, custom_objects={"MinimalCell": MinimalCell})
    assert isinstance(again.cell, MinimalCell) and again.go_backwards
    # stacked cells: two LSTM cells equal two LSTM layers with the same weights
    stacked = R.RNN([R.LSTMCell(3), R.LSTMCell(2)], return_state=True)
    out = stacked(x)
    assert [tuple(o.shape.as_list()) for o in out] == [(3, 2), (3, 3), (3, 3), (3, 2), (3, 2)]
    l1, l2 = R.LSTM(3, return_sequences=True), R.LSTM(2)
    l2(l1(x))
    l1.set_weights(stacked.get_weights()[:3])
    l2.set_weights(stacked.get_weights()[3:])
    np.testing.assert_allclose(_np(out[0]), _np(l2(l1(x))), rtol=2e-5, atol=2e-5)
    again = R.RNN.from_config(json.loads(json.dumps(stacked.get_config())))
    assert [type(c) for c in again.cell.cells] == [R.LSTMCell, R.LSTMCell]


def test_cells_called_directly_match_layers(rng):
    x = _x(rng)
    for layer in (R.LSTM(3), R.GRU(3), R.GRU(3, reset_after=False), R.SimpleRNN(3)):
        layer(x)
        states = layer.get_initial_state(3)
        for t in range(x.shape[1]):
            out, states = layer.cell(x[:, t], states)
        np.testing.assert_allclose(_np(out), _np(layer(x)), rtol=2e-5, atol=2e-5)


# ---- dropout -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [R.LSTM, R.GRU, R.SimpleRNN])
def test_dropout(cls, rng):
    x = _x(rng, b=8)
    plain = cls(3, return_sequences=True)
    drop = cls(3, return_sequences=True, dropout=0.5, seed=1)
    plain(x)
    drop(x)
    drop.set_weights(plain.get_weights())
    np.testing.assert_allclose(_np(drop(x, training=False)), _np(plain(x)), rtol=1e-6)
    assert not np.allclose(_np(drop(x, training=True)), _np(plain(x)))
    rec = cls(3, return_sequences=True, recurrent_dropout=0.5, dropout=0.2, seed=2)   # the step-by-step path
    rec(x)
    rec.set_weights(plain.get_weights())
    np.testing.assert_allclose(_np(rec(x, training=False)), _np(plain(x)), rtol=2e-5, atol=2e-5)
    with tw.GradientTape() as tape:
        y = tw.reduce_sum(rec(x, training=True))
    assert all(g is not None for g in tape.gradient(y, rec.trainable_weights))


# ---- errors -------------------------------------------------------------------------------------------
def test_errors(rng):
    with pytest.raises(NotImplementedError, match="stateful"):
        R.LSTM(2, stateful=True)
    with pytest.raises(ValueError, match="positive"):
        R.GRU(0)
    layer = R.LSTM(2)
    with pytest.raises(ValueError, match=layer.name):
        layer(np.ones((2, 3), np.float32))
    layer(np.ones((2, 3, 4), np.float32))
    with pytest.raises(ValueError, match=layer.name):
        layer(np.ones((2, 3, 5), np.float32))
    with pytest.raises(ValueError, match="initial state"):
        layer(np.ones((2, 3, 4), np.float32), initial_state=[np.zeros((2, 2), np.float32)])
    slow, fast = R.RNN(MinimalCell(2)), R.LSTM(2)
    slow(np.ones((1, 1, 3), np.float32))
    fast(np.ones((1, 1, 3), np.float32))
    g = tw.Graph()
    with g.as_default():
        with pytest.raises(ValueError, match="known number of time steps"):
            slow(tw.placeholder(tw.float32, [None, None, 3]))
        fast = fast(tw.placeholder(tw.float32, [None, None, 3]))   # the fused op takes any length
        assert fast.shape.as_list() == [None, 2]


# ---- the layer harness -------------------------------------------------------------------------------
class SoftsignGRU(R.RNN):
    """RNN over a GRU cell with an activation the fused kernels lack (so: the step-by-step path);
    the cell is made here so that the harness' float64 copy gets a float64 cell."""

    def __init__(self, cell=None, **kwargs):
        super().__init__(cell or R.GRUCell(2, activation="softsign", dtype=kwargs.get("dtype")), **kwargs)


class StackedRNN(R.RNN):
    def __init__(self, cell=None, **kwargs):
        dtype = kwargs.get("dtype")
        super().__init__(cell or [R.SimpleRNNCell(3, dtype=dtype), R.LSTMCell(2, dtype=dtype)], **kwargs)


HARNESS = [
    (R.LSTM, {"units": 3}, (2, 4, 3), {"expected_output_shape": (2, 3), "expected_num_trainable_weights": 3,
                                       "supports_masking": True, "bad_input_shape": (2, 4, 5)}),
    (R.LSTM, {"units": 2, "return_sequences": True, "go_backwards": True}, (2, 4, 3),
     {"expected_output_shape": (2, 4, 2)}),
    (R.GRU, {"units": 3, "return_sequences": True}, (2, 4, 3), {"expected_output_shape": (2, 4, 3),
                                                                "expected_num_trainable_weights": 3}),
    (R.GRU, {"units": 2, "reset_after": False, "use_bias": False}, (2, 4, 3),
     {"expected_num_trainable_weights": 2}),
    (R.SimpleRNN, {"units": 3, "activation": "relu"}, (2, 4, 3), {"expected_output_shape": (2, 3)}),
    (R.LSTM, {"units": 2, "dropout": 0.3, "recurrent_dropout": 0.3}, (2, 4, 3),
     {"call_kwargs": {"training": False}}),
    (R.Bidirectional, {"layer": R.LSTM(2, return_sequences=True)}, (2, 4, 3),
     {"expected_output_shape": (2, 4, 4), "expected_num_trainable_weights": 6}),
    (R.Bidirectional, {"layer": R.GRU(2), "merge_mode": "ave"}, (2, 4, 3), {"expected_output_shape": (2, 2)}),
    (SoftsignGRU, {}, (2, 4, 3), {"expected_output_shape": (2, 2)}),
    (StackedRNN, {"return_sequences": True}, (2, 4, 3),
     {"expected_output_shape": (2, 4, 2), "expected_num_trainable_weights": 6}),
]


@pytest.mark.parametrize("cls,kwargs,shape,extra", HARNESS,
                         ids=[f"{c.__name__}-{i}" for i, (c, *_ ) in enumerate(HARNESS)])
def test_harness(cls, kwargs, shape, extra):
    layer_test(cls, kwargs, shape, **extra)


# ---- PyTorch parity ---------------------------------------------------------------------------------
def test_lstm_and_gru_match_torch(rng):
    torch = pytest.importorskip("torch")
    x = _x(rng, b=4, t=7, f=5)
    lstm = R.LSTM(6, return_sequences=True, return_state=True)
    lstm(x)
    lstm.set_weights([rng.uniform(-0.5, 0.5, size=w.shape).astype(np.float32) for w in lstm.get_weights()])
    k, rk, b = lstm.get_weights()
    t_lstm = torch.nn.LSTM(5, 6, batch_first=True)
    with torch.no_grad():
        t_lstm.weight_ih_l0.copy_(torch.tensor(k.T))        # both use gate order (i, f, g, o)
        t_lstm.weight_hh_l0.copy_(torch.tensor(rk.T))
        t_lstm.bias_ih_l0.copy_(torch.tensor(b))
        t_lstm.bias_hh_l0.zero_()
        t_out, (t_h, t_c) = t_lstm(torch.tensor(x))
    seq, h, c = lstm(x)
    np.testing.assert_allclose(_np(seq), t_out.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_np(h), t_h[0].numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_np(c), t_c[0].numpy(), rtol=1e-5, atol=1e-5)

    gru = R.GRU(6, return_sequences=True)
    gru(x)
    gru.set_weights([rng.uniform(-0.5, 0.5, size=w.shape).astype(np.float32) for w in gru.get_weights()])
    k, rk, b = gru.get_weights()
    u = 6

    def torch_order(m):   # Keras (z, r, h) -> torch (r, z, n)
        return np.concatenate([m[..., u:2 * u], m[..., :u], m[..., 2 * u:]], axis=-1)
    t_gru = torch.nn.GRU(5, 6, batch_first=True)
    with torch.no_grad():
        t_gru.weight_ih_l0.copy_(torch.tensor(torch_order(k).T))
        t_gru.weight_hh_l0.copy_(torch.tensor(torch_order(rk).T))
        t_gru.bias_ih_l0.copy_(torch.tensor(torch_order(b[0])))
        t_gru.bias_hh_l0.copy_(torch.tensor(torch_order(b[1])))
        t_out, _ = t_gru(torch.tensor(x))
    np.testing.assert_allclose(_np(gru(x)), t_out.numpy(), rtol=1e-5, atol=1e-5)


def test_lstm_gradients_match_torch(rng):
    torch = pytest.importorskip("torch")
    x = _x(rng, b=4, t=6, f=5, dtype=np.float64)
    lstm = R.LSTM(3, dtype="float64")
    lstm(x)
    lstm.set_weights([rng.uniform(-0.5, 0.5, size=w.shape) for w in lstm.get_weights()])
    k, rk, b = lstm.get_weights()
    t_lstm = torch.nn.LSTM(5, 3, batch_first=True).double()
    with torch.no_grad():
        t_lstm.weight_ih_l0.copy_(torch.tensor(k.T))
        t_lstm.weight_hh_l0.copy_(torch.tensor(rk.T))
        t_lstm.bias_ih_l0.copy_(torch.tensor(b))
        t_lstm.bias_hh_l0.zero_()
    xt = torch.tensor(x, requires_grad=True)
    _, (h, _) = t_lstm(xt)
    (h[0] ** 2).sum().backward()
    xx = tw.constant(x)
    with tw.GradientTape() as tape:
        tape.watch(xx)
        loss = tw.reduce_sum(tw.square(lstm(xx)))
    gx, gk, grk, gb = tape.gradient(loss, [xx] + lstm.trainable_weights)
    np.testing.assert_allclose(_np(gx), xt.grad.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(_np(gk), t_lstm.weight_ih_l0.grad.numpy().T, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(_np(grk), t_lstm.weight_hh_l0.grad.numpy().T, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(_np(gb), t_lstm.bias_ih_l0.grad.numpy(), rtol=1e-9, atol=1e-12)


# ---- functional models: states between layers, config round trip ------------------------------------
def test_functional_round_trip_with_states_masks_and_attention(rng):
    from tensorweave.keras.layers.attention import MultiHeadAttention
    custom = {c.__name__: c for c in (R.LSTM, R.GRU, R.SimpleRNN, R.Bidirectional, MultiHeadAttention)}
    inp = keras.Input((6,), dtype="int32")
    x = Embedding(20, 8, mask_zero=True)(inp)
    x = R.Bidirectional(R.LSTM(4, return_sequences=True))(x)
    x = MultiHeadAttention(2, 4)(x, x)
    _, h = R.GRU(3, return_state=True)(x)
    y = R.SimpleRNN(3)(x, initial_state=[h])
    model = keras.Model(inp, keras.layers.Dense(1)(y))
    again = keras.Model.from_config(json.loads(json.dumps(model.get_config())), custom_objects=custom)
    again.set_weights(model.get_weights())
    ids = np.array([[1, 2, 3, 0, 0, 0], [4, 5, 6, 7, 8, 9]], np.int32)
    np.testing.assert_allclose(_np(again(ids)), _np(model(ids)), rtol=1e-6, atol=1e-6)
    # Keras 2's list form [x, *initial_states] is the same call
    lstm = R.LSTM(3)
    xs = _x(rng)
    h0, c0 = rng.standard_normal((2, 3, 3)).astype(np.float32)
    np.testing.assert_array_equal(_np(lstm([xs, h0, c0])), _np(lstm(xs, initial_state=[h0, c0])))
