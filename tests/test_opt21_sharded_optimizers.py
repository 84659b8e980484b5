"""Keras 3's Adamax, Nadam, Lion, Lamb and Adafactor on sharded (global) variables, issue 13:
weights ``S(0)`` (ZeRO-style optimizer state) on 2 and 3 in-process ranks, uneven and empty
shards, equal one device (float32 rtol 2e-5); each slot keeps its variable's layout (Adafactor's
row/column statistics the layout reduced over their axis). Lamb's trust ratio and Adafactor's
means are over the whole weight: a partial sum per rank, all-reduced, never per shard."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core.sbp import B, S
from keras3_optimizer_refs import NAMES, keras_numbers, tw_run

CASES = keras_numbers()["cases"]
STEPS = 3
LAYOUTS = {   # rows 5, 3 and 2: uneven on 2 and 3 ranks, K's third shard empty
    "rows": {"W": S(0), "b": S(0), "K": S(0)},
    "columns": {"W": S(1), "b": B, "K": S(2)},
}


@pytest.fixture(scope="module")
def one_device():
    return {name: tw_run(CASES[name], STEPS)[0][-1] for name in CASES}


def _slots(opt, v):
    return {name: s for (ref, name), s in opt._slots.items() if ref == id(v)}


@pytest.mark.parametrize("ranks", [2, 3])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("name", ["adamax", "nadam", "lion_decay", "lamb", "adafactor"])
def test_sharded_training_equals_one_device(one_device, name, layout, ranks):
    placement = tw.placement("cpu", ranks=list(range(ranks)))
    history, opt, ws = tw_run(CASES[name], STEPS, layout=(placement, LAYOUTS[layout]))
    for n, got, want in zip(NAMES, history[-1], one_device[name]):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6, err_msg=n)
    for v in ws:
        assert v.sbp == (LAYOUTS[layout][v.name.split(":")[0]],)
        slots = _slots(opt, v)
        assert slots and all(s.sbp == v.sbp for s in slots.values()), {k: s.sbp for k, s in slots.items()}


@pytest.mark.parametrize("sbp,r_sbp,c_sbp", [(S(0), S(0), S(0)), (S(1), S(1), B), (S(2), B, S(1)), (B, B, B)])
def test_adafactor_statistics_follow_the_weight_s_layout(sbp, r_sbp, c_sbp):
    """r (a mean over the last axis) and c (over the one before) of a rank-3 weight: a split of
    the reduced axis becomes B, a later split shifts down; their values equal one device's."""
    p = tw.placement("cpu", ranks=[0, 1, 2])
    case = CASES["adafactor"]
    want_opt = tw_run(case, 2)[1]
    _, opt, ws = tw_run(case, 2, layout=(p, {"W": B, "b": B, "K": sbp}))
    k = ws[2]
    i = opt._get_variable_index(k)
    assert (opt._r[i].sbp, opt._c[i].sbp) == ((r_sbp,), (c_sbp,))
    assert opt._r[i].shape.as_list() == [2, 3] and opt._c[i].shape.as_list() == [2, 4]
    np.testing.assert_allclose(opt._r[i].numpy(), want_opt._r[i].numpy(), rtol=2e-5)
    np.testing.assert_allclose(opt._c[i].numpy(), want_opt._c[i].numpy(), rtol=2e-5)


def test_lamb_scales_every_shard_by_the_whole_weight_s_ratio():
    """One step from zero slots: the update is about sign(g), so each shard's ratio computed
    alone would be its own |w_shard| / |u_shard|; the whole weight's differs, and is what runs."""
    p = tw.placement("cpu", ranks=[0, 1])
    w0 = np.array([[3.0, 0.0], [0.0, 0.1], [0.2, 0.0]], np.float32)   # rows 2 + 1: unequal norms
    g = np.ones_like(w0)
    w = tw.Variable(w0, placement=p, sbp=S(0))
    tw.keras.optimizers.Lamb(learning_rate=0.1).apply([tw.constant(g).to_global(placement=p, sbp=S(0))], [w])
    update = 1 / (1 + 1e-7)
    whole = w0 - np.linalg.norm(w0) / (update * np.sqrt(w0.size)) * 0.1 * update
    np.testing.assert_allclose(w.numpy(), whole, rtol=1e-6)
    per_shard = w0.copy()
    per_shard[:2] -= np.linalg.norm(w0[:2]) / np.sqrt(4) * 0.1
    assert not np.allclose(whole, per_shard, rtol=1e-3)


@pytest.mark.parametrize("name", ["nadam", "lamb", "adafactor"])
def test_a_planned_step_on_sharded_weights_equals_one_device(one_device, name):
    """The same rules traced by tw.function and planned whole-graph (issue 13's planner): the
    reductions over split rows still all-reduced before use, Nadam's u_product advanced once."""
    p = tw.placement("cpu", ranks=[0, 1, 2])
    _, _, ws = tw_run(CASES[name], STEPS, layout=(p, {n: S(0) for n in NAMES}), traced=True)
    for n, w, want in zip(NAMES, ws, one_device[name]):
        np.testing.assert_allclose(w.numpy(), want, rtol=2e-5, atol=1e-6, err_msg=n)
