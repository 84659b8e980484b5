"""keras.utils: serialize/deserialize_keras_object, registered names and objects, standardize_dtype,
split_dataset (Keras' sizes and errors), get_source_inputs, Config, clear_session/is_keras_tensor."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave import keras

U = keras.utils


def test_serialize_and_deserialize_keras_objects():
    for obj in (keras.layers.Dense(3, activation="relu", name="d"), keras.losses.Dice(axis=-1),
                keras.metrics.MeanIoU(num_classes=3), keras.optimizers.Adam(0.01),
                keras.initializers.GlorotUniform(seed=1)):
        config = U.serialize_keras_object(obj)
        assert set(config) == {"module", "class_name", "config", "registered_name"}
        again = U.deserialize_keras_object(config)
        assert type(again) is type(obj) and again.get_config() == obj.get_config()
    assert U.serialize_keras_object([1, "a", None]) == [1, "a", None]
    assert U.deserialize_keras_object("my_fn", custom_objects={"my_fn": len}) is len
    with pytest.raises(ValueError, match="Cannot deserialize 'Nope' from module 'keras.nowhere'"):
        U.deserialize_keras_object({"module": "keras.nowhere", "class_name": "Nope", "config": {}})


def test_registered_names_and_objects():
    @U.register_keras_serializable(package="kerasfeat_tests")
    class Doubler(keras.layers.Layer):
        def call(self, x):
            return 2 * x
    assert U.get_registered_name(Doubler) == "kerasfeat_tests>Doubler"
    assert U.get_registered_object("kerasfeat_tests>Doubler") is Doubler
    assert U.get_registered_name(keras.layers.Dense) == "Dense"
    assert U.get_registered_object("missing_thing") is None
    assert U.get_registered_object("x", custom_objects={"x": len}) is len
    config = U.serialize_keras_object(Doubler(name="dbl"))
    assert config["registered_name"] == "kerasfeat_tests>Doubler"
    assert type(U.deserialize_keras_object(config)) is Doubler


def test_standardize_dtype():
    assert [U.standardize_dtype(d) for d in (None, "float", float, int, bool, "float16", np.float64, tw.int8,
                                             np.dtype("uint8"))] == \
        ["float32", "float32", "float32", "int64", "bool", "float16", "float64", "int8", "uint8"]
    with pytest.raises(ValueError, match="Invalid dtype"):
        U.standardize_dtype("floaty")


def test_split_dataset_sizes_follow_keras():
    x, y = np.arange(10), np.arange(10) * 10
    left, right = U.split_dataset((x, y), left_size=0.75)        # round(7.5) = 8, as Keras
    assert [int(a) for a, _ in left] == list(range(8)) and [int(b) for _, b in right] == [80, 90]
    left, right = U.split_dataset(x, left_size=3, right_size=2)
    assert [int(a) for a in left] == [0, 1, 2] and [int(a) for a in right] == [8, 9]
    left, right = U.split_dataset(x, right_size=0.5, shuffle=True, seed=0)
    assert sorted(int(a) for a in left) + sorted(int(a) for a in right) != list(range(10))
    assert sorted([int(a) for a in left] + [int(a) for a in right]) == list(range(10))
    ds = tw.data.Dataset.from_tensor_slices({"a": np.arange(6), "b": np.ones((6, 2))})
    left, right = U.split_dataset(ds, left_size=4)
    assert [int(e["a"]) for e in right] == [4, 5] and right.element_spec["b"].shape.as_list() == [2]
    with pytest.raises(ValueError, match=r"`left_size` should be either a positive integer and smaller than 10"):
        U.split_dataset(x, left_size=10)
    with pytest.raises(ValueError, match="The sum of `left_size` and `right_size` is greater than 1"):
        U.split_dataset(x, left_size=0.6, right_size=0.6)


def test_source_inputs_config_and_session_helpers():
    a, b = keras.Input((2,), name="a"), keras.Input((2,), name="b")
    out = keras.layers.Dense(1)(keras.layers.Concatenate()([a, keras.layers.Dense(2)(b)]))
    assert U.get_source_inputs(out) == [a, b] and U.get_source_inputs(a) == [a]
    assert U.is_keras_tensor(out) and not U.is_keras_tensor(np.ones(2))
    U.clear_session()
    assert keras.layers.Dense(1).name == "dense"
    c = U.Config(learning_rate=0.1)
    c.epochs = 2
    c["batch"] = 8
    assert dict(c.items()) == {"learning_rate": 0.1, "epochs": 2, "batch": 8} and "epochs" in c and len(c) == 3
    c.freeze()
    with pytest.raises(ValueError, match="Cannot change a frozen Config"):
        c.epochs = 3
    c.unfreeze()
    c.epochs = 3
    assert c.epochs == 3 and c.as_dict()["epochs"] == 3
    with pytest.raises(AttributeError, match="Unknown attribute: 'nope'"):
        c.nope


def test_interactive_logging_switch_routes_progress_to_logging(capsys, caplog):
    import logging
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    x, y = np.ones((4, 2), "float32"), np.zeros((4, 1), "float32")
    assert U.is_interactive_logging_enabled()
    U.disable_interactive_logging()
    try:
        with caplog.at_level(logging.INFO, logger="tensorweave.keras"):
            model.fit(x, y, epochs=1, verbose=1, callbacks=[keras.callbacks.EarlyStopping("loss", verbose=1)])
        assert capsys.readouterr().out == ""
        assert any("loss:" in r.getMessage() for r in caplog.records)
    finally:
        U.enable_interactive_logging()
    model.fit(x, y, epochs=1, verbose=2)
    assert "loss:" in capsys.readouterr().out
