"""DeepFM click-through model trained with ``ParameterServerStrategy`` on Ray (issue 14).

A recommendation model in the large-scale style: ``FIELDS`` categorical fields whose ids
share one embedding table of ``--rows`` rows (default 1,000,000) x 32, plus a one-column
"wide" table; the FM term and a small MLP on the concatenated embeddings. The tables are cut
by rows over the parameter servers (``FixedShardsPartitioner``); a worker pulls only the
rows its batch touches and pushes gradients for those rows only, so the table is never whole
in one process (the script prints what each server holds). Synthetic click data: ids from a
Zipf-like distribution, clicks from a hidden per-id score.

    python examples/ps_recommendation.py --workers 2 --ps 2 --steps 60
    python examples/ps_recommendation.py --sync --rows 20000 --steps 40
"""
import argparse
import time

import numpy as np

import tensorweave as tw

FIELDS = 8
DIM = 32


@tw.keras.saving.register_keras_serializable("ps_recommendation")
class DeepFM(tw.keras.Model):
    """logit = wide(ids) + FM(embeddings) + MLP(embeddings)."""

    def __init__(self, rows, dim=DIM, hidden=(64, 32), **kwargs):
        super().__init__(**kwargs)
        self.rows, self.dim, self.hidden = rows, dim, tuple(hidden)
        init = tw.keras.initializers.RandomNormal(stddev=0.01)
        self.embedding = tw.keras.layers.Embedding(rows, dim, embeddings_initializer=init, name="embedding")
        self.wide = tw.keras.layers.Embedding(rows, 1, embeddings_initializer="zeros", name="wide")
        self.mlp = [tw.keras.layers.Dense(h, activation="relu", name=f"dense_{i}") for i, h in enumerate(hidden)]
        self.out = tw.keras.layers.Dense(1, name="logit")

    def call(self, ids, training=False):
        e = self.embedding(ids)                                    # (batch, fields, dim)
        wide = tw.reduce_sum(self.wide(ids), axis=[1, 2])
        s = tw.reduce_sum(e, axis=1)
        fm = 0.5 * tw.reduce_sum(s * s - tw.reduce_sum(e * e, axis=1), axis=1)
        h = tw.reshape(e, [-1, ids.shape[1] * self.dim])
        for layer in self.mlp:
            h = layer(h)
        return wide + fm + tw.reshape(self.out(h), [-1])

    def get_config(self):
        return {**super().get_config(), "rows": self.rows, "dim": self.dim, "hidden": list(self.hidden)}


def click_data(rows, n, fields=FIELDS, seed=0):
    """``(ids (n, fields) int64, clicks (n,) float32)``: Zipf-like ids per field, clicks drawn
    from a hidden score of the ids."""
    rng = np.random.default_rng(seed)
    ranks = np.minimum(rng.zipf(1.2, size=(n, fields)) - 1, rows // fields - 1)
    ids = (ranks * fields + np.arange(fields)).astype(np.int64)          # field f owns ids = f (mod fields)
    score = ((ids * 2654435761) % 1009 / 1009.0 - 0.5).sum(axis=1) * 4.0
    clicks = (rng.random(n) < 1.0 / (1.0 + np.exp(-score))).astype(np.float32)
    return ids, clicks


def loss_fn(model, ids, clicks):
    logits = model(ids, training=True)
    return tw.reduce_mean(tw.nn.sigmoid_cross_entropy_with_logits(labels=clicks, logits=logits))


def make_step(model, optimizer):
    """The training step scheduled on the workers (TF2's custom training loop)."""
    def step(iterator):
        ids, clicks = next(iterator)
        with tw.GradientTape() as tape:
            loss = loss_fn(model, ids, clicks)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    return step


def worker_batches(ids, clicks, batch, context):
    """This worker's part of every global batch: global batch ``r`` is the concatenation of
    the workers' ``r``-th batches (so synchronous rounds equal single-process steps)."""
    k, j = context.num_input_pipelines, context.input_pipeline_id
    rounds = len(ids) // (batch * k)
    sel = np.arange(rounds * batch * k).reshape(rounds, k, batch)[:, j].reshape(-1)
    return tw.data.Dataset.from_tensor_slices((ids[sel], clicks[sel])).batch(batch)


def train(workers=2, ps=2, rows=1_000_000, steps=60, batch=256, sync=False, learning_rate=0.05, verbose=True):
    """Trains DeepFM on the cluster; returns ``(losses, examples per second, server shapes)``."""
    resolver = tw.distribute.cluster_resolver.SimpleClusterResolver(
        tw.train.ClusterSpec({"worker": [f"w{i}" for i in range(workers)], "ps": [f"ps{i}" for i in range(ps)]}))
    # tables (128 MB at 1M rows) are cut into one shard per server; the small dense layers stay whole
    partitioner = tw.distribute.experimental.partitioners.MinSizePartitioner(min_shard_bytes=256 << 10, max_shards=ps)
    strategy = tw.distribute.experimental.ParameterServerStrategy(resolver, variable_partitioner=partitioner,
                                                                  synchronous=sync)
    try:
        with strategy.scope():
            model = DeepFM(rows)
            model(np.zeros((1, FIELDS), np.int64))        # builds the weights on the servers
            optimizer = tw.keras.optimizers.Adagrad(learning_rate)
        shapes = strategy.server_shapes()
        coordinator = tw.distribute.experimental.coordinator.ClusterCoordinator(strategy)
        ids, clicks = click_data(rows, (steps + 2 * workers) * batch * workers, seed=1)

        def dataset_fn(context):      # repeated: asynchronous workers need not take equal numbers of steps
            return worker_batches(ids, clicks, batch, context).repeat()
        iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))
        step = make_step(model, optimizer)
        # warm-up: every worker imports, unpickles the step once and pulls (a worker that is busy
        # warming up leaves the next steps to the others, so 2 per worker reach all of them)
        coordinator.fetch([coordinator.schedule(step, args=(iterator,)) for _ in range(2 * workers)])
        t0 = time.perf_counter()
        losses = [coordinator.schedule(step, args=(iterator,)) for _ in range(steps)]
        coordinator.join()
        seconds = time.perf_counter() - t0
        losses = [float(v.fetch()) for v in losses]
        coordinator.shutdown()
    finally:
        strategy.shutdown()
    rate = steps * batch / seconds
    if verbose:
        for i, s in enumerate(shapes):
            print(f"ps{i} holds {s}")
        n = max(1, len(losses) // 5)
        print(f"loss first {n} steps {np.mean(losses[:n]):.4f} -> last {n} {np.mean(losses[-n:]):.4f}; "
              f"{rate:.0f} examples/s with {workers} workers")
    return losses, rate, shapes


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--ps", type=int, default=2)
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--sync", action="store_true")
    a = p.parse_args()
    train(a.workers, a.ps, a.rows, a.steps, a.batch, a.sync)


if __name__ == "__main__":
    main()
