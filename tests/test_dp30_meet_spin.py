"""The bounded GIL-free spin before an in-process rank sleeps at a meeting (``distribute/meet_spin.py``,
issue 13 session 26 dp30): where it spins (a rank's inbox, a bucket's first member), that a post and
a round's hand-out ring the bell, that it is off by default and bounded, and that a planned step's
bits do not depend on it (2 and 3 ranks)."""
import threading

import numpy as np
import pytest

from tensorweave.distribute import meet_spin
from tensorweave.distribute.collective import InProcessGroup
from tensorweave.distribute.ranks import World
from tensorweave.kernels.cpu import jit
from mlp_step import mlp_step, run, same
from test_nogil24_segments import one_thread  # noqa: F401 - fixture


@pytest.fixture
def spin_us():
    before = meet_spin._setting["us"]
    yield meet_spin.set_spin_us
    meet_spin.set_spin_us(before)


@pytest.fixture
def spins(monkeypatch):
    """Records each spin's (bell, seen, ns) and spins nothing."""
    calls = []
    monkeypatch.setattr(meet_spin, "spin", lambda bell, seen, ns: calls.append((bell, seen, ns)) or seen)
    return calls


def test_off_unless_set(spin_us):
    assert meet_spin.set_spin_us(0) >= 0 and meet_spin.spin_ns() == 0
    assert spin_us(25) == 0 and meet_spin.spin_ns() == 25_000
    spin_us(-3)
    assert meet_spin.spin_ns() == 0


def test_the_compiled_watch_returns_on_a_ring_or_at_its_bound():
    bell = meet_spin.Bell()
    watch = jit.compile_now(meet_spin._watch, bell.box, 0, 0)
    assert watch(bell.box, 0, 200_000) == 0               # nothing rung: back at the bound, the same value
    bell.ring()
    assert watch(bell.box, 0, 10**12) == 1                # rung past what was seen: at once
    assert meet_spin._no_spin(bell.box, 0, 10**12) == 1   # the twin while it compiles: spins nothing
    assert bell.seen() == 1 and meet_spin.spin(bell, 0, 10**12) == 1


def test_a_rank_thread_spins_before_its_inbox_and_a_post_rings(spin_us, spins):
    world = World()
    try:
        rank = world.rank(1)
        before = rank._bell.seen()
        assert world.run([0, 1], lambda i: i) == [0, 1]
        assert rank._bell.seen() == before + 1                 # the post rang it
        spin_us(0)
        world.run([0, 1], lambda i: i)
        assert not spins                                       # off: the loop sleeps at once
        spin_us(30)
        world.run([0, 1], lambda i: i)                          # (its loop read the setting before this post)
        world.run([0, 1], lambda i: i)
        assert any(bell is rank._bell and ns == 30_000 for bell, _, ns in spins)
    finally:
        world.shutdown()


def test_the_first_member_of_a_bucket_spins_then_waits(spin_us, monkeypatch):
    """Member 1 deposits first (member 0 starts only once member 1 spun): it spins on the group's
    bell, then waits as before; the sums are the same."""
    group = InProcessGroup([0, 1])
    spun, calls = threading.Event(), []

    def fake(bell, seen, ns):
        calls.append((bell, seen, ns))
        spun.set()
        return seen
    monkeypatch.setattr(meet_spin, "spin", fake)
    spin_us(40)
    values = [[np.arange(6, dtype=np.float32) * (i + 1)] for i in range(2)]
    out = [None, None]

    def member(i):
        if i == 0:
            spun.wait(30)
        pending = group.communicator(i).all_reduce_start(values[i], "sum")
        out[i] = pending.wait()
    threads = [threading.Thread(target=member, args=(i,)) for i in (1, 0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert calls and calls[0][0] is group._bell and calls[0][2] == 40_000
    assert group._bell.seen() >= 1                              # the round's hand-out rang it
    for got in out:
        np.testing.assert_array_equal(got[0], np.arange(6, dtype=np.float32) * 3)


@pytest.mark.parametrize("ranks", [2, 3])
def test_the_step_has_the_same_bits_with_the_spin(one_thread, spin_us, ranks):  # noqa: F811
    spin_us(0)
    off = run(*mlp_step((32, 64, 10), ranks, batch=18, seed=3), steps=4)
    spin_us(50)
    on = run(*mlp_step((32, 64, 10), ranks, batch=18, seed=3), steps=4)
    assert same(on[0], off[0]) and same(on[1], off[1])


def test_the_bucket_does_not_spin_when_off(spin_us, spins):
    """Member 1 deposits first and waits (member 0 starts once it is in the group's wait): no spin."""
    spin_us(0)
    group = InProcessGroup([0, 1])
    waiting, wait = threading.Event(), group._wait

    def in_wait(*a, **k):
        waiting.set()
        return wait(*a, **k)
    group._wait = in_wait
    out = [None, None]

    def member(i):
        if i == 0:
            waiting.wait(30)
        out[i] = group.communicator(i).all_reduce_start([np.ones(4, np.float32)], "sum").wait()
    threads = [threading.Thread(target=member, args=(i,)) for i in (1, 0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert waiting.is_set() and not spins
    assert all(got is not None and got[0].tolist() == [2.0] * 4 for got in out)
