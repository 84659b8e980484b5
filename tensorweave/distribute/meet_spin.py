"""A bounded spin without the GIL before an in-process rank sleeps at a meeting (issue 13, dp30).

Why: two of a planned step's meetings put a thread to sleep — rank 1's thread waiting for its next
job (``ranks.Rank``'s inbox) and the first member of a bucket waiting for the others' deposits
(``collective.InProcessGroup.reduce_wait``). On the 2-vCPU KVM guest the idle driver halts a
vCPU at once (``haltpoll``, ``guest_halt_poll_ns=0``), so each such sleep ends in a hypervisor
wake-up. :func:`spin` first watches a :class:`Bell` (an ``int64`` rung by the side that hands
the work over) in compiled code that holds no GIL, for at most :func:`spin_ns` ns; only then does
the caller sleep as before. Nothing changes what a meeting computes: a spin that sees nothing ends
at its bound and the caller waits as it always did.

Off by default (``TW_MEET_SPIN_US``, µs, 0 or unset: off; :func:`set_spin_us`): a spin takes that
much CPU from whoever else wants the core, and no quiet A/B has shown a win yet (BENCHMARKS.md,
session 26 dp30). While the loop compiles (background, ``jit.njit_twin``) its twin spins nothing.

>>> bell = Bell()
>>> seen = bell.seen()
>>> bell.ring()
>>> spin(bell, seen, 1_000_000) != seen            # rung: returns at once
True
"""
import os

import numpy as np

from tensorweave.kernels.cpu import jit
from tensorweave.kernels.cpu.spin_share import _load, _now_ns, _pause

#: µs a waiter spins before sleeping (``TW_MEET_SPIN_US``; 0: no spin)
_setting = {"us": float(os.environ.get("TW_MEET_SPIN_US", "0") or 0)}


def spin_ns():
    """The bound of a spin in ns (0: off)."""
    return int(_setting["us"] * 1000)


def set_spin_us(us):
    """Sets the spin's bound (µs; 0 turns it off); returns the old one."""
    old, _setting["us"] = _setting["us"], max(0.0, float(us))
    return old


class Bell:
    """A counter one side rings (under the GIL: a plain ``int64`` store) after handing work over."""

    __slots__ = ("box",)

    def __init__(self):
        self.box = np.zeros(1, np.int64)

    def seen(self):
        return int(self.box[0])

    def ring(self):
        self.box[0] += 1


def _no_spin(box, seen, ns):
    return box[0]


@jit.njit_twin(_no_spin)
def _watch(box, seen, ns):
    """``box[0]`` once it differs from ``seen`` or ``ns`` ns have passed (no GIL held)."""
    deadline = _now_ns() + ns
    while True:
        now = _load(box, 0)
        if now != seen or _now_ns() > deadline:
            return now
        _pause()


def spin(bell, seen, ns):
    """Watches ``bell`` until it is rung past ``seen`` (the value read before the caller checked
    there was nothing to do) or ``ns`` ns passed; returns its value then. The caller checks again
    and sleeps as before where still nothing came."""
    return int(_watch(bell.box, seen, ns))


__all__ = ["Bell", "spin", "spin_ns", "set_spin_us"]
