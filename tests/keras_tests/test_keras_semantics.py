"""Keras semantics that programs written for Keras/tf.keras rely on (issue 16's correctness bugs).

Each test failed before its fix; the expected values come from Keras 3.15 with TensorFlow 2.21.
"""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave import keras


@pytest.fixture(autouse=True)
def _fresh_names():
    keras.backend.clear_session()
    keras.utils.set_random_seed(3)


# ---- 1: dict targets are matched to outputs by name -------------------------------------------
def test_dict_targets_matched_by_output_name_not_key_order():
    x = keras.Input((3,))
    b = keras.layers.Dense(1, name="b_out")(x)
    a = keras.layers.Dense(1, name="a_out")(x)
    model = keras.Model(x, [b, a])       # outputs in the order b, a; sorted keys would be a, b
    model.compile(keras.optimizers.SGD(0.1), loss={"b_out": "mse", "a_out": "mse"}, metrics={"a_out": ["mae"]})
    data = np.random.default_rng(0).random((64, 3)).astype(np.float32)
    hist = model.fit(data, {"b_out": np.full((64, 1), 10.0), "a_out": np.zeros((64, 1))}, epochs=40, verbose=0)
    pb, pa = model.predict(data, verbose=0)
    assert abs(pb.mean() - 10.0) < 0.5 and abs(pa.mean()) < 0.5
    assert hist.history["a_out_mae"][-1] < 0.5
    ev = model.evaluate(data, {"a_out": np.zeros((64, 1)), "b_out": np.full((64, 1), 10.0)}, return_dict=True,
                        verbose=0)
    assert ev["a_out_loss"] < 1.0 and ev["b_out_loss"] < 1.0   # swapped targets would give ~100


def test_dict_targets_with_unknown_name_raise():
    x = keras.Input((3,))
    model = keras.Model(x, [keras.layers.Dense(1, name="p")(x), keras.layers.Dense(1, name="q")(x)])
    model.compile("sgd", loss="mse")
    with pytest.raises(ValueError, match=r"key\(s\) \['r'\] that match no model output.*\['p', 'q'\]"):
        model.fit(np.ones((4, 3)), {"p": np.ones((4, 1)), "r": np.ones((4, 1))}, verbose=0)


def test_dict_outputs_are_named_by_their_keys():
    x = keras.Input((3,))
    model = keras.Model(x, {"zeta": keras.layers.Dense(1)(x), "alpha": keras.layers.Dense(2)(x)})
    model.compile(keras.optimizers.SGD(0.1), loss={"zeta": "mse", "alpha": "mse"})
    data = np.ones((16, 3), np.float32)
    model.fit(data, {"zeta": np.full((16, 1), 3.0), "alpha": np.zeros((16, 2))}, epochs=30, verbose=0)
    out = model.predict(data, verbose=0)
    assert abs(out["zeta"].mean() - 3.0) < 0.3 and abs(out["alpha"].mean()) < 0.3


# ---- 2: CustomModel(inputs, outputs) keeps the graph and the subclass's methods ----------------
class _CountingModel(keras.Model):
    traces = []

    def train_step(self, data):
        self.traces.append(1)
        return super().train_step(data)


@pytest.mark.parametrize("keyword", [False, True])
def test_subclass_constructed_functionally_keeps_graph_and_train_step(keyword):
    x = keras.Input((3,))
    y = keras.layers.Dense(2)(x)
    model = _CountingModel(inputs=x, outputs=y) if keyword else _CountingModel(x, y)
    assert isinstance(model, _CountingModel) and len(model.weights) == 2 and len(model.layers) == 2
    assert model(np.ones((1, 3), np.float32)).shape == (1, 2)
    del _CountingModel.traces[:]
    model.compile("sgd", "mse")
    model.fit(np.ones((8, 3)), np.ones((8, 2)), batch_size=4, epochs=1, verbose=0, shuffle=False)
    assert _CountingModel.traces    # traced once per input signature
    assert type(model).__name__ == "_CountingModel"


def test_subclass_calling_functional_init_from_its_own_init():
    class Wrapped(keras.Model):
        def __init__(self):
            inp = keras.Input((4,))
            super().__init__(inp, keras.layers.Dense(3)(inp), name="wrapped")

    model = Wrapped()
    assert model.name == "wrapped" and model(np.ones((2, 4), np.float32)).shape == (2, 3)
    assert model.output_shape == (None, 3)


# ---- 3: train_step/test_step receive (x, y) without sample weights ----------------------------
def test_train_step_receives_x_y_pair_without_sample_weight():
    seen = []

    class PairModel(keras.Model):
        def train_step(self, data):
            seen.append(len(data))
            x, y = data                  # the usual Keras idiom
            with tw.GradientTape() as tape:
                loss = keras.losses.mean_squared_error(y, self(x, training=True))
            grads = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
            return {"loss": tw.reduce_mean(loss)}

        def test_step(self, data):
            x, y = data
            return {"loss": tw.reduce_mean(keras.losses.mean_squared_error(y, self(x)))}

    x = keras.Input((3,))
    model = PairModel(x, keras.layers.Dense(1)(x))
    model.compile("sgd")
    hist = model.fit(np.ones((8, 3)), np.ones((8, 1)), epochs=3, verbose=0, validation_data=(np.ones((4, 3)),
                                                                                             np.ones((4, 1))))
    assert seen and set(seen) == {2}
    assert hist.history["loss"][-1] < hist.history["loss"][0] and "val_loss" in hist.history


def test_train_step_receives_x_alone_and_x_y_weights_triple():
    seen = []

    class Probe(keras.Model):
        def train_step(self, data):
            seen.append(type(data).__name__ if not isinstance(data, tuple) else len(data))
            return {}

    x = keras.Input((3,))
    model = Probe(x, keras.layers.Dense(1)(x))
    model.compile("sgd")
    model.fit(np.ones((4, 3)), verbose=0)
    model.fit(np.ones((4, 3)), np.ones((4, 1)), sample_weight=np.ones(4), verbose=0)
    assert len(seen) == 2 and "Tensor" in seen[0] and seen[1] == 3   # x itself, then (x, y, sample_weight)


# ---- 4: inputs are cast to the Input's dtype ---------------------------------------------------
def test_inputs_cast_to_input_dtype():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    out = model(np.ones((2, 4), np.uint8))
    assert out.dtype == tw.float32
    np.testing.assert_allclose(out.numpy(), model(np.ones((2, 4), np.float32)).numpy())
    x = keras.Input((4,), dtype="bool")
    model = keras.Model(x, keras.layers.Dense(2)(x))       # a bool Input feeding Dense (Keras casts)
    assert model(np.ones((2, 4), bool)).dtype == tw.float32
    img = keras.Input((5, 5, 1), dtype="uint8")
    conv = keras.Model(img, keras.layers.Conv2D(2, 3)(img))
    assert conv.predict(np.full((1, 5, 5, 1), 7, np.uint8), verbose=0).dtype == np.float32


# ---- 5: a static shape contradicting the Input's raises ----------------------------------------
@pytest.mark.parametrize("kind", ["functional", "sequential"])
def test_static_shape_mismatch_against_input_raises(kind):
    if kind == "sequential":
        model = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Flatten()])
    else:
        x = keras.Input((8, 8, 1))
        model = keras.Model(x, keras.layers.Flatten()(x))
    with pytest.raises(ValueError, match=r"incompatible with the layer: expected shape=\(None, 8, 8, 1\), "
                                         r"found shape=\(2, 9, 9, 1\)"):
        model(np.ones((2, 9, 9, 1), np.float32))
    assert model(np.ones((3, 8, 8, 1), np.float32)).shape == (3, 64)


# ---- 6: a loaded SavedModel is called like the model -------------------------------------------
def test_saved_model_load_call_returns_tensor(tmp_path):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="head")])
    tw.saved_model.save(model, str(tmp_path / "sm"))
    loaded = tw.saved_model.load(str(tmp_path / "sm"))
    x = np.ones((1, 3), np.float32)
    out = loaded(x)
    assert isinstance(out, tw.Tensor)
    np.testing.assert_allclose(out.numpy(), model(x).numpy(), rtol=1e-6)
    sig = loaded.signatures["serving_default"](x)
    assert isinstance(sig, dict) and list(sig) == ["head"]


# ---- 7: weight order and names ------------------------------------------------------------------
def test_weight_order_after_freezing_and_paths():
    inner = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2), keras.layers.BatchNormalization()])
    model = keras.Sequential([keras.Input((3,)), inner, keras.layers.Dense(1)])
    inner.layers[0].trainable = False
    # Keras 3.15: [v.path for v in model.weights]
    assert [v.path for v in model.weights] == [
        "sequential/dense/kernel", "sequential/dense/bias", "sequential/batch_normalization/gamma",
        "sequential/batch_normalization/beta", "sequential/batch_normalization/moving_mean",
        "sequential/batch_normalization/moving_variance", "sequential_1/dense_1/kernel", "sequential_1/dense_1/bias"]
    assert [v.path for v in model.trainable_weights] == [
        "sequential/batch_normalization/gamma", "sequential/batch_normalization/beta", "sequential_1/dense_1/kernel",
        "sequential_1/dense_1/bias"]
    copy = keras.models.clone_model(model)
    copy.set_weights(model.get_weights())
    np.testing.assert_array_equal(copy.predict(np.ones((2, 3)), verbose=0), model.predict(np.ones((2, 3)), verbose=0))


def test_variable_names_carry_outer_layers_and_are_unique():
    class Block(keras.layers.Layer):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.proj = keras.layers.Dense(2, name="proj")

        def call(self, x):
            return self.proj(x)

    class Net(keras.Model):
        def __init__(self):
            super().__init__(name="net")
            self.b1, self.b2 = Block(name="b1"), Block(name="b2")

        def call(self, x):
            return self.b2(self.b1(x))

    net = Net()
    net(np.ones((1, 2), np.float32))
    names = [v.name for v in net.weights]
    assert names == ["net/b1/proj/kernel:0", "net/b1/proj/bias:0", "net/b2/proj/kernel:0", "net/b2/proj/bias:0"]
    x = keras.Input((2,))
    with pytest.raises(ValueError, match='The name "d" is used 2 times in the model'):
        keras.Model(x, keras.layers.Dense(1, name="d")(keras.layers.Dense(2, name="d")(x)))


# ---- 8: errors that confused users ----------------------------------------------------------------
def test_tf_ops_on_keras_tensors_become_layers():
    a, b = keras.Input((4,)), keras.Input((4,))
    both = tw.concat([a, b], axis=-1)
    mean = tw.reduce_mean(tw.nn.relu(both) * 2.0, axis=1, keepdims=True)
    gated = tw.where(mean > 0.5, mean, tw.zeros_like(mean))
    first, second = tw.split(both, 2, axis=1)
    model = keras.Model([a, b], [gated, second, tw.shape(a)[0]])
    assert mean.shape == (None, 1) and second.shape == (None, 4)
    xa, xb = np.full((2, 4), 1.0, np.float32), np.full((2, 4), -1.0, np.float32)
    g, s, n = model([xa, xb])
    np.testing.assert_allclose(g.numpy(), [[1.0], [1.0]])
    np.testing.assert_allclose(s.numpy(), xb)
    assert int(n) == 2


def test_public_ops_on_keras_tensors_keep_one_wrapping_frame():
    # The KerasTensor-to-layer path rides the wrong-keyword wrapper's failure handler: a second
    # wrapper per op cost ~0.1 us of a ~1.7 us eager add (BENCHMARKS.md, eager call path).
    for fn in (tw.add, tw.matmul, tw.reduce_sum, tw.nn.relu, tw.math.reduce_sum, tw.linalg.matmul):
        assert not hasattr(fn, "_keras_symbolic_op"), fn
        assert not hasattr(fn.__wrapped__, "__wrapped__"), fn
    x = keras.Input((3,))
    # binary ops convert both operands first: the KerasTensor's error must reach the handler as is
    out = tw.matmul(tw.expand_dims(tw.add(x, 1.0), 1), tw.ones([3, 2]))
    assert out.shape == (None, 1, 2)
    np.testing.assert_allclose(keras.Model(x, out)(np.ones((1, 3), np.float32)).numpy(), [[[6.0, 6.0]]])
    with pytest.raises(TypeError, match=r"^reduce_sum\(\) got an unexpected keyword argument 'axes'"):
        tw.reduce_sum(x, axes=1)


def test_keras_tensor_in_a_function_that_is_not_an_op_says_what_to_do():
    x = keras.Input((3,))
    with pytest.raises(TypeError, match=r"symbolic placeholder.*keras.layers.Lambda"):
        np.asarray(x)


def test_positional_training_flag_and_extra_positional_argument():
    x = keras.Input((3,))
    model = keras.Model(x, keras.layers.Dropout(0.5)(x))
    ones = np.ones((200, 3), np.float32)
    assert (model(ones, True).numpy() == 0).any()             # tf.keras: model(x, training)
    np.testing.assert_array_equal(model(ones, False).numpy(), ones)
    with pytest.raises(TypeError, match=r"model 'functional' was called with 2 positional arguments; argument 2 "
                                        r"is its `training` flag.*got ndarray of shape \(200, 3\).*list or dict"):
        model(ones, ones)


def test_fit_with_only_add_loss_losses():
    class ActivityRegularization(keras.layers.Layer):
        def call(self, inputs):
            self.add_loss(1e-2 * tw.reduce_mean(inputs))
            return inputs

    x = keras.Input((3,))
    model = keras.Model(x, ActivityRegularization()(x))      # no trainable weights: Keras warns, trains
    model.compile(optimizer="adam")
    with pytest.warns(UserWarning, match="does not have any trainable weights"):
        hist = model.fit(np.full((2, 3), 0.5), np.ones((2, 3)), verbose=0)
    np.testing.assert_allclose(hist.history["loss"], [5e-3], rtol=1e-5)
    model = keras.Model(x, ActivityRegularization()(keras.layers.Dense(3)(x)))
    model.compile(optimizer=keras.optimizers.SGD(0.5))
    hist = model.fit(np.full((8, 3), 0.5), epochs=3, verbose=0)
    assert hist.history["loss"][-1] < hist.history["loss"][0]
