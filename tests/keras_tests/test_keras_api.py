"""Layer/Model API, losses, metrics, initializers, backend and utils that Keras programs use
(issue 16). Numbers marked "Keras" were computed with Keras 3.15 / TensorFlow 2.21."""
import json

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import keras


@pytest.fixture(autouse=True)
def _fresh():
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)


YT = np.array([[0.0, 1.0, 1.0], [1.0, 0.0, 1.0]], np.float32)
YP = np.array([[0.2, 0.6, 0.9], [0.7, 0.1, -0.5]], np.float32)
POSITIVE = ("Poisson", "MeanSquaredLogarithmicError")


@pytest.mark.parametrize("name, keras_value", [        # Keras: losses.<name>()(YT, YP)
    ("MeanAbsolutePercentageError", 50000036.0), ("MeanSquaredLogarithmicError", 0.03398709371685982),
    ("LogCosh", 0.1679309755563736), ("Poisson", 0.7776679396629333), ("CosineSimilarity", -0.5637679696083069),
    ("Hinge", 0.7666666507720947), ("SquaredHinge", 0.8600000143051147), ("CategoricalHinge", 0.45000001788139343)])
def test_more_losses_match_keras(name, keras_value):
    pred = np.abs(YP) if name in POSITIVE else YP
    np.testing.assert_allclose(float(getattr(keras.losses, name)()(YT, pred)), keras_value, rtol=1e-5)
    assert keras.losses.get(keras.backend.snake_case(name) if name != "LogCosh" else "log_cosh") is not None


@pytest.mark.parametrize("name, keras_value", [        # Keras: update_state(YT, YP, sample_weight=[1, 3])
    ("MeanAbsolutePercentageError", 41666716.0), ("MeanSquaredLogarithmicError", 0.036703113466501236),
    ("RootMeanSquaredError", 0.77781742811203), ("CosineSimilarity", 0.363533616065979),
    ("LogCoshError", 0.23476092517375946), ("Poisson", 0.7804709076881409), ("Hinge", 0.8666666746139526),
    ("SquaredHinge", 1.0216667652130127), ("CategoricalHinge", 0.675000011920929)])
def test_more_metrics_match_keras(name, keras_value):
    m = getattr(keras.metrics, name)()
    m.update_state(YT, np.abs(YP) if name in POSITIVE else YP, sample_weight=[1.0, 3.0])
    np.testing.assert_allclose(float(m.result()), keras_value, rtol=1e-5)


def test_loss_aliases_reduction_regularizers_initializers():
    assert keras.losses.get("mape") is keras.losses.mean_absolute_percentage_error
    assert keras.metrics.get("rmse").name == "root_mean_squared_error"
    assert keras.losses.Reduction.SUM == "sum" and keras.losses.Reduction.AUTO == "sum_over_batch_size"
    loss = keras.losses.MeanSquaredError(reduction=keras.losses.Reduction.SUM)
    assert float(loss([[0.0], [0.0]], [[1.0], [2.0]])) == 5.0
    assert keras.regularizers.l2(0.1).get_config() == {"l2": 0.1}
    assert keras.regularizers.l1_l2().get_config() == {"l1": 0.01, "l2": 0.01}
    init = tw.random_normal_initializer(0.0, 0.02)
    assert isinstance(init, keras.initializers.RandomNormal) and init((3, 4)).shape == (3, 4)
    assert keras.initializers.glorot_uniform is keras.initializers.GlorotUniform
    with pytest.raises(AttributeError):
        tw.no_such_initializer


def test_compiled_loss_compiled_metrics_and_lr_in_a_tf_keras_2_train_step():
    class TF2Style(keras.Model):
        def train_step(self, data):
            x, y = data
            with tw.GradientTape() as tape:
                y_pred = self(x, training=True)
                loss = self.compiled_loss(y, y_pred, regularization_losses=self.losses)
            grads = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
            self.compiled_metrics.update_state(y, y_pred)
            return {m.name: m.result() for m in self.metrics}

    x = keras.Input((4,))
    model = TF2Style(x, keras.layers.Dense(1, kernel_regularizer=keras.regularizers.l2(1e-3))(x))
    model.compile(keras.optimizers.SGD(0.05), "mse", metrics=["mae"])
    model.optimizer.lr = 0.1
    assert abs(float(model.optimizer.learning_rate) - 0.1) < 1e-7
    data = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    hist = model.fit(data, data.sum(1, keepdims=True), epochs=5, verbose=0)
    assert set(hist.history) == {"loss", "mae"} and hist.history["mae"][-1] < hist.history["mae"][0]
    assert [m.name for m in model.compiled_metrics.metrics] == ["mae"]


def test_to_json_model_from_json_and_custom_object_scope():
    class Scale(keras.layers.Layer):
        def call(self, x):
            return 2 * x

    x = keras.Input((3,))
    model = keras.Model(x, keras.layers.Dense(2, name="d")(Scale(name="s")(x)))
    text = model.to_json()
    assert json.loads(text)["class_name"] == "Functional"
    with pytest.raises(ValueError, match="Unknown layer class 'Scale'"):
        keras.models.model_from_json(text)
    with keras.utils.custom_object_scope({"Scale": Scale}):
        copy = keras.models.model_from_json(text)
    copy.set_weights(model.get_weights())
    ones = np.ones((2, 3), np.float32)
    np.testing.assert_allclose(copy(ones).numpy(), model(ones).numpy())
    keras.utils.register_keras_serializable("test")(Scale)
    try:
        assert type(keras.models.model_from_json(text).layers[1]).__name__ == "Scale"
    finally:
        keras.utils.get_custom_objects().clear()


def test_load_weights_status_and_subclassed_model_into_fresh_instance(tmp_path):
    class Net(keras.Model):
        def __init__(self):
            super().__init__()
            self.d1, self.d2 = keras.layers.Dense(4, activation="relu"), keras.layers.Dense(1)

        def call(self, x):
            return self.d2(self.d1(x))

    x = np.random.default_rng(0).normal(size=(3, 5)).astype(np.float32)
    net = Net()
    expected = net(x).numpy()
    path = str(tmp_path / "net.weights.h5")
    net.save_weights(path)
    fresh = Net()
    status = fresh.load_weights(path)        # no weights yet: restored by the first call
    np.testing.assert_allclose(fresh(x).numpy(), expected, rtol=1e-6)
    status.expect_partial()
    assert net.load_weights(path).assert_consumed() is not None
    bigger = keras.Sequential([keras.Input((5,)), keras.layers.Dense(4), keras.layers.Dense(1)])
    bigger.save_weights(str(tmp_path / "seq.weights.h5"))
    small = keras.Sequential([keras.Input((5,)), keras.layers.Dense(4)])
    with pytest.raises(AssertionError, match="unused file entries"):
        small.load_weights(str(tmp_path / "seq.weights.h5")).assert_consumed()


def test_metric_add_weight_without_shape_and_layer_add_variable():
    class Count(keras.metrics.Metric):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.count = self.add_weight(name="count", initializer="zeros")

        def update_state(self, y_true, y_pred, sample_weight=None):
            self.count.assign_add(tw.cast(tw.shape(y_true)[0], tw.float32))

        def result(self):
            return self.count

    m = Count()
    m.update_state(np.ones((3, 1)), np.ones((3, 1)))
    assert float(m.result()) == 3.0 and m.count.shape == ()
    layer = keras.layers.Layer()
    v = layer.add_variable(shape=(2,), initializer="ones", name="v")
    assert v.numpy().tolist() == [1.0, 1.0] and layer.weights == [v]


def test_layer_and_model_input_output_shapes():
    x = keras.Input((6,))
    dense = keras.layers.Dense(3)
    y = dense(x)
    model = keras.Model(x, y)
    assert dense.input is x and dense.output is y and dense.input_shape == (None, 6) and dense.output_shape == (None, 3)
    assert model.input is x and model.output is y
    seq = keras.Sequential([keras.Input((6,)), keras.layers.Dense(2), keras.layers.Dense(1)])
    extractor = keras.Model(seq.inputs, [layer.output for layer in seq.layers])
    assert [tuple(o.shape) for o in extractor(np.ones((2, 6), np.float32))] == [(2, 2), (2, 1)]
    with pytest.raises(AttributeError, match="has never been called"):
        keras.layers.Dense(2).output


def test_backend_basics():
    K = keras.backend
    v = K.variable([[1, 2], [3, 4]])
    assert K.int_shape(v) == (2, 2) and K.ndim(v) == 2 and K.dtype(v) == "float32" and K.count_params(v) == 4
    K.set_value(v, [[0, 0], [0, 1]])
    assert K.get_value(v).sum() == 1.0 and K.batch_get_value([v])[0].shape == (2, 2)
    assert K.int_shape(keras.Input((3,))) == (None, 3) and K.is_keras_tensor(keras.Input((3,)))
    assert K.image_data_format() == "channels_last" and K.backend() == "tensorweave"
    with pytest.raises(ValueError, match="data_format"):
        K.set_image_data_format("nhwc")


def test_timeseries_dataset_matches_keras():
    ds = keras.utils.timeseries_dataset_from_array(np.arange(20), np.arange(20) * 10, sequence_length=4,
                                                   sequence_stride=3, sampling_rate=2, batch_size=2)
    batches = [(x.numpy().tolist(), y.numpy().tolist()) for x, y in ds]
    # Keras: [[[0, 2, 4, 6], [3, 5, 7, 9]], [0, 30]], [[[6, 8, 10, 12], [9, 11, 13, 15]], [60, 90]],
    #        [[[12, 14, 16, 18]], [120]]
    assert batches == [([[0, 2, 4, 6], [3, 5, 7, 9]], [0, 30]), ([[6, 8, 10, 12], [9, 11, 13, 15]], [60, 90]),
                       ([[12, 14, 16, 18]], [120])]
    with pytest.raises(ValueError, match="sequence_length"):
        keras.utils.timeseries_dataset_from_array(np.arange(5), None, sequence_length=0)


def test_image_and_text_datasets_from_directory(tmp_path):
    pytest.importorskip("PIL")
    for cls, value in (("cats", 10), ("dogs", 200)):
        (tmp_path / "img" / cls).mkdir(parents=True)
        (tmp_path / "txt" / cls).mkdir(parents=True)
        for i in range(3):
            keras.utils.save_img(str(tmp_path / "img" / cls / f"{i}.png"), np.full((6, 8, 3), value, np.float32),
                                 scale=False)
            (tmp_path / "txt" / cls / f"{i}.txt").write_text(f"{cls} {i}")
    ds = keras.utils.image_dataset_from_directory(str(tmp_path / "img"), image_size=(4, 4), batch_size=6, seed=1)
    images, labels = next(iter(ds))
    assert ds.class_names == ["cats", "dogs"] and images.shape == (6, 4, 4, 3)
    np.testing.assert_allclose(images.numpy()[:, 0, 0, 0], np.where(labels.numpy() == 0, 10.0, 200.0))
    train, val = keras.utils.image_dataset_from_directory(str(tmp_path / "img"), image_size=(4, 4), seed=1,
                                                          validation_split=0.5, subset="both", label_mode="categorical")
    assert sum(len(x) for x, _ in train) == 3 and next(iter(val))[1].shape == (3, 2)
    texts = keras.utils.text_dataset_from_directory(str(tmp_path / "txt"), batch_size=6, shuffle=False)
    strings, labels = next(iter(texts))
    decoded = [s.decode() if isinstance(s, bytes) else str(s) for s in strings.numpy().tolist()]
    assert decoded[0] == "cats 0" and labels.numpy().tolist() == [0, 0, 0, 1, 1, 1]
    img = keras.utils.array_to_img(np.arange(12, dtype=np.float32).reshape(2, 2, 3))
    assert keras.utils.img_to_array(img).max() == 255.0


def test_plot_model_says_what_to_install():
    try:
        import pydot  # noqa: F401
        pytest.skip("pydot is installed")
    except ImportError:
        pass
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    with pytest.raises(ImportError, match=r"install pydot .*graphviz"):
        keras.utils.plot_model(model)
