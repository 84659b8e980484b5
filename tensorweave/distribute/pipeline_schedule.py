"""Pipeline schedules as data: per stage the order of forward/backward actions, their time
slots, the bubble fraction and the activations each stage holds (see ``pipeline.py``).

>>> sched = make_schedule(2, 3, "gpipe")
>>> print(format_schedule(sched))
stage 0: F0 F1 F2 .. .. B0 B1 B2
stage 1: .. F0 F1 F2 B0 B1 B2 ..
>>> bubble_fraction(sched), peak_activations(sched)
(0.25, [3, 3])

Interleaved 1F1B (Megatron's virtual stages): each of ``p`` devices holds ``v`` model chunks
(stage ``c`` on device ``c % p``); a device runs forwards in groups of ``p`` micro-batches
per chunk, so the pipeline fills ``v`` times faster and the bubble shrinks ``v``-fold:

>>> sched = make_schedule(2, 2, "interleaved_1f1b", virtual_stages=2)
>>> print(format_schedule(sched))
device 0: F0.0 F1.0 F0.2 F1.2 .... B0.2 .... B1.2 B0.0 B1.0
device 1: .... F0.1 F1.1 F0.3 B0.3 F1.3 B1.3 B0.1 B1.1 ....
>>> bubble_fraction(sched), peak_activations(sched)
(0.2, [2, 2, 2, 1])
"""
import collections

SCHEDULES = ("gpipe", "1f1b", "interleaved_1f1b")


class Action(collections.namedtuple("Action", "time stage micro_batch kind device", defaults=(None,))):
    """One slot of a schedule: at ``time``, ``stage`` runs the forward (``"F"``) or backward
    (``"B"``) of ``micro_batch`` on ``device`` (the stage itself, or with virtual stages the
    device holding it: ``stage % devices``)."""

    __slots__ = ()

    def __str__(self):
        return f"{self.kind}{self.micro_batch}"

    @property
    def on(self):
        """The device (pipeline rank) that runs this action."""
        return self.stage if self.device is None else self.device


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


def interleaved_orders(devices, micro_batches, virtual_stages):
    """Per device, the order of its (stage, micro-batch, kind) actions in Megatron's interleaved
    1F1B: ``v = virtual_stages`` model chunks per device (stage ``c`` on device ``c % p``).
    The ``k``-th forward of a device runs chunk ``(k // p) % v`` on micro-batch
    ``(k // (p v)) p + k % p`` (groups of ``p`` micro-batches per chunk), backwards the same
    with the chunks reversed; device ``d`` warms up with ``2 (p - d - 1) + (v - 1) p`` forwards,
    then alternates one forward and one backward, then cools down."""
    p, m, v = int(devices), int(micro_batches), int(virtual_stages)
    if p < 1 or m < 1 or v < 1:
        raise ValueError(f"pipeline: needs at least one device, micro-batch and virtual stage, got {p}, {m} and {v}")
    if m % p:
        raise ValueError(f"pipeline: interleaved_1f1b runs micro-batches in groups of the {p} devices, so "
                         f"micro_batches must be a multiple of {p}, got {m}")
    total = m * v

    def action(k, kind, d):
        chunk = (k % (p * v)) // p
        if kind == "B":
            chunk = v - 1 - chunk
        return chunk * p + d, (k // (p * v)) * p + k % p, kind

    orders = []
    for d in range(p):
        warmup = min(total, 2 * (p - d - 1) + (v - 1) * p)
        order = [action(k, "F", d) for k in range(warmup)]
        for i in range(total - warmup):
            order += [action(warmup + i, "F", d), action(i, "B", d)]
        order += [action(k, "B", d) for k in range(total - warmup, total)]
        orders.append(order)
    return orders


def make_schedule(stages, micro_batches, schedule="1f1b", virtual_stages=1):
    """The schedule as data: :class:`Action` s sorted by (time, device). Each action takes one
    slot and starts as soon as its device is free and its input is ready (a forward after the
    previous stage's forward of that micro-batch, a backward after the next stage's backward).
    For ``"interleaved_1f1b"`` ``stages`` is the number of devices, each holding
    ``virtual_stages`` model chunks (``stages * virtual_stages`` stages in all)."""
    if schedule == "interleaved_1f1b":
        orders = interleaved_orders(stages, micro_batches, virtual_stages)
    else:
        if int(virtual_stages) != 1:
            raise ValueError(f"pipeline: virtual_stages={virtual_stages} needs schedule='interleaved_1f1b', "
                             f"got {schedule!r}")
        orders = [[(s, mb, kind) for mb, kind in order]
                  for s, order in enumerate(stage_orders(stages, micro_batches, schedule))]
    p = len(orders)
    last = p * int(virtual_stages) - 1
    done = {}                                   # (stage, micro-batch, kind) -> slot it ran in
    pos, free, out = [0] * p, [0] * p, []
    while len(out) < sum(map(len, orders)):
        progressed = False
        for d in range(p):
            if pos[d] == len(orders[d]):
                continue
            s, mb, kind = orders[d][pos[d]]
            dep = (s - 1, mb, "F") if kind == "F" else (s + 1, mb, "B") if s < last else (s, mb, "F")
            if kind == "F" and s == 0:
                ready = 0
            elif dep in done:
                ready = done[dep] + 1
            else:
                continue
            t = max(free[d], ready)
            done[(s, mb, kind)] = t
            out.append(Action(t, s, mb, kind, d if schedule == "interleaved_1f1b" else None))
            free[d] = t + 1
            pos[d] += 1
            progressed = True
        if not progressed:
            raise RuntimeError(f"pipeline: schedule {schedule!r} deadlocks")   # (a bug in the orders)
    return sorted(out, key=lambda a: (a.time, a.on))


def bubble_fraction(schedule):
    """The idle share of the devices' time slots: (devices x slots - actions) / (devices x slots);
    ``(p - 1) / (k + p - 1)`` for GPipe and 1F1B, ``(p - 1) / (v k + p - 1)`` for interleaved
    1F1B with ``v`` virtual stages per device."""
    devices = 1 + max(a.on for a in schedule)
    slots = 1 + max(a.time for a in schedule)
    return (devices * slots - len(schedule)) / (devices * slots)


def peak_activations(schedule):
    """Per stage, the most micro-batches whose forward ran and backward did not yet."""
    stages = 1 + max(a.stage for a in schedule)
    live, peak = [0] * stages, [0] * stages
    for a in schedule:
        live[a.stage] += 1 if a.kind == "F" else -1
        peak[a.stage] = max(peak[a.stage], live[a.stage])
    return peak


def format_schedule(schedule):
    """One line per stage (per device with virtual stages: ``F2.3`` is stage 3's forward of
    micro-batch 2), one column per slot (``F2``: forward of micro-batch 2, ``..``: idle)."""
    virtual = any(a.device is not None for a in schedule)
    rows = 1 + max(a.on for a in schedule)
    slots = 1 + max(a.time for a in schedule)
    label = (lambda a: f"{a}.{a.stage}") if virtual else str
    width = max(len(label(a)) for a in schedule)
    grid = [["." * width] * slots for _ in range(rows)]
    for a in schedule:
        grid[a.on][a.time] = label(a).rjust(width)
    return "\n".join(f"{'device' if virtual else 'stage'} {s}: " + " ".join(row) for s, row in enumerate(grid))


__all__ = ["SCHEDULES", "Action", "stage_orders", "interleaved_orders", "make_schedule", "bubble_fraction",
           "peak_activations", "format_schedule"]
