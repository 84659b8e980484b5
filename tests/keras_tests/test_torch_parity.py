"""With identical initial weights and batches, 50 SGD steps of an MLP give PyTorch's losses
(float64, within 1e-5). Skipped when torch is not installed (``pip install torch==2.13.0``)."""
import numpy as np
import pytest

from tensorweave import keras

torch = None


@pytest.fixture(autouse=True, scope="module")
def _torch():
    """torch is imported when these tests run, not at collection (~3 s of CPU on every xdist
    worker, also one that runs none of them)."""
    global torch
    torch = pytest.importorskip("torch")


def test_mlp_sgd_losses_match_pytorch():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 20))
    y = rng.integers(0, 5, 400)
    sizes = [(20, 32), (32, 16), (16, 5)]
    weights = [(rng.normal(size=s) * 0.3, rng.normal(size=s[1]) * 0.1) for s in sizes]

    model = keras.Sequential([keras.Input(shape=(20,), dtype="float64"),
                              keras.layers.Dense(32, activation="tanh", dtype="float64"),
                              keras.layers.Dense(16, activation="relu", dtype="float64"),
                              keras.layers.Dense(5, dtype="float64")])
    model.set_weights([a for pair in weights for a in pair])
    model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    layers = [torch.nn.Linear(i, o).double() for i, o in sizes]
    with torch.no_grad():
        for lin, (w, b) in zip(layers, weights):
            lin.weight.copy_(torch.from_numpy(w.T))
            lin.bias.copy_(torch.from_numpy(b))
    net = torch.nn.Sequential(layers[0], torch.nn.Tanh(), layers[1], torch.nn.ReLU(), layers[2])
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)

    ours, theirs = [], []
    for step in range(50):
        idx = slice((step * 32) % 384, (step * 32) % 384 + 32)
        ours.append(model.train_on_batch(x[idx], y[idx]))
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(torch.from_numpy(x[idx])), torch.from_numpy(y[idx]))
        loss.backward()
        opt.step()
        theirs.append(loss.item())
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)     # train_on_batch: this batch's loss
    final = [w.numpy() for w in model.trainable_weights]
    np.testing.assert_allclose(final[0], layers[0].weight.detach().numpy().T, rtol=1e-5, atol=1e-6)
