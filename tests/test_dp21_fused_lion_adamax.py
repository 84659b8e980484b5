"""Lion's and Adamax's fused updates (``ResourceApplyLion`` / ``ResourceApplyAdamax``, weight decay
folded) applied by the gradient bucket's reduction (distribute/fused_rules.py, fused_sgd.py), issue
13: the rank summing a chunk of a ZeRO-1 weight's gradient updates the shared weight and the owner's
slot rows there at once. On 2 ranks one compiled loop sums and updates (``_sum2_lion`` /
``_sum2_adamax``, calling the kernels' element functions); on 3 the sum goes to scratch and the
kernel's own loop runs. The bits are the unfused ZeRO-1 step's on 2 and 3 ranks (uneven rows), and
equal one device within the gradient sum's rounding."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core.sbp import S
from tensorweave.distribute import fused_rules, fused_sgd
from test_dp13_fused_sgd import applied, check_apply_chunk, zero_everywhere  # noqa: F401 - fixtures
from zero13_model import slots_of, train

K = tw.keras.optimizers
OPTIMIZERS = {
    "lion": lambda: K.Lion(0.01),
    "lion_wd": lambda: K.Lion(0.01, beta_1=0.8, weight_decay=0.2),
    "adamax": lambda: K.Adamax(0.05),
    "adamax_wd": lambda: K.Adamax(0.05, beta_2=0.99, weight_decay=0.3),
}
ATTRS = {"ResourceApplyLion": {"beta_1": 0.9, "beta_2": 0.99},
         "ResourceApplyAdamax": {"beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-7}}


def _trained(placement, name, dtype=np.float32, steps=3):
    values, opt, vs, _, _ = train(placement, OPTIMIZERS[name](), steps=steps, dtype=dtype)
    slots = [s for v in vs for _, s in sorted(slots_of(opt, v).items())]
    return values + [s.numpy() for s in slots], slots


@pytest.mark.parametrize("ranks", [2, 3])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_the_bucket_applies_the_update_with_the_unfused_bits(zero_everywhere, applied, monkeypatch, ranks, name):
    """Weights 7x5, 5, 5x3 (uneven rows): slots ``S(0)``, every rank's rows of every weight applied
    by the buckets each step with Lion's/Adamax's rule; the bits of the fusion off; one device within rounding."""
    p = tw.placement("cpu", ranks=list(range(ranks)))
    got, slots = _trained(p, name)
    assert slots and all(s.sbp == (S(0),) for s in slots)
    assert len(applied) == 3 * 3 * ranks and len(set(applied)) == 3 * ranks
    assert {r.name for r in applied.rules} == {name.split("_")[0]}
    assert all(bool(r.decay) == name.endswith("_wd") for r in applied.rules)
    applied.clear()
    monkeypatch.setattr(fused_sgd, "ENABLED", False)
    plain, _ = _trained(p, name)
    assert not applied
    assert len(got) == len(plain) == 3 + 3 * fused_rules.rule_for(
        "ResourceApplyLion" if name.startswith("lion") else "ResourceApplyAdamax",
        ATTRS["ResourceApplyLion" if name.startswith("lion") else "ResourceApplyAdamax"]).slots
    for a, b in zip(got, plain):
        np.testing.assert_array_equal(a, b)
    for a, w in zip(got, _trained(None, name)[0]):
        np.testing.assert_allclose(a, w, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["lion_wd", "adamax_wd"])
def test_float64_on_three_ranks_equals_one_device(zero_everywhere, applied, name):
    p = tw.placement("cpu", ranks=[0, 1, 2])
    got = _trained(p, name, dtype=np.float64)[0]
    assert len(applied) == 3 * 3 * 3
    for a, w in zip(got, _trained(None, name, dtype=np.float64)[0]):
        assert a.dtype == np.float64
        np.testing.assert_allclose(a, w, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("decay", [0.0, 0.25])
@pytest.mark.parametrize("members", [2, 3])
@pytest.mark.parametrize("op", sorted(ATTRS))
def test_apply_chunk_equals_the_sum_then_the_update_kernel(members, op, decay):
    """Chunks of 5 elements of a 9x4 weight (cut inside the members' rows), in reverse order: the
    members' gradients summed in rank order, then the kernel (with its decay) on the whole arrays."""
    attrs = dict(ATTRS[op], weight_decay=decay)
    assert fused_rules.rule_for(op, attrs) == fused_rules.rule_for(op.replace("Apply", "GroupApply"), attrs)
    check_apply_chunk(members, op, attrs)


def _lion_args(dtype, rng):
    w, m, a, b = (rng.standard_normal(1000).astype(dtype) for _ in range(4))
    a[:3], b[:3], m[:3] = [0.0, np.nan, 1.0], [-0.0, 0.0, -1.0], [0.0, 0.0, 0.0]   # zero and NaN interpolations
    return [w, m, a, b, *fused_rules.rule_for("ResourceApplyLion", ATTRS["ResourceApplyLion"]).factors(
        [0.01], np.dtype(dtype))], 2


def _adamax_args(dtype, rng):
    w, m, u, a, b = (rng.standard_normal(1000).astype(dtype) for _ in range(5))
    u = np.abs(u)
    u[:2], a[:2] = [np.nan, 3.0], [0.5, np.nan]                           # a NaN on either side of max
    return [w, m, u, a, b, *fused_rules.rule_for("ResourceApplyAdamax", ATTRS["ResourceApplyAdamax"]).factors(
        [0.05, np.int64(4)], np.dtype(dtype))], 3


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("loop", ["lion", "adamax"])
def test_the_two_member_loops_have_their_twins_and_the_kernels_bits(loop, dtype):
    """The compiled ``_sum2_*`` loop, its NumPy twin and the kernel's loop on ``a + b``: the same bits."""
    from tensorweave.kernels.cpu.jit import compile_now
    args, n = globals()[f"_{loop}_args"](dtype, np.random.default_rng(21))
    twin = [x.copy() if isinstance(x, np.ndarray) else x for x in args]
    kernel = [x.copy() if isinstance(x, np.ndarray) else x for x in args]
    fn = getattr(fused_rules, f"_sum2_{loop}")
    compile_now(fn, *args)(*args)
    getattr(fused_rules, f"_sum2_{loop}_numpy")(*twin)
    flat = fused_rules._OWN_LOOPS[loop][1]
    flat(*kernel[:n], kernel[n] + kernel[n + 1], *kernel[n + 2:])
    before = globals()[f"_{loop}_args"](dtype, np.random.default_rng(21))[0]
    for x, y, z, old in zip(args[:n], twin[:n], kernel[:n], before):
        assert x.dtype == dtype and not np.array_equal(x, old)
        np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(x, z)
