"""tw.saved_model: versioned JSON graphs + tensor file, loadable without the model's code."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tensorweave as tw
import tensorweave.saved_model as sm
from tensorweave.saving.validation import LoadError


class Model:
    """Variables, a while loop and a cond over them, a stateful counter, a big constant."""

    def __init__(self):
        self.w = tw.Variable(np.arange(6, dtype=np.float32).reshape(2, 3) / 10, name="w")
        self.count = tw.Variable(0, dtype=tw.int64, name="count", trainable=False)
        self.table = np.linspace(-1, 1, 300).astype(np.float32)

    @tw.function(input_signature=[tw.TensorSpec([None, 2], tw.float32, name="x")])
    def __call__(self, x):
        self.count.assign_add(np.int64(1))
        y = tw.matmul(x, self.w)
        i, z = tw.while_loop(lambda i, z: i < 3, lambda i, z: (i + 1, z * 1.5 + tw.reduce_sum(self.w)), (0, y))
        z = tw.cond(tw.reduce_sum(z) > 0, lambda: z + tw.constant(self.table)[:3], lambda: -z)
        return {"z": z, "steps": i}

    @tw.function
    def scaled(self, x, k):
        return x[..., 1:] * self.w[0, 0] + tw.cast(k, tw.float32)


def _reference(m, x, w=None):
    """The model's computation in NumPy (``w`` instead of the variable's value when given)."""
    w = m.w.numpy() if w is None else w
    z = x @ w
    for _ in range(3):
        z = z * 1.5 + w.sum()
    return z + m.table[:3] if z.sum() > 0 else -z


@pytest.fixture
def saved(tmp_path):
    m = Model()
    x = np.ones((2, 2), np.float32)
    m.scaled(tw.constant(x), tw.constant(2))
    m.scaled(tw.constant(np.ones((3, 4), np.float32)), tw.constant(1))
    path = str(tmp_path / "model")
    sm.save(m, path)
    return m, path


def test_layout_json_format_and_fingerprint(saved):
    _, path = saved
    assert sorted(os.listdir(path)) == ["assets", "fingerprint.json", "saved_model.json", "variables"]
    assert os.listdir(os.path.join(path, "variables")) == ["variables.safetensors"]
    doc = json.load(open(os.path.join(path, "saved_model.json")))
    assert doc["format"] == "tensorweave.saved_model" and doc["version"] == 1
    assert sorted(v["name"] for v in doc["variables"]) == ["count:0", "w:0"]
    sig = doc["signatures"]["serving_default"]
    assert sig["inputs"] == [{"name": "x", "dtype": "float32", "shape": [None, 2]}]
    assert {o["name"] for o in sig["outputs"]} == {"z", "steps"}
    ops = {n["op"] for f in doc["functions"] for n in f["graph"]["nodes"]}
    assert {"StatefulWhile", "If", "VarHandleOp", "MatMul"} <= ops
    # the 300-element constant goes to the tensor file, small ones stay inline
    assert [c["shape"] for c in doc["constants"].values()] == [[300]]
    fp = json.load(open(os.path.join(path, "fingerprint.json")))
    assert len(fp["sha256"]) == 64 and set(fp["files"]) == {"saved_model.json", "variables/variables.safetensors"}


def test_outputs_match_and_state_is_real_variables(saved):
    m, path = saved
    x = np.array([[1.0, 2.0], [0.5, -1.0]], np.float32)
    ref = m(tw.constant(x))
    loaded = sm.load(path, verify_fingerprint=True)
    out = loaded.signatures["serving_default"](x=x)
    np.testing.assert_array_equal(out["z"].numpy(), ref["z"].numpy())
    np.testing.assert_allclose(out["z"].numpy(), _reference(m, x), rtol=1e-6)
    assert int(out["steps"].numpy()) == 3
    # the restored counter is a real variable that the loaded graph updates
    assert isinstance(loaded.count, tw.Variable) and int(loaded.count.numpy()) == 1
    loaded(tw.constant(x))
    assert int(loaded.count.numpy()) == 2
    assert {v.name for v in loaded.trainable_variables} == {"w:0"}
    loaded.w.assign(np.zeros((2, 3), np.float32))
    assert not loaded.signatures["serving_default"](x=x)["z"].numpy().any()


def test_attribute_function_dispatches_among_saved_traces(saved):
    m, path = saved
    loaded = sm.load(path)
    a = np.ones((2, 2), np.float32)
    b = np.full((3, 4), 2.0, np.float32)
    np.testing.assert_array_equal(loaded.scaled(a, tw.constant(2)).numpy(), m.scaled(a, tw.constant(2)).numpy())
    np.testing.assert_array_equal(loaded.scaled(b, tw.constant(1)).numpy(), m.scaled(b, tw.constant(1)).numpy())
    with pytest.raises(ValueError, match="no saved graph"):
        loaded.scaled(np.ones((5,), np.float32), tw.constant(1))
    with pytest.raises(AttributeError, match="saved attributes"):
        loaded.missing


def test_signature_call_errors_name_the_inputs(saved):
    _, path = saved
    sig = sm.load(path).signatures["serving_default"]
    with pytest.raises(TypeError, match=r"missing input\(s\) \['x'\]"):
        sig()
    with pytest.raises(TypeError, match="no input named 'y'"):
        sig(y=np.ones((1, 2), np.float32))
    with pytest.raises(ValueError, match="expects"):
        sig(x=np.ones((1, 3), np.float32))
    assert "x: TensorSpec([?,2], float32)" in repr(sig)


def test_gradients_through_loaded_control_flow(saved):
    m, path = saved
    loaded = sm.load(path)
    x = tw.constant(np.array([[1.0, 2.0], [0.5, -1.0]], np.float32))
    with tw.GradientTape() as tape:
        z = loaded(x)["z"]
        loss = tw.reduce_sum(z * z)
    g = tape.gradient(loss, loaded.w).numpy()
    # central differences of the NumPy reference, in float64
    w0, xv, eps = m.w.numpy().astype(np.float64), x.numpy().astype(np.float64), 1e-4
    num = np.zeros_like(w0)
    for idx in np.ndindex(*w0.shape):
        e = np.zeros_like(w0)
        e[idx] = eps
        num[idx] = ((_reference(m, xv, w0 + e) ** 2).sum() - (_reference(m, xv, w0 - e) ** 2).sum()) / (2 * eps)
    np.testing.assert_allclose(g, num, rtol=2e-3)


FRESH = textwrap.dedent("""
    import json, sys, numpy as np
    import tensorweave.saved_model as sm
    loaded = sm.load(sys.argv[1])
    x = np.load(sys.argv[2])
    out = loaded.signatures["serving_default"](x=x)
    print(json.dumps({k: v.numpy().tolist() for k, v in out.items()}))
    print(json.dumps(loaded.scaled(np.ones((2, 2), np.float32), np.int32(2)).numpy().tolist()))
    print("Model" in dir(sys.modules.get("__main__")), "test_saved_model" in sys.modules)
""")


def test_fresh_process_without_the_model_code(saved, tmp_path):
    m, path = saved
    x = np.array([[3.0, -2.0]], np.float32)
    np.save(tmp_path / "x.npy", x)
    proc = subprocess.run([sys.executable, "-c", FRESH, path, str(tmp_path / "x.npy")], capture_output=True,
                          text=True, timeout=120, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    out = json.loads(lines[0])
    ref = m(tw.constant(x))
    np.testing.assert_array_equal(np.array(out["z"], np.float32), ref["z"].numpy())
    assert json.loads(lines[1]) == m.scaled(tw.constant(np.ones((2, 2), np.float32)), tw.constant(2)).numpy().tolist()
    assert lines[2] == "False False"


def test_functions_and_concrete_functions_and_signatures(tmp_path):
    @tw.function(input_signature=[tw.TensorSpec([None], tw.float32), tw.TensorSpec([], tw.int32)])
    def f(values, k):
        top = tw.math.top_k(values, k=2).values
        return top * tw.cast(k, tw.float32), tw.reverse(values, [0])[1:]

    sm.save(f, str(tmp_path / "f"))
    loaded = sm.load(str(tmp_path / "f"))
    sig = loaded.signatures["serving_default"]
    assert sig.input_names == ["values", "k"] and sig.output_names == ["output_0", "output_1"]
    v = np.array([1.0, 5.0, 3.0], np.float32)
    out = sig(v, np.int32(3))
    np.testing.assert_array_equal(out["output_0"].numpy(), [15.0, 9.0])
    np.testing.assert_array_equal(out["output_1"].numpy(), [5.0, 1.0])
    a, b = loaded(v, np.int32(1))
    np.testing.assert_array_equal(a.numpy(), [5.0, 3.0])

    g = tw.function(lambda x: {"double": x * 2.0, "neg": -x})
    cf = g.get_concrete_function(tw.TensorSpec([2], tw.float32))
    sm.save(cf, str(tmp_path / "g"), signatures={"double_it": cf, "again": f})
    loaded = sm.load(str(tmp_path / "g"))
    assert sorted(loaded.signatures) == ["again", "double_it"]
    assert loaded.signatures["double_it"].output_names == ["double", "neg"]
    # a bare ConcreteFunction does not know its Python parameter names: inputs keep the node names
    assert loaded.signatures["double_it"].input_names == ["input"]
    np.testing.assert_array_equal(loaded.signatures["double_it"](input=np.ones(2, np.float32))["double"].numpy(), [2, 2])


def test_dtypes_constants_and_slices_roundtrip(tmp_path):
    v16 = tw.Variable(np.array([1.5, -2.25], np.float16), name="h")
    vb = tw.Variable(np.array([1.0, 2.0, 3.0], dtype=tw.bfloat16.np_dtype), name="bf")
    big = np.arange(100, dtype=np.int64) * (2 ** 40)
    nan = np.array([np.nan, np.inf, -np.inf, 1.0], np.float32)

    @tw.function(input_signature=[tw.TensorSpec([None, 4], tw.float32)])
    def f(x):
        y = x[:, ::2] + tw.cast(v16[None, :], tw.float32)
        z = x[..., -1] + tw.cast(tw.reduce_sum(vb), tw.float32)
        return y, z, tw.constant(big)[::7], x * nan, tw.constant(["a", "b"])

    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    ref = f(x)
    sm.save(f, str(tmp_path / "f"))
    doc = json.load(open(tmp_path / "f" / "saved_model.json"))
    assert any(c["dtype"] == "int64" for c in doc["constants"].values())
    out = sm.load(str(tmp_path / "f"))(x)
    for a, b in zip(out, ref):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert out[2].dtype is tw.int64 and out[4].numpy().tolist() == ["a", "b"]


def test_keras_model_serving_signature(tmp_path):
    from tensorweave import keras
    keras.utils.set_random_seed(0)
    a = keras.Input(shape=(4,), name="features")
    h = keras.layers.Dense(8, activation="relu", name="hidden")(a)
    model = keras.Model(a, [keras.layers.Dense(2, name="logits")(h), keras.layers.Dense(1, name="score")(h)])
    sm.save(model, str(tmp_path / "k"))
    loaded = sm.load(str(tmp_path / "k"))
    sig = loaded.signatures["serving_default"]
    assert sig.input_names == ["features"] and sorted(sig.output_names) == ["logits", "score"]
    x = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    out = sig(features=x)
    ref = model.predict(x, verbose=0)
    np.testing.assert_array_equal(out["logits"].numpy(), ref[0])
    np.testing.assert_array_equal(out["score"].numpy(), ref[1])
    assert loaded.keras_metadata["class_name"] == "Functional"
    assert all(isinstance(v, tw.Variable) for v in loaded.variables)


def test_assets_are_copied(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("a\nb\n")

    class WithAsset:
        def __init__(self):
            self.vocab = sm.Asset(str(vocab))

        @tw.function(input_signature=[tw.TensorSpec([], tw.float32)])
        def __call__(self, x):
            return x + 1.0

    sm.save(WithAsset(), str(tmp_path / "a"))
    loaded = sm.load(str(tmp_path / "a"))
    assert loaded.vocab.asset_path.startswith(str(tmp_path / "a"))
    assert open(loaded.vocab.asset_path).read() == "a\nb\n"
    assert float(loaded(np.float32(1.0)).numpy()) == 2.0


def test_save_is_atomic_and_refuses_what_it_cannot_save(tmp_path):
    path = str(tmp_path / "m")
    f = tw.function(lambda x: x + 1.0, input_signature=[tw.TensorSpec([], tw.float32)])
    sm.save(f, path)
    g = tw.function(lambda x: tw.py_function(lambda v: v * 2, [x], tw.float32),
                    input_signature=[tw.TensorSpec([], tw.float32)])
    with pytest.raises(ValueError, match="py_function runs Python code and cannot be saved"):
        sm.save(g, path)
    # the earlier SavedModel is intact and no temporary directory is left behind
    assert float(sm.load(path)(np.float32(1.0)).numpy()) == 2.0
    assert sorted(os.listdir(tmp_path)) == ["m"]
    sm.save(tw.function(lambda x: x * 10.0, input_signature=[tw.TensorSpec([], tw.float32)]), path)
    assert float(sm.load(path)(np.float32(1.0)).numpy()) == 10.0
    assert sorted(os.listdir(tmp_path)) == ["m"]
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not a SavedModel"):
        sm.save(f, str(other))
    with pytest.warns(UserWarning, match="never called"):
        with pytest.raises(ValueError, match="no traced tw.function"):
            class Nothing:
                g = tw.function(lambda self, x: x)
            sm.save(Nothing(), str(tmp_path / "n"))


def test_fingerprint_detects_changes(saved):
    _, path = saved
    p = os.path.join(path, "variables", "variables.safetensors")
    data = bytearray(open(p, "rb").read())
    data[-1] ^= 0xFF
    open(p, "wb").write(bytes(data))
    sm.load(path)   # still well-formed
    with pytest.raises(LoadError, match="fingerprint mismatch"):
        sm.load(path, verify_fingerprint=True)
    assert sm.read_info(path)["fingerprint_ok"] is False


KERAS_FRESH = textwrap.dedent("""
    import json, sys, numpy as np
    import tensorweave.saved_model as sm
    sig = sm.load(sys.argv[1]).signatures["serving_default"]
    data = np.load(sys.argv[2])
    out = sig(image=data["image"], tokens=data["tokens"])
    print(json.dumps({k: v.numpy().tolist() for k, v in out.items()}))
""")


def test_keras_layers_run_in_a_fresh_process(tmp_path):
    """Conv, pooling, batch norm, dropout, embedding with mask, LSTM and GRU: each layer's ops
    (some registered only when Keras imports them) load in a process that never imported Keras."""
    from tensorweave import keras
    keras.utils.set_random_seed(3)
    image = keras.Input(shape=(8, 8, 2), name="image")
    tokens = keras.Input(shape=(6,), dtype="int32", name="tokens")
    h = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(image)
    h = keras.layers.BatchNormalization()(keras.layers.MaxPooling2D()(h))
    h = keras.layers.Dropout(0.5)(keras.layers.GlobalAveragePooling2D()(h))
    e = keras.layers.Embedding(12, 5, mask_zero=True)(tokens)
    s = keras.layers.LSTM(3, return_sequences=True)(e)
    s = keras.layers.GRU(4)(s)
    out = keras.layers.Dense(2, name="out")(keras.layers.Concatenate()([h, s]))
    model = keras.Model([image, tokens], out)
    rng = np.random.default_rng(0)
    x = {"image": rng.normal(size=(3, 8, 8, 2)).astype(np.float32),
         "tokens": np.array([[1, 2, 3, 0, 0, 0], [4, 5, 6, 7, 8, 9], [11, 0, 0, 0, 0, 0]], np.int32)}
    ref = model.predict([x["image"], x["tokens"]], verbose=0)
    path = str(tmp_path / "k")
    model.save(path)
    np.savez(tmp_path / "x.npz", **x)
    proc = subprocess.run([sys.executable, "-c", KERAS_FRESH, path, str(tmp_path / "x.npz")], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    np.testing.assert_allclose(np.array(json.loads(proc.stdout)["out"], np.float32), ref, rtol=1e-6, atol=1e-6)


def test_output_structure_keeps_tuples_lists_and_dicts(tmp_path):
    """A saved tw.function returns the containers it returned when traced: a tuple stays a
    tuple (not a list), a list a list, a dict a dict."""
    @tw.function(input_signature=[tw.TensorSpec([2], tw.float32)])
    def f(x):
        return (x + 1.0, [x * 2.0, {"n": -x, 7: None}]), x, [None, 3, "s", 1.5, True]

    class Holder:
        pass
    h = Holder()
    h.f = f
    f.get_concrete_function()
    path = str(tmp_path / "structured")
    tw.saved_model.save(h, path)
    out = tw.saved_model.load(path).f(tw.constant([1.0, 2.0]))
    assert type(out) is tuple and type(out[0]) is tuple and type(out[0][1]) is list
    assert type(out[0][1][1]) is dict and list(out[0][1][1]) == ["n", 7] and out[0][1][1][7] is None
    assert out[0][0].numpy().tolist() == [2.0, 3.0] and out[1].numpy().tolist() == [1.0, 2.0]
    assert out[2] == [None, 3, "s", 1.5, True]

    @tw.function(input_signature=[tw.TensorSpec([2], tw.float32)])
    def g(x):
        return x, float("nan")
    h.f = g
    g.get_concrete_function()
    with pytest.raises(ValueError, match="a value of type float cannot be saved"):
        tw.saved_model.save(h, str(tmp_path / "nan"))
