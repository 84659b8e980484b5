"""Issue 13 session 25 (dp29): a bucket's update targets kept from step to step (``fused_sgd.BucketUpdate
.targets``) while every weight stays in the buffer they update (``zero_update.SharedWeight.flat``, which
``reshare`` counts as a known holder of the buffer): made again where a weight gets a new buffer (an
assignment, a value someone holds), never for an update with slots; the same bits as the unfused step."""
import numpy as np
import pytest

from mlp_step import mlp_step, plans, run, same
from tensorweave.distribute import fused_sgd, planner, zero_update

SIZES = (12, 8, 6, 3)


def _spec(step):
    """The first rank's bucket update (its ``_AllReduceStart``'s ``BucketUpdate``)."""
    st = next(s for s in plans(step)[0].steps if s.node.op == "_AllReduceStart")
    return next(c.cell_contents for c in st.fn.__closure__ if isinstance(c.cell_contents, fused_sgd.BucketUpdate))


def _trained(on, fused, monkeypatch, between=None, momentum=0.0, steps=5):
    monkeypatch.setattr(planner, "ZERO_FIXED_BYTES", 0)      # every weight of the small model in shards
    monkeypatch.setattr(fused_sgd, "ENABLED", fused)
    step, params = mlp_step(SIZES, on=on, batch=16, momentum=momentum)
    losses, weights = run(step, params, steps=steps, between=None if between is None else lambda i: between(i, step, params))
    return step, params, losses, weights


@pytest.mark.parametrize("ranks", [2, 3])
def test_plain_sgd_keeps_its_targets_and_the_unfused_bits(monkeypatch, ranks):
    step, params, losses, weights = _trained(ranks, True, monkeypatch)
    spec = _spec(step)
    # (run's reads of the weights at its end are values someone holds: the next step moves the
    # weights they read to new buffers, copy-on-write)
    losses += [step().numpy() for _ in range(2)]
    kept = spec._kept
    assert kept is not None and len(kept[1]) == len(spec.weights) == 6
    losses += [step().numpy() for _ in range(3)]
    # the same targets, the same buffers: reshare counts the kept flat views, so no step copies a weight
    assert spec._kept is kept and spec.targets() is kept[0]
    assert all(g.flat is flat and flat.base is g.shards[0]._value for g, flat in zip(spec.weights, kept[1]))
    assert all(t.weight is flat for t, flat in zip([t for t in kept[0] if t is not None], kept[1]))
    _, _, plain_losses, plain = _trained(ranks, False, monkeypatch, steps=10)
    assert same(losses, plain_losses) and same([p.numpy() for p in params], plain)


def test_a_weight_assigned_between_steps_gets_new_targets(monkeypatch):
    """An assignment gives the shard a buffer of its own: reshare joins the shards on a new one with a
    new flat view, and the targets are made again for it (the kept ones would update the old buffer)."""
    def assign(i, step, params):
        if i == 3:
            params[0].assign(params[0].numpy() * 0.5)
    kept = {}

    def watch(i, step, params):
        assign(i, step, params)
        if i in (3, 4):
            kept[i] = _spec(step)._kept
    step, params, losses, weights = _trained(2, True, monkeypatch, between=watch, steps=6)
    assert kept[3] is not None and kept[4] is not None and kept[4] is not kept[3]
    moved = [j for j, (a, b) in enumerate(zip(kept[3][1], kept[4][1])) if a is not b]
    assert moved == [next(j for j, g in enumerate(_spec(step).weights) if g.shards[0] is params[0]._locals[0])]
    _, _, plain_losses, plain = _trained(2, False, monkeypatch, between=assign, steps=6)
    assert same(losses, plain_losses) and same(weights, plain)


def test_a_weight_value_someone_holds_keeps_its_value(monkeypatch):
    step, params, _, _ = _trained(2, True, monkeypatch)
    spec = _spec(step)
    held = params[0].numpy()            # a read of the logical value: the shared buffer itself or a copy
    before = held.copy()
    step()
    np.testing.assert_array_equal(held, before)
    assert not np.array_equal(params[0].numpy(), before)
    step()
    assert spec._kept is not None


def test_an_update_with_slots_keeps_no_targets(monkeypatch):
    step, params, losses, weights = _trained(2, True, monkeypatch, momentum=0.9)
    spec = _spec(step)
    assert spec.rule.slots == 1 and spec._kept is None
    _, _, plain_losses, plain = _trained(2, False, monkeypatch, momentum=0.9)
    assert same(losses, plain_losses) and same(weights, plain)


class _Group:
    """A stand-in SharedWeight whose buffer (``buf``; None: not shared now) and flat view can change."""

    def __init__(self, buf, bounds):
        self.bounds, self.shards = bounds, [object() for _ in bounds]
        self.share(buf)

    def share(self, buf):
        self.buf, self.flat = buf, None if buf is None else buf.reshape(-1)

    def buffer(self):
        return self.buf


def _spec_of(groups):
    rule = fused_sgd.fused_rules.rule_for("ResourceApplyKerasMomentum", {"momentum": 0.0})     # plain SGD
    return fused_sgd.BucketUpdate(range(len(groups)), groups, [[()] * 2 for _ in groups], rule, None, 0)


def test_kept_targets_are_checked_every_step():
    a, b = np.zeros((4, 2), np.float32), np.ones((5, 3), np.float32)
    groups = [_Group(a, [(0, 2), (2, 4)]), _Group(b, [(0, 3), (3, 5)])]
    spec = _spec_of(groups)
    first = spec.targets()
    assert spec.targets() is first and [t.weight for t in first] == [groups[0].flat, groups[1].flat]
    groups[1].share(b.copy())                   # a new buffer: made again, pointing at it
    again = spec.targets()
    assert again is not first and again[1].weight is groups[1].flat and again[0].weight is groups[0].flat
    groups[0].share(None)                       # not shared now: no target, and nothing kept
    got = spec.targets()
    assert got[0] is None and got[1] is not None and spec._kept is None
    groups[0].share(a)
    assert spec.targets()[0].weight is groups[0].flat and spec._kept is not None


@pytest.mark.parametrize("flat", ["none", "another buffer's"])
def test_a_buffer_without_its_flat_view_is_targeted_for_the_step_only(flat):
    """No flat view (a SharedWeight its reshare did not join), or one of another buffer (row views set
    apart from reshare): the step's target is a view of the buffer itself, and nothing is kept."""
    a = np.zeros((4, 2), np.float32)
    g = _Group(a, [(0, 2), (2, 4)])
    g.flat = None if flat == "none" else a.copy().reshape(-1)
    spec = _spec_of([g])
    got = spec.targets()
    assert got[0].weight.base is a and spec._kept is None


def test_reshare_counts_the_flat_view_as_a_known_holder():
    """A steady step's reshare finds the buffer held by the shards, the views and the flat view only:
    it stays (a copy each step would be a new buffer, its targets made again); a value read beyond
    them is a holder, and the shards move to a fresh buffer."""
    class Shard:
        def __init__(self, value):
            self._value = value
    base = np.arange(8, dtype=np.float32).reshape(4, 2)
    shards = [Shard(base), Shard(base)]
    g = zero_update.SharedWeight(shards, [(0, 2), (2, 4)])
    del base
    zero_update.reshare([g])
    flat = g.flat
    assert g.active and flat.base is shards[0]._value and all(w.base is flat.base for w in g.views)
    zero_update.reshare([g])
    assert g.flat is flat and shards[0]._value is flat.base
    held = shards[0]._value         # someone holds the value
    zero_update.reshare([g])
    assert shards[0]._value is not held and g.flat.base is shards[0]._value and g.flat is not flat
    np.testing.assert_array_equal(shards[1]._value, held)


def test_kept_targets_mark_each_weight_modified_every_step(monkeypatch):
    """The check of kept targets is ``SharedWeight.buffer()``, which also drops what was derived from
    the weight (``derived.modified``): a value derived before the step never outlives the update."""
    from tensorweave.core import derived
    step, params, _, _ = _trained(2, True, monkeypatch)
    step()
    spec = _spec(step)
    kept = spec._kept
    before = [derived.generation(flat.base) for flat in kept[1]]
    step()
    assert spec._kept is kept
    after = [derived.generation(flat.base) for flat in kept[1]]
    assert None not in before and all(a != b for a, b in zip(after, before))


def test_a_weight_whose_shards_differ_is_not_applied_by_kept_targets(monkeypatch):
    """Shards of unequal values (a rank's shard assigned alone) are not joined: reshare leaves the group
    inactive with its old flat view, and the kept targets must not update that buffer."""
    def split(i, step, params):
        if i == 3:
            shard = params[2]._locals[1]
            shard.assign(shard.numpy() + 1.0)
    step, params, losses, weights = _trained(2, True, monkeypatch, between=split, steps=6)
    _, plain_params, plain_losses, plain = _trained(2, False, monkeypatch, between=split, steps=6)
    assert same(losses, plain_losses) and same(weights, plain)
    assert same([s.numpy() for s in params[2]._locals], [s.numpy() for s in plain_params[2]._locals])
