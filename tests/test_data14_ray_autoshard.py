"""``MultiWorkerMirroredStrategy`` on 2 Ray workers honours a pipeline's ``AutoShardPolicy``:
FILE gives each worker its own files, OFF gives every worker everything, and either way the
final weights equal single-process training on the global batches the workers' pieces make
up (what ``experimental_distribute_dataset`` shows on the driver)."""
import os
import sys

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import tensorweave as tw  # noqa: E402
import tensorweave.data  # noqa: E402,F401
from tensorweave.distribute.ray import cluster as ray_cluster  # noqa: E402

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
keras = tw.keras
P = tw.data.experimental.AutoShardPolicy


@pytest.fixture(scope="module")
def strategy():
    ray_cluster.connect(num_workers=2, timeout=120)
    yield tw.distribute.MultiWorkerMirroredStrategy(tw.distribute.RayClusterResolver(num_workers=2))
    ray_cluster.shutdown()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """3 files of 7, 4 and 6 numbers (uneven, so the workers run out at different steps)."""
    d = tmp_path_factory.mktemp("autoshard")
    rng = np.random.default_rng(3)
    out = []
    for i, n in enumerate((7, 4, 6)):
        p = d / f"part-{i}.txt"
        p.write_text("".join(f"{v:.6f}\n" for v in rng.standard_normal(n)))
        out.append(str(p))
    return out


def _parse(line):
    v = tw.strings.to_number(line, tw.float32)
    return tw.stack([v, v * v - 0.5]), tw.reshape(2.0 * v + 1.0, [1])


def _pipeline(files, policy, batch=5):
    opts = tw.data.Options()
    opts.experimental_distribute.auto_shard_policy = policy
    return tw.data.TextLineDataset(files).map(_parse).batch(batch).with_options(opts)


def _model():
    keras.utils.set_random_seed(2)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(3, activation="tanh"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    return model


def _global_batches(distributed):
    """The global batch of each step: the workers' pieces, concatenated."""
    out = []
    for step in distributed:
        xs, ys = zip(*step.values)
        out.append((np.concatenate(xs), np.concatenate(ys)))
    return out


def _reference_fit(batches, epochs):
    ref = _model()
    ds = tw.data.Dataset.from_generator(
        lambda: iter(batches), output_signature=(tw.TensorSpec([None, 2], tw.float32),
                                                 tw.TensorSpec([None, 1], tw.float32)))
    history = ref.fit(ds, epochs=epochs, verbose=0)
    return ref, history


def _assert_same_weights(a, b):
    for u, v in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_allclose(u, v, rtol=2e-5, atol=1e-7)


@pytest.mark.parametrize("policy", [P.FILE, P.AUTO, P.OFF])
def test_fit_follows_the_auto_shard_policy(strategy, files, policy):
    ds = _pipeline(files, policy)
    distributed = strategy.experimental_distribute_dataset(ds)
    batches = _global_batches(distributed)
    rows = sum(len(x) for x, _ in batches)
    if policy == P.OFF:
        assert distributed.policy == P.OFF and rows == 2 * 17          # every worker read everything
    else:
        # FILE (AUTO over files): worker 0 read files 0 and 2 (13 rows), worker 1 file 1 (4 rows);
        # in pieces of 3, 2, 3 ... and 2, 3, ... rows: 5 steps, worker 1 without rows from the 3rd
        assert distributed.policy == P.FILE and rows == 17
        assert [len(x) for x, _ in batches] == [3 + 2, 2 + 2, 3, 2, 3]
    ref, want = _reference_fit(batches, epochs=2)
    with strategy.scope():
        model = _model()
    got = model.fit(distributed if policy == P.FILE else ds, epochs=2, verbose=0)
    _assert_same_weights(model, ref)
    np.testing.assert_allclose(got.history["loss"], want.history["loss"], rtol=2e-5)


def test_data_policy_and_file_errors_on_the_driver(strategy, files):
    # DATA: the existing slicing of each global batch (the single-process fit of the pipeline)
    ds = _pipeline(files, P.DATA)
    ref = _model()
    ref.fit(ds, epochs=1, verbose=0)
    with strategy.scope():
        model = _model()
    model.fit(ds, epochs=1, verbose=0)
    _assert_same_weights(model, ref)
    # FILE on a source without files, and too few files, fail before any worker is asked
    opts = tw.data.Options()
    opts.experimental_distribute.auto_shard_policy = P.FILE
    x = np.zeros((4, 2), np.float32)
    with strategy.scope():
        bad = _model()
    with pytest.raises(tw.errors.NotFoundError, match="unshardable source dataset: TensorSliceDataset"):
        bad.fit(tw.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(2).with_options(opts), verbose=0)
    with pytest.raises(tw.errors.InvalidArgumentError, match="only has 1 file"):
        bad.fit(_pipeline(files[:1], P.AUTO), verbose=0)
    assert os.path.exists(files[0])
