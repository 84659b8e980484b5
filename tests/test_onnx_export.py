"""tw.onnx.export: each exported model passes onnx.checker and, run by ONNX's reference evaluator
at two batch sizes, gives model.predict's outputs."""
import os
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx.reference import ReferenceEvaluator  # noqa: E402

import tensorweave.onnx as tw_onnx  # noqa: E402
from tensorweave import keras  # noqa: E402
from tensorweave.keras import layers as L  # noqa: E402

BATCHES = (1, 4)

try:  # not a dependency: where it is installed, the exported models must run there too
    import onnxruntime
except ImportError:
    onnxruntime = None


@pytest.fixture(autouse=True)
def _seed():
    keras.utils.set_random_seed(0)


def _random_inputs(model, batch, rng, int_high=None):
    xs = []
    for t in model.inputs:
        shape = [batch] + [d for d in t.shape[1:]]
        if t.dtype.is_integer or int_high is not None:
            xs.append(rng.integers(0, int_high or 10, size=shape).astype(t.dtype.np_dtype))
        else:
            xs.append(rng.normal(size=shape).astype(t.dtype.np_dtype))
    return xs


def check(model, tmp_path, make_inputs=None, opset=17, rtol=1e-4, atol=1e-5, **kwargs):
    """Exports ``model``, checks the file, and compares the reference evaluator's outputs (and ONNX
    Runtime's, where installed) with ``model.predict`` for two batch sizes. Returns the ModelProto."""
    path = os.path.join(tmp_path, "model.onnx")
    proto = tw_onnx.export(model, path, opset=opset, **kwargs)
    loaded = onnx.load(path)
    onnx.checker.check_model(loaded, full_check=True)
    assert loaded.opset_import[0].version == opset
    sessions = [ReferenceEvaluator(loaded).run]
    if onnxruntime is not None:
        sessions.append(onnxruntime.InferenceSession(loaded.SerializeToString(),
                                                     providers=["CPUExecutionProvider"]).run)
    names = [i.name for i in loaded.graph.input]
    rng = np.random.default_rng(1)
    for batch in BATCHES:
        xs = make_inputs(batch, rng) if make_inputs else _random_inputs(model, batch, rng)
        expected = model.predict(xs if len(xs) > 1 else xs[0], verbose=0)
        expected = expected if isinstance(expected, (list, tuple)) else [expected]
        for run in sessions:
            got = run(None, dict(zip(names, xs)))
            assert len(got) == len(expected)
            for g, e in zip(got, expected):
                assert g.shape == e.shape
                assert np.isfinite(e).all()  # (assert_allclose would pass NaN == NaN)
                np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)
    return proto


def op_types(proto):
    return [n.op_type for n in proto.graph.node]


# ---- feed-forward --------------------------------------------------------------------------------
def test_mlp(tmp_path):
    model = keras.Sequential([keras.Input(shape=(10,), name="features"), L.Dense(16, activation="relu"),
                              L.Dropout(0.5), L.Dense(8, activation="tanh"), L.Dense(3, activation="softmax")])
    proto = check(model, tmp_path)
    assert op_types(proto) == ["MatMul", "Add", "Relu", "MatMul", "Add", "Tanh", "MatMul", "Add", "Softmax"]
    assert proto.graph.input[0].name == "features"
    dims = proto.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == "batch" and dims[1].dim_value == 10


@pytest.mark.parametrize("activation", ["relu", "sigmoid", "tanh", "softmax", "log_softmax", "elu", "selu", "gelu",
                                        "softplus", "softsign", "swish", "relu6", "leaky_relu", "hard_sigmoid",
                                        "exponential", "linear"])
def test_activations(tmp_path, activation):
    model = keras.Sequential([keras.Input(shape=(6,)), L.Dense(5, activation=activation),
                              L.Activation(activation)])
    check(model, tmp_path, make_inputs=lambda b, rng: [rng.normal(size=(b, 6)).astype(np.float32) * 0.5])


def test_gelu_native_op_from_opset_20(tmp_path):
    if onnx.defs.onnx_opset_version() < 20:
        pytest.skip("onnx too old for opset 20")
    model = keras.Sequential([keras.Input(shape=(6,)), L.Dense(5, activation="gelu")])
    assert "Gelu" in op_types(check(model, tmp_path, opset=20))


def test_dense_on_sequences_reshape_permute(tmp_path):
    model = keras.Sequential([keras.Input(shape=(4, 6)), L.Dense(5), L.Permute((2, 1)), L.Dense(3, activation="relu"),
                              L.Reshape((-1,)), L.Reshape((5, 3)), L.Flatten(), L.Dense(2)])
    check(model, tmp_path)


# ---- convolutional -------------------------------------------------------------------------------
def test_cnn_channels_last(tmp_path):
    model = keras.Sequential([
        keras.Input(shape=(12, 12, 3), name="image"),
        L.Conv2D(8, 3, padding="same", activation="relu"),
        L.MaxPooling2D(),
        L.Conv2D(6, 3, strides=2, padding="valid", activation="relu"),
        L.Flatten(),
        L.Dense(10, activation="softmax")])
    proto = check(model, tmp_path)
    ops = op_types(proto)
    # one Transpose into ONNX's channels-first convolutions, one back before Flatten
    assert ops.count("Transpose") == 2 and ops.count("Conv") == 2 and "MaxPool" in ops


def test_cnn_channels_first(tmp_path):
    model = keras.Sequential([
        keras.Input(shape=(3, 11, 11)),
        L.Conv2D(4, 3, padding="same", data_format="channels_first", activation="relu"),
        L.AveragePooling2D(padding="same", data_format="channels_first"),
        L.Conv2D(5, (2, 3), dilation_rate=2, data_format="channels_first"),
        L.Flatten(data_format="channels_first"),
        L.Dense(4)])
    proto = check(model, tmp_path)
    assert op_types(proto).count("Transpose") == 1  # only Flatten's channels-last order


def test_fully_convolutional_unknown_sizes(tmp_path):
    # spatial sizes unknown at export: "same" padding is left to the runtime (auto_pad)
    model = keras.Sequential([keras.Input(shape=(None, None, 3)), L.Conv2D(4, 3, strides=2, padding="same"),
                              L.MaxPooling2D(3, strides=2, padding="same"),
                              L.Conv2D(2, 2, dilation_rate=2, padding="same"), L.GlobalMaxPooling2D()])
    proto = check(model, tmp_path, make_inputs=lambda b, r: [r.normal(size=(b, 9, 12, 3)).astype(np.float32)])
    name = proto.graph.input[0].name
    assert [d.dim_param for d in proto.graph.input[0].type.tensor_type.shape.dim[:3]] == [
        "batch", f"{name}_dim1", f"{name}_dim2"]


@pytest.mark.parametrize("make_layers, shape", [
    (lambda: [L.Conv1D(4, 3, padding="causal", dilation_rate=2, activation="relu"), L.MaxPooling1D(2),
              L.Conv1D(3, 2, strides=2, padding="same"), L.AveragePooling1D(2, strides=1), L.GlobalMaxPooling1D()],
     (16, 5)),
    (lambda: [L.Conv2D(6, 3, groups=3, padding="same"), L.DepthwiseConv2D(3, depth_multiplier=2, strides=2,
                                                                          padding="same", activation="relu6"),
              L.SeparableConv2D(5, 3, depth_multiplier=2), L.GlobalAveragePooling2D(keepdims=True), L.Flatten()],
     (10, 9, 3)),
    (lambda: [L.Conv2DTranspose(4, 3, strides=2, padding="same"), L.Conv2DTranspose(3, (3, 2), strides=2),
              L.Conv2DTranspose(2, 3, strides=2, padding="same", output_padding=1), L.GlobalMaxPooling2D()],
     (5, 4, 3)),
    (lambda: [L.Conv3D(3, 2, padding="same", activation="elu"), L.MaxPooling3D(2), L.Conv3DTranspose(2, 2, strides=2),
              L.GlobalAveragePooling3D()], (4, 6, 4, 2)),
    (lambda: [L.Conv2D(4, 3, data_format="channels_first"),
              L.Conv2DTranspose(3, 3, strides=2, padding="same", data_format="channels_first"),
              L.DepthwiseConv2D(2, data_format="channels_first"), L.MaxPooling2D(data_format="channels_first"),
              L.GlobalAveragePooling2D(data_format="channels_first")], (2, 9, 9)),
], ids=["conv1d", "grouped-depthwise-separable", "transposed", "conv3d", "channels-first-mix"])
def test_conv_variants(tmp_path, make_layers, shape):
    model = keras.Sequential([keras.Input(shape=shape)] + make_layers())
    check(model, tmp_path)


def test_batch_normalization_after_training(tmp_path):
    model = keras.Sequential([
        keras.Input(shape=(8, 8, 2)),
        L.Conv2D(4, 3, padding="same"),
        L.BatchNormalization(),
        L.Activation("relu"),
        L.GlobalAveragePooling2D(),
        L.Dense(6),
        L.BatchNormalization(momentum=0.5, center=False),
        L.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    rng = np.random.default_rng(0)
    x = rng.normal(2.0, 3.0, size=(32, 8, 8, 2)).astype(np.float32)
    model.fit(x, rng.normal(size=(32, 1)).astype(np.float32), epochs=2, batch_size=8, verbose=0)
    bn = model.layers[1]
    assert np.abs(bn.moving_mean.numpy()).max() > 1e-2 and np.abs(bn.moving_variance.numpy() - 1).max() > 1e-2
    proto = check(model, tmp_path, make_inputs=lambda b, r: [r.normal(2.0, 3.0, size=(b, 8, 8, 2)).astype(np.float32)])
    assert "BatchNormalization" in op_types(proto)  # the conv's NCHW layout suits ONNX's op


def test_layer_normalization(tmp_path):
    inp = keras.Input(shape=(5, 6))
    a = L.LayerNormalization()(inp)
    b = L.LayerNormalization(axis=[1, 2], epsilon=1e-5)(inp)
    c = L.LayerNormalization(rms_scaling=True)(inp)
    d = L.LayerNormalization(axis=1, center=False)(inp)
    model = keras.Model(inp, [a, b, c, d])
    for w in model.weights:  # non-trivial gamma/beta
        w.assign(np.random.default_rng(3).normal(size=w.shape.as_list()).astype(np.float32))
    assert "LayerNormalization" in op_types(check(model, tmp_path))
    check(model, tmp_path, opset=13)  # spelled out with reductions before opset 17


# ---- embeddings and recurrent ----------------------------------------------------------------------
def _ids(vocab, steps, pad=False):
    def make(batch, rng):
        ids = rng.integers(1, vocab, size=(batch, steps)).astype(np.int32)
        if pad:  # pre- and post-padding, and one fully padded row
            for i in range(batch):
                ids[i, :i % 3] = 0
                ids[i, steps - (i % 2) * 2:] = 0
            ids[-1] = 0
        return [ids]
    return make


@pytest.mark.parametrize("return_sequences", [False, True])
def test_embedding_lstm(tmp_path, return_sequences):
    model = keras.Sequential([keras.Input(shape=(7,), dtype="int32", name="tokens"), L.Embedding(20, 8),
                              L.LSTM(6, return_sequences=return_sequences), L.Dense(2, activation="softmax")])
    proto = check(model, tmp_path, make_inputs=_ids(20, 7))
    assert "LSTM" in op_types(proto) and "Gather" in op_types(proto)


@pytest.mark.parametrize("opset", [13, 17])
@pytest.mark.parametrize("kind, kwargs", [
    ("LSTM", {"go_backwards": True}), ("LSTM", {"use_bias": False, "unit_forget_bias": False}),
    ("GRU", {}), ("GRU", {"reset_after": False, "go_backwards": True}), ("SimpleRNN", {}),
])
def test_recurrent_native(tmp_path, kind, kwargs, opset):
    layer = getattr(L, kind)(5, return_sequences=True, **kwargs)
    model = keras.Sequential([keras.Input(shape=(6, 4)), layer, getattr(L, kind)(3, **kwargs)])
    # random biases so that the ONNX bias layout is really exercised
    for w in model.weights:
        if "bias" in w.name:
            w.assign(np.random.default_rng(2).normal(size=w.shape.as_list()).astype(np.float32))
    proto = check(model, tmp_path, opset=opset)
    assert op_types(proto).count({"SimpleRNN": "RNN"}.get(kind, kind)) == 2


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "SimpleRNN"])
def test_recurrent_masked_and_custom_activation(tmp_path, kind):
    # a mask (pre- and post-padding) and a non-default activation: both take the Scan lowering
    inp = keras.Input(shape=(8,), dtype="int32")
    h = L.Embedding(15, 4, mask_zero=True)(inp)
    seq = getattr(L, kind)(5, return_sequences=True)(h)
    last = getattr(L, kind)(3, go_backwards=True)(seq)
    relu = getattr(L, kind)(3, activation="relu", return_sequences=True)(L.Embedding(15, 4)(inp))
    pooled = L.GlobalAveragePooling1D()(seq)
    model = keras.Model(inp, [seq, last, relu, pooled])
    proto = check(model, tmp_path, make_inputs=_ids(15, 8, pad=True))
    assert "Scan" in op_types(proto)


def test_masks_through_merges(tmp_path):
    a, b = keras.Input(shape=(6,), dtype="int32"), keras.Input(shape=(6,), dtype="int32")
    ea, eb = L.Embedding(10, 3, mask_zero=True)(a), L.Embedding(10, 3, mask_zero=True)(b)
    features = L.Concatenate()([ea, eb])        # a step counts where either input has it
    steps = L.Concatenate(axis=1)([ea, eb])     # the masks concatenate in time
    both = L.Add()([ea, eb])                    # a step counts where both inputs have it
    model = keras.Model([a, b], [L.GRU(2)(features), L.LSTM(2)(steps), L.SimpleRNN(2)(both)])

    def make(batch, rng):
        return _ids(10, 6, pad=True)(batch, rng) + [rng.integers(0, 3, size=(batch, 6)).astype(np.int32)]
    check(model, tmp_path, make_inputs=make)


def test_rnn_over_cells(tmp_path):
    model = keras.Sequential([keras.Input(shape=(5, 3)), L.RNN(L.LSTMCell(4), return_sequences=True),
                              L.RNN(L.GRUCell(2), go_backwards=True)])
    check(model, tmp_path)
    stacked = keras.Sequential([keras.Input(shape=(5, 3)), L.RNN([L.LSTMCell(4), L.LSTMCell(2)], name="stack")])
    with pytest.raises(tw_onnx.UnsupportedLayerError, match=r"'stack' \(RNN\): its cell is StackedRNNCells"):
        tw_onnx.export(stacked)


def test_bidirectional_and_states(tmp_path):
    x = keras.Input(shape=(6, 3))
    seq, h_f, c_f, h_b, c_b = L.Bidirectional(L.LSTM(4, return_sequences=True, return_state=True))(x)
    summed = L.Bidirectional(L.GRU(3), merge_mode="sum")(seq)
    ave = L.Bidirectional(L.SimpleRNN(2, return_sequences=True), merge_mode="ave")(x)
    # states from one layer start another
    out, h, c = L.LSTM(4, return_state=True)(x, initial_state=[h_f, c_b])
    model = keras.Model(x, [seq, summed, ave, out, h, c, h_b])
    check(model, tmp_path)


def test_bidirectional_masked(tmp_path):
    # returning sequences, Bidirectional zeroes the masked steps (instead of repeating outputs)
    ids = keras.Input(shape=(7,), dtype="int32")
    seq = L.Bidirectional(L.LSTM(3, return_sequences=True))(L.Embedding(12, 4, mask_zero=True)(ids))
    model = keras.Model(ids, [seq, L.Bidirectional(L.GRU(2))(seq)])
    check(model, tmp_path, make_inputs=_ids(12, 7, pad=True))


# ---- functional graphs ---------------------------------------------------------------------------------
def test_functional_branches(tmp_path):
    a = keras.Input(shape=(6,), name="a")
    b = keras.Input(shape=(6,), name="b")
    h1 = L.Dense(8, activation="relu")(a)
    h2 = L.Dense(8, activation="sigmoid")(b)
    added = L.Add()([h1, h2, L.Dense(8)(a)])
    cat = L.Concatenate()([added, h1, b])
    merged = [L.Subtract()([h1, h2]), L.Multiply()([h1, h2]), L.Average()([h1, h2]), L.Maximum()([h1, h2]),
              L.Minimum()([h1, h2])]
    dot = L.Dot(axes=1, normalize=True)([h1, h2])
    out = L.Dense(3, activation="softmax", name="probs")(L.Concatenate()([cat] + merged + [dot]))
    model = keras.Model([a, b], [out, L.Dense(1, name="score")(cat)])
    proto = check(model, tmp_path)
    assert [o.name for o in proto.graph.output] == ["probs", "score"]
    assert [i.name for i in proto.graph.input] == ["a", "b"]


@pytest.mark.parametrize("opset", [13, 17, 18])
def test_functional_conv_branches_and_nested_model(tmp_path, opset):
    inner = keras.Sequential([keras.Input(shape=(8, 8, 4)), L.Conv2D(4, 1, activation="relu"), L.BatchNormalization()])
    x = keras.Input(shape=(8, 8, 3))
    c1 = L.Conv2D(4, 3, padding="same")(x)
    c2 = L.Conv2D(4, 1)(x)
    s = L.Add()([c1, inner(c2)])
    cat = L.Concatenate(axis=-1)([s, c2])
    model = keras.Model(x, L.Dense(2)(L.GlobalAveragePooling2D()(L.MaxPooling2D()(cat))))
    proto = check(model, tmp_path, opset=opset)
    # the branches stay channels-first between the convolutions
    assert op_types(proto).count("Transpose") == 1


def test_shared_layer_weights_stored_once(tmp_path):
    shared = L.Dense(4, activation="relu")
    a, b = keras.Input(shape=(3,)), keras.Input(shape=(3,))
    model = keras.Model([a, b], L.Dot(axes=1)([shared(a), shared(b)]))
    proto = check(model, tmp_path)
    assert sorted(i.name for i in proto.graph.initializer if "dense" in i.name) == [
        f"{shared.name}/bias", f"{shared.name}/kernel"]  # stored once


def test_float_ids_and_masked_average(tmp_path):
    # ids in a float keras.Input (the default dtype) are cast, as Keras does
    model = keras.Sequential([keras.Input(shape=(6,)), L.Embedding(9, 3, mask_zero=True), L.Dense(4),
                              L.GlobalAveragePooling1D(), L.Dense(2)])
    proto = check(model, tmp_path, make_inputs=lambda b, r: [x.astype(np.float32) for x in _ids(9, 6, pad=True)(b, r)])
    assert "Cast" in op_types(proto)


def test_sequential_built_by_calling(tmp_path):
    model = keras.Sequential([L.Dense(3, activation="relu"), L.Dense(2)])
    model.predict(np.zeros((2, 5), np.float32), verbose=0)
    check(model, tmp_path)


def test_names_and_shared_outputs(tmp_path):
    x = keras.Input(shape=(3,))
    y = L.Dense(2)(x)
    model = keras.Model(x, [y, y, x])
    proto = check(model, tmp_path, input_names=["in"], output_names=["y1", "y2", "echo"])
    assert [o.name for o in proto.graph.output] == ["y1", "y2", "echo"]
    with pytest.raises(ValueError, match="output_names has 1 name"):
        tw_onnx.export(model, None, output_names=["only"])


# ---- errors and files --------------------------------------------------------------------------------------
def test_unsupported_layer_names_layer_and_class(tmp_path):
    model = keras.Sequential([keras.Input(shape=(3,)), L.Dense(2), L.Lambda(lambda t: t * 2, name="doubler")])
    path = os.path.join(tmp_path, "model.onnx")
    with open(path, "wb") as f:
        f.write(b"previous")
    with pytest.raises(tw_onnx.UnsupportedLayerError, match=r"layer 'doubler' \(Lambda\).*supported layers: .*Dense"):
        tw_onnx.export(model, path)
    with open(path, "rb") as f:  # the old file is untouched and no temporary file is left
        assert f.read() == b"previous"
    assert os.listdir(tmp_path) == ["model.onnx"]


def test_unsupported_activation_and_subclass():
    def custom(t):
        return t * 2
    model = keras.Sequential([keras.Input(shape=(3,)), L.Dense(2, activation=custom, name="d")])
    with pytest.raises(tw_onnx.UnsupportedLayerError, match=r"layer 'd' \(Dense\): its activation 'custom'"):
        tw_onnx.export(model)

    class Twice(L.Dense):
        def call(self, inputs):
            return super().call(inputs) * 2
    model = keras.Sequential([keras.Input(shape=(3,)), Twice(2, name="twice")])
    with pytest.raises(tw_onnx.UnsupportedLayerError, match=r"'twice' \(Twice\)"):
        tw_onnx.export(model)


def test_subclassed_model_is_refused():
    class Net(keras.Model):
        def __init__(self):
            super().__init__(name="net")
            self.dense = L.Dense(2)

        def call(self, x):
            return self.dense(x) * 2
    net = Net()
    net(np.zeros((1, 3), np.float32))
    with pytest.raises(tw_onnx.UnsupportedLayerError, match=r"'net' \(Net\) defines its own call"):
        tw_onnx.export(net)


def test_bad_opset_and_unbuilt_model():
    model = keras.Sequential([keras.Input(shape=(3,)), L.Dense(2)])
    with pytest.raises(ValueError, match="opset=9 is not supported"):
        tw_onnx.export(model, opset=9)
    with pytest.raises(ValueError, match="no defined inputs yet"):
        tw_onnx.export(keras.Sequential([L.Dense(2)]))


def test_overwrites_atomically(tmp_path):
    path = os.path.join(tmp_path, "model.onnx")
    with open(path, "wb") as f:
        f.write(b"old")
    model = keras.Sequential([keras.Input(shape=(3,)), L.Dense(2)])
    proto = tw_onnx.export(model, path)
    assert onnx.load(path) == proto
    assert os.listdir(tmp_path) == ["model.onnx"]


def test_missing_onnx_gives_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)  # makes `import onnx` fail
    model = keras.Sequential([keras.Input(shape=(3,)), L.Dense(2)])
    with pytest.raises(ImportError, match=r"pip install 'tensorweave\[onnx\]'"):
        tw_onnx.export(model)
