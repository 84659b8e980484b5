"""What MultiWorkerMirroredStrategy ships with a model so that the workers can rebuild it
(``multi_worker._custom_objects``, audit session 12; the Ray run is in
``test_audit12_mwms_rows.py``): the user's own classes of the model, its nested layers and its
compiled metrics and losses — never tensorweave's classes, metric names or plain functions."""
import tensorweave as tw
from tensorweave.distribute.ray.multi_worker import _custom_objects

keras = tw.keras


class Twice(keras.layers.Layer):
    def call(self, x):
        return 2.0 * x


class Block(keras.layers.Layer):
    """A custom layer holding another custom layer (found by walking ``_layers``)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.inner = Twice()

    def call(self, x):
        return self.inner(x)


class Seen(keras.metrics.Metric):
    def __init__(self, name="seen", **kwargs):
        super().__init__(name=name, **kwargs)
        self.n = self.add_variable(shape=(), name="n")

    def update_state(self, y_true, y_pred, sample_weight=None):
        self.n.assign_add(1.0)

    def result(self):
        return tw.identity(self.n)


class Half(keras.losses.Loss):
    def call(self, y_true, y_pred):
        return 0.5 * tw.reduce_mean(tw.square(y_true - y_pred), axis=-1)


class MyModel(keras.Sequential):
    pass


def _plain_metric(y_true, y_pred):
    return tw.reduce_mean(y_pred)


def test_the_users_classes_travel_and_tensorweaves_do_not():
    model = MyModel([keras.Input((3,)), Block(), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss=Half(),
                  metrics=[Seen(), "mae", keras.metrics.MeanSquaredError(), _plain_metric])
    assert _custom_objects(model) == {"MyModel": MyModel, "Block": Block, "Twice": Twice, "Seen": Seen,
                                      "Half": Half}


def test_per_output_metrics_and_a_model_of_tensorweaves_classes_only():
    inputs = keras.Input((3,))
    model = keras.Model(inputs, [keras.layers.Dense(1, name="a")(inputs), keras.layers.Dense(1, name="b")(inputs)])
    model.compile(optimizer="sgd", loss=["mse", "mse"], metrics=[[Seen()], None])
    assert _custom_objects(model) == {"Seen": Seen}
    plain = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    plain.compile(optimizer="sgd", loss="mse", metrics=["mae"])
    assert _custom_objects(plain) == {}
