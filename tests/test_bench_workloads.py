"""The issue-18 benchmark workloads (``benchmarks/peers.py``) build in tw.keras and learn: a few
Adam steps on one small batch lower the loss (the benchmark's own rows record the same)."""
import os
import sys

import numpy as np
import pytest

import tensorweave as tw

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
import bench_models  # noqa: E402
import peers  # noqa: E402


# encoder2 is left out: its loss rises after the first Adam step on one small batch, in Keras 3 and
# JAX too with the same weights (BENCHMARKS.md, issue 18 session 9), and its benchmark rows record
# loss_first/loss_last over the full batch.
@pytest.mark.parametrize("workload,rows", [("resnet", 8), ("widedeep", 16)])
def test_workload_trains_and_its_loss_falls(workload, rows):
    data = bench_models.synthetic_batch(workload)
    x, y = data["x"][:rows], data["y"][:rows]
    tw.keras.utils.set_random_seed(0)
    model, loss = peers._keras_model(tw.keras, tw.keras.layers, workload)
    model.compile(optimizer=tw.keras.optimizers.Adam(1e-3), loss=loss)
    losses = [float(model.train_on_batch(x, y)) for _ in range(6)]
    assert all(np.isfinite(losses))
    assert losses[-1] < losses[0], losses
