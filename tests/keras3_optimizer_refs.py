"""NumPy float64 references of Keras 3's Adamax, Nadam, Lion, Lamb and Adafactor (the rules of
``keras/src/optimizers/*.py``, checked against Keras 3.15's own numbers in
``tf_reference/keras3_optimizers.json``), and the tiny model those numbers come from, for
tests/test_opt21_*.py. A reference is ``ref(w, g, state, t, lr, **hyper) -> new w`` (``state``:
that weight's slots; ``t`` the 1-based step)."""
import json
import os

import numpy as np

import tensorweave as tw

HERE = os.path.dirname(os.path.abspath(__file__))
NAMES = ("W", "b", "K")


def ref_adamax(w, g, st, t, lr, beta_1=0.9, beta_2=0.999, epsilon=1e-7):
    m = st["m"] = st.get("m", 0 * w) + (g - st.get("m", 0 * w)) * (1 - beta_1)
    u = st["u"] = np.maximum(beta_2 * st.get("u", 0 * w), np.abs(g))
    return w - lr * m / ((1 - beta_1 ** t) * (u + epsilon))


def ref_nadam(w, g, st, t, lr, beta_1=0.9, beta_2=0.999, epsilon=1e-7):
    mu = lambda s: beta_1 * (1 - 0.5 * 0.96 ** s)   # noqa: E731
    u_product = st["u_product"] = st.get("u_product", 1.0) * mu(t)
    m = st["m"] = beta_1 * st.get("m", 0 * w) + (1 - beta_1) * g
    v = st["v"] = beta_2 * st.get("v", 0 * w) + (1 - beta_2) * g * g
    m_hat = mu(t + 1) * m / (1 - u_product * mu(t + 1)) + (1 - mu(t)) * g / (1 - u_product)
    return w - lr * m_hat / (np.sqrt(v / (1 - beta_2 ** t)) + epsilon)


def ref_lion(w, g, st, t, lr, beta_1=0.9, beta_2=0.99):
    m = st.get("m", 0 * w)
    st["m"] = beta_2 * m + (1 - beta_2) * g
    return w - lr * np.sign(beta_1 * m + (1 - beta_1) * g)


def ref_lamb(w, g, st, t, lr, beta_1=0.9, beta_2=0.999, epsilon=1e-7):
    m = st["m"] = beta_1 * st.get("m", 0 * w) + (1 - beta_1) * g
    v = st["v"] = beta_2 * st.get("v", 0 * w) + (1 - beta_2) * g * g
    update = (m / (1 - beta_1 ** t)) / (np.sqrt(v / (1 - beta_2 ** t)) + epsilon)
    w_norm, u_norm = np.linalg.norm(w), np.linalg.norm(update)
    ratio = w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0
    return w - ratio * lr * update


def ref_adafactor(w, g, st, t, lr, beta_2_decay=-0.8, epsilon_1=1e-30, epsilon_2=1e-3, clip_threshold=1.0,
                  relative_step=True):
    rms = lambda x: np.sqrt(np.mean(x * x))   # noqa: E731
    if relative_step:
        lr = min(lr, 1 / np.sqrt(t))
    alpha = max(epsilon_2, rms(w)) * min(lr, 1 / np.sqrt(t))
    g2 = g * g + epsilon_1
    beta = 1 - t ** beta_2_decay
    if w.ndim >= 2:
        r = st["r"] = beta * st.get("r", 0 * w[..., 0]) + (1 - beta) * g2.mean(-1)
        c = st["c"] = beta * st.get("c", 0 * w[..., 0, :]) + (1 - beta) * g2.mean(-2)
        v = (r / r.mean(-1, keepdims=True))[..., None] * c[..., None, :]
    else:
        v = st["v"] = beta * st.get("v", 0 * w) + (1 - beta) * g2
    u = g / np.sqrt(v)
    return w - alpha * u / max(1.0, rms(u) / clip_threshold)


REFS = {"Adamax": ref_adamax, "Nadam": ref_nadam, "Lion": ref_lion, "Lamb": ref_lamb, "Adafactor": ref_adafactor}


def keras_numbers():
    """Keras 3's results (``tf_reference/keras3_optimizers_oracle.py``)."""
    with open(os.path.join(HERE, "tf_reference", "keras3_optimizers.json")) as f:
        return json.load(f)


def data(dtype=np.float64):
    return {k: np.asarray(v, np.float32).astype(dtype) for k, v in keras_numbers()["data"].items()}


def numpy_gradients(ws, d):
    """The model's gradients: loss = mean((x W + b - y)**2) + sum(C * K**2) / 2."""
    w, b, k = ws
    r = d["x"] @ w + b - d["y"]
    return [2 * d["x"].T @ r / r.size, 2 * r.sum(0) / r.size, d["C"] * k]


def reference_run(case, steps, dtype=np.float64):
    """The weights after each step, by the NumPy reference (weight decay applied first, as Keras)."""
    kwargs = dict(case["kwargs"])
    # the rate is a float32 variable (Keras and tensorweave), read into the weights' dtype
    lr, wd = float(np.float32(kwargs.pop("learning_rate"))), kwargs.pop("weight_decay", None)
    d = data(dtype)
    ws = [d[n] for n in NAMES]
    states = [{} for _ in ws]
    history = []
    for t in range(1, steps + 1):
        gs = numpy_gradients(ws, d)
        if wd is not None:
            ws = [w - w * wd * lr for w in ws]
        ws = [REFS[case["class"]](w, g, st, t, lr, **kwargs) for w, g, st in zip(ws, gs, states)]
        history.append(ws)
    return history


def tw_loss(ws, d):
    r = tw.matmul(d["x"], ws[0]) + ws[1] - d["y"]
    return tw.reduce_mean(r * r) + 0.5 * tw.reduce_sum(d["C"] * ws[2] * ws[2])


def tw_run(case, steps, dtype=np.float32, layout=None, traced=False):
    """``(history, optimizer, variables)``: tensorweave's weights after each step. ``layout``:
    ``(placement, {name: sbp})`` for global variables (the data then ``B`` on that placement);
    ``traced``: the step is a ``tw.function`` (planned whole-graph on a placement)."""
    d = data(dtype)
    if layout is None:
        ws = [tw.Variable(d[n], name=n) for n in NAMES]
        consts = {k: tw.constant(v) for k, v in d.items()}
    else:
        placement, sbps = layout
        ws = [tw.Variable(d[n], name=n, placement=placement, sbp=sbps[n]) for n in NAMES]
        consts = {k: tw.constant(v).to_global(placement=placement, sbp=tw.sbp.broadcast) for k, v in d.items()}
    opt = getattr(tw.keras.optimizers, case["class"])(**case["kwargs"])

    def step():
        with tw.GradientTape() as tape:
            loss = tw_loss(ws, consts)
        opt.apply_gradients(zip(tape.gradient(loss, ws), ws))
    step = tw.function(step) if traced else step
    history = []
    for _ in range(steps):
        step()
        history.append([w.numpy() for w in ws])
    return history, opt, ws
