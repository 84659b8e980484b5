"""TF2's variable partitioners (tw.distribute.experimental.partitioners): the shard counts TF
2.21 gives for the same calls (recorded from it), TF's argument errors, and the per-shard
initializers of ParameterServerStrategy (no Ray needed)."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.distribute.ps import strategy as ps_strategy

P = tw.distribute.experimental.partitioners
SHAPES = [((1000000, 32), tw.float32), ((10, 3), tw.float32), ((7,), tw.float64), ((3, 5), tw.string),
          ((100000, 8), tw.float16), ((1,), tw.float32)]
# what TensorFlow 2.21 returns for these partitioners on SHAPES
TF = {
    "Fixed3": (lambda: P.FixedShardsPartitioner(3), [[3, 1], [3, 1], [3], [3, 1], [3, 1], [1]]),
    "MinDefault": (lambda: P.MinSizePartitioner(), [[1, 1], [1, 1], [1], [1, 1], [1, 1], [1]]),
    "Min4": (lambda: P.MinSizePartitioner(min_shard_bytes=1024, max_shards=4),
             [[4, 1], [1, 1], [1], [1, 1], [4, 1], [1]]),
    "Min1": (lambda: P.MinSizePartitioner(min_shard_bytes=1, max_shards=100),
             [[100, 1], [10, 1], [7], [3, 1], [100, 1], [1]]),
    "Max": (lambda: P.MaxSizePartitioner(max_shard_bytes=1024), [[125000, 1], [1, 1], [1], [1, 1], [1563, 1], [1]]),
    "Max2": (lambda: P.MaxSizePartitioner(max_shard_bytes=100, max_shards=2),
             [[2, 1], [2, 1], [1], [2, 1], [2, 1], [1]]),
}


@pytest.mark.parametrize("name", sorted(TF))
def test_shard_counts_equal_tensorflows(name):
    make, want = TF[name]
    assert [make()(shape, dtype) for shape, dtype in SHAPES] == want


def test_the_partitioned_axis_can_be_chosen():
    assert P.FixedShardsPartitioner(2)([5, 4], tw.float32, axis=1) == [1, 2]
    assert P.MinSizePartitioner(min_shard_bytes=4, max_shards=8)([2, 3], tw.float32, axis=-1) == [1, 3]


@pytest.mark.parametrize("make, message", [
    (lambda: P.MinSizePartitioner(min_shard_bytes=0), "Argument `min_shard_bytes` must be positive. Received: 0"),
    (lambda: P.MinSizePartitioner(max_shards=0), "Argument `max_shards` must be positive. Received: 0"),
    (lambda: P.MinSizePartitioner(bytes_per_string=0), "Argument `bytes_per_string` must be positive. Received: 0"),
    (lambda: P.MaxSizePartitioner(0), "Argument `max_shard_bytes` must be positive. Received 0"),
    (lambda: P.MaxSizePartitioner(10, bytes_per_string=0), "Argument `bytes_per_string` must be positive."),
    (lambda: P.FixedShardsPartitioner(0), "Argument `num_shards` must be positive. Received: 0"),
])
def test_bad_arguments_raise_tensorflows_errors(make, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
        make()


def test_a_partitioned_call_names_the_problem():
    with pytest.raises(ValueError, match=r"scalar variable cannot be partitioned"):
        P.FixedShardsPartitioner(2)([], tw.float32)
    with pytest.raises(ValueError, match=r"axis 2 is out of range for a variable of shape \[4, 4\]"):
        P.FixedShardsPartitioner(2)([4, 4], tw.float32, axis=2)


def test_max_shards_zero_means_no_cap_as_in_tensorflow():
    assert P.MaxSizePartitioner(16, max_shards=0)([10, 1], tw.float32) == [3, 1]


def test_shards_of_a_variance_scaling_initializer_keep_the_whole_variables_variance():
    init = tw.keras.initializers.GlorotUniform(seed=4)
    shard = ps_strategy._shard_initializer(init, [4000, 64], 1000, 1)
    values = shard([1000, 64], tw.float32).numpy()
    limit = np.sqrt(6.0 / (4000 + 64))                       # the full variable's Glorot limit
    assert values.shape == (1000, 64) and np.abs(values).max() <= limit
    assert np.abs(values).max() > 0.95 * limit


def test_seeded_initializers_draw_each_shard_differently():
    init = tw.keras.initializers.RandomUniform(seed=7)
    a = ps_strategy._shard_initializer(init, [20, 3], 10, 0)([10, 3], tw.float32).numpy()
    b = ps_strategy._shard_initializer(init, [20, 3], 10, 1)([10, 3], tw.float32).numpy()
    assert not np.allclose(a, b)
    np.testing.assert_array_equal(a, init([10, 3], tw.float32).numpy())   # shard 0 keeps the seed


def test_an_initializer_that_cannot_be_cut_is_an_error():
    with pytest.raises(ValueError, match=r"Orthogonal cannot initialize one shard of a partitioned variable"):
        ps_strategy._shard_initializer(tw.keras.initializers.Orthogonal(), [8, 8], 4, 0)
    same = tw.keras.initializers.Orthogonal()
    assert ps_strategy._shard_initializer(same, [8, 8], 8, 0) is same      # one shard: used as it is


def test_the_cluster_spec_needs_workers_and_servers():
    resolver = tw.distribute.cluster_resolver.SimpleClusterResolver(tw.train.ClusterSpec({"worker": ["a"]}))
    with pytest.raises(ValueError, match=r"needs 'worker' and 'ps' jobs, got \['worker'\]"):
        tw.distribute.experimental.ParameterServerStrategy(resolver)
    with pytest.raises(TypeError, match=r"must have a cluster_spec\(\)"):
        tw.distribute.experimental.ParameterServerStrategy(object())


def test_input_context_splits_the_global_batch():
    ctx = tw.distribute.InputContext(2, 1, 2)
    assert ctx.get_per_replica_batch_size(64) == 32
    with pytest.raises(ValueError, match="not divisible"):
        ctx.get_per_replica_batch_size(5)


def test_negative_axes_count_from_the_end():
    assert P.FixedShardsPartitioner(2)([6, 4], tw.float32, axis=-2) == [2, 1]
    with pytest.raises(ValueError, match=r"axis -3 is out of range"):
        P.FixedShardsPartitioner(2)([6, 4], tw.float32, axis=-3)


@pytest.mark.parametrize("bad", [2.0, "2", True, None])
def test_counts_must_be_integers(bad):
    with pytest.raises(ValueError, match="must be positive"):
        P.FixedShardsPartitioner(bad)
    with pytest.raises(ValueError, match="must be positive"):
        P.MinSizePartitioner(min_shard_bytes=bad)
    with pytest.raises(ValueError, match="must be positive"):
        P.MaxSizePartitioner(bad)


def test_the_default_minimum_shard_is_256_kib():
    # TF 2.21: 262144 bytes make one shard, one more element two
    assert P.MinSizePartitioner(max_shards=8)([65536, 1], tw.float32) == [1, 1]
    assert P.MinSizePartitioner(max_shards=8)([65537, 1], tw.float32) == [2, 1]


def test_an_empty_axis():
    assert P.FixedShardsPartitioner(2)([0, 4], tw.float32) == [0, 1]          # as TF
    assert P.MinSizePartitioner(max_shards=8)([0, 4], tw.float32) == [1, 1]   # as TF
    # TF divides by zero here; one (empty) shard is what the others give
    assert P.MaxSizePartitioner(16)([0, 4], tw.float32) == [1, 1]
