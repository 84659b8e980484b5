"""The four issue-5 workloads written for each peer framework (PyTorch, JAX, Keras 3 on TensorFlow).

Each ``make_<framework>(workload, data)`` returns ``(step, version, info)``: ``step()`` runs one
full training step (forward, loss, gradients, Adam(1e-3) update) and returns the loss as a
Python float, so every framework finishes its work before the clock stops. ``data`` holds the
synthetic NumPy batch (``x``, ``y``) shared with tensorweave's run.

Models follow the table in issue 5 (and ``bench_models.WORKLOADS``):

* mlp: Dense 784->512 relu -> 512 relu -> 10 logits, sparse softmax cross-entropy;
* cnn: Conv2D 32 3x3 relu -> Conv2D 64 3x3 relu (valid padding) -> MaxPool 2 -> Flatten -> Dense 128
  relu -> Dense 10, sparse softmax cross-entropy;
* lstm: Embedding 20000x128 -> LSTM 128 (last state) -> Dense 1, sigmoid cross-entropy;
* fasttext: Embedding 20000x50 -> mean over time -> Dense 1, sigmoid cross-entropy;
* gru (issue 18): Embedding 20000x64 -> GRU 64 (last state; Keras' reset_after form, PyTorch's) ->
  Dense 1, sigmoid cross-entropy, 80 steps;
* transformer (issue 18): Embedding 20000x64 -> one post-norm encoder block (2-head self-attention
  of key size 32, residual + LayerNorm, Dense 128 relu -> Dense 64, residual + LayerNorm) -> mean
  over the 64 positions -> Dense 1, sigmoid cross-entropy; no dropout;
* mlp_predict, cnn_predict (issue 18): the mlp/cnn model's inference on one sample (Keras
  ``predict_on_batch``; PyTorch eval mode under ``no_grad``);
* resnet (issue 18): a small ResNet on 32x32x3 images — Conv 16 3x3 + BatchNorm + ReLU, three
  basic residual blocks (16, 32 stride 2, 64 stride 2; two 3x3 convolutions with BatchNorm
  each, a 1x1 convolution + BatchNorm on the shortcut where the shape changes), global average
  pooling, Dense 10; sparse softmax cross-entropy; BatchNorm in training mode;
* encoder2 (issue 18): the issue's transformer — Embedding 20000x256 -> two post-norm encoder
  blocks (4 heads of key size 64, Dense 512 relu -> Dense 256) -> mean over the 128 positions ->
  Dense 1, sigmoid cross-entropy; no dropout;
* widedeep (issue 18): wide & deep over 8 categorical fields hashed into 1M rows — deep:
  Embedding 1Mx16 -> Flatten -> Dense 256 relu -> Dense 128 relu -> Dense 1; wide: Embedding
  1Mx1 summed over the fields; the two logits added; sigmoid cross-entropy. Each framework's
  default embedding gradient: PyTorch's dense one (Adam then updates the whole tables), Keras'
  rows (tw.keras and Keras 3 update the rows the batch used, as their optimizers do).

JAX has every workload (added for the issue-18 ones in session 9): the same layers written out, Glorot
weights with Keras' fans (the attention projections' too), BatchNorm's moving statistics carried in
the jitted step's state, the widedeep embeddings' gradients dense (JAX's idiom).

Each peer uses its own idiom: PyTorch an ``nn.Module`` with ``torch.optim.Adam`` (NCHW for the
CNN, its native layout; dense embedding gradients, its default); JAX a ``jax.jit``-compiled step
(parameters and Adam state donated) with Adam written out here (optax is not a dependency);
TensorFlow the Keras 3 model with ``train_on_batch``, as Keras 3 compiles it by default.
No module here imports tensorweave, so the TensorFlow worker can run in an interpreter
that only has TensorFlow and NumPy.
"""
import os

VOCAB = 20000
#: rows of the wide & deep model's embedding tables
WIDE_ROWS = 1_000_000


# ---- PyTorch -----------------------------------------------------------------------------------
def make_torch(workload, data, threads):
    import numpy as np
    import torch
    from torch import nn

    torch.set_num_threads(threads)
    torch.set_num_interop_threads(threads)
    torch.manual_seed(0)

    class LastLSTM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(VOCAB, 128)
            self.lstm = nn.LSTM(128, 128, batch_first=True)
            self.out = nn.Linear(128, 1)

        def forward(self, ids):
            _, (h, _) = self.lstm(self.emb(ids))
            return self.out(h[-1])

    class FastText(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(VOCAB, 50)
            self.out = nn.Linear(50, 1)

        def forward(self, ids):
            return self.out(self.emb(ids).mean(dim=1))

    class LastGRU(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(VOCAB, 64)
            self.gru = nn.GRU(64, 64, batch_first=True)
            self.out = nn.Linear(64, 1)

        def forward(self, ids):
            _, h = self.gru(self.emb(ids))
            return self.out(h[-1])

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(VOCAB, 64)
            self.block = nn.TransformerEncoderLayer(64, 2, dim_feedforward=128, dropout=0.0, batch_first=True)
            self.out = nn.Linear(64, 1)

        def forward(self, ids):
            return self.out(self.block(self.emb(ids)).mean(dim=1))

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
            self.c2, self.b2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
            self.short = None if stride == 1 and cin == cout else nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            h = self.b2(self.c2(torch.relu(self.b1(self.c1(x)))))
            return torch.relu(h + (x if self.short is None else self.short(x)))

    class Encoder2(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(VOCAB, 256)
            layer = nn.TransformerEncoderLayer(256, 4, dim_feedforward=512, dropout=0.0, batch_first=True)
            self.blocks = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.out = nn.Linear(256, 1)

        def forward(self, ids):
            return self.out(self.blocks(self.emb(ids)).mean(dim=1))

    class WideDeep(nn.Module):
        def __init__(self):
            super().__init__()
            self.deep_emb, self.wide_emb = nn.Embedding(WIDE_ROWS, 16), nn.Embedding(WIDE_ROWS, 1)
            self.deep = nn.Sequential(nn.Flatten(), nn.Linear(8 * 16, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                                      nn.Linear(128, 1))

        def forward(self, ids):
            return self.deep(self.deep_emb(ids)) + self.wide_emb(ids).sum(dim=1)

    x, y = data["x"], data["y"]
    predict = workload.endswith("_predict")
    workload = workload[:-len("_predict")] if predict else workload
    if workload == "resnet":
        model = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(), Block(16, 16, 1),
                              Block(16, 32, 2), Block(32, 64, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                              nn.Linear(64, 10))
        xt = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))   # NHWC -> NCHW
        loss_fn, yt = nn.CrossEntropyLoss(), torch.from_numpy(y.astype(np.int64))
    elif workload == "mlp":
        model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
        loss_fn, xt, yt = nn.CrossEntropyLoss(), torch.from_numpy(x), torch.from_numpy(y.astype(np.int64))
    elif workload == "cnn":
        model = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Flatten(), nn.Linear(64 * 12 * 12, 128), nn.ReLU(), nn.Linear(128, 10))
        xt = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))   # NHWC -> NCHW
        loss_fn, yt = nn.CrossEntropyLoss(), torch.from_numpy(y.astype(np.int64))
    elif workload == "lstm":
        model, loss_fn = LastLSTM(), nn.BCEWithLogitsLoss()
        xt, yt = torch.from_numpy(x.astype(np.int64)), torch.from_numpy(y)
    elif workload in ("fasttext", "gru", "transformer", "encoder2", "widedeep"):
        model = {"fasttext": FastText, "gru": LastGRU, "transformer": Encoder, "encoder2": Encoder2,
                 "widedeep": WideDeep}[workload]()
        loss_fn, xt, yt = nn.BCEWithLogitsLoss(), torch.from_numpy(x.astype(np.int64)), torch.from_numpy(y)
    else:
        raise ValueError(workload)
    if predict:
        model.eval()

        def infer():
            with torch.no_grad():
                return float(model(xt).sum())
        return infer, torch.__version__, {"threads": torch.get_num_threads(), "mode": "eval, no_grad"}
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(xt), yt)
        loss.backward()
        opt.step()
        return loss.item()
    info = {"threads": torch.get_num_threads(), "layout": "NCHW" if workload in ("cnn", "resnet") else None}
    return step, torch.__version__, info


# ---- JAX -------------------------------------------------------------------------------------------
def make_jax(workload, data, threads):
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    if threads == 1:
        # XLA:CPU has no thread-count knob short of switching Eigen's pool off; more threads than one
        # means "all cores" (its default), which is what threads == os.cpu_count() asks for.
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1").strip()
    import jax
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(0)
    predict = workload.endswith("_predict")
    workload = workload[:-len("_predict")] if predict else workload
    if predict and workload not in ("mlp", "cnn"):
        raise ValueError(f"JAX peer: no {workload}_predict (inference is written for mlp and cnn only)")
    bn_state = None                  # resnet: BatchNorm's moving statistics, updated by each step

    def glorot(shape, fan_in, fan_out):
        lim = np.sqrt(6.0 / (fan_in + fan_out))
        return jnp.asarray(rng.uniform(-lim, lim, shape).astype(np.float32))

    def dense(n_in, n_out):
        return {"w": glorot((n_in, n_out), n_in, n_out), "b": jnp.zeros((n_out,), jnp.float32)}

    def sparse_ce(logits, labels):
        logp = jax.nn.log_softmax(logits)
        return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))

    def sigmoid_ce(logits, labels):
        # log(1 + exp(-|z|)) + max(z, 0) - z*y: stable for large |z|, like every framework's version
        return jnp.mean(jnp.maximum(logits, 0) - logits * labels + jnp.log1p(jnp.exp(-jnp.abs(logits))))

    if workload == "mlp":
        params = {"d1": dense(784, 512), "d2": dense(512, 512), "d3": dense(512, 10)}

        def loss_fn(p, x, y):
            h = jax.nn.relu(x @ p["d1"]["w"] + p["d1"]["b"])
            h = jax.nn.relu(h @ p["d2"]["w"] + p["d2"]["b"])
            return sparse_ce(h @ p["d3"]["w"] + p["d3"]["b"], y)
    elif workload == "cnn":
        params = {"c1": {"w": glorot((3, 3, 1, 32), 9, 9 * 32), "b": jnp.zeros((32,), jnp.float32)},
                  "c2": {"w": glorot((3, 3, 32, 64), 9 * 32, 9 * 64), "b": jnp.zeros((64,), jnp.float32)},
                  "d1": dense(12 * 12 * 64, 128), "d2": dense(128, 10)}

        def conv(x, c):
            y = jax.lax.conv_general_dilated(x, c["w"], (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"))
            return jax.nn.relu(y + c["b"])

        def loss_fn(p, x, y):
            h = conv(conv(x, p["c1"]), p["c2"])
            h = jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
            h = h.reshape(h.shape[0], -1)
            h = jax.nn.relu(h @ p["d1"]["w"] + p["d1"]["b"])
            return sparse_ce(h @ p["d2"]["w"] + p["d2"]["b"], y)
    elif workload == "lstm":
        units = 128
        params = {"emb": jnp.asarray(rng.uniform(-0.05, 0.05, (VOCAB, 128)).astype(np.float32)),
                  "wx": glorot((128, 4 * units), 128, 4 * units), "wh": glorot((units, 4 * units), units, 4 * units),
                  "b": jnp.zeros((4 * units,), jnp.float32), "out": dense(units, 1)}

        def loss_fn(p, ids, y):
            xs = jnp.take(p["emb"], ids, axis=0)                     # (batch, time, 128)
            xw = jnp.einsum("btd,dg->tbg", xs, p["wx"]) + p["b"]    # input projection for all steps at once

            def cell(carry, xt):
                h, c = carry
                z = xt + h @ p["wh"]
                i, f, g, o = jnp.split(z, 4, axis=-1)              # Keras gate order
                c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
                h = jax.nn.sigmoid(o) * jnp.tanh(c)
                return (h, c), None
            zeros = jnp.zeros((ids.shape[0], units), jnp.float32)
            (h, _), _ = jax.lax.scan(cell, (zeros, zeros), xw)
            return sigmoid_ce(h @ p["out"]["w"] + p["out"]["b"], y)
    elif workload == "fasttext":
        params = {"emb": jnp.asarray(rng.uniform(-0.05, 0.05, (VOCAB, 50)).astype(np.float32)), "out": dense(50, 1)}

        def loss_fn(p, ids, y):
            h = jnp.mean(jnp.take(p["emb"], ids, axis=0), axis=1)
            return sigmoid_ce(h @ p["out"]["w"] + p["out"]["b"], y)
    elif workload == "gru":
        units = 64
        params = {"emb": jnp.asarray(rng.uniform(-0.05, 0.05, (VOCAB, 64)).astype(np.float32)),
                  "wx": glorot((64, 3 * units), 64, 3 * units), "wh": glorot((units, 3 * units), units, 3 * units),
                  "b": jnp.zeros((2, 3 * units), jnp.float32), "out": dense(units, 1)}

        def loss_fn(p, ids, y):
            xs = jnp.take(p["emb"], ids, axis=0)
            xw = jnp.einsum("btd,dg->tbg", xs, p["wx"]) + p["b"][0]

            def cell(h, xt):                                        # Keras' reset_after GRU, gates z, r, h
                rec = h @ p["wh"] + p["b"][1]
                z = jax.nn.sigmoid(xt[:, :units] + rec[:, :units])
                r = jax.nn.sigmoid(xt[:, units:2 * units] + rec[:, units:2 * units])
                hh = jnp.tanh(xt[:, 2 * units:] + r * rec[:, 2 * units:])
                return z * h + (1 - z) * hh, None
            h, _ = jax.lax.scan(cell, jnp.zeros((ids.shape[0], units), jnp.float32), xw)
            return sigmoid_ce(h @ p["out"]["w"] + p["out"]["b"], y)
    elif workload in ("transformer", "encoder2"):
        width, heads, key, ff_width, blocks = (64, 2, 32, 128, 1) if workload == "transformer" else (256, 4, 64, 512, 2)

        def block():
            inner = heads * key                                     # Keras' einsum fans: width in, heads*key out
            return {"q": dense(width, inner), "k": dense(width, inner), "v": dense(width, inner),
                    "o": dense(inner, width), "ln1": {"g": jnp.ones(width), "b": jnp.zeros(width)},
                    "f1": dense(width, ff_width), "f2": dense(ff_width, width),
                    "ln2": {"g": jnp.ones(width), "b": jnp.zeros(width)}}
        params = {"emb": jnp.asarray(rng.uniform(-0.05, 0.05, (VOCAB, width)).astype(np.float32)),
                  "blocks": [block() for _ in range(blocks)], "out": dense(width, 1)}

        def layer_norm(h, ln):
            mean = h.mean(-1, keepdims=True)
            var = ((h - mean) ** 2).mean(-1, keepdims=True)
            return (h - mean) * jax.lax.rsqrt(var + 1e-5) * ln["g"] + ln["b"]

        def attention(h, b):
            n, t, _ = h.shape

            def heads_of(d):
                return (h @ d["w"] + d["b"]).reshape(n, t, heads, key)
            q, k, v = heads_of(b["q"]) / np.sqrt(key).astype(np.float32), heads_of(b["k"]), heads_of(b["v"])
            weights = jax.nn.softmax(jnp.einsum("nqhd,nkhd->nhqk", q, k), axis=-1)
            return jnp.einsum("nhqk,nkhd->nqhd", weights, v).reshape(n, t, heads * key) @ b["o"]["w"] + b["o"]["b"]

        def loss_fn(p, ids, y):
            h = jnp.take(p["emb"], ids, axis=0)
            for b in p["blocks"]:                                   # post-norm, as the Keras model
                h = layer_norm(h + attention(h, b), b["ln1"])
                ff = jax.nn.relu(h @ b["f1"]["w"] + b["f1"]["b"]) @ b["f2"]["w"] + b["f2"]["b"]
                h = layer_norm(h + ff, b["ln2"])
            return sigmoid_ce(h.mean(axis=1) @ p["out"]["w"] + p["out"]["b"], y)
    elif workload == "resnet":
        def conv_bn(cin, cout, size):
            return {"w": glorot((size, size, cin, cout), size * size * cin, size * size * cout),
                    "g": jnp.ones(cout), "b": jnp.zeros(cout)}
        layout = [("stem", 3, 16, 3)]
        for name, cin, cout in (("b1", 16, 16), ("b2", 16, 32), ("b3", 32, 64)):
            layout += [(name + "c1", cin, cout, 3), (name + "c2", cout, cout, 3)]
            if cin != cout:
                layout.append((name + "sc", cin, cout, 1))
        params = {name: conv_bn(cin, cout, size) for name, cin, cout, size in layout}
        params["out"] = dense(64, 10)
        bn_state = {name: {"mean": jnp.zeros(cout), "var": jnp.ones(cout)} for name, _, cout, _ in layout}

        def apply_conv_bn(p, s, name, h, stride, new_s):
            h = jax.lax.conv_general_dilated(h, p[name]["w"], (stride, stride), "SAME",
                                             dimension_numbers=("NHWC", "HWIO", "NHWC"))
            mean, var = h.mean((0, 1, 2)), h.var((0, 1, 2))         # training mode: the batch's statistics
            count = h.shape[0] * h.shape[1] * h.shape[2]
            new_s[name] = {"mean": 0.9 * s[name]["mean"] + 0.1 * jax.lax.stop_gradient(mean),
                           "var": 0.9 * s[name]["var"] + 0.1 * jax.lax.stop_gradient(var) * count / (count - 1)}
            return (h - mean) * jax.lax.rsqrt(var + 1e-5) * p[name]["g"] + p[name]["b"]

        def loss_fn(p, s, x, y):
            new_s = {}
            h = jax.nn.relu(apply_conv_bn(p, s, "stem", x, 1, new_s))
            for name, stride in (("b1", 1), ("b2", 2), ("b3", 2)):
                r = jax.nn.relu(apply_conv_bn(p, s, name + "c1", h, stride, new_s))
                r = apply_conv_bn(p, s, name + "c2", r, 1, new_s)
                short = apply_conv_bn(p, s, name + "sc", h, stride, new_s) if name + "sc" in p else h
                h = jax.nn.relu(r + short)
            return sparse_ce(h.mean((1, 2)) @ p["out"]["w"] + p["out"]["b"], y), new_s
    elif workload == "widedeep":
        # JAX's idiom: the embedding gradients are dense (a scatter-add into a zero table), Adam updates
        # the whole tables, as PyTorch's default does
        params = {"deep": jnp.asarray(rng.uniform(-0.05, 0.05, (WIDE_ROWS, 16)).astype(np.float32)),
                  "wide": jnp.asarray(rng.uniform(-0.05, 0.05, (WIDE_ROWS, 1)).astype(np.float32)),
                  "d1": dense(8 * 16, 256), "d2": dense(256, 128), "d3": dense(128, 1)}

        def loss_fn(p, ids, y):
            h = jnp.take(p["deep"], ids, axis=0).reshape(ids.shape[0], -1)
            h = jax.nn.relu(h @ p["d1"]["w"] + p["d1"]["b"])
            h = jax.nn.relu(h @ p["d2"]["w"] + p["d2"]["b"])
            wide = jnp.take(p["wide"], ids, axis=0).sum(axis=1)
            return sigmoid_ce(h @ p["d3"]["w"] + p["d3"]["b"] + wide, y)
    else:
        raise ValueError(workload)

    x = jnp.asarray(data["x"])
    y = jnp.asarray(data["y"])
    if predict:
        def forward(p, x):                                          # the mlp/cnn model up to the logits
            if workload == "mlp":
                h = jax.nn.relu(jax.nn.relu(x @ p["d1"]["w"] + p["d1"]["b"]) @ p["d2"]["w"] + p["d2"]["b"])
                return h @ p["d3"]["w"] + p["d3"]["b"]
            h = conv(conv(x, p["c1"]), p["c2"])
            h = jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
            h = jax.nn.relu(h.reshape(h.shape[0], -1) @ p["d1"]["w"] + p["d1"]["b"])
            return h @ p["d2"]["w"] + p["d2"]["b"]
        infer = jax.jit(forward)

        def step_predict():
            return float(jnp.sum(infer(params, x)))
        return step_predict, jax.__version__, {"mode": "jit forward"}

    lr, b1, b2, eps = 1e-3, 0.9, 0.999, 1e-7
    state = {"m": jax.tree_util.tree_map(jnp.zeros_like, params),
             "v": jax.tree_util.tree_map(jnp.zeros_like, params), "t": jnp.zeros((), jnp.float32)}

    if bn_state is not None:
        state["bn"] = bn_state

    def train_step(params, state, x, y):
        if bn_state is not None:
            (loss, bn), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, state["bn"], x, y)
        else:
            loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        t = state["t"] + 1
        m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, state["m"], grads)
        v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, state["v"], grads)
        alpha = lr * jnp.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        params = jax.tree_util.tree_map(lambda p, m, v: p - alpha * m / (jnp.sqrt(v) + eps), params, m, v)
        return params, {"m": m, "v": v, "t": t, **({"bn": bn} if bn_state is not None else {})}, loss

    jitted = jax.jit(train_step, donate_argnums=(0, 1))
    box = {"params": params, "state": state}

    def step():
        box["params"], box["state"], loss = jitted(box["params"], box["state"], x, y)
        jax.block_until_ready(box["params"])
        return float(loss)
    return step, jax.__version__, {"adam": "hand-written", "xla_flags": os.environ.get("XLA_FLAGS")}


# ---- Keras 3 on TensorFlow --------------------------------------------------------------------------
def make_tensorflow(workload, data, threads):
    import numpy as np
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import tensorflow as tf

    if keras.backend.backend() != "tensorflow":
        raise ImportError(f"Keras backend is {keras.backend.backend()!r}, not tensorflow")
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    keras.utils.set_random_seed(0)
    L = keras.layers
    predict = workload.endswith("_predict")
    model, loss = _keras_model(keras, L, workload[:-len("_predict")] if predict else workload)
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=loss)
    x, y = data["x"], data["y"]

    def step():
        if predict:
            return float(np.asarray(model.predict_on_batch(x)).sum())
        return float(model.train_on_batch(x, y))
    info = {"keras": keras.__version__, "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
            "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads()}
    return step, tf.__version__, info


def _keras_model(keras, L, workload):
    """The workload as a Keras model and loss; shared by Keras 3 and tw.keras (same API)."""
    if workload == "mlp":
        model = keras.Sequential([keras.Input((784,)), L.Dense(512, activation="relu"),
                                  L.Dense(512, activation="relu"), L.Dense(10)])
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    elif workload == "cnn":
        model = keras.Sequential([keras.Input((28, 28, 1)), L.Conv2D(32, 3, activation="relu"),
                                  L.Conv2D(64, 3, activation="relu"), L.MaxPooling2D(2), L.Flatten(),
                                  L.Dense(128, activation="relu"), L.Dense(10)])
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    elif workload == "lstm":
        model = keras.Sequential([keras.Input((80,), dtype="int32"), L.Embedding(VOCAB, 128), L.LSTM(128),
                                  L.Dense(1)])
        loss = keras.losses.BinaryCrossentropy(from_logits=True)
    elif workload == "fasttext":
        model = keras.Sequential([keras.Input((400,), dtype="int32"), L.Embedding(VOCAB, 50),
                                  L.GlobalAveragePooling1D(), L.Dense(1)])
        loss = keras.losses.BinaryCrossentropy(from_logits=True)
    elif workload == "gru":
        model = keras.Sequential([keras.Input((80,), dtype="int32"), L.Embedding(VOCAB, 64), L.GRU(64),
                                  L.Dense(1)])
        loss = keras.losses.BinaryCrossentropy(from_logits=True)
    elif workload in ("transformer", "encoder2"):
        seq, width, heads, key, ff_width, blocks = (64, 64, 2, 32, 128, 1) if workload == "transformer" else \
            (128, 256, 4, 64, 512, 2)
        ids = keras.Input((seq,), dtype="int32")
        h = L.Embedding(VOCAB, width)(ids)
        for _ in range(blocks):
            h = L.LayerNormalization(epsilon=1e-5)(L.Add()([h, L.MultiHeadAttention(heads, key)(h, h)]))
            ff = L.Dense(width)(L.Dense(ff_width, activation="relu")(h))
            h = L.LayerNormalization(epsilon=1e-5)(L.Add()([h, ff]))
        model = keras.Model(ids, L.Dense(1)(L.GlobalAveragePooling1D()(h)))
        loss = keras.losses.BinaryCrossentropy(from_logits=True)
    elif workload == "resnet":
        images = keras.Input((32, 32, 3))

        def conv_bn(h, width, size, stride):
            return L.BatchNormalization(epsilon=1e-5, momentum=0.9)(
                L.Conv2D(width, size, strides=stride, padding="same", use_bias=False)(h))

        h = L.ReLU()(conv_bn(images, 16, 3, 1))
        for width, stride in ((16, 1), (32, 2), (64, 2)):
            y = conv_bn(L.ReLU()(conv_bn(h, width, 3, stride)), width, 3, 1)
            short = h if stride == 1 and h.shape[-1] == width else conv_bn(h, width, 1, stride)
            h = L.ReLU()(L.Add()([y, short]))
        model = keras.Model(images, L.Dense(10)(L.GlobalAveragePooling2D()(h)))
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    elif workload == "widedeep":
        ids = keras.Input((8,), dtype="int32")
        deep = L.Flatten()(L.Embedding(WIDE_ROWS, 16)(ids))
        deep = L.Dense(1)(L.Dense(128, activation="relu")(L.Dense(256, activation="relu")(deep)))
        wide = L.Flatten()(L.Embedding(WIDE_ROWS, 1)(ids))          # [batch, 8]: one weight per field's row
        wide = L.Dense(1, use_bias=False, kernel_initializer="ones", trainable=False)(wide)   # their sum
        model = keras.Model(ids, L.Add()([deep, wide]))
        loss = keras.losses.BinaryCrossentropy(from_logits=True)
    else:
        raise ValueError(workload)
    return model, loss


PEERS = {"torch": make_torch, "jax": make_jax, "tensorflow": make_tensorflow}
