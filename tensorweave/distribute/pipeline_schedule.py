"""Pipeline schedules as data: per stage the order of forward/backward actions, their time
slots, the bubble fraction and the activations each stage holds (see ``pipeline.py``).

>>> sched = make_schedule(2, 3, "gpipe")
>>> print(format_schedule(sched))
stage 0: F0 F1 F2 .. .. B0 B1 B2
stage 1: .. F0 F1 F2 B0 B1 B2 ..
>>> bubble_fraction(sched), peak_activations(sched)
(0.25, [3, 3])
"""
import collections

SCHEDULES = ("gpipe", "1f1b")


class Action(collections.namedtuple("Action", "time stage micro_batch kind")):
    """One slot of a schedule: at ``time``, ``stage`` runs the forward (``"F"``) or backward
    (``"B"``) of ``micro_batch``."""

    __slots__ = ()

    def __str__(self):
        return f"{self.kind}{self.micro_batch}"


def stage_orders(stages, micro_batches, schedule):
    """Per stage, the order of its (micro-batch, kind) actions."""
    p, m = int(stages), int(micro_batches)
    if p < 1 or m < 1:
        raise ValueError(f"pipeline: needs at least one stage and one micro-batch, got {p} and {m}")
    if schedule == "gpipe":
        return [[(i, "F") for i in range(m)] + [(i, "B") for i in range(m)] for _ in range(p)]
    if schedule == "1f1b":
        orders = []
        for s in range(p):
            warmup = min(p - s - 1, m)
            order = [(i, "F") for i in range(warmup)]
            for i in range(m - warmup):                       # steady state: one forward, one backward
                order += [(warmup + i, "F"), (i, "B")]
            order += [(i, "B") for i in range(m - warmup, m)]  # cool-down
            orders.append(order)
        return orders
    raise ValueError(f"pipeline: schedule must be one of {SCHEDULES}, got {schedule!r}")


def make_schedule(stages, micro_batches, schedule="1f1b"):
    """The schedule as data: :class:`Action` s sorted by (time, stage). Each action takes one
    slot and starts as soon as its stage is free and its input is ready (a forward after the
    previous stage's forward of that micro-batch, a backward after the next stage's backward)."""
    orders = stage_orders(stages, micro_batches, schedule)
    p = len(orders)
    done = {}                                   # (stage, micro-batch, kind) -> slot it ran in
    pos, free, out = [0] * p, [0] * p, []
    while len(out) < sum(map(len, orders)):
        progressed = False
        for s in range(p):
            if pos[s] == len(orders[s]):
                continue
            mb, kind = orders[s][pos[s]]
            dep = (s - 1, mb, "F") if kind == "F" else (s + 1, mb, "B") if s + 1 < p else (s, mb, "F")
            if kind == "F" and s == 0:
                ready = 0
            elif dep in done:
                ready = done[dep] + 1
            else:
                continue
            t = max(free[s], ready)
            done[(s, mb, kind)] = t
            out.append(Action(t, s, mb, kind))
            free[s] = t + 1
            pos[s] += 1
            progressed = True
        if not progressed:
            raise RuntimeError(f"pipeline: schedule {schedule!r} deadlocks")   # (a bug in stage_orders)
    return sorted(out, key=lambda a: (a.time, a.stage))


def bubble_fraction(schedule):
    """The idle share of the stages' time slots: (stages x slots - actions) / (stages x slots)."""
    stages = 1 + max(a.stage for a in schedule)
    slots = 1 + max(a.time for a in schedule)
    return (stages * slots - len(schedule)) / (stages * slots)


def peak_activations(schedule):
    """Per stage, the most micro-batches whose forward ran and backward did not yet."""
    stages = 1 + max(a.stage for a in schedule)
    live, peak = [0] * stages, [0] * stages
    for a in schedule:
        live[a.stage] += 1 if a.kind == "F" else -1
        peak[a.stage] = max(peak[a.stage], live[a.stage])
    return peak


def format_schedule(schedule):
    """One line per stage, one column per slot (``F2``: forward of micro-batch 2, ``..``: idle)."""
    stages = 1 + max(a.stage for a in schedule)
    slots = 1 + max(a.time for a in schedule)
    width = max(len(str(a)) for a in schedule)
    grid = [["." * width] * slots for _ in range(stages)]
    for a in schedule:
        grid[a.stage][a.time] = str(a).rjust(width)
    return "\n".join(f"stage {s}: " + " ".join(row) for s, row in enumerate(grid))


__all__ = ["SCHEDULES", "Action", "stage_orders", "make_schedule", "bubble_fraction", "peak_activations",
           "format_schedule"]
