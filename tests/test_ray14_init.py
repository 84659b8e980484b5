"""Issue 14 (ray14): a global variable made by a tw initializer has the one-device value: each
rank keeps its slice of ``init(logical shape)`` (was: ``init(piece shape)`` per rank, so a
seeded initializer repeated itself in every shard, fans came from the piece, and an unseeded
one gave a ``B`` variable replicas that disagree). In-process ranks here; on the Ray workers:
tests/test_ray14_steps.py."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core.sbp import B, P, S

P2, P3 = tw.placement("cpu", ranks=[0, 1]), tw.placement("cpu", ranks=[0, 1, 2])
init = tw.keras.initializers


@pytest.mark.parametrize("make,shape,placement,sbp", [
    (lambda: init.GlorotUniform(seed=3), (5, 3), P2, S(0)),
    (lambda: init.RandomNormal(stddev=2.0, seed=7), (4, 7), P3, S(1)),
    (lambda: init.HeNormal(seed=1), (3, 3, 2, 4), P2, S(3)),
    (lambda: init.Orthogonal(seed=2), (6, 4), P3, B),
])
def test_a_seeded_initializer_gives_the_one_device_value(make, shape, placement, sbp):
    v = tw.Variable(make(), shape=shape, placement=placement, sbp=sbp)
    np.testing.assert_array_equal(v.numpy(), make()(shape).numpy())


def test_an_unseeded_initializer_gives_replicas_that_agree_and_a_seeded_run_repeats():
    def make():
        tw.keras.utils.set_random_seed(5)
        v = tw.Variable(init.RandomNormal(), shape=(3, 4), placement=P2, sbp=B)
        return [t.numpy() for t in v.to_local()]
    first = make()
    np.testing.assert_array_equal(first[0], first[1])
    np.testing.assert_array_equal(make()[0], first[0])


def test_a_partial_variable_has_the_value_on_one_rank_and_the_identity_elsewhere():
    v = tw.Variable(init.Constant(2.0), shape=(2, 2), placement=P2, sbp=P)
    assert [t.numpy().tolist() for t in v.to_local()] == [[[2.0, 2.0]] * 2, [[0.0, 0.0]] * 2]
    assert v.numpy().tolist() == [[2.0, 2.0]] * 2
