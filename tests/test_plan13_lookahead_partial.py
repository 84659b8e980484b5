"""The planner's look-ahead prices a signature that pads or fills a decided input to P (a local
step, no bytes) with the reduction its partial output then needs (planner.made_partial_cost):
an op free to choose its output's split follows the split its consumer's other input has,
instead of ``S(0)`` beside an ``S(1)`` input looking free (both padded to P) and an
all-to-all following."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core.sbp import B, S

RNG = np.random.default_rng(44)
C = RNG.standard_normal((7, 5)).astype(np.float32)             # uneven on 2 and 3 ranks
D = RNG.standard_normal((7, 5)).astype(np.float32)


def _fn(c, d):
    return tw.tanh(tw.exp(c) + d)


@pytest.mark.parametrize("ranks", [[0, 1], [0, 1, 2]])
@pytest.mark.parametrize("axis", [0, 1])
def test_a_free_output_split_follows_the_other_input_with_no_collective(ranks, axis):
    p = tw.placement("cpu", ranks=ranks)
    c = tw.constant(C).to_global(placement=p, sbp=B)               # exp(c): any split of it is a local slice
    d = tw.constant(D).to_global(placement=p, sbp=S(axis))
    e = tw.distribute.explain(_fn, c, d).to_dict()
    assert e["collectives"] == []                                  # was an all-to-all of exp(c) for axis 1
    assert [o["signature"] for o in e["ops"]] == [f"S({axis}) -> S({axis})", f"S({axis}), S({axis}) -> S({axis})",
                                                  f"S({axis}) -> S({axis})"]
    y = tw.function(_fn)(c, d)
    assert y.sbp == (S(axis),)
    np.testing.assert_allclose(y.numpy(), _fn(tw.constant(C), tw.constant(D)).numpy(), rtol=2e-6)


def test_a_contractions_own_partial_is_not_penalised():
    """S(1) x S(0) -> P of a matmul makes no input partial: the data-parallel weight gradient
    stays a partial sum all-reduced (the look-ahead change leaves it alone)."""
    p = tw.placement("cpu", ranks=[0, 1])
    w = tw.Variable(RNG.standard_normal((5, 3)).astype(np.float32), placement=p, sbp=B)

    def step(x):
        with tw.GradientTape() as tape:
            loss = tw.reduce_sum(tw.square(tw.matmul(x, w)))
        return tape.gradient(loss, w)
    x = tw.constant(C).to_global(placement=p, sbp=S(0))
    e = tw.distribute.explain(step, x).to_dict()
    grad = [o for o in e["ops"] if o["type"] == "MatMul" and o["signature"].endswith("-> P")]
    assert grad and [c["kind"] for c in e["collectives"]] == []    # the P(sum) gradient is returned as it is
