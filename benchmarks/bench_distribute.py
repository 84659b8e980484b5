"""Data-parallel throughput of the benchmark MLP on in-process ranks: prints one JSON object per line.

The MLP of ``bench_models.py`` (784-512-512-10, ReLU, softmax cross-entropy; no dropout) at a
global batch of ``--batch`` trained with SGD: on one device, and data-parallel on ``--ranks``
in-process ranks (batch ``S(0)``, weights ``B``, the gradient all-reduce from boxing), each
row in the same process, alternating (the order swapped or rotated each round), best of ``--rounds``
and, under ``per_round``, the median / min / max over the rounds of the ratios paired within a round
(each round's data-parallel figure against that round's one-device one: the robust figures on a
loaded machine):

* ``planned_data_parallel_mlp`` (the issue's target: >= 1.6x on 2 ranks): the step in
  ``tw.function``, one plan per rank (``distribute/planner.py``), vs the same ``tw.function``
  on one device.
* ``data_parallel_mlp``: the step run eagerly on global tensors (a hand-off to every rank per op).

Threads: the baseline is one thread — the one-device plan runs on the calling thread
(``inter_op`` 1) with one BLAS thread — and each rank gets one BLAS thread (the ranks share
the controller's BLAS threads, ``distribute/rank_threads.py``; eager rows set it per rank
thread here). ``--all-cores`` adds the one-device step with the default threading (BLAS and
side-by-side ops on every core) as a second baseline. Each row also gives CPU time per step:
the process's and, per rank, the rank thread's (``time.thread_time``), so a loaded machine's
figures can still be judged. ``load`` is ``os.getloadavg()`` before and after. Where a run's figure
swings, the main row says why: ``rounds_detail`` gives per round the speedup, both steps' wall, and for
one device and each rank where its wall went (:func:`thread_waits`: on a core, runnable but waiting
for one — the host's load —, or asleep — waiting for the other rank or the GIL: ours) with the host's
steal; ``waits_ms`` the same over the rounds. Read outside the timed loops: the row measures what it did.

``--ablation`` adds a row of the planned step built without ZeRO-1 updates, without the step
counter folded into the bucket, without the bucketed all-reduce and without the rank plans' graph
passes (as before issue 13's dp13 work), alternating with one device. ``--optimizer adam`` (or
``momentum``) trains with an optimizer whose update the planner shards (ZeRO-1); the issue's
benchmark is plain SGD, whose update the planner keeps replicated.
``--decompose`` adds a row splitting the planned step's time (see :func:`decompose`): the
smaller products, two rank threads side by side, the collectives and hand-off.
``--profile`` prints, per plan (one device at the global batch and at the per-rank batch, and
each rank), the wall and thread-CPU ms per step of each op type.
``--gil`` prints, per rank of the planned step, the ms per step its thread held the GIL, per op type
(:func:`gil_held`, ``gil_sampler.py``): the part of a rank's step that cannot overlap the other rank's.
``--meeting`` adds a row timing ``World.run`` of an empty job (the per-step meeting alone).
``--controller`` adds a row with the controller's CPU per planned step outside the first rank's plan
(:func:`controller`: serial work, no rank overlaps it).
``--pipeline`` adds a row for the same MLP as a 2-stage pipeline (layer 1 on rank 0, layers
2-3 on rank 1; ``--micro-batches`` 4, 1F1B): steps/s against one device and the schedule's
bubble fraction (one controller runs a time slot's actions one after the other: overhead, not overlap).

From a worktree, ``PYTHONPATH=.`` measures its ``tensorweave`` (else the installed one: ``benchmarks/``
comes first on ``sys.path``, not the working directory).

Usage: ``python benchmarks/bench_distribute.py [--batch 256] [--ranks 2] [--steps 20] [--rounds 3]
[--all-cores] [--ablation] [--decompose] [--meeting] [--controller] [--profile] [--gil] [--pipeline] [--eager] [--optimizer sgd|momentum|adam|adamw|rmsprop|adagrad]``.
"""
import argparse
import json
import os
import sys
import threading
import time
import warnings

import numpy as np
from threadpoolctl import threadpool_limits

import tensorweave as tw
from bench_ray_collectives import _cpu_model   # this directory's sibling benchmark
from tensorweave.kernels.cpu import jit

SIZES = (784, 512, 512, 10)


OPTIMIZERS = {"sgd": lambda: tw.keras.optimizers.SGD(0.01),
              "momentum": lambda: tw.keras.optimizers.SGD(0.01, momentum=0.9),
              "adam": lambda: tw.keras.optimizers.Adam(0.001),
              "adamw": lambda: tw.keras.optimizers.AdamW(0.001, weight_decay=0.004),
              "rmsprop": lambda: tw.keras.optimizers.RMSprop(0.001),
              "adagrad": lambda: tw.keras.optimizers.Adagrad(0.01)}
OPTIMIZER = "sgd"


def mlp_loss(params, x, y):
    """The benchmark MLP's mean softmax cross-entropy: ReLU between the layers ``params`` (w, b, w, b, ...)."""
    h = x
    for i in range(0, len(params), 2):
        h = tw.matmul(h, params[i]) + params[i + 1]
        if i + 2 < len(params):
            h = tw.nn.relu(h)
    return tw.reduce_mean(tw.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=h))


def make(placement, batch):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, SIZES[0])).astype(np.float32)
    y = rng.integers(0, SIZES[-1], batch).astype(np.int32)
    weights = []
    for a, b in zip(SIZES, SIZES[1:]):
        w = (rng.standard_normal((a, b)) * np.sqrt(2.0 / a)).astype(np.float32)
        weights += [w, np.zeros(b, np.float32)]
    if placement is None:
        params = [tw.Variable(w) for w in weights]
        x, y = tw.constant(x), tw.constant(y)
    else:
        params = [tw.Variable(w, placement=placement, sbp=tw.sbp.broadcast) for w in weights]
        x = tw.constant(x).to_global(placement=placement, sbp=tw.sbp.split(0))
        y = tw.constant(y).to_global(placement=placement, sbp=tw.sbp.split(0))
    opt = OPTIMIZERS[OPTIMIZER]()

    def step():
        with tw.GradientTape() as tape:
            loss = mlp_loss(params, x, y)
        opt.apply_gradients(zip(tape.gradient(loss, params), params))
        return loss
    return step


def make_pipeline(batch, micro_batches):
    """The MLP as two stages (layer 1 | layers 2-3) on ranks 0 and 1, trained through a 1F1B pipeline."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, SIZES[0])).astype(np.float32)
    y = rng.integers(0, SIZES[-1], batch).astype(np.int32)
    layers = []
    for a, b in zip(SIZES, SIZES[1:]):
        layers.append((tw.Variable((rng.standard_normal((a, b)) * np.sqrt(2.0 / a)).astype(np.float32)),
                       tw.Variable(np.zeros(b, np.float32))))

    class Stage(tw.Module):
        def __init__(self, params, last):
            super().__init__()
            self.params, self.last = params, last

        def __call__(self, h):
            for i, (w, b) in enumerate(self.params):
                h = tw.matmul(h, w) + b
                if not (self.last and i == len(self.params) - 1):
                    h = tw.nn.relu(h)
            return h

    def loss(labels, logits):
        return tw.reduce_mean(tw.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    pipe = tw.distribute.pipeline([(Stage(layers[:1], False), tw.placement("cpu", ranks=[0])),
                                   (Stage(layers[1:], True), tw.placement("cpu", ranks=[1]))],
                                  micro_batches=micro_batches, schedule="1f1b", loss=loss)
    opt = tw.keras.optimizers.SGD(0.01)
    return pipe, lambda: pipe.train_step(x, y, opt)


def cpu_id():
    """The CPU's model name with its family and model numbers (``AMD EPYC`` alone names both the
    Zen 3 and the Zen 4 this project's figures came from)."""
    fields = {}
    try:
        for line in open("/proc/cpuinfo"):
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("cpu family", "model", "flags") and key not in fields:
                fields[key] = value.strip()
            if len(fields) == 3:
                break
    except OSError:
        pass
    name = _cpu_model()
    if "cpu family" in fields and "model" in fields:
        avx512 = "avx512f" in fields.get("flags", "").split()
        name += f" (family {fields['cpu family']} model {fields['model']}, {'AVX-512' if avx512 else 'no AVX-512'})"
    return name


def steps_per_s(step, steps):
    step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return steps / (time.perf_counter() - t0)


def _rank_cpu(world, ranks, inline=None, read=time.thread_time):
    """Per rank, the CPU seconds (``read()``) of the thread that runs its plan: the calling (controller)
    thread's for the first rank when planned functions run it there (``plan_function.INLINE_FIRST_RANK``:
    its figure then includes the controller's own work), else each rank thread's."""
    from tensorweave.distribute import plan_function
    got = world.run(ranks, lambda i: read())
    if plan_function.INLINE_FIRST_RANK if inline is None else inline:
        got[0] = read()
    return got


def measure(step, steps, world=None, ranks=None, inline=None, waits=None):
    """(steps/s, process CPU ms per step, [per-rank thread CPU ms per step] or the calling thread's);
    ``inline`` False: the first rank's work runs on its own thread (eager global ops). ``waits``: a
    list that gets, per thread, where its time went (:func:`thread_waits`; read outside the timed loop)."""
    step()
    s0 = (_rank_cpu(world, ranks, inline, _sched) if ranks else [_sched()]) if waits is not None else None
    c0 = time.process_time()
    r0 = _rank_cpu(world, ranks, inline) if ranks else [time.thread_time()]
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    wall = time.perf_counter() - t0
    r1 = _rank_cpu(world, ranks, inline) if ranks else [time.thread_time()]
    cpu = (time.process_time() - c0) / steps * 1e3
    if waits is not None:
        waits.append(thread_waits(s0, _rank_cpu(world, ranks, inline, _sched) if ranks else [_sched()], steps))
    return steps / wall, cpu, [(b - a) / steps * 1e3 for a, b in zip(r0, r1)]


def _sched(path="/proc/thread-self/schedstat"):
    """The calling thread's ``(wall ns, ns on a core, ns runnable but waiting for one)`` now (Linux's
    ``/proc/thread-self/schedstat``); None where the kernel gives no such record."""
    wall = time.perf_counter_ns()
    try:
        with open(path, "rb") as f:
            on_core, queued = f.read().split()[:2]
    except (OSError, ValueError):
        return None
    return wall, int(on_core), int(queued)


def thread_waits(before, after, steps):
    """Per thread, ms per step: ``cpu`` on a core, ``runq`` runnable but waiting for a core (other
    processes' load, the other rank on the same core: the host's share) and ``blocked`` the rest of
    the wall (asleep: waiting for another rank at a collective or the meeting, or for the GIL: our
    share). Which of the two moves with a round's speedup says where a run's swing comes from."""
    out = []
    for a, b in zip(before, after):
        if a is None or b is None:
            out.append(None)
            continue
        wall, on_core, queued = ((y - x) / steps / 1e6 for x, y in zip(a, b))
        out.append({"cpu": round(on_core, 3), "runq": round(queued, 3),
                    "blocked": round(max(0.0, wall - on_core - queued), 3)})
    return out


def host_steal(path="/proc/stat"):
    """``(steal, all)`` CPU ticks of the host so far (``/proc/stat``; None elsewhere): a round's share of
    ticks the hypervisor gave to other guests."""
    try:
        with open(path) as f:
            ticks = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return ticks[7] if len(ticks) > 7 else 0, sum(ticks[:8])     # (guest time is in user already)


def _one_thread_per_rank(world, ranks):
    """Eager global ops run on the rank threads: one BLAS/numba thread on each (the planned path does
    this itself, distribute/rank_threads.py)."""
    from tensorweave.distribute import rank_threads
    world.run(ranks, lambda i: rank_threads.use(1))


def spread(values, nd=2):
    """``{"median", "min", "max"}`` of ``values`` (rounded): a loaded machine's rounds differ by 2x,
    so one best round says little; the median of paired per-round ratios is the robust figure."""
    v = sorted(values)
    return {"median": round(float(np.median(v)), nd), "min": round(v[0], nd), "max": round(v[-1], nd)}


def paired(one, other):
    """Per-round figures of ``other`` against ``one`` measured in the same round (the same load):
    ``speedup`` (steps/s ratio) and ``cpu_ratio`` (one device's CPU per step / the busiest rank
    thread's), each as :func:`spread`, and ``busiest_rank_cpu_ms`` the same way."""
    return {"speedup": spread([d[0] / o[0] for o, d in zip(one, other)]),
            "cpu_ratio": spread([o[1] / max(d[2]) for o, d in zip(one, other)]),
            "busiest_rank_cpu_ms": spread([max(d[2]) for d in other])}


def compare(name, local_step, dp_step, args, world, ranks, extra=None, inline=None):
    compiled0 = jit.background_compile_seconds()
    one, dp, one_waits, dp_waits, steal = [], [], [], [], []
    for r in range(args.rounds):        # alternate, the order swapped every round: both see the same load
        pair = [(one, lambda: measure(local_step, args.steps, waits=one_waits)),
                (dp, lambda: measure(dp_step, args.steps, world, ranks, inline, waits=dp_waits))]
        h0 = host_steal()
        for acc, run in pair[::-1] if r % 2 else pair:
            acc.append(run())
        h1 = host_steal()
        steal.append(None if h0 is None or h1 is None or h1[1] == h0[1] else
                     round(100 * (h1[0] - h0[0]) / (h1[1] - h0[1]), 1))
    b1, bd = max(one), max(dp)
    row = {"row": name, "batch": args.batch, "ranks": args.ranks, "one_device_steps_s": round(b1[0], 2),
           "data_parallel_steps_s": round(bd[0], 2), "speedup": round(bd[0] / b1[0], 2), "target": 1.6,
           "one_device_cpu_ms": round(b1[1], 2), "data_parallel_cpu_ms": round(bd[1], 2),
           "rank_thread_cpu_ms": [round(c, 2) for c in bd[2]],
           "cpu_ratio": round(b1[1] / max(bd[2]), 2), "rounds": args.rounds,
           "per_round": paired(one, dp),
           "one_device_cpu_ms_per_round": spread([o[1] for o in one]),
           "waits_ms": waits_summary(one_waits, dp_waits),
           "rounds_detail": rounds_detail(one, dp, one_waits, dp_waits, steal),
           "compile_s_while_measured": round(jit.background_compile_seconds() - compiled0, 2)}
    row.update(extra or {})
    return row


def rounds_detail(one, dp, one_waits, dp_waits, steal):
    """Per round of :func:`compare` (the rounds the row's best and medians come from): the speedup, both
    steps' wall ms, one device's and each rank's :func:`thread_waits` and the host's steal (% of its
    ticks): the figures that tell a slow round of ours (a rank ``blocked``) from the host's (``runq``, steal)."""
    return [{"speedup": round(d[0] / o[0], 3), "wall_ms": [round(1e3 / o[0], 3), round(1e3 / d[0], 3)],
             "one_device": ow[0], "ranks": dw, "steal_pct": st}
            for o, d, ow, dw, st in zip(one, dp, one_waits, dp_waits, steal)]


def waits_summary(one_waits, dp_waits):
    """:func:`thread_waits`' figures over the rounds (:func:`spread`): one device's ``runq``, and per
    rank its ``blocked`` and ``runq`` ms per step (which rank waits, and how much the host took)."""
    def over(rows, i, key):
        got = [r[i][key] for r in rows if r[i] is not None]
        return spread(got, 3) if got else None
    return {"one_device_runq": over(one_waits, 0, "runq"),
            "ranks": [{k: over(dp_waits, i, k) for k in ("cpu", "blocked", "runq")}
                      for i in range(len(dp_waits[0]) if dp_waits else 0)]}


#: the ablation's ``switch_100us`` row: the interpreter's switch interval (s) while the planned step
#: runs (Python's default 5 ms: a rank thread back from a product waits for the GIL until the other
#: rank's Python reaches its next product, or this long)
SWITCH_INTERVAL = 1e-4
_RUN_ONLY = ("passes", "inline", "switch", "fuse")     # ablation keys that are not planner settings


def ablation(placement, args, world, ranks):
    """The planned step built with parts of the data-parallel work switched off, measured in one
    alternation with one device (same load): ``shared`` (the default: ZeRO-1 weights in one buffer
    the in-process ranks share; their update — plain SGD, momentum or Adam — applied by the
    bucket's reduction, ``fused_sgd.py``), ``unfused_sgd`` (the same without that, whatever the
    optimizer: the sums kept, then the update), ``switch_100us`` (the same plan run with ``sys.setswitchinterval``
    at :data:`SWITCH_INTERVAL`: what the GIL's hand-off between the rank threads costs),
    ``zero13`` (each rank its own copy, the gather copying rows, as before dp13's third session),
    ``posted`` (every rank's plan handed to its rank thread, the controller waiting, as before
    dp13's second session), ``no_zero`` (no ZeRO-1 updates), ``dp13`` (also the step counter's
    broadcast of its own, as before zero13), ``no_bucket`` (one blocking all-reduce per gradient
    where it is read, and the planner's plain byte costs), ``before_dp13`` (also no
    graph passes on the rank plans and FLOPS_PER_BYTE 10, as before dp13; rank threads still at one
    thread)."""
    from tensorweave.distribute import fused_sgd, plan_function, planner
    variants = {"shared": {}, "unfused_sgd": {"fuse": False}, "zero13": {"SHARED_ZERO_STORAGE": False},
                "posted": {"inline": False},
                "switch_100us": {"switch": SWITCH_INTERVAL},
                "no_zero": {"ZERO_UPDATES": False},
                "dp13": {"ZERO_UPDATES": False, "FOLD_ONCE_READS": False}, "no_bucket": {
                    "ALL_REDUCE_BUCKET_BYTES": 0, "ZERO_UPDATES": False},
                "before_dp13": {"ALL_REDUCE_BUCKET_BYTES": 0, "FLOPS_PER_BYTE": 10, "passes": False,
                                "ZERO_UPDATES": False}}
    if args.variants:       # --variants a,b: only those (fewer rows: more rounds in the same time)
        variants = {k: v for k, v in variants.items() if k in args.variants.split(",")}
    fns = {"one_device": tw.function(make(None, args.batch))}
    fns["one_device"]()
    for name, patch in variants.items():
        saved = {k: getattr(planner, k) for k in patch if k not in _RUN_ONLY}
        for k, v in patch.items():
            if k not in _RUN_ONLY:
                setattr(planner, k, v)
        tw.config.optimizer.set_experimental_options({"disable_meta_optimizer": not patch.get("passes", True)})
        fused_sgd.ENABLED = patch.get("fuse", True)
        try:
            fns[name] = tw.function(make(placement, args.batch))
            fns[name]()                                 # plans and binds with the patch
        finally:
            fused_sgd.ENABLED = True
            tw.config.optimizer.set_experimental_options({"disable_meta_optimizer": False})
            for k, v in saved.items():
                setattr(planner, k, v)
    # the variants' plans may ask numba for loops the main row's did not: a compile on the background
    # thread (Python, holding the GIL) beside two rank threads on two cores would slow only the rows
    # with rank threads (a replay of the old sequence found none; a guard, reported per row)
    jit.wait_for_compiles()
    compiled0 = jit.background_compile_seconds()
    best, every = {}, {name: [] for name in fns}
    names = list(fns)
    for r in range(args.rounds):
        # the order rotates each round: measured in a fixed order, the last variants came out ahead
        # by up to 2x at load 20-50 (a position effect; alternated in both orders they were even)
        for name in names[r % len(names):] + names[:r % len(names)]:
            fn = fns[name]
            plan_function.INLINE_FIRST_RANK = variants.get(name, {}).get("inline", True)
            interval = sys.getswitchinterval()
            sys.setswitchinterval(variants.get(name, {}).get("switch", interval))
            try:
                m = measure(fn, args.steps, *((None, None) if name == "one_device" else (world, ranks)))
            finally:
                plan_function.INLINE_FIRST_RANK = True
                sys.setswitchinterval(interval)
            every[name].append(m)
            if name not in best or m[0] > best[name][0]:
                best[name] = m
    one = best["one_device"][0]
    return {"row": "ablation", "batch": args.batch, "ranks": args.ranks,
            "compile_s_while_measured": round(jit.background_compile_seconds() - compiled0, 2), **{
        name: {"steps_s": round(m[0], 2), "vs_one_device": round(m[0] / one, 2), "cpu_ms": round(m[1], 2),
               "thread_cpu_ms": [round(c, 2) for c in m[2]],
               **({} if name == "one_device" else {"per_round": paired(every["one_device"], every[name])})}
        for name, m in best.items()}}


def decompose(placement, args, world, ranks):
    """Where the planned step's time goes, alternating in one run (same load): ``one_device`` (the
    global batch), ``half_batch`` (one device at the per-rank batch: a rank's work alone),
    ``independent`` (each rank thread runs its own one-device step at the per-rank batch at once:
    the ranks' work with no collective, so what two threads side by side cost),
    ``independent_processes`` (the same steps in as many processes, :class:`HalfBatchProcesses`)
    and ``planned`` (the data-parallel step). ``2 * half_batch / one_device`` is the price of the
    smaller products, ``independent_processes / half_batch`` that of sharing the cores' caches and
    memory, ``independent / independent_processes`` that of sharing one process (GIL, allocator,
    library state) and of meeting every step, ``planned / independent`` that of the collectives and
    the hand-off. ``independent_loop``: each rank thread runs its steps back to back in one
    ``World.run`` (as each process does): ``independent_loop / independent_processes`` is the price
    of sharing one process alone, ``independent / independent_loop`` that of the per-step rendezvous
    (the slower rank's time and the wake-ups of the hand-off; session 16 dp20 counted ~7 GIL
    hand-offs a step, ``gil_sampler.switches``)."""
    per_rank = args.batch // args.ranks
    halves = [tw.function(make(None, per_rank)) for _ in ranks]
    _one_thread_per_rank(world, ranks)
    world.run(ranks, lambda i: (halves[i](), halves[i]()))     # (the second run records nogil segments)

    def independent():
        world.run(ranks, lambda i: halves[i]())

    def independent_loop():         # args.steps steps per rank in one hand-off (measured as one "step")
        world.run(ranks, lambda i: [halves[i]() for _ in range(args.steps)])
    fns = {"one_device": (tw.function(make(None, args.batch)), None),
           "half_batch": (tw.function(make(None, per_rank)), None),
           "independent": (independent, False), "planned": (tw.function(make(placement, args.batch)), None)}
    for name, (fn, _) in fns.items():
        if name != "independent":
            fn(), fn()
    jit.wait_for_compiles()         # see ablation()
    compiled0 = jit.background_compile_seconds()
    workers = HalfBatchProcesses(len(ranks), per_rank, args.optimizer)
    best, every = {}, {}
    names = list(fns) + ["independent_processes", "independent_loop"]
    try:
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                if name == "independent_processes":
                    m = workers.measure(args.steps)
                elif name == "independent_loop":
                    rate, cpu_ms, per_thread = measure(independent_loop, 1, world, ranks, False)
                    m = (rate * args.steps, cpu_ms / args.steps, [c / args.steps for c in per_thread])
                else:
                    fn, inline = fns[name]
                    on_ranks = name in ("independent", "planned")
                    m = measure(fn, args.steps, *((world, ranks, inline) if on_ranks else (None, None)))
                every.setdefault(name, []).append(m)
                if name not in best or m[0] > best[name][0]:
                    best[name] = m
    finally:
        workers.close()
    return {"row": "decomposition", "batch": args.batch, "ranks": args.ranks,
            "compile_s_while_measured": round(jit.background_compile_seconds() - compiled0, 2), **{
        name: {"steps_s": round(m[0], 2), "cpu_ms": round(m[1], 2), "thread_cpu_ms": [round(c, 2) for c in m[2]],
               # medians over the rounds: each thread's CPU ms per step, and steps/s
               "median_thread_cpu_ms": [round(float(np.median([e[2][i] for e in every[name]])), 2)
                                        for i in range(len(m[2]))],
               "median_steps_s": round(float(np.median([e[0] for e in every[name]])), 2)}
        for name, m in best.items()}}


def controller(fn, steps, rounds):
    """The controller's own CPU per planned step: the calling thread's ``time.thread_time`` per call of
    ``fn`` (a traced planned tw.function, the first rank inline) less the part inside the first rank's
    plan (``executor.run_plan`` on that thread, wrapped for the measurement): the tw.function call,
    the feeds, the thread settings, the shared weights' join, the meeting and the outputs — work no
    rank overlaps (session 18 dp22). µs per step, min and median of ``rounds`` rounds."""
    from tensorweave.runtime import executor
    inside, real = [0], executor.run_plan
    me = threading.get_ident()

    def timed(plan, feeds):
        if threading.get_ident() != me:
            return real(plan, feeds)
        c0 = time.thread_time_ns()
        try:
            return real(plan, feeds)
        finally:
            inside[0] += time.thread_time_ns() - c0
    got = []
    executor.run_plan = timed           # plan_function calls it through the module
    try:
        fn()
        for _ in range(rounds):
            inside[0] = 0
            c0 = time.thread_time_ns()
            for _ in range(steps):
                fn()
            got.append((time.thread_time_ns() - c0 - inside[0]) / steps / 1e3)
    finally:
        executor.run_plan = real
    return {"row": "controller", "steps": steps, "outside_first_rank_plan_cpu_us": {
        "min": round(min(got), 1), "median": round(float(np.median(got)), 1)}}


def meeting(world, ranks, runs, rounds):
    """The per-step meeting alone: ``World.run`` of an empty job (the first rank inline, as a planned
    step runs), CPU µs per run of the calling thread, of the other ranks' threads (each's
    ``time.thread_time``) and of the process, best and median of ``rounds`` rounds of ``runs`` runs
    (what a step pays to meet its ranks, beside its work; session 17 dp21)."""
    def nothing(i):
        return None

    def one_round():
        for _ in range(runs // 10):
            world.run(ranks, nothing, inline=True)
        r0 = world.run(ranks, lambda i: time.thread_time())[1:]
        c0, p0 = time.thread_time(), time.process_time()
        for _ in range(runs):
            world.run(ranks, nothing, inline=True)
        c1, p1 = time.thread_time(), time.process_time()
        r1 = world.run(ranks, lambda i: time.thread_time())[1:]
        return [(c1 - c0) / runs * 1e6, sum(b - a for a, b in zip(r0, r1)) / runs * 1e6, (p1 - p0) / runs * 1e6]
    got = [one_round() for _ in range(rounds)]
    return {"row": "meeting", "ranks": len(ranks), "runs": runs, **{
        name: {"min": round(min(g[i] for g in got), 1), "median": round(float(np.median([g[i] for g in got])), 1)}
        for i, name in enumerate(("controller_cpu_us", "other_ranks_cpu_us", "process_cpu_us"))}}


class HalfBatchProcesses:
    """``n`` worker processes (this script with ``--half-batch-worker``), each with its own
    one-device step at the per-rank batch on one thread: ``independent`` with no GIL, allocator,
    BLAS state or address space shared (what two rank threads of one process pay beyond two
    processes is in our stack; what both pay is the cores' shared cache and memory bandwidth).
    Started once; :meth:`measure` releases them at once (a line on each one's stdin) and reads
    each one's figures (a JSON line on its stdout: no pickles)."""

    def __init__(self, n, batch, optimizer):
        import subprocess
        env = dict(os.environ)
        # the workers import the tensorweave this process imported (a worktree's or the installed one)
        root = os.path.dirname(os.path.dirname(os.path.abspath(tw.__file__)))
        env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in (env.get("PYTHONPATH"),) if p])
        self.procs = [subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--half-batch-worker", "--batch", str(batch),
             "--optimizer", optimizer], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
            for _ in range(n)]
        for p in self.procs:           # each has traced and run its step once
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError("a --half-batch-worker process failed to start")

    def measure(self, steps):
        """(steps/s of the slowest, the processes' CPU ms per step together, [each one's thread CPU
        ms per step]), as :func:`measure` gives for rank threads."""
        for p in self.procs:
            p.stdin.write(f"{steps}\n")
            p.stdin.flush()
        got = [json.loads(p.stdout.readline()) for p in self.procs]
        return min(g["steps_s"] for g in got), sum(g["cpu_ms"] for g in got), [g["cpu_ms"] for g in got]

    def close(self):
        for p in self.procs:
            p.stdin.close()
        for p in self.procs:
            p.wait(timeout=60)


def half_batch_worker(batch):
    """The loop of a :class:`HalfBatchProcesses` worker: ``ready``, then per line ``steps`` on stdin
    one JSON line of figures."""
    from tensorweave.kernels import threads
    from tensorweave.kernels.cpu import jit
    threads.set_inter_op_slots(1)
    with threadpool_limits(1):
        fn = tw.function(make(None, batch))
        fn()
        jit.wait_for_compiles()
        print("ready", flush=True)
        for line in sys.stdin:
            steps = int(line)
            rate, _, (cpu,) = measure(fn, steps)
            print(json.dumps({"steps_s": rate, "cpu_ms": cpu}), flush=True)


def profile(fn, steps):
    """Per bound plan of ``fn`` (a traced tw.function): {op type: [wall ns, thread CPU ns, count]} over
    ``steps`` calls (the steps of the bound plans wrap themselves; the plans are used as they are)."""
    import collections
    cf = list(fn._cache.values())[-1]
    plans = [cf._plan] if cf._global is None else list(cf._global.bound)
    accs = []
    for plan in plans:
        acc = collections.defaultdict(lambda: [0, 0, 0])
        accs.append(acc)
        for st in plan.steps:
            def timed(*a, _fn=st.fn, _e=acc[st.node.op]):
                c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
                r = _fn(*a)
                _e[0] += time.perf_counter_ns() - t0
                _e[1] += time.thread_time_ns() - c0
                _e[2] += 1
                return r
            st.fn = timed
        plan.runner = None          # the generated runner binds the step functions: made again with the timed ones
    for _ in range(steps):
        fn()
    return [{op: [round(w / steps / 1e6, 3), round(c / steps / 1e6, 3), n // steps] for op, (w, c, n) in
             sorted(a.items(), key=lambda kv: -kv[1][1])} for a in accs]


def gil_held(fn, steps, world, ranks, inline=True):
    """Per rank of the planned step ``fn`` (a traced tw.function on ``ranks``), the ms per step its
    thread held the GIL (wall: a holder off its core on a loaded machine counts; so also the share
    of each op's time it held it, and the op's thread CPU ms), per op type and ``outside`` ops, and
    the process's GIL hand-offs between threads per step (``gil_sampler.switches``: a count, not a time) (the runner, the hand-off and, on the first
    rank's thread with ``inline``, the controller's own work: tracing lookup, feeds, outputs), beside
    its thread CPU ms (``gil_sampler.py``: CPython's GIL record sampled by a nogil loop; None where
    the record is not found). The step functions are wrapped (as :func:`profile` does): each wrapper's
    two label writes count as the op's."""
    import gil_sampler
    if not gil_sampler.available():
        return None
    cf = list(fn._cache.values())[-1]
    plans = list(cf._global.bound)
    from tensorweave.runtime import nogil_segments
    # a segment running compiled calls none of its steps' functions: its calls count as "segment"
    labels = sorted({st.node.op for plan in plans for st in plan.steps} | {"segment"})
    index = {op: i for i, op in enumerate(labels)}
    sampler = gil_sampler.GilSampler(labels, len(plans))
    world.run(ranks, lambda i: sampler.register(i), inline=inline)
    where, outside = sampler.where, sampler.outside
    cpu = np.zeros((len(plans), len(labels)), np.int64)      # per rank and op type: thread CPU ns
    for t, plan in enumerate(plans):
        for st in plan.steps:
            def labelled(*a, _fn=st.fn, _t=t, _k=index[st.node.op]):
                where[_t] = _k
                c0 = time.thread_time_ns()
                try:
                    return _fn(*a)
                finally:
                    cpu[_t, _k] += time.thread_time_ns() - c0
                    where[_t] = outside
            labelled.__dict__.update(getattr(st.fn, "__dict__", {}))   # (a step's marks: a pad's ``rows_padded``)
            st.fn = labelled
        plan.runner = None          # the generated runner binds the step functions: made again
    fn(), fn()                      # (the second run records the plans' nogil segments, which then compile)
    jit.wait_for_compiles()
    segment_call, rank_of = nogil_segments.Segment.__call__, {id(plan): t for t, plan in enumerate(plans)}

    def labelled_segment(seg, *a):
        t = rank_of.get(id(seg.plan))
        if t is None:
            return segment_call(seg, *a)
        where[t] = index["segment"]
        c0 = time.thread_time_ns()
        try:
            return segment_call(seg, *a)
        finally:
            cpu[t, index["segment"]] += time.thread_time_ns() - c0
            where[t] = outside
    nogil_segments.Segment.__call__ = labelled_segment
    cpu[:] = 0
    c0 = _rank_cpu(world, ranks, inline)
    sampler.start()
    s0 = gil_sampler.switches()
    for _ in range(steps):
        fn()
    s1 = gil_sampler.switches()
    sampler.stop()
    nogil_segments.Segment.__call__ = segment_call
    c1 = _rank_cpu(world, ranks, inline)
    held, share = sampler.held_ms(steps), sampler.fractions()
    # per op type: [wall ms/step holding the GIL, share of the op's samples holding it, thread CPU ms/step]
    return [{"rank": i, "thread_cpu_ms": round((b - a) / steps * 1e3, 3), "gil_held_ms": round(sum(h.values()), 3),
             "gil_handoffs_per_step": round((s1 - s0) / steps, 1),      # the process's, all threads
             "per_op_held_share_cpu": {op: [ms, f.get(op), round(float(cpu[i, index[op]]) / steps / 1e6, 3)
                                            if op in index else None]
                                       for op, ms in sorted(h.items(), key=lambda kv: -kv[1])}}
            for i, (h, f, a, b) in enumerate(zip(held, share, c0, c1))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--all-cores", action="store_true")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--eager", action="store_true", help="also the eager global row")
    ap.add_argument("--ablation", action="store_true", help="the planned step without bucketing / passes")
    ap.add_argument("--variants", default="", help="the ablation's variants to run, comma-separated (default all)")
    ap.add_argument("--no-main", action="store_true", help="skip the main row (an ablation or decomposition alone)")
    ap.add_argument("--decompose", action="store_true",
                    help="one device at the global and the per-rank batch, independent ranks, the planned step")
    ap.add_argument("--pipeline", action="store_true")
    ap.add_argument("--micro-batches", type=int, default=4)
    ap.add_argument("--optimizer", choices=sorted(OPTIMIZERS), default="sgd",
                    help="the MLP's optimizer (sgd: the issue's benchmark; adam/momentum: ZeRO-1 updates)")
    ap.add_argument("--gil", action="store_true",
                    help="per rank of the planned step: ms per step holding the GIL, per op type (gil_sampler.py)")
    ap.add_argument("--meeting", action="store_true",
                    help="CPU µs of World.run with an empty job (the per-step meeting alone)")
    ap.add_argument("--controller", action="store_true",
                    help="the controller's CPU µs per planned step outside the first rank's plan")
    ap.add_argument("--half-batch-worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    global OPTIMIZER
    OPTIMIZER = args.optimizer
    warnings.simplefilter("ignore")
    if args.half_batch_worker:
        return half_batch_worker(args.batch)
    from tensorweave.distribute.ranks import default_world
    from tensorweave.kernels import threads
    from tensorweave.kernels.cpu import jit
    world, ranks = default_world(), list(range(args.ranks))
    placement = tw.placement("cpu", ranks=ranks)
    load0 = os.getloadavg()[0]
    local_fn, dp_fn = tw.function(make(None, args.batch)), tw.function(make(placement, args.batch))
    rows = []
    if args.all_cores:
        local_fn(), dp_fn(), local_fn(), dp_fn()    # (the second runs record nogil segments)
        jit.wait_for_compiles()
        rows.append(compare("planned_data_parallel_mlp_vs_all_cores", local_fn, dp_fn, args, world, ranks,
                            {"one_device_threads": "default (all cores)"}))
    threads.set_inter_op_slots(1)
    with threadpool_limits(1):
        local_fn(), dp_fn(), local_fn(), dp_fn()    # (the second runs record nogil segments)
        jit.wait_for_compiles()
        if not args.no_main:
            rows.insert(0, compare("planned_data_parallel_mlp", local_fn, dp_fn, args, world, ranks))
        if args.ablation:
            rows.append(ablation(placement, args, world, ranks))
        if args.decompose:
            rows.append(decompose(placement, args, world, ranks))
        if args.meeting:
            rows.append(meeting(world, ranks, 2000, args.rounds))
        if args.controller:
            rows.append(controller(dp_fn, args.steps * 5, args.rounds))
        if args.eager:
            _one_thread_per_rank(world, ranks)
            local, glob = make(None, args.batch), make(placement, args.batch)
            rows.append(compare("data_parallel_mlp", local, glob, args, world, ranks, inline=False))
        from tensorweave.distribute import calibrate, planner
        cal = calibrate.measure()
    load1 = os.getloadavg()[0]
    cpu_model = cpu_id()
    for row in rows:
        row["load"] = [round(load0, 2), round(load1, 2)]
        row["optimizer"], row["cpu"] = args.optimizer, cpu_model
        print(json.dumps(row), flush=True)
    print(json.dumps({"calibration": {"gflops_per_s": round(cal["flops_per_s"] / 1e9, 1),
                                      "copy_gb_per_s": round(cal["bytes_per_s"] / 1e9, 1),
                                      "flops_per_byte": round(cal["flops_per_byte"], 2),
                                      "planner_flops_per_byte": planner.FLOPS_PER_BYTE}}), flush=True)
    if args.profile:
        with threadpool_limits(1):
            half = tw.function(make(None, args.batch // args.ranks))
            half()
            jit.wait_for_compiles()
            for name, fn in ((f"one_device_b{args.batch}", local_fn), (f"one_device_b{args.batch // args.ranks}", half),
                             (f"data_parallel_b{args.batch}", dp_fn)):
                for i, table in enumerate(profile(fn, args.steps)):
                    print(json.dumps({"profile": name, "plan": i, "ms_per_step": {
                        "wall": round(sum(v[0] for v in table.values()), 3),
                        "cpu": round(sum(v[1] for v in table.values()), 3)},
                        "ops": {op: {"wall": v[0], "cpu": v[1], "n": v[2]} for op, v in table.items()}}), flush=True)
    if args.gil:
        with threadpool_limits(1):
            gil_fn = tw.function(make(placement, args.batch))
            gil_fn()
            jit.wait_for_compiles()
            for row in gil_held(gil_fn, args.steps, world, ranks) or [{"gil": "record not found"}]:
                print(json.dumps({"gil": "planned_data_parallel_mlp", "load": round(os.getloadavg()[0], 2), **row}),
                      flush=True)
    if args.pipeline:
        with threadpool_limits(1):
            one = max(measure(make(None, args.batch), args.steps)[0] for _ in range(args.rounds))
            pipe, step = make_pipeline(args.batch, args.micro_batches)
            piped = [steps_per_s(step, args.steps) for _ in range(args.rounds)]
        print(json.dumps({"row": "pipelined_mlp", "batch": args.batch, "stages": 2,
                          "micro_batches": args.micro_batches, "schedule": "1f1b",
                          "bubble_fraction": round(pipe.bubble_fraction, 3),
                          "one_device_steps_s": round(one, 2), "pipelined_steps_s": round(max(piped), 2),
                          "ratio": round(max(piped) / one, 2)}), flush=True)


if __name__ == "__main__":
    main()
