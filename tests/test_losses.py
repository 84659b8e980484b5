"""``tw.keras.losses`` against hand-written NumPy references (Keras 3 semantics)."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.keras import losses

EPS = 1e-7


# ---- NumPy references (per-sample values; written from Keras' documented formulas) -------------
def _clip(p, lo=EPS, hi=1 - EPS):
    return np.clip(p, lo, hi)


def _softmax(z, axis=-1):
    e = np.exp(z - z.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _sigmoid(z):
    return 1 / (1 + np.exp(-z))


def ref_mse(y, p):
    return np.mean((y - p) ** 2, axis=-1)


def ref_mae(y, p):
    return np.mean(np.abs(y - p), axis=-1)


def ref_huber(y, p, delta=1.0):
    e = np.abs(p - y)
    return np.mean(np.where(e <= delta, 0.5 * e ** 2, delta * e - 0.5 * delta ** 2), axis=-1)


def ref_kld(y, p):
    y, p = np.clip(y, EPS, 1), np.clip(p, EPS, 1)
    return np.sum(y * np.log(y / p), axis=-1)


def ref_bce(y, p, from_logits=False, label_smoothing=0.0, axis=-1):
    y = y * (1 - label_smoothing) + 0.5 * label_smoothing
    if from_logits:
        p = _sigmoid(p)
    else:
        p = _clip(p)
    return np.mean(-(y * np.log(p) + (1 - y) * np.log(1 - p)), axis=axis)


def ref_cce(y, p, from_logits=False, label_smoothing=0.0, axis=-1):
    n = y.shape[axis]
    y = y * (1 - label_smoothing) + label_smoothing / n
    if from_logits:
        logp = np.log(_softmax(p, axis))
    else:
        logp = np.log(_clip(p / p.sum(axis=axis, keepdims=True)))
    return -np.sum(y * logp, axis=axis)


def ref_scce(y, p, from_logits=False):
    y = np.asarray(y).astype(np.int64)
    if y.ndim == p.ndim:
        y = y[..., 0]
    # Keras' TF backend: log of clipped probabilities, then a (renormalising) softmax.
    logp = np.log(_softmax(p if from_logits else np.log(_clip(p))))
    return -np.take_along_axis(logp, y[..., None], -1)[..., 0]


def ref_reduce(values, weights=None, reduction="sum_over_batch_size"):
    if weights is not None:
        w = np.asarray(weights, values.dtype)
        while w.ndim < values.ndim:
            w = w[..., None]
        values = values * w
    if reduction in ("none", None):
        return values
    if reduction == "sum":
        return values.sum()
    if reduction == "mean_with_sample_weight" and weights is not None:
        return values.sum() / np.broadcast_to(w, values.shape).sum()
    return values.sum() / values.size


@pytest.fixture
def data():
    rng = np.random.default_rng(7)
    n, c = 16, 5
    logits = rng.standard_normal((n, c))
    probs = _softmax(logits)
    labels = rng.integers(0, c, n)
    return {
        "reg_true": rng.standard_normal((n, c)), "reg_pred": rng.standard_normal((n, c)) * 2,
        "bin_true": rng.integers(0, 2, (n, c)).astype(np.float64), "bin_logits": logits,
        "bin_probs": _sigmoid(logits), "probs": probs, "logits": logits, "labels": labels,
        "onehot": np.eye(c)[labels], "weights": rng.uniform(0, 2, n), "dist": _softmax(rng.standard_normal((n, c))),
    }


CASES = [  # (loss class, kwargs, function, reference, y_true key, y_pred key)
    (losses.MeanSquaredError, {}, losses.mean_squared_error, ref_mse, "reg_true", "reg_pred"),
    (losses.MeanAbsoluteError, {}, losses.mean_absolute_error, ref_mae, "reg_true", "reg_pred"),
    (losses.Huber, {"delta": 1.5}, losses.huber, ref_huber, "reg_true", "reg_pred"),
    (losses.KLDivergence, {}, losses.kl_divergence, ref_kld, "dist", "probs"),
    (losses.BinaryCrossentropy, {}, losses.binary_crossentropy, ref_bce, "bin_true", "bin_probs"),
    (losses.BinaryCrossentropy, {"from_logits": True, "label_smoothing": 0.2}, losses.binary_crossentropy, ref_bce,
     "bin_true", "bin_logits"),
    (losses.CategoricalCrossentropy, {}, losses.categorical_crossentropy, ref_cce, "onehot", "probs"),
    (losses.CategoricalCrossentropy, {"from_logits": True, "label_smoothing": 0.1}, losses.categorical_crossentropy,
     ref_cce, "onehot", "logits"),
    (losses.SparseCategoricalCrossentropy, {}, losses.sparse_categorical_crossentropy, ref_scce, "labels", "probs"),
    (losses.SparseCategoricalCrossentropy, {"from_logits": True}, losses.sparse_categorical_crossentropy, ref_scce,
     "labels", "logits"),
]
IDS = [f"{c.__name__}-{'-'.join(k)}" for c, k, *_ in CASES]


@pytest.mark.parametrize("cls,kwargs,fn,ref,yk,pk", CASES, ids=IDS)
def test_function_matches_reference(data, cls, kwargs, fn, ref, yk, pk):
    y, p = data[yk], data[pk]
    np.testing.assert_allclose(fn(y, p, **kwargs).numpy(), ref(y, p, **kwargs), rtol=1e-10, atol=1e-12)
    out32 = fn(y.astype(np.float32) if y.dtype.kind == "f" else y, tw.constant(p.astype(np.float32)), **kwargs)
    assert out32.dtype == tw.float32
    np.testing.assert_allclose(out32.numpy(), ref(y, p, **kwargs), rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("reduction", ["sum_over_batch_size", "sum", "none", None, "mean",
                                       "mean_with_sample_weight"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("cls,kwargs,fn,ref,yk,pk", CASES, ids=IDS)
def test_class_reductions_and_sample_weight(data, cls, kwargs, fn, ref, yk, pk, reduction, weighted):
    y, p = data[yk], tw.constant(data[pk])  # a float64 tensor: the loss computes in float64
    w = data["weights"] if weighted else None
    loss = cls(reduction=reduction, **kwargs)
    out = loss(y, p, sample_weight=w)
    assert out.dtype == tw.float64
    np.testing.assert_allclose(out.numpy(), ref_reduce(ref(y, data[pk], **kwargs), w, reduction),
                               rtol=1e-10, atol=1e-12)


def test_sample_weight_shapes(data):
    y, p = data["reg_true"], data["reg_pred"]
    w = data["weights"]
    loss = losses.MeanSquaredError()
    expected = ref_reduce(ref_mse(y, p), w)
    for weights in (w, w[:, None], list(w)):
        np.testing.assert_allclose(float(loss(y, tw.constant(p), sample_weight=weights)), expected, rtol=1e-10)
    np.testing.assert_allclose(float(loss(y, tw.constant(p), sample_weight=2.0)), 2 * ref_mse(y, p).mean(),
                               rtol=1e-10)
    # Per-sample weights apply to every time step of a (N, T, C) output; (N, T) weights per step.
    y3, p3 = y.reshape(4, 4, 5), p.reshape(4, 4, 5)
    w4 = w[:4]
    np.testing.assert_allclose(float(loss(y3, tw.constant(p3), sample_weight=w4)),
                               (ref_mse(y3, p3) * w4[:, None]).mean(), rtol=1e-10)
    w44 = w.reshape(4, 4)
    np.testing.assert_allclose(float(loss(y3, tw.constant(p3), sample_weight=w44)),
                               (ref_mse(y3, p3) * w44).mean(), rtol=1e-10)
    with pytest.raises(ValueError, match=r"sample_weight of shape \(3,\) cannot be applied to losses of shape \(16,\)"):
        loss(y, tw.constant(p), sample_weight=[1.0, 2.0, 3.0])


def test_from_logits_equals_probabilities(data):
    z, y = data["logits"], data["bin_true"]
    np.testing.assert_allclose(losses.BinaryCrossentropy(from_logits=True)(y, z).numpy(),
                               losses.BinaryCrossentropy()(y, _sigmoid(z)).numpy(), rtol=1e-9)
    z = tw.constant(z)
    np.testing.assert_allclose(losses.CategoricalCrossentropy(from_logits=True)(data["onehot"], z).numpy(),
                               losses.CategoricalCrossentropy()(data["onehot"], tw.nn.softmax(z)).numpy(), rtol=1e-9)
    np.testing.assert_allclose(losses.SparseCategoricalCrossentropy(from_logits=True)(data["labels"], z).numpy(),
                               losses.SparseCategoricalCrossentropy()(data["labels"], tw.nn.softmax(z)).numpy(),
                               rtol=1e-9)
    # Sparse and one-hot forms agree.
    np.testing.assert_allclose(losses.sparse_categorical_crossentropy(data["labels"], data["probs"]).numpy(),
                               losses.categorical_crossentropy(data["onehot"], data["probs"]).numpy(), rtol=1e-9)


def test_probabilities_are_clipped():
    # log(0) would be -inf: clipping to [eps, 1 - eps] keeps it finite, as Keras.
    y = np.array([[1.0, 0.0], [0.0, 1.0]])
    p = np.array([[0.0, 1.0], [0.0, 1.0]])
    bce = losses.binary_crossentropy(y, p).numpy()
    np.testing.assert_allclose(bce, ref_bce(y, p), rtol=1e-6)
    assert np.isfinite(bce).all() and bce[0] == pytest.approx(-np.log(EPS), rel=1e-6)
    assert losses.categorical_crossentropy(y, p).numpy()[0] == pytest.approx(-np.log(EPS), rel=1e-6)
    assert losses.sparse_categorical_crossentropy([0, 1], p).numpy()[0] == pytest.approx(-np.log(EPS), rel=1e-3)
    # Categorical probabilities are renormalised first.
    np.testing.assert_allclose(losses.categorical_crossentropy([[0.0, 1.0]], [[2.0, 2.0]]).numpy(), [np.log(2)],
                               rtol=1e-6)


def test_label_smoothing(data):
    y, p = data["onehot"], data["probs"]
    smoothed = y * 0.7 + 0.3 / y.shape[-1]
    np.testing.assert_allclose(losses.CategoricalCrossentropy(label_smoothing=0.3)(y, p).numpy(),
                               losses.CategoricalCrossentropy()(smoothed, p).numpy(), rtol=1e-10)
    yb, pb = data["bin_true"], data["bin_probs"]
    np.testing.assert_allclose(losses.BinaryCrossentropy(label_smoothing=0.4)(yb, pb).numpy(),
                               losses.BinaryCrossentropy()(yb * 0.6 + 0.2, pb).numpy(), rtol=1e-10)
    with pytest.raises(ValueError, match="label_smoothing"):
        losses.BinaryCrossentropy(label_smoothing=1.5)


def test_axis(data):
    y, p = data["onehot"].T, data["probs"].T
    np.testing.assert_allclose(losses.categorical_crossentropy(y, p, axis=0).numpy(), ref_cce(y, p, axis=0),
                               rtol=1e-10)
    np.testing.assert_allclose(losses.categorical_crossentropy(y, np.log(p), from_logits=True, axis=0).numpy(),
                               ref_cce(y, p, axis=0), rtol=1e-9)
    yb, pb = data["bin_true"], data["bin_probs"]
    np.testing.assert_allclose(losses.binary_crossentropy(yb, pb, axis=0).numpy(), ref_bce(yb, pb, axis=0),
                               rtol=1e-10)
    with pytest.raises(ValueError, match="only axis=-1"):
        losses.sparse_categorical_crossentropy([0], [[0.5, 0.5]], axis=0)


@pytest.mark.parametrize("shape", ["flat", "column", "float", "int64"])
def test_sparse_label_shapes(data, shape):
    labels = data["labels"]
    y = {"flat": labels, "column": labels[:, None], "float": labels.astype(np.float32)[:, None],
         "int64": tw.constant(labels.astype(np.int64))}[shape]
    expected = ref_scce(labels, data["probs"])
    np.testing.assert_allclose(losses.sparse_categorical_crossentropy(y, data["probs"]).numpy(), expected, rtol=1e-10)
    np.testing.assert_allclose(float(losses.SparseCategoricalCrossentropy()(y, tw.constant(data["probs"]))),
                               expected.mean(), rtol=1e-10)


def test_sparse_labels_of_higher_rank_outputs(data):
    # (batch, time, classes) predictions with (batch, time) labels, as in sequence models.
    p = data["probs"].reshape(4, 4, 5)
    y = data["labels"].reshape(4, 4)
    np.testing.assert_allclose(losses.sparse_categorical_crossentropy(y, p).numpy(), ref_scce(y, p), rtol=1e-10)


def test_ignore_class(data):
    labels = data["labels"].copy()
    labels[::3] = -1
    keep = labels != -1
    p = data["probs"]
    per_sample = losses.sparse_categorical_crossentropy(labels, p, ignore_class=-1).numpy()
    np.testing.assert_allclose(per_sample[keep], ref_scce(labels[keep], p[keep]), rtol=1e-10)
    assert (per_sample[~keep] == 0).all()
    loss = losses.SparseCategoricalCrossentropy(ignore_class=-1)
    # The mean runs over the valid entries only.
    np.testing.assert_allclose(float(loss(labels, tw.constant(p))), ref_scce(labels[keep], p[keep]).mean(), rtol=1e-6)
    summed = losses.SparseCategoricalCrossentropy(ignore_class=-1, reduction="sum")(labels, tw.constant(p))
    np.testing.assert_allclose(float(summed), ref_scce(labels[keep], p[keep]).sum(), rtol=1e-10)
    w = data["weights"]
    np.testing.assert_allclose(float(loss(labels, tw.constant(p), sample_weight=w)),
                               (ref_scce(labels[keep], p[keep]) * w[keep]).sum() / keep.sum(), rtol=1e-6)
    # The ignored entries give no gradient (and no NaN).
    z = tw.constant(data["logits"])
    with tw.GradientTape() as tape:
        tape.watch(z)
        value = losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=-1)(labels, z)
    g = tape.gradient(value, z).numpy()
    assert np.isfinite(g).all() and (g[~keep] == 0).all()


def test_dtypes():
    y, p32 = [[0.0, 1.0]], [[0.3, 0.6]]
    # NumPy and list inputs compute in floatx (float32), as Keras.
    assert losses.MeanSquaredError()(np.array(y), np.array(p32)).dtype == tw.float32
    assert losses.MeanSquaredError()(y, tw.constant(p32, tw.float64)).dtype == tw.float64
    assert losses.MeanSquaredError(dtype="float64")(y, p32).dtype == tw.float64
    assert losses.SparseCategoricalCrossentropy()([1], tw.constant(p32, tw.float16)).dtype == tw.float32
    assert losses.MeanSquaredError().dtype is None and losses.MeanSquaredError(dtype="float64").dtype == "float64"


# ---- differentiability, eager == tw.function == TF1 graph ---------------------------------------
def _numeric_grad(f, x, h=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = h
        g[i] = (f(x + d) - f(x - d)) / (2 * h)
    return g


@pytest.mark.parametrize("cls,kwargs,fn,ref,yk,pk", CASES, ids=IDS)
def test_gradients_match_finite_differences(data, cls, kwargs, fn, ref, yk, pk):
    y, p0 = data[yk][:4], data[pk][:4]
    if "Huber" in cls.__name__:
        p0 = y + np.linspace(-3, 3, p0.size).reshape(p0.shape) + 0.01  # both sides of delta, away from the kink
    loss = cls(**kwargs)
    p = tw.constant(p0)
    with tw.GradientTape() as tape:
        tape.watch(p)
        value = loss(y, p, sample_weight=np.arange(1.0, 5.0))
    g = tape.gradient(value, p).numpy()
    num = _numeric_grad(lambda q: float(loss(y, tw.constant(q), sample_weight=np.arange(1.0, 5.0))), p0)
    np.testing.assert_allclose(g, num, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("cls,kwargs,fn,ref,yk,pk", CASES, ids=IDS)
def test_eager_function_and_graph_agree(data, cls, kwargs, fn, ref, yk, pk):
    y, p, w = data[yk], data[pk], data["weights"]
    loss = cls(**kwargs)
    eager = float(loss(y, tw.constant(p), sample_weight=w))
    traced = tw.function(lambda a, b, c: loss(a, b, sample_weight=c))
    assert float(traced(tw.constant(y), tw.constant(p), tw.constant(w))) == pytest.approx(eager, rel=1e-12)
    g = tw.Graph()
    with g.as_default():
        yp = tw.placeholder(tw.as_dtype(y.dtype), [None] + list(y.shape[1:]))
        pp = tw.placeholder(tw.float64, [None] + list(p.shape[1:]))
        out = loss(yp, pp, sample_weight=w)
        grad, = tw.gradients(out, [pp])
        with tw.Session(graph=g) as sess:
            value, gv = sess.run([out, grad], {yp: y, pp: p})
    assert value == pytest.approx(eager, rel=1e-12)
    assert gv.shape == p.shape and np.isfinite(gv).all()


def test_training_step_reduces_loss(data):
    # A loss drives gradient descent inside tw.function, as compile/fit will.
    w = tw.Variable(np.zeros((5, 5)))
    x, y = data["probs"], data["labels"]
    loss = losses.SparseCategoricalCrossentropy(from_logits=True)

    @tw.function
    def step():
        with tw.GradientTape() as tape:
            value = loss(y, tw.matmul(x, w))
        w.assign_sub(0.5 * tape.gradient(value, w))
        return value

    first = float(step())
    for _ in range(20):
        last = float(step())
    assert last < first


# ---- errors -------------------------------------------------------------------------------------
def test_shape_errors():
    with pytest.raises(ValueError, match=r"binary_crossentropy: `y_true` and `y_pred` must have the same shape. "
                                         r"Received: y_true.shape=\(2, 3\), y_pred.shape=\(2, 4\)"):
        losses.BinaryCrossentropy()(np.zeros((2, 3)), np.zeros((2, 4)))
    with pytest.raises(ValueError, match=r"categorical_crossentropy: .*y_true.shape=\(2,\), y_pred.shape=\(2, 3\)"
                                         r".*Hint: integer class labels go with sparse_categorical_crossentropy"):
        losses.categorical_crossentropy(np.array([0, 1]), np.ones((2, 3)) / 3)
    with pytest.raises(ValueError, match=r"sparse_categorical_crossentropy: .*y_true.shape=\(2, 3\), "
                                         r"y_pred.shape=\(2, 3\). Hint: one-hot labels go with categorical"):
        losses.SparseCategoricalCrossentropy()(np.eye(3)[:2], np.ones((2, 3)) / 3)
    with pytest.raises(ValueError, match=r"y_true.shape=\(3,\), y_pred.shape=\(2, 3\)"):
        losses.sparse_categorical_crossentropy([0, 1, 2], np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"mean_squared_error: .*incompatible shapes.*\(2, 3\).*\(2, 4\)"):
        losses.mean_squared_error(np.zeros((2, 3)), np.zeros((2, 4)))
    with pytest.raises(tw.errors.InvalidArgumentError):
        losses.sparse_categorical_crossentropy([0, 7], np.ones((2, 3)) / 3)
    with pytest.raises(ValueError, match="Invalid value for argument `reduction`"):
        losses.MeanSquaredError(reduction="average")


def test_categorical_with_one_class_warns():
    with pytest.warns(SyntaxWarning, match="binary_crossentropy"):
        losses.categorical_crossentropy([[1.0]], [[0.7]])


# ---- get / config -----------------------------------------------------------------------------------
def test_get():
    assert losses.get("mse") is losses.mean_squared_error
    assert losses.get("MSE") is losses.mean_squared_error
    assert losses.get("mae") is losses.mean_absolute_error
    assert losses.get("binary_crossentropy") is losses.binary_crossentropy
    assert losses.get("sparse_categorical_crossentropy") is losses.sparse_categorical_crossentropy
    assert losses.get("kld") is losses.kl_divergence
    assert isinstance(losses.get("CategoricalCrossentropy"), losses.CategoricalCrossentropy)
    assert isinstance(losses.get(losses.Huber), losses.Huber)
    inst = losses.Huber(2.0)
    assert losses.get(inst) is inst
    fn = lambda y, p: y - p  # noqa: E731
    assert losses.get(fn) is fn
    assert losses.get(None) is None
    assert losses.get({"class_name": "Huber", "config": {"delta": 3.0}}).delta == 3.0
    with pytest.raises(ValueError, match="Could not interpret loss identifier: 'msee'"):
        losses.get("msee")
    with pytest.raises(ValueError, match="Could not interpret loss identifier"):
        losses.get(42)


@pytest.mark.parametrize("loss", [losses.MeanSquaredError(), losses.MeanAbsoluteError(reduction="sum"),
                                  losses.Huber(delta=0.5, name="h"), losses.KLDivergence(reduction="none"),
                                  losses.BinaryCrossentropy(from_logits=True, label_smoothing=0.1, axis=-1),
                                  losses.CategoricalCrossentropy(label_smoothing=0.2, dtype="float64"),
                                  losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0),
                                  losses.LossFunctionWrapper(losses.huber, name="hub", delta=2.0)])
def test_config_round_trip(loss, data):
    config = loss.get_config()
    again = type(loss).from_config(config)
    assert again.get_config() == config
    restored = losses.deserialize(losses.serialize(loss))
    assert type(restored) is type(loss) and restored.get_config() == config
    import json
    json.dumps(losses.serialize(loss))
    y, p = ("labels", "probs") if "Sparse" in type(loss).__name__ else ("onehot", "probs")
    np.testing.assert_allclose(np.asarray(restored(data[y], data[p])), np.asarray(loss(data[y], data[p])))


def test_keras_config_keys():
    assert losses.BinaryCrossentropy().get_config() == {"name": "binary_crossentropy",
                                                        "reduction": "sum_over_batch_size", "from_logits": False,
                                                        "label_smoothing": 0.0, "axis": -1}
    assert losses.Huber().get_config() == {"name": "huber_loss", "reduction": "sum_over_batch_size", "delta": 1.0}
    assert losses.deserialize(losses.serialize(losses.mean_absolute_error)) is losses.mean_absolute_error


def test_custom_function_round_trip():
    def cubed(y_true, y_pred, scale=1.0):
        return tw.reduce_mean(tw.abs(y_true - y_pred) ** 3, axis=-1) * scale

    loss = losses.LossFunctionWrapper(cubed, reduction="sum", scale=2.0)
    assert loss.name == "cubed" and loss.get_config()["fn"] == "cubed"
    again = losses.deserialize(losses.serialize(loss), custom_objects={"cubed": cubed})
    assert again.fn is cubed and float(again([[2.0]], [[0.0]])) == 16.0
    with pytest.raises(ValueError, match="Unknown loss function 'cubed'"):
        losses.deserialize(losses.serialize(loss))


def test_get_for_compile():
    loss = losses.get_for_compile("mse")
    assert isinstance(loss, losses.LossFunctionWrapper) and loss.name == "mse"
    assert float(loss([[1.0], [3.0]], [[0.0], [0.0]], sample_weight=[1.0, 3.0])) == 14.0
    bce = losses.BinaryCrossentropy(from_logits=True)
    assert losses.get_for_compile(bce) is bce
    assert isinstance(losses.get_for_compile("SparseCategoricalCrossentropy"), losses.SparseCategoricalCrossentropy)

    def my_loss(y_true, y_pred):
        return tw.reduce_mean(tw.abs(y_true - y_pred), axis=-1)

    wrapped = losses.get_for_compile(my_loss)
    assert wrapped.name == "my_loss" and float(wrapped([[1.0]], [[0.0]])) == 1.0
    # A lambda's name is not a valid graph scope: it is sanitised there.
    lam = losses.get_for_compile(lambda y, p: tw.reduce_mean(tw.abs(y - p), axis=-1))
    assert float(tw.function(lambda a, b: lam(a, b))(tw.constant([[2.0]]), tw.constant([[0.0]]))) == 2.0
    assert losses.get_for_compile(None) is None


def test_binary_labels_and_outputs_of_different_rank():
    # (N,) labels with an (N, 1) sigmoid output, as in compile(loss="binary_crossentropy").
    y, p = np.array([1.0, 0.0, 1.0]), np.array([[0.9], [0.2], [0.4]])
    expected = ref_bce(y[:, None], p).mean()
    assert float(losses.BinaryCrossentropy()(y, p)) == pytest.approx(expected, rel=1e-6)
    assert float(losses.get_for_compile("binary_crossentropy")(y, p)) == pytest.approx(expected, rel=1e-6)
    assert float(losses.MeanSquaredError()(y, p)) == pytest.approx(ref_mse(y[:, None], p).mean(), rel=1e-6)


def test_custom_loss_subclass():
    class Scaled(losses.Loss):
        def call(self, y_true, y_pred):
            return tw.reduce_sum(tw.abs(y_true - y_pred), axis=-1) * 3.0

    assert float(Scaled()([[1.0, 2.0]], [[0.0, 0.0]])) == 9.0
    assert Scaled().name == "scaled"
