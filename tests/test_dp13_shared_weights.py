"""In-process ranks keep a ZeRO-1 weight in one buffer (distribute/zero_update.share_storage): each
rank updates its rows in place, the gather copies nothing. Training equals one device and has the
bits of each rank keeping its own copy; a value read before a step stays as read; an assignment
between steps, shards of unequal values and a plan reading the weight after its bucket starts
keep (or get back) correct values."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.distribute import collective, planner
from tensorweave.distribute.ranks import default_world
from zero13_model import OPTIMIZERS, train


@pytest.fixture
def zero_everywhere(monkeypatch):
    monkeypatch.setattr(planner, "ZERO_FIXED_BYTES", 0)      # every weight of the small model in shards


def _shared(step, x):
    return step.get_concrete_function(x)._global.shared


def _buffers(v):
    return [s._value for s in v._locals]


@pytest.mark.parametrize("ranks", [2, 3])
@pytest.mark.parametrize("optimizer", ["sgd", "sgd_momentum", "adam"])
def test_training_equals_one_device_and_the_own_copies_bits(zero_everywhere, monkeypatch, ranks, optimizer):
    p = tw.placement("cpu", ranks=list(range(ranks)))
    want = train(None, optimizer)[0]
    got, _, vs, step, x = train(p, optimizer)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-6)
    assert len(_shared(step, x)) == 3
    for v in vs:                                  # one buffer, every rank's shard
        bufs = _buffers(v)
        assert all(b is bufs[0] for b in bufs)
    monkeypatch.setattr(planner, "SHARED_ZERO_STORAGE", False)
    own, _, vs2, step2, x2 = train(p, optimizer)
    assert _shared(step2, x2) == []
    assert all(b is not _buffers(vs2[0])[0] for b in _buffers(vs2[0])[1:])
    for a, b in zip(got, own):
        np.testing.assert_array_equal(a, b)


def test_a_value_read_before_a_step_stays_as_read(zero_everywhere):
    p = tw.placement("cpu", ranks=[0, 1])
    _, _, vs, step, x = train(p, "sgd", steps=2)
    held = [np.asarray(s._read()) for s in vs[0]._locals]       # the shared buffer itself, held
    before = held[0].copy()
    assert held[0] is held[1]
    step(x)
    np.testing.assert_array_equal(held[0], before)               # copy-on-write: the holder's value kept
    after = _buffers(vs[0])
    assert after[0] is after[1] and after[0] is not held[0]      # a fresh shared buffer took the update
    assert not np.array_equal(after[0], before)


@pytest.fixture
def gathers(monkeypatch):
    """The calls of the in-process all_gather_rows (the ZeRO-1 gather's rendezvous)."""
    calls = []
    real = collective.InProcessCommunicator.all_gather_rows

    def counting(self, arrays):
        calls.append(len(arrays))
        return real(self, arrays)
    monkeypatch.setattr(collective.InProcessCommunicator, "all_gather_rows", counting)
    return calls


def test_assignments_and_unequal_shards_between_steps(zero_everywhere, gathers):
    p = tw.placement("cpu", ranks=[0, 1])
    _, _, vs, step, x = train(p, "sgd_momentum", steps=2)
    _, _, ref, rstep, rx = train(None, "sgd_momentum", steps=2)
    new = np.full(vs[0].shape, 0.25, np.float32)
    vs[0].assign(new)
    ref[0].assign(new)
    step(x)
    rstep(rx)
    np.testing.assert_allclose(vs[0].numpy(), ref[0].numpy(), rtol=2e-5, atol=1e-6)
    bufs = _buffers(vs[0])
    assert bufs[0] is bufs[1]                                    # joined again
    assert gathers == []                                         # nothing to gather, no rendezvous
    # shards of unequal values (not a replicated weight's) are not joined: each rank keeps its own
    # buffer, updates its rows and gathers the others' rows, as without shared storage
    world = default_world()
    world.run([0, 1], lambda i: vs[0]._locals[i]._storage_for_update().__setitem__((0, 0), float(i)))
    step(x)
    bufs = _buffers(vs[0])
    assert bufs[0] is not bufs[1]
    np.testing.assert_array_equal(bufs[0], bufs[1])
    assert gathers == [3, 3]                                     # each rank gathered the other's rows
    step(x)                                                      # equal again: joined, no gather
    assert gathers == [3, 3] and _buffers(vs[0])[0] is _buffers(vs[0])[1]
    # one shard given a buffer of unequal values (the other keeps the shared one): not joined either
    changed = _buffers(vs[0])[1].copy()
    changed[0, 0] += 1.0
    vs[0]._locals[1]._value = changed
    step(x)
    assert gathers == [3, 3, 3, 3]
    bufs = _buffers(vs[0])
    np.testing.assert_array_equal(bufs[0], bufs[1])


def test_a_read_after_the_bucket_starts_keeps_own_copies(zero_everywhere):
    """The weight read again after the update (returned): that weight is not shared, the step is correct."""
    p = tw.placement("cpu", ranks=[0, 1])
    rng = np.random.default_rng(1)
    w0 = rng.standard_normal((6, 4)).astype(np.float32)
    xs = rng.standard_normal((8, 6)).astype(np.float32)
    results = []
    for placement in (None, p):
        w = tw.Variable(w0) if placement is None else tw.Variable(w0, placement=placement, sbp=tw.sbp.broadcast)
        x = tw.constant(xs) if placement is None else tw.constant(xs).to_global(placement=placement,
                                                                                 sbp=tw.sbp.split(0))
        opt = OPTIMIZERS["sgd_momentum"]()

        @tw.function
        def step(x):
            with tw.GradientTape() as tape:
                loss = tw.reduce_mean(tw.matmul(x, w) ** 2)
            opt.apply_gradients([(tape.gradient(loss, w), w)])
            return tw.reduce_sum(w.read_value())
        out = [float(step(x).numpy()) for _ in range(3)]
        results.append((out, w.numpy()))
        if placement is not None:
            assert _shared(step, x) == []
    np.testing.assert_allclose(results[1][0], results[0][0], rtol=2e-5)
    np.testing.assert_allclose(results[1][1], results[0][1], rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("ranks", [2, 3])
def test_no_copy_while_nothing_else_holds_the_weights(zero_everywhere, gathers, ranks):
    p = tw.placement("cpu", ranks=list(range(ranks)))
    _, _, vs, step, x = train(p, "adam", steps=2)
    step(x)               # (copies: train's returned values, read from the buffers, were alive at its start)
    before = [id(v._locals[0]._value) for v in vs]          # ids only: holding the buffers would be a holder
    for _ in range(3):
        step(x)
    assert [id(v._locals[0]._value) for v in vs] == before
    assert all(all(s._value is v._locals[0]._value for s in v._locals) for v in vs)
    assert gathers == []


def test_reshare_joins_equal_shards_and_replaces_a_held_buffer():
    from types import SimpleNamespace
    from tensorweave.distribute.zero_update import SharedWeight, reshare
    a = np.arange(12, dtype=np.float32).reshape(4, 3)
    shards = [SimpleNamespace(_value=a.copy()), SimpleNamespace(_value=a.copy())]
    first = id(shards[0]._value)                       # (ids only: holding a buffer is a holder)
    g = SharedWeight(shards, [(0, 2), (2, 4)])
    reshare([g])                                       # joined on the first shard's own buffer, no copy
    assert g.active and id(shards[0]._value) == first and shards[1]._value is shards[0]._value
    assert [w.base is shards[0]._value for w in g.views] == [True, True] and g.views[1].shape == (2, 3)
    reshare([g])                                       # nothing to do
    assert id(shards[0]._value) == first and g.active
    held = shards[0]._value                            # someone holds the buffer: a fresh one for the step
    reshare([g])
    assert g.active and shards[0]._value is not held and shards[1]._value is shards[0]._value
    np.testing.assert_array_equal(shards[0]._value, held)
    np.testing.assert_array_equal(held, a)
    del held
    apart = [SimpleNamespace(_value=a.copy()), SimpleNamespace(_value=a.copy())]
    held = apart[0]._value                             # held while the shards are joined: joined on a copy
    g1 = SharedWeight(apart, [(0, 2), (2, 4)])
    reshare([g1])
    assert g1.active and apart[0]._value is not held and apart[1]._value is apart[0]._value
    del held
    view = np.arange(24, dtype=np.float32)[::2].reshape(4, 3)    # not owning its memory: copied when joined
    g2 = SharedWeight([SimpleNamespace(_value=view), SimpleNamespace(_value=view.copy())], [(0, 2), (2, 4)])
    reshare([g2])
    assert g2.active and g2.shards[0]._value is not view and g2.shards[0]._value.flags.c_contiguous
    g3 = SharedWeight([SimpleNamespace(_value=a.copy()), SimpleNamespace(_value=a + 1)], [(0, 2), (2, 4)])
    reshare([g3])                                      # unequal values: left apart, inactive
    assert not g3.active and g3.shards[0]._value is not g3.shards[1]._value


def test_a_single_weight_update_is_shared(zero_everywhere):
    p = tw.placement("cpu", ranks=[0, 1])
    w = tw.Variable(np.ones((6, 4), np.float32), placement=p, sbp=tw.sbp.broadcast)
    x = tw.constant(np.ones((8, 6), np.float32)).to_global(placement=p, sbp=tw.sbp.split(0))
    opt = OPTIMIZERS["sgd"]()

    @tw.function
    def step(x):
        with tw.GradientTape() as tape:
            loss = 0.5 * tw.reduce_sum(tw.matmul(x, w) ** 2)      # the gradient reads the weight's value
        opt.apply_gradients([(tape.gradient(loss, w), w)])
        return loss
    step(x)
    assert len(_shared(step, x)) == 1 and _buffers(w)[0] is _buffers(w)[1]
    np.testing.assert_allclose(w.numpy(), 1 - 0.05 * 8 * 6, rtol=1e-6)    # x^T (x w): 8 rows of 6
