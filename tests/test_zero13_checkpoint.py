"""A model trained with ZeRO-1 updates (slots S(0)) round-trips through tw.train.Checkpoint: into
fresh replicated variables and optimizer, or onto one device, training continues as without the
checkpoint."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core.sbp import S
from tensorweave.distribute import planner
from zero13_model import model, slots_of


@pytest.fixture(autouse=True)
def zero_everywhere(monkeypatch):
    monkeypatch.setattr(planner, "ZERO_FIXED_BYTES", 0)
    monkeypatch.setattr(planner, "ZERO_GATHER_WEIGHT", 0)


@pytest.mark.parametrize("target", ["global", "one_device"])
def test_a_zero_trained_model_round_trips_and_continues(tmp_path, target):
    p = tw.placement("cpu", ranks=[0, 1, 2])
    step, vs, opt, x = model(p, "adam")
    for _ in range(4):
        step(x)
    assert all(s.sbp == (S(0),) for v in vs for s in slots_of(opt, v).values())
    path = tw.train.Checkpoint(optimizer=opt, w0=vs[0], b0=vs[1], w1=vs[2]).save(str(tmp_path / "ckpt"))
    for _ in range(3):                                     # uninterrupted
        step(x)
    want = [v.numpy() for v in vs]
    want_slots = [slots_of(opt, v)["momentum"].numpy() for v in vs]

    step2, vs2, opt2, x2 = model(p if target == "global" else None, "adam", seed=7)   # other values
    opt2.build(vs2)
    tw.train.Checkpoint(optimizer=opt2, w0=vs2[0], b0=vs2[1], w1=vs2[2]).restore(path)
    np.testing.assert_array_equal(slots_of(opt2, vs2[0])["momentum"].numpy().shape, vs[0].shape.as_list())
    batch = x if target == "global" else tw.constant(x.numpy())
    for _ in range(3):
        step2(batch)
    for a, b in zip(want, vs2):
        np.testing.assert_allclose(b.numpy(), a, rtol=2e-5, atol=1e-6)
    for a, v in zip(want_slots, vs2):
        np.testing.assert_allclose(slots_of(opt2, v)["momentum"].numpy(), a, rtol=2e-5, atol=1e-6)
    if target == "global":
        assert all(s.sbp == (S(0),) for v in vs2 for s in slots_of(opt2, v).values())
