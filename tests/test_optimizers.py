"""Keras optimizers: update rules against NumPy references of the published rules (float64),
eager == tw.function == TF1 Session, sparse (row-wise) updates, clipping, schedules,
configs, and parity with torch.optim when torch is installed."""
import math
import os

import numpy as np
import pytest

import tensorweave as tw
import tensorweave.compat.v1 as tf1
from tensorweave.keras import optimizers as O
from tensorweave.keras.optimizers import schedules as S

F64 = tw.float64


# ---- NumPy references: (w, g, state, t, lr, **hyper) -> new w; `state` keeps the slots ----------
def ref_sgd(w, g, st, t, lr, momentum=0.0, nesterov=False):
    if momentum == 0:
        return w - lr * g
    m = st.get("m", np.zeros_like(w))
    m = momentum * m - lr * g
    st["m"] = m
    return w + (momentum * m - lr * g if nesterov else m)


def ref_adam(w, g, st, t, lr, beta_1=0.9, beta_2=0.999, epsilon=1e-7, amsgrad=False, weight_decay=None):
    if weight_decay is not None:
        w = w - w * weight_decay * lr
    m = st.get("m", np.zeros_like(w)) * beta_1 + (1 - beta_1) * g
    v = st.get("v", np.zeros_like(w)) * beta_2 + (1 - beta_2) * g * g
    st["m"], st["v"] = m, v
    if amsgrad:
        v = st["vhat"] = np.maximum(st.get("vhat", np.zeros_like(w)), v)
    m_hat = m / (1 - beta_1 ** t)
    v_hat_corr = v / (1 - beta_2 ** t)
    # Kingma & Ba's algorithm with the "epsilon hat" of their section 2 (Keras' form):
    return w - lr * m_hat / (np.sqrt(v_hat_corr) + epsilon / math.sqrt(1 - beta_2 ** t))


def ref_rmsprop(w, g, st, t, lr, rho=0.9, momentum=0.0, epsilon=1e-7, centered=False):
    v = st["v"] = rho * st.get("v", np.zeros_like(w)) + (1 - rho) * g * g
    denom = v + epsilon
    if centered:
        a = st["a"] = rho * st.get("a", np.zeros_like(w)) + (1 - rho) * g
        denom = v - a * a + epsilon
    inc = lr * g / np.sqrt(denom)
    if momentum > 0:
        inc = st["mom"] = momentum * st.get("mom", np.zeros_like(w)) + inc
    return w - inc


def ref_adagrad(w, g, st, t, lr, initial_accumulator_value=0.1, epsilon=1e-7):
    acc = st["acc"] = st.get("acc", np.full_like(w, initial_accumulator_value)) + g * g
    return w - lr * g / np.sqrt(acc + epsilon)


def ref_adadelta(w, g, st, t, lr, rho=0.95, epsilon=1e-7):
    eg = st["eg"] = rho * st.get("eg", np.zeros_like(w)) + (1 - rho) * g * g
    ed = st.get("ed", np.zeros_like(w))
    delta = -np.sqrt(ed + epsilon) / np.sqrt(eg + epsilon) * g
    st["ed"] = rho * ed + (1 - rho) * delta * delta
    return w + lr * delta


def ref_ftrl(w, g, st, t, lr, learning_rate_power=-0.5, initial_accumulator_value=0.1,
             l1_regularization_strength=0.0, l2_regularization_strength=0.0,
             l2_shrinkage_regularization_strength=0.0, beta=0.0):
    p = -learning_rate_power
    n = st.get("n", np.full_like(w, initial_accumulator_value))
    z = st.get("z", np.zeros_like(w))
    g_shr = g + 2 * l2_shrinkage_regularization_strength * w
    n_new = n + g * g
    z = z + g_shr - (n_new ** p - n ** p) / lr * w
    l1, l2 = l1_regularization_strength, l2_regularization_strength + beta / (2 * lr)
    # McMahan et al.: w = 0 where |z| <= l1, else -(z - sign(z) l1) / (n^p / lr + 2 l2)
    w = np.where(np.abs(z) <= l1, 0.0, -(z - np.sign(z) * l1) / (n_new ** p / lr + 2 * l2))
    st["n"], st["z"] = n_new, z
    return w


CASES = [
    (O.SGD, ref_sgd, dict(learning_rate=0.125)),
    (O.SGD, ref_sgd, dict(learning_rate=0.125, momentum=0.9)),
    (O.SGD, ref_sgd, dict(learning_rate=0.125, momentum=0.5, nesterov=True)),
    (O.Adam, ref_adam, dict(learning_rate=0.0625)),
    (O.Adam, ref_adam, dict(learning_rate=0.0625, beta_1=0.5, beta_2=0.75, epsilon=1e-3, amsgrad=True)),
    (O.AdamW, ref_adam, dict(learning_rate=0.0625, weight_decay=0.25)),
    (O.RMSprop, ref_rmsprop, dict(learning_rate=0.0625)),
    (O.RMSprop, ref_rmsprop, dict(learning_rate=0.0625, momentum=0.5, centered=True, epsilon=1e-2)),
    (O.Adagrad, ref_adagrad, dict(learning_rate=0.25, initial_accumulator_value=0.5)),
    (O.Adadelta, ref_adadelta, dict(learning_rate=1.0, rho=0.9, epsilon=1e-3)),
    (O.Ftrl, ref_ftrl, dict(learning_rate=0.5)),
    (O.Ftrl, ref_ftrl, dict(learning_rate=0.5, learning_rate_power=-0.75, initial_accumulator_value=0.25,
                            l1_regularization_strength=0.05, l2_regularization_strength=0.1,
                            l2_shrinkage_regularization_strength=0.02, beta=0.5)),
]
IDS = [f"{c.__name__}-{'-'.join(k for k in kw if k != 'learning_rate') or 'default'}" for c, _, kw in CASES]


def _grad_of(w, t, rng_grads):
    # A gradient that depends on the weights, so that any error compounds over the steps.
    return rng_grads[t] + 0.3 * w


@pytest.mark.parametrize("cls,ref,kw", CASES, ids=IDS)
def test_update_rule_matches_numpy_reference(cls, ref, kw):
    rng = np.random.default_rng(0)
    w0 = rng.normal(size=(3, 2))
    grads = rng.normal(size=(6, 3, 2))
    opt = cls(**kw)
    v = tw.Variable(w0, dtype=F64)
    w, st = w0.copy(), {}
    hyper = {k: x for k, x in kw.items() if k != "learning_rate"}
    for t in range(6):
        opt.apply([tw.constant(_grad_of(v.numpy(), t, grads))], [v])
        w = ref(w, _grad_of(w, t, grads), st, t + 1, kw["learning_rate"], **hyper)
        np.testing.assert_allclose(v.numpy(), w, rtol=1e-12, atol=1e-13)
    assert int(opt.iterations.numpy()) == 6


# ---- one problem, three execution modes ----------------------------------------------------------
X = np.random.default_rng(1).normal(size=(8, 3))
Y = np.random.default_rng(2).normal(size=(8, 2))
IDX = np.array([0, 2, 2, 5, 0, 1, 2, 5], np.int32)   # rows 3 and 4 of the embedding are never used


def _make_vars():
    rng = np.random.default_rng(3)
    return [tw.Variable(rng.normal(size=(3, 2)), name="w"), tw.Variable(np.zeros(2), name="b"),
            tw.Variable(rng.normal(size=(6, 2)), name="emb")]


def _loss(w, b, emb, x, y):
    pred = tw.matmul(x, w) + b + tw.gather(emb, IDX)
    return tw.reduce_mean(tw.square(pred - y))


MODE_CASES = [
    (O.SGD, dict(learning_rate=0.1, momentum=0.9, nesterov=True)),
    (O.Adam, dict(learning_rate=0.05, amsgrad=True)),
    (O.AdamW, dict(learning_rate=0.05, weight_decay=0.1)),
    (O.RMSprop, dict(learning_rate=0.05, momentum=0.5, centered=True)),
    (O.Adagrad, dict(learning_rate=0.1)),
    (O.Adadelta, dict(learning_rate=1.0)),
    (O.Ftrl, dict(learning_rate=0.1, l1_regularization_strength=0.01, l2_regularization_strength=0.01)),
    (O.SGD, dict(learning_rate=S.ExponentialDecay(0.1, 2, 0.5), clipnorm=0.5)),
    (O.Adam, dict(learning_rate=0.05, weight_decay=0.05, use_ema=True, ema_momentum=0.5, ema_overwrite_frequency=3,
                  global_clipnorm=0.5)),
]


def _run_eager(cls, kw, steps, fn=False):
    vs = _make_vars()
    opt = cls(**kw)
    x, y = tw.constant(X), tw.constant(Y)

    def step(x, y):
        with tw.GradientTape() as tape:
            loss = _loss(*vs, x, y)
        grads = tape.gradient(loss, vs)
        assert isinstance(grads[2], tw.IndexedSlices)
        opt.apply_gradients(zip(grads, vs))
        return loss

    if fn:
        step = tw.function(step)
    for _ in range(steps):
        step(x, y)
    if fn:
        assert step.experimental_get_tracing_count() == 1
    return [v.numpy() for v in vs], opt


def _run_session(cls, kw, steps):
    g = tw.Graph()
    with g.as_default():
        vs = _make_vars()
        x = tf1.placeholder(F64, [None, 3])
        y = tf1.placeholder(F64, [None, 2])
        loss = _loss(*vs, x, y)
        grads = tw.gradients(loss, vs)
        opt = cls(**kw)
        train = opt.apply_gradients(zip(grads, vs))
        init = tf1.global_variables_initializer()
    assert isinstance(train, tw.Operation)
    with tf1.Session(graph=g) as sess:
        sess.run(init)
        for _ in range(steps):
            sess.run(train, {x: X, y: Y})
        return sess.run(vs), int(sess.run(opt.iterations))


@pytest.mark.parametrize("cls,kw", MODE_CASES, ids=[f"{c.__name__}-{i}" for i, (c, _) in enumerate(MODE_CASES)])
def test_eager_function_and_session_agree(cls, kw):
    eager, opt = _run_eager(cls, kw, 4)
    traced, _ = _run_eager(cls, kw, 4, fn=True)
    graph, iters = _run_session(cls, kw, 4)
    assert iters == 4
    for a, b, c in zip(eager, traced, graph):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(c, a, rtol=1e-12, atol=1e-14)
    if kw.get("weight_decay"):
        return   # decoupled weight decay shrinks every row (as in Keras)
    # Rows 3 and 4 of the embedding never had a gradient: unchanged, and so are their slots.
    init_emb = _make_vars()[2].numpy()
    np.testing.assert_array_equal(eager[2][3:5], init_emb[3:5])
    for v in opt.variables:
        if v.name.startswith("emb") and len(v.shape) == 2:
            fresh = {"accumulator": 0.1 if cls in (O.Adagrad, O.Ftrl) else 0.0}.get(v.name.split("_", 1)[1][:-2], 0.0)
            np.testing.assert_array_equal(v.numpy()[3:5], fresh)


def test_session_slots_are_graph_variables_initialized_by_the_init_op():
    g = tw.Graph()
    with g.as_default():
        w = tw.Variable([1.0, 2.0], name="w")
        loss = tw.reduce_sum(w * w)
        opt = O.Adam(0.1)
        train = opt.apply_gradients(zip(tw.gradients(loss, [w]), [w]))
        names = {v.name for v in tf1.global_variables()}
        init = tf1.global_variables_initializer()
    assert {"w_momentum:0", "w_velocity:0", "iteration:0", "learning_rate:0"} <= names
    with g.as_default():
        assert [v.name for v in g.get_collection("trainable_variables")] == ["w:0"]
    with tf1.Session(graph=g) as sess:
        with pytest.raises(tw.errors.FailedPreconditionError, match="uninitialized"):
            sess.run(train)
        sess.run(init)
        sess.run(train)
        np.testing.assert_allclose(sess.run(w), [0.9, 1.9], rtol=1e-5)


def test_slots_made_outside_control_dependencies_of_the_caller():
    # TF1 code often wraps minimize in control_dependencies(update_ops); the slots'
    # initializers must not depend on those ops.
    g = tw.Graph()
    with g.as_default():
        w = tw.Variable(1.0)
        counter = tw.Variable(0.0)
        bump = tf1.assign_add(counter, 1.0)
        with tw.control_dependencies([bump]):
            train = O.SGD(0.5, momentum=0.5).apply_gradients([(tw.constant(2.0), w)])
        init = tf1.global_variables_initializer()
    with tf1.Session(graph=g) as sess:
        sess.run(init)
        assert sess.run(counter) == 0.0
        sess.run(train)
        assert sess.run(counter) == 1.0 and sess.run(w) == 0.0


# ---- sparse gradients ------------------------------------------------------------------------------
def _sparse_grad(values, indices, rows=5):
    return tw.IndexedSlices(tw.constant(values), tw.constant(indices, dtype=tw.int32),
                            np.array([rows, values.shape[1]]))


def test_sparse_sgd_equals_dense_and_sums_duplicates():
    rng = np.random.default_rng(4)
    init = rng.normal(size=(5, 2))
    vals = rng.normal(size=(4, 2))
    idx = np.array([3, 0, 3, 3])
    a, b = tw.Variable(init), tw.Variable(init)
    O.SGD(0.5).apply([_sparse_grad(vals, idx)], [a])
    dense = np.zeros_like(init)
    np.add.at(dense, idx, vals)
    O.SGD(0.5).apply([tw.constant(dense)], [b])
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-15)
    np.testing.assert_array_equal(a.numpy()[[1, 2, 4]], init[[1, 2, 4]])


@pytest.mark.parametrize("cls,ref,kw", [
    (O.Adam, ref_adam, dict(learning_rate=0.125)),
    (O.Adagrad, ref_adagrad, dict(learning_rate=0.25)),
    (O.SGD, ref_sgd, dict(learning_rate=0.25, momentum=0.5)),
    (O.RMSprop, ref_rmsprop, dict(learning_rate=0.125, centered=True, epsilon=0.1)),
], ids=["Adam", "Adagrad", "SGD-momentum", "RMSprop"])
def test_sparse_updates_are_row_wise(cls, ref, kw):
    """Rows not in the gradient keep their weights and slots (TF's sparse kernels; lazy Adam)."""
    rng = np.random.default_rng(5)
    init = rng.normal(size=(5, 2))
    steps = [(np.array([1, 3, 1]), rng.normal(size=(3, 2))), (np.array([3]), rng.normal(size=(1, 2))),
             (np.array([0, 1]), rng.normal(size=(2, 2)))]
    v = tw.Variable(init)
    opt = cls(**kw)
    w = init.copy()
    row_state = [dict() for _ in range(5)]
    hyper = {k: x for k, x in kw.items() if k != "learning_rate"}
    for t, (idx, vals) in enumerate(steps):
        opt.apply([_sparse_grad(vals, idx)], [v])
        summed = {}
        for i, row in zip(idx, vals):
            summed[i] = summed.get(i, 0) + row
        for i, g in summed.items():
            w[i] = ref(w[i], g, row_state[i], t + 1, kw["learning_rate"], **hyper)
        np.testing.assert_allclose(v.numpy(), w, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(v.numpy()[[2, 4]], init[[2, 4]])


def test_sparse_duplicates_in_session_and_function():
    init = np.arange(10.0).reshape(5, 2)
    vals = np.ones((3, 2))
    idx = np.array([4, 4, 1])
    expected = init.copy()
    expected[4] -= 0.5 * 2
    expected[1] -= 0.5

    v = tw.Variable(init)
    opt = O.Adagrad(0.5, initial_accumulator_value=0.0, epsilon=0.0)

    @tw.function
    def step():
        opt.apply([_sparse_grad(vals, idx)], [v])
    step()
    np.testing.assert_allclose(v.numpy(), init - 0.5 * np.sign(np.bincount(idx, minlength=5))[:, None])

    g = tw.Graph()
    with g.as_default():
        v2 = tw.Variable(init)
        train = O.SGD(0.5).apply([_sparse_grad(vals, idx)], [v2])
        init_op = tf1.global_variables_initializer()
    with tf1.Session(graph=g) as sess:
        sess.run(init_op)
        sess.run(train)
        np.testing.assert_allclose(sess.run(v2), expected)


# ---- clipping --------------------------------------------------------------------------------------
def test_clipnorm_clipvalue_global_clipnorm():
    g1, g2 = np.array([3.0, 4.0]), np.array([[12.0]])

    def run(**kw):
        a, b = tw.Variable(np.zeros(2)), tw.Variable(np.zeros((1, 1)))
        O.SGD(1.0, **kw).apply([tw.constant(g1), tw.constant(g2)], [a, b])
        return -a.numpy(), -b.numpy()

    a, b = run(clipnorm=1.0)                              # each gradient to norm 1
    np.testing.assert_allclose(a, [0.6, 0.8])
    np.testing.assert_allclose(b, [[1.0]])
    a, b = run(clipnorm=100.0)                            # below the limit: unchanged
    np.testing.assert_allclose(a, g1)
    np.testing.assert_allclose(b, g2)
    a, b = run(global_clipnorm=6.5)                       # joint norm 13 -> scale 0.5
    np.testing.assert_allclose(a, g1 / 2)
    np.testing.assert_allclose(b, g2 / 2)
    a, b = run(clipvalue=3.5)
    np.testing.assert_allclose(a, [3.0, 3.5])
    np.testing.assert_allclose(b, [[3.5]])
    with pytest.raises(ValueError, match="Only one of"):
        O.SGD(clipnorm=1.0, global_clipnorm=1.0)


def test_clipnorm_of_sparse_gradient_uses_summed_rows():
    v = tw.Variable(np.zeros((3, 2)))
    # Rows: 0 -> [3, 0] + [0, 4] = [3, 4] (norm 5); the dense gradient's norm is 5 too.
    O.SGD(1.0, clipnorm=1.0).apply([_sparse_grad(np.array([[3.0, 0.0], [0.0, 4.0]]), [0, 0], rows=3)], [v])
    np.testing.assert_allclose(v.numpy(), [[-0.6, -0.8], [0, 0], [0, 0]])


# ---- schedules ---------------------------------------------------------------------------------------
def test_schedule_values():
    steps = [0, 1, 5, 10, 15, 30]
    ed = S.ExponentialDecay(0.5, 10, 0.25)
    eds = S.ExponentialDecay(0.5, 10, 0.25, staircase=True)
    pc = S.PiecewiseConstantDecay([5, 10], [1.0, 0.5, 0.125])
    cd = S.CosineDecay(2.0, 20, alpha=0.25)
    cdw = S.CosineDecay(0.0, 20, warmup_target=1.0, warmup_steps=10)
    it = S.InverseTimeDecay(1.0, 5, 0.5)
    pd = S.PolynomialDecay(1.0, 10, end_learning_rate=0.5, power=2.0)
    for s in steps:
        np.testing.assert_allclose(float(ed(s)), 0.5 * 0.25 ** (s / 10), rtol=1e-6)
        np.testing.assert_allclose(float(eds(s)), 0.5 * 0.25 ** (s // 10), rtol=1e-6)
        np.testing.assert_allclose(float(pc(s)), 1.0 if s <= 5 else 0.5 if s <= 10 else 0.125)
        c = min(s, 20) / 20
        np.testing.assert_allclose(float(cd(s)), 2.0 * (0.75 * 0.5 * (1 + math.cos(math.pi * c)) + 0.25),
                                   rtol=1e-6, atol=1e-7)
        wexp = s / 10 if s < 10 else 0.5 * (1 + math.cos(math.pi * min(s - 10, 20) / 20))
        np.testing.assert_allclose(float(cdw(s)), wexp, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(float(it(s)), 1.0 / (1 + 0.5 * s / 5), rtol=1e-6)
        np.testing.assert_allclose(float(pd(s)), 0.5 * (1 - min(s, 10) / 10) ** 2 + 0.5, rtol=1e-6)
    with pytest.raises(ValueError, match="decay_steps"):
        S.ExponentialDecay(0.1, 0, 0.5)
    with pytest.raises(ValueError, match="1 less"):
        S.PiecewiseConstantDecay([1, 2], [1.0])


def test_schedule_drives_the_optimizer_step_by_step():
    v = tw.Variable(np.zeros(1))
    opt = O.SGD(S.PiecewiseConstantDecay([1], [1.0, 0.25]))
    total = 0.0
    for t in range(4):   # lr 1 at steps 0 and 1 (step <= 1), then 0.25
        assert float(opt.learning_rate) == (1.0 if t <= 1 else 0.25)
        opt.apply([tw.constant([1.0])], [v])
        total += 1.0 if t <= 1 else 0.25
    np.testing.assert_allclose(v.numpy(), [-total])
    with pytest.raises(TypeError, match="not settable"):
        opt.learning_rate = 0.1


def test_learning_rate_variable_change_applies_inside_traced_function():
    v = tw.Variable(np.zeros(1))
    opt = O.SGD(1.0)

    @tw.function
    def step():
        opt.apply([tw.constant([1.0])], [v])
    step()
    opt.learning_rate = 0.5      # assigns the rate variable: the traced step sees it
    step()
    np.testing.assert_allclose(v.numpy(), [-1.5])
    assert step.experimental_get_tracing_count() == 1
    assert isinstance(opt.learning_rate, tw.Variable) and opt.get_config()["learning_rate"] == 0.5


# ---- config, serialization, misc ---------------------------------------------------------------------
@pytest.mark.parametrize("cls,kw", [(c, kw) for c, _, kw in CASES] + [
    (O.Adam, dict(learning_rate=S.CosineDecay(0.1, 100, alpha=0.1, warmup_target=0.2, warmup_steps=5),
                  clipvalue=1.0, use_ema=True, ema_overwrite_frequency=3))], ids=IDS + ["Adam-schedule"])
def test_config_round_trip(cls, kw):
    opt = cls(**kw)
    config = opt.get_config()
    again = cls.from_config(config)
    assert again.get_config() == config
    ser = O.serialize(opt)
    assert ser["class_name"] == cls.__name__ and ser["module"] == "keras.optimizers"
    back = O.deserialize(ser)
    assert type(back) is cls and back.get_config() == config
    import json
    json.dumps(ser)   # JSON-compatible


def test_get_by_name_and_errors():
    assert isinstance(O.get("adam"), O.Adam) and isinstance(O.get("SGD"), O.SGD)
    assert isinstance(O.get("rmsprop"), O.RMSprop) and O.get("adamw").weight_decay == 0.004
    opt = O.Adagrad()
    assert O.get(opt) is opt and O.get(None) is None
    with pytest.raises(ValueError, match="Could not interpret optimizer identifier"):
        O.get("nadamx")
    with pytest.raises(ValueError, match="not recognized.*learning_rate"):
        O.SGD(lr=0.1)
    with pytest.raises(ValueError, match="momentum"):
        O.SGD(momentum=1.5)
    with pytest.raises(ValueError, match="weight_decay"):
        O.AdamW(weight_decay=None)
    v = tw.Variable([1.0])
    with pytest.raises(ValueError, match="No gradients provided for any variable"):
        O.SGD().apply([None], [v])


def test_missing_gradient_warns_and_skips_that_variable():
    a, b = tw.Variable([1.0]), tw.Variable([1.0])
    with pytest.warns(UserWarning, match="Gradients do not exist"):
        O.SGD(1.0).apply([tw.constant([1.0]), None], [a, b])
    assert a.numpy()[0] == 0.0 and b.numpy()[0] == 1.0


def test_variables_order_and_save_load():
    w = tw.Variable(np.ones((2, 2)), name="kernel")
    opt = O.Adam(0.1)
    opt.apply([tw.constant(np.ones((2, 2)))], [w])
    assert [v.name for v in opt.variables] == ["iteration:0", "learning_rate:0", "kernel_momentum:0",
                                               "kernel_velocity:0"]
    store = {}
    opt.save_own_variables(store)
    opt2 = O.Adam(0.1)
    opt2.build([w])
    opt2.load_own_variables(store)
    for a, b in zip(opt.variables, opt2.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    with pytest.warns(UserWarning, match="Skipping variable loading"):
        O.Adam().load_own_variables(store)


def test_new_variables_in_a_later_step_get_slots():
    a, b = tw.Variable([1.0]), tw.Variable([2.0])
    opt = O.SGD(1.0, momentum=0.5)
    opt.apply([tw.constant([1.0])], [a])
    opt.apply([tw.constant([1.0])], [b])
    opt.apply([tw.constant([1.0]), tw.constant([1.0])], [a, b])
    np.testing.assert_allclose(a.numpy(), [1 - 1 - 1.5])     # m: -1, then -1.5
    np.testing.assert_allclose(b.numpy(), [2 - 1 - 1.5])


def test_weight_decay_exclusion_constraint_and_loss_scale():
    a, b = tw.Variable([1.0], name="dense_kernel"), tw.Variable([1.0], name="dense_bias")
    opt = O.SGD(0.5, weight_decay=0.5)
    opt.exclude_from_weight_decay(var_names=["bias"])
    opt.apply([tw.constant([0.0]), tw.constant([0.0])], [a, b])
    assert a.numpy()[0] == 0.75 and b.numpy()[0] == 1.0
    with pytest.raises(ValueError, match="before the optimizer is built"):
        opt.exclude_from_weight_decay(var_names=["x"])

    c = tw.Variable([1.0], constraint=lambda x: tw.clip_by_value(x, 0.0, 0.5))
    O.SGD(1.0).apply([tw.constant([-3.0])], [c])
    assert c.numpy()[0] == 0.5

    d = tw.Variable([1.0])
    opt = O.SGD(1.0, loss_scale_factor=4.0)
    assert float(opt.scale_loss(tw.constant(2.0))) == 8.0
    opt.apply([tw.constant([4.0])], [d])     # gradient of the scaled loss, unscaled again
    assert d.numpy()[0] == 0.0


def test_ema_tracks_and_overwrites():
    v = tw.Variable([0.0])
    opt = O.SGD(1.0, use_ema=True, ema_momentum=0.5, ema_overwrite_frequency=3)
    avg = None
    for t in range(3):
        opt.apply([tw.constant([-1.0])], [v])
        w = t + 1.0
        avg = w if avg is None else 0.5 * avg + 0.5 * w
        if t < 2:
            assert v.numpy()[0] == w
    # After the 3rd step the variable was replaced by its moving average.
    assert v.numpy()[0] == avg == 2.25
    opt.finalize_variable_values([v])
    assert v.numpy()[0] == 2.25


def test_float32_variables_and_custom_optimizer_subclass():
    class HalfStep(O.Optimizer):
        def build(self, variables):
            if self.built:
                return
            super().build(variables)
            self._count = [self.add_variable_from_reference(v, "count") for v in variables]

        def update_step(self, gradient, variable, learning_rate):
            count = self._count[self._get_variable_index(variable)]
            self.assign_add(count, tw.ones_like(variable.value()))
            self.assign_sub(variable, 0.5 * tw.cast(learning_rate, variable.dtype) * gradient)

    v = tw.Variable([2.0])
    opt = HalfStep(learning_rate=1.0)
    opt.apply([tw.constant([1.0])], [v])
    assert v.dtype == tw.float32 and v.numpy()[0] == 1.5
    assert opt._count[0].numpy()[0] == 1.0 and opt.name == "half_step"


# ---- parity with torch.optim ---------------------------------------------------------------------------
TORCH_CASES = [
    # torch adds epsilon to the bias-corrected sqrt(v), Keras to the uncorrected one (Kingma &
    # Ba's "epsilon hat"); RMSprop and Adagrad: torch outside the square root, Keras inside.
    # With a negligible epsilon both are the same published rule.
    ("Adam", dict(learning_rate=0.01, epsilon=1e-12), "Adam", dict(lr=0.01, eps=1e-12)),
    ("Adam", dict(learning_rate=0.01, epsilon=1e-12, amsgrad=True), "Adam", dict(lr=0.01, eps=1e-12, amsgrad=True)),
    ("AdamW", dict(learning_rate=0.01, weight_decay=0.1, epsilon=1e-12), "AdamW",
     dict(lr=0.01, weight_decay=0.1, eps=1e-12)),
    ("SGD", dict(learning_rate=0.05, momentum=0.9), "SGD", dict(lr=0.05, momentum=0.9)),
    ("SGD", dict(learning_rate=0.05, momentum=0.9, nesterov=True), "SGD", dict(lr=0.05, momentum=0.9, nesterov=True)),
    ("RMSprop", dict(learning_rate=0.01, epsilon=0.0), "RMSprop", dict(lr=0.01, alpha=0.9, eps=0.0)),
    ("RMSprop", dict(learning_rate=0.01, epsilon=0.0, momentum=0.5, centered=True), "RMSprop",
     dict(lr=0.01, alpha=0.9, eps=0.0, momentum=0.5, centered=True)),
    ("Adagrad", dict(learning_rate=0.1, initial_accumulator_value=0.1, epsilon=0.0), "Adagrad",
     dict(lr=0.1, initial_accumulator_value=0.1, eps=0.0)),
]


@pytest.mark.parametrize("ours,our_kw,theirs,their_kw", TORCH_CASES,
                         ids=[f"{o}-{i}" for i, (o, *_rest) in enumerate(TORCH_CASES)])
def test_parity_with_torch_optim(ours, our_kw, theirs, their_kw):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    x, y = rng.normal(size=(16, 4)), rng.normal(size=(16, 1))
    init = [rng.normal(size=(4, 5)) * 0.5, np.zeros(5), rng.normal(size=(5, 1)) * 0.5, np.zeros(1)]

    tv = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in init]
    topt = getattr(torch.optim, theirs)(tv, **their_kw)
    tx, ty = torch.tensor(x), torch.tensor(y)

    vs = [tw.Variable(a) for a in init]
    opt = getattr(O, ours)(**our_kw)
    wx, wy = tw.constant(x), tw.constant(y)

    @tw.function
    def step():
        with tw.GradientTape() as tape:
            h = tw.tanh(tw.matmul(wx, vs[0]) + vs[1])
            loss = tw.reduce_mean(tw.square(tw.matmul(h, vs[2]) + vs[3] - wy))
        opt.apply_gradients(zip(tape.gradient(loss, vs), vs))
        return loss

    for _ in range(20):
        topt.zero_grad()
        tloss = ((torch.tanh(tx @ tv[0] + tv[1]) @ tv[2] + tv[3] - ty) ** 2).mean()
        tloss.backward()
        topt.step()
        loss = step()
        np.testing.assert_allclose(float(loss), tloss.item(), rtol=1e-6)
    for a, b in zip(vs, tv):
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-6, atol=1e-9)


# ---- fused in-place updates -----------------------------------------------------------------------
def test_fused_adam_is_one_op_per_variable_and_rule_path_serves_other_dtypes():
    g = tw.Graph()
    with g.as_default():
        v = tw.compat.v1.Variable(np.ones((3, 2), np.float32))
        O.Adam(0.1).apply_gradients([(tw.ones((3, 2)), v)])
    types = [op.type for op in g.get_operations()]
    assert types.count("ResourceApplyAdam") == 1 and "Sqrt" not in types
    # float16 has no fused kernel: the op-by-op rule runs, with the same arithmetic.
    rng = np.random.default_rng(0)
    w0, grads = rng.normal(size=(4,)), rng.normal(size=(3, 4))
    half = tw.Variable(w0.astype(np.float16))
    opt, w, st = O.Adam(0.125), w0.astype(np.float16).astype(np.float64), {}
    for t in range(3):
        opt.apply([tw.constant(grads[t].astype(np.float16))], [half])
        w = ref_adam(w, grads[t].astype(np.float16).astype(np.float64), st, t + 1, 0.125)
    np.testing.assert_allclose(half.numpy().astype(np.float64), w, rtol=0, atol=1e-2)   # float16 rounding


@pytest.mark.parametrize("make", [lambda: O.Adam(0.05), lambda: O.Adam(0.05, amsgrad=True),
                                  lambda: O.SGD(0.1, momentum=0.9, nesterov=True), lambda: O.SGD(0.1),
                                  lambda: O.Adagrad(0.1), lambda: O.RMSprop(0.01, momentum=0.5, centered=True)],
                         ids=["adam", "amsgrad", "nesterov", "sgd", "adagrad", "rmsprop"])
def test_grouped_updates_equal_one_variable_at_a_time(make):
    # Three float32 variables share one ResourceGroupApply* op, the float64 one gets its own
    # op, the sparse and float16 ones their own paths; the bits equal updating each alone.
    rng = np.random.default_rng(3)
    inits = [rng.normal(size=s).astype(d) for s, d in (((3, 4), np.float32), ((4,), np.float32),
                                                        ((2, 2), np.float32), ((5,), np.float64),
                                                        ((5, 2), np.float32), ((3,), np.float16))]
    grads = [[rng.normal(size=a.shape).astype(a.dtype) for a in inits] for _ in range(3)]
    sparse = [_sparse_grad(g[4][:2], np.array([4, 1])) for g in grads]

    def run(one_at_a_time):
        vs = [tw.Variable(a) for a in inits]
        opt = make()
        for t in range(3):
            gs = [tw.constant(g) for g in grads[t]]
            gs[4] = sparse[t]
            if one_at_a_time:
                opt.build(vs)
                for g, v in zip(gs, vs):    # outside training_ops.grouped(): each op at once
                    opt._per_apply = {}
                    opt.update_step(g, v, opt._get_current_learning_rate())
                opt.iterations.assign_add(1)
            else:
                opt.apply(gs, vs)
        return [v.numpy() for v in vs]

    for a, b in zip(run(False), run(True)):
        np.testing.assert_array_equal(a, b)

    g = tw.Graph()
    with g.as_default():
        vs = [tw.compat.v1.Variable(a) for a in inits[:4]]
        make().apply_gradients([(tw.ones(v.shape, v.dtype), v) for v in vs])
    types = [op.type for op in g.get_operations()]
    assert sum(t.startswith("ResourceGroupApply") for t in types) == 1
    assert sum(t.startswith("ResourceApply") for t in types) == 1     # the float64 variable


def test_grouped_block_drops_its_updates_on_error_and_checks_inputs():
    from tensorweave.core.dispatch import execute
    from tensorweave.core.registry import get_op
    from tensorweave.ops import training_ops
    w = tw.Variable(np.ones(2, np.float32))
    with pytest.raises(RuntimeError):
        with training_ops.grouped():
            training_ops.apply_momentum(w, None, 0.5, tw.ones(2), momentum=0.0)
            raise RuntimeError("stop")
    np.testing.assert_array_equal(w.numpy(), [1, 1])
    training_ops.apply_momentum(w, None, 0.5, tw.ones(2), momentum=0.0)    # outside: at once
    np.testing.assert_array_equal(w.numpy(), [0.5, 0.5])
    with tw.Graph().as_default():
        h = tw.compat.v1.Variable(np.ones(2, np.float32)).handle
        with pytest.raises(TypeError, match="ResourceGroupApplyKerasMomentum: expected 2 x 1 variable handles"):
            execute(get_op("ResourceGroupApplyKerasMomentum"), [h, tw.constant(0.1), tw.ones(2)],
                    {"momentum": 0.0, "nesterov": False, "num_variables": 2}, None)


@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_large_adam_updates_in_chunks_equal_one_pass(dtype, amsgrad):
    # Variables of >= PARALLEL_MIN elements are updated in one chunk per intra-op thread
    # (numba prange): elementwise, so the bits equal the one-thread loop for any chunk count.
    from tensorweave.kernels.cpu import training_kernels as tk
    rng = np.random.default_rng(5)
    n = tk.PARALLEL_MIN + 1001
    w, m, v, vh, g = (rng.normal(size=n).astype(dtype) for _ in range(5))
    v, vh = np.abs(v), np.abs(vh)
    coeffs = tuple(dtype(c) for c in (1e-3, 0.1, 0.001, 1e-7))
    one = [a.copy() for a in ((w, m, v, vh) if amsgrad else (w, m, v))]
    (tk._adam_flat_amsgrad if amsgrad else tk._adam_flat)(*one, g, *coeffs)
    for chunks in (2, 3):
        got = [a.copy() for a in ((w, m, v, vh) if amsgrad else (w, m, v))]
        (tk._adam_amsgrad_chunks if amsgrad else tk._adam_chunks)(*got, g, *coeffs, chunks)
        for a, b in zip(got, one):
            np.testing.assert_array_equal(a, b)
    # through the optimizer (in chunks where this machine has 2+ threads) against the reference
    var = tw.Variable(w)
    opt, ref, st = O.Adam(0.01, amsgrad=amsgrad), w.astype(np.float64), {}
    for t in range(2):
        grad = g * (t + 1)
        opt.apply([tw.constant(grad)], [var])
        ref = ref_adam(ref, grad.astype(np.float64), st, t + 1, 0.01, amsgrad=amsgrad)
    np.testing.assert_allclose(var.numpy(), ref, rtol=1e-4 if dtype == np.float32 else 1e-10, atol=1e-6)


def test_parallel_loops_are_not_used_in_a_forked_child():
    from tensorweave.kernels.cpu.jit import parallel_loops
    assert parallel_loops() in (True, False)
    pid = os.fork()
    if pid == 0:   # the child: must answer without touching the parent's thread pool
        os._exit(0 if parallel_loops() is False else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_values_read_before_an_in_place_update_keep_their_contents():
    v = tw.Variable(np.arange(6.0).reshape(3, 2))
    before, as_array = v.read_value(), v.numpy()
    O.Adam(0.5).apply([tw.constant(np.ones((3, 2)))], [v])
    O.Adam(0.5).apply([_sparse_grad(np.ones((1, 2)), np.array([1]))], [v])
    v.scatter_update(tw.IndexedSlices(tw.constant([[9.0, 9.0]], tw.float64), tw.constant([0])))
    np.testing.assert_array_equal(before.numpy(), np.arange(6.0).reshape(3, 2))
    np.testing.assert_array_equal(as_array, np.arange(6.0).reshape(3, 2))
    assert v.numpy()[0].tolist() == [9.0, 9.0] and v.numpy()[2, 0] < 4.0


def test_fused_adam_errors_name_the_variable():
    v = tw.Variable(np.zeros((3, 2)), name="table")
    with pytest.raises(tw.errors.InvalidArgumentError, match="table.*not in"):
        O.Adam(0.1).apply([_sparse_grad(np.ones((1, 2)), np.array([7]))], [v])


SPARSE_BOUNDS = r"""
import numpy as np
import tensorweave as tw
from tensorweave.keras import optimizers as O
for cls in (O.SGD, O.Adam, O.Adagrad, O.RMSprop):
    v = tw.Variable(np.zeros((5, 2)))
    ok = tw.IndexedSlices(tw.constant(np.ones((1, 2))), tw.constant([4], dtype=tw.int32), np.array([5, 2]))
    cls(0.5).apply([ok], [v])                         # the last row is in bounds
    assert v.numpy()[4].any() and not v.numpy()[:4].any(), cls
    for bad in (5, -1):
        g = tw.IndexedSlices(tw.constant(np.ones((1, 2))), tw.constant([bad], dtype=tw.int32), np.array([5, 2]))
        try:
            cls(0.5).apply([g], [v])
        except tw.errors.InvalidArgumentError as e:
            assert f"index {bad} is not in [0, 5)" in str(e), e
        else:
            raise AssertionError(f"{cls.__name__}: index {bad} was accepted")
print("bounds ok")
"""


@pytest.mark.parametrize("cls", ["Adam", "SGD", "RMSprop", "Adagrad"])
def test_update_errors_name_the_variable_and_the_bad_index(cls):
    from tensorweave.keras import optimizers as O
    v = tw.Variable(np.zeros((5, 2)), name="table")
    opt = getattr(O, cls)(0.5)
    with pytest.raises(tw.errors.InvalidArgumentError,
                       match=r"update of 'table:0': gradient shape \(3, 2\) does not match the variable's \(5, 2\)"):
        opt.apply([tw.constant(np.ones((3, 2)))], [v])
    for indices, bad in (([-1, 3], -1), ([1, 9], 9), ([2, -4, 7], -4)):
        g = tw.IndexedSlices(tw.constant(np.ones((len(indices), 2))), tw.constant(indices, dtype=tw.int32),
                             np.array([5, 2]))
        with pytest.raises(tw.errors.InvalidArgumentError, match=rf"update of 'table:0': index {bad} is not in \[0, 5\)"):
            opt.apply([g], [v])
    assert not v.numpy().any()


def test_sparse_update_index_exactly_at_the_end_is_rejected():
    """Index == rows is the boundary: a check weakened to ``> rows`` would let the compiled loop
    write one row past the end (the process aborts), so this runs in a subprocess."""
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-c", SPARSE_BOUNDS], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "bounds ok" in proc.stdout, proc.stderr[-2000:]


@pytest.mark.parametrize("cls", [O.Adam, O.Adagrad, O.SGD, O.RMSprop])
def test_sparse_gradient_with_no_rows_changes_nothing(cls):
    """An embedding none of whose rows the batch used: TF's sparse kernels do nothing (was a reshape error)."""
    init = np.arange(12.0).reshape(4, 3)
    v = tw.Variable(init)
    opt = cls(learning_rate=0.5, **({"momentum": 0.5} if cls is O.SGD else {}))
    opt.apply([_sparse_grad(np.zeros((0, 3)), np.zeros((0,), np.int64))], [v])
    np.testing.assert_array_equal(v.numpy(), init)
    opt.apply([_sparse_grad(np.ones((1, 3)), np.array([2]))], [v])        # the slots were left usable
    assert not np.array_equal(v.numpy()[2], init[2]) and np.array_equal(v.numpy()[[0, 1, 3]], init[[0, 1, 3]])
