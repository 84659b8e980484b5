"""The main job on Ray workers (``python -m tensorweave --workers N``): data-parallel training of
the MNIST MLP on N rank actors of a local Ray instance (or a ``ray start`` cluster: ``--address``; a program that connected already keeps its cluster).

The main job's Keras MLP (784 → 512 → 512 → 10 with dropout; each worker draws its rows' masks) is made
global with ``model.to_global(placement, broadcast)`` — each worker holds a replica of every
weight — and one ``tw.function`` step (forward, ``GradientTape``, Adam) is planned for a batch
split over the workers (``S(0)``): the planner inserts the gradient all-reduce, each worker gets
its plan once, and every step is one call per worker. Before training it prints the plan's
collectives (``tw.distribute.explain``); after each epoch the examples/s in all and per worker.
The last partial batch of an epoch is dropped (one plan per input shape).

>>> import io, contextlib                                                          # doctest: +SKIP
>>> result = train_on_workers(2, epochs=1, verbose=0)                              # doctest: +SKIP
>>> 0.5 < result["test_accuracy"] <= 1.0                                            # doctest: +SKIP
True
"""
import time

import numpy as np


def build_mlp(keras):
    L = keras.layers
    return keras.Sequential([keras.Input(shape=(28, 28)), L.Flatten(), L.Dense(512, activation="relu"), L.Dropout(0.2),
                             L.Dense(512, activation="relu"), L.Dropout(0.2), L.Dense(10)], name="mnist_mlp_dp")


def train_on_workers(workers, epochs=None, batch_size=128, address=None, verbose=1, seed=0):
    """Trains the MLP data-parallel on ``workers`` Ray workers (``batch_size`` examples per worker
    and step); returns the history, test accuracy and throughput."""
    import tensorweave as tw
    from tensorweave import keras
    from tensorweave.examples.mnist import DEFAULT_EPOCHS, load
    keras.utils.set_random_seed(seed)
    (x_train, y_train), (x_test, y_test) = load("mlp")
    epochs = DEFAULT_EPOCHS["mlp"] if epochs is None else epochs
    cluster = tw.distribute.current()
    owned = cluster is None          # a program already connected keeps its cluster
    if owned:
        cluster = tw.distribute.connect(address=address, num_workers=workers)
    elif cluster.num_workers < workers:
        raise ValueError(f"--workers {workers}: the connected cluster has {cluster.num_workers} workers")
    try:
        placement = tw.placement("cpu", ranks=list(range(workers)))
        model = build_mlp(keras)
        model.to_global(placement, tw.sbp.broadcast)
        optimizer = keras.optimizers.Adam(1e-3)
        split = tw.sbp.split(0)

        @tw.function
        def step(x, y):
            with tw.GradientTape() as tape:
                logits = model(x, training=True)
                loss = tw.reduce_mean(tw.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        @tw.function
        def predict(x):
            return tw.argmax(model(x, training=False), axis=-1)

        def batch(x, y):
            return (tw.constant(x).to_global(placement=placement, sbp=split),
                    tw.constant(y.astype(np.int32)).to_global(placement=placement, sbp=split))

        global_batch = batch_size * workers
        steps = len(x_train) // global_batch
        if verbose:
            print(f"data-parallel on {workers} Ray workers (transport {cluster.transport}), "
                  f"{batch_size} examples per worker and step, {steps} steps per epoch")
            explained = tw.distribute.explain(step, *batch(x_train[:global_batch], y_train[:global_batch]))
            print(f"the step's plan: {len(explained.ops)} ops, collectives per step:")
            for c in explained.collectives:
                print(f"  {c['kind']:<14} {c['dtype']}{c['shape']} for '{c['op']}' ({c['bytes']} bytes)")
        rng = np.random.default_rng(seed)
        history, rates = [], []
        for epoch in range(epochs):
            order = rng.permutation(len(x_train))
            start, losses = time.perf_counter(), []
            for s in range(steps):
                idx = order[s * global_batch:(s + 1) * global_batch]
                losses.append(step(*batch(x_train[idx], y_train[idx])))
                if epoch == 0 and s == 0:       # the first call traces, plans and ships: not timed
                    float(losses[0])
                    start = time.perf_counter()
            loss = float(np.mean([float(v) for v in losses]))
            rate = (steps - (epoch == 0)) * global_batch / max(time.perf_counter() - start, 1e-9)
            history.append(loss)
            rates.append(rate)
            if verbose:
                print(f"epoch {epoch + 1}/{epochs}: loss {loss:.4f} - {rate:.0f} examples/s "
                      f"({rate / workers:.0f} per worker)")
        n_test = len(x_test) // workers * workers
        x_t = tw.constant(x_test[:n_test]).to_global(placement=placement, sbp=split)
        accuracy = float(np.mean(predict(x_t).numpy() == y_test[:n_test]))
        if verbose:
            print(f"test accuracy {accuracy:.4f} on {n_test} images")
        return {"history": {"loss": history}, "test_accuracy": accuracy, "examples_per_s": rates,
                "workers": workers}
    finally:
        if owned:
            tw.distribute.shutdown()
