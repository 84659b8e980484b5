"""Keras 3's Adamax, Nadam, Lion, Lamb and Adafactor: tensorweave's float32 steps equal Keras
3.15's (its numbers in tf_reference/keras3_optimizers.json; no TensorFlow needed), the NumPy
references equal Keras' too, float64 steps equal the references; variables in Keras' order and
names; configs and names; sparse gradients; tw.function and a TF1 Session."""
import numpy as np
import pytest

import tensorweave as tw
import tensorweave.compat.v1 as tf1
from keras3_optimizer_refs import NAMES, data, keras_numbers, reference_run, tw_loss, tw_run

KERAS = keras_numbers()
CASES = sorted(KERAS["cases"])
STEPS = KERAS["steps"]


@pytest.mark.parametrize("name", CASES)
def test_numpy_reference_equals_keras3(name):
    want = KERAS["cases"][name]["weights"]
    for step, (ref, keras) in enumerate(zip(reference_run(KERAS["cases"][name], STEPS), want)):
        for n, r, k in zip(NAMES, ref, keras):
            np.testing.assert_allclose(r, k, rtol=2e-5, atol=1e-6, err_msg=f"{name} step {step + 1} {n}")


@pytest.mark.parametrize("name", CASES)
def test_float32_steps_equal_keras3(name):
    got, _, _ = tw_run(KERAS["cases"][name], STEPS)
    for step, (mine, keras) in enumerate(zip(got, KERAS["cases"][name]["weights"])):
        for n, m, k in zip(NAMES, mine, keras):
            assert m.dtype == np.float32
            np.testing.assert_allclose(m, np.float32(k), rtol=1e-6, atol=1e-7, err_msg=f"{name} step {step + 1} {n}")


@pytest.mark.parametrize("name", CASES)
def test_float64_steps_equal_the_numpy_reference(name):
    case = KERAS["cases"][name]
    got, _, _ = tw_run(case, STEPS, dtype=np.float64)
    for step, (mine, ref) in enumerate(zip(got, reference_run(case, STEPS))):
        for n, m, r in zip(NAMES, mine, ref):
            assert m.dtype == np.float64
            np.testing.assert_allclose(m, r, rtol=1e-12, atol=1e-14, err_msg=f"{name} step {step + 1} {n}")


@pytest.mark.parametrize("name", CASES)
def test_variables_and_config_line_up_with_keras3(name):
    case = KERAS["cases"][name]
    _, opt, _ = tw_run(case, 1)
    mine = [[v.name.split(":")[0], v.shape.as_list(), v.dtype.name] for v in opt.variables]
    # Keras leaves Nadam's momentum-schedule product unnamed ("variable"); tensorweave names it
    keras = [["u_product"] + v[1:] if name == "nadam" and v[0] == "variable" else v for v in case["variables"]]
    assert mine == keras
    config = {k: v for k, v in opt.get_config().items() if k != "name"}
    keras_config = dict(case["config"])
    assert np.float32(config.pop("learning_rate")) == np.float32(keras_config.pop("learning_rate"))
    assert config == keras_config
    again = type(opt).from_config(opt.get_config())
    assert again.get_config() == opt.get_config()
    blob = tw.keras.optimizers.serialize(opt)
    assert blob["class_name"] == case["class"] and blob["registered_name"] is None
    assert tw.keras.optimizers.deserialize(blob).get_config() == opt.get_config()


@pytest.mark.parametrize("identifier", ["adamax", "Adamax", "nadam", "lion", "lamb", "adafactor", "Adafactor"])
def test_by_name_as_compile_takes_them(identifier):
    opt = tw.keras.optimizers.get(identifier)
    assert type(opt).__name__.lower() == identifier.lower() and opt.name == identifier.lower()


def test_lion_refuses_a_beta_1_outside_0_1():
    with pytest.raises(ValueError, match=r"`beta_1` must be in the \[0, 1\] range.*beta_1=0"):
        tw.keras.optimizers.Lion(beta_1=0.0)


def _sparse_step(cls, sparse):
    table = tw.Variable(np.arange(1.0, 13.0).reshape(6, 2) / 7.0)
    opt = cls(learning_rate=0.1)
    ids = tw.constant([4, 1, 4])
    for _ in range(2):
        with tw.GradientTape() as tape:
            loss = tw.reduce_sum(tw.square(tw.gather(table, ids) - 0.3))
        g = tape.gradient(loss, table)
        assert isinstance(g, tw.IndexedSlices)
        opt.apply_gradients([(g if sparse else tw.convert_to_tensor(g), table)])
    return table.numpy()


@pytest.mark.parametrize("cls", ["Adamax", "Nadam", "Lion"])
def test_row_wise_optimizers_update_only_the_touched_rows(cls):
    before = np.arange(1.0, 13.0).reshape(6, 2) / 7.0
    sparse, dense = (_sparse_step(getattr(tw.keras.optimizers, cls), s) for s in (True, False))
    touched = [1, 4]
    np.testing.assert_array_equal(np.delete(sparse, touched, 0), np.delete(before, touched, 0))
    np.testing.assert_allclose(sparse[touched], dense[touched], rtol=1e-12)
    assert not np.allclose(sparse[touched], before[touched])


@pytest.mark.parametrize("cls", ["Lamb", "Adafactor"])
def test_whole_weight_optimizers_use_a_sparse_gradient_densely(cls):
    sparse, dense = (_sparse_step(getattr(tw.keras.optimizers, cls), s) for s in (True, False))
    np.testing.assert_array_equal(sparse, dense)


@pytest.mark.parametrize("name", ["nadam", "lamb", "adafactor"])
def test_function_and_tf1_session_equal_eager(name):
    case = KERAS["cases"][name]
    want = tw_run(case, 3, dtype=np.float64)[0][-1]
    _, _, ws = tw_run(case, 3, dtype=np.float64, traced=True)
    for w, m in zip(want, ws):
        np.testing.assert_allclose(m.numpy(), w, rtol=1e-13)
    d = data(np.float64)
    g = tw.Graph()
    with g.as_default():
        vs = [tw.Variable(d[n]) for n in NAMES]
        opt = getattr(tw.keras.optimizers, case["class"])(**case["kwargs"])
        loss = tw_loss(vs, {k: tw.constant(v) for k, v in d.items()})
        train = opt.apply_gradients(zip(tw.gradients(loss, vs), vs))
        init = tf1.global_variables_initializer()
    with tf1.Session(graph=g) as sess:
        sess.run(init)
        for _ in range(3):
            sess.run(train)
        got = sess.run(vs)
    for w, m in zip(want, got):
        np.testing.assert_allclose(m, w, rtol=1e-13)


@pytest.mark.parametrize("identifier", ["adamax", "nadam", "lion"])
def test_compile_by_name_trains(identifier):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((16, 3)).astype(np.float32), rng.standard_normal((16, 1)).astype(np.float32)
    model = tw.keras.Sequential([tw.keras.layers.Dense(1)])
    model.compile(optimizer=identifier, loss="mse")
    model.optimizer.learning_rate = 0.05
    first = model.evaluate(x, y, verbose=0)
    model.fit(x, y, epochs=3, batch_size=16, verbose=0)
    assert type(model.optimizer).__name__.lower() == identifier
    assert model.evaluate(x, y, verbose=0) < first
