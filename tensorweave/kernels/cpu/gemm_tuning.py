"""Which GEMM library runs a product, chosen by timing both on this machine, per shape class,
and remembered on disk.

Why: MKL's GEMM is 10-40 % faster than OpenBLAS on Intel's small-batch shapes but runs at less
than half OpenBLAS's speed on AMD EPYC (2048x2048: 209 against 457 GFLOP/s), and which one wins
also depends on the shape. So the first product of a *shape class* (M, N, K bucketed by powers of
two, the dtype, the operands' transpose flags) runs a few times on each library, interleaved
(so a burst of load from other processes hits both), and the class keeps the faster one by the
median. The incumbent (MKL, the old default) is kept unless the other is at least
:data:`MARGIN` faster by the median *and* by the fastest call: on a noisy machine a coin flip
between equals would only add churn. A timing whose median and fastest call disagree about the
winner (other processes' load came and went while it ran), or one made while the machine was
busy (:func:`quiet`), is not *settled*: it is used for this process only (the incumbent where
median and fastest call disagree), and the next process measures again rather than keep a
choice made in a burst of noise on disk for good.

Each entry keeps what it was timed under (:func:`conditions`: load average, other processes'
runnable threads, the samples' spread). One whose samples spread, or which other processes' threads
ran beside, is *noisy*: it stands, but the next quiet process times it again (a few ms, once per
process, at most :data:`MAX_RETIMES` times; :meth:`Tuner.backend`). Why: the cache this project's
2-vCPU Xeon had accumulated over sessions kept such timings as settled (MKL's two threads at
7,574 µs against 875 on one for a 128-stack, a neighbour's burst under a load average of 0.9) and
its transformer step cost 30 ms of CPU against 23 with a file timed that hour (issue 18, tune25).

The same file keeps *thresholds* measured once per machine: ``serial-ways:<dtype>``, the product
size under which one GEMM thread beats all of them (:func:`serial_threshold`), and
``split-pass:bytes`` (``split_passes.py``), each kept once walks of two processes agree
(:meth:`Tuner.threshold`, :func:`agree`), a walk counting only where nothing else used the CPUs
while it ran (:class:`Watch`); one kept at its ladder's top is walked again by later quiet
processes.

Choices live in one JSON file (``$TW_TUNING_CACHE``, else ``$XDG_CACHE_HOME/tensorweave/`` or
``~/.cache/tensorweave/gemm-tuning.json``), keyed by the CPU model, the core count and both
libraries' versions: a file written elsewhere, corrupt, or of another format is ignored (and
replaced on the next write), never trusted; it is plain JSON, never pickled. Writes go to a
temporary file renamed over the old one, so a reader never sees half a file; two processes
tuning at once may drop each other's newest entries (they are re-measured, a few ms).

>>> from tensorweave.kernels.cpu import gemm_tuning
>>> gemm_tuning.shape_class(128, 512, 784, "float32", False, True)
'float32:NT:8,10,10'
"""
import json
import os
import platform
import re
import tempfile
import threading
import time

#: the other library must be this much faster (by median) to displace the incumbent
MARGIN = 0.10
#: timed samples per library: at least MIN_CALLS, more while the tuning stays under BUDGET_S
MIN_CALLS, MAX_CALLS, BUDGET_S = 3, 7, 0.02
#: a timed sample is a block of consecutive calls of one candidate lasting about BLOCK_S (one call
#: where a call is longer; at most MAX_REPS), its mean per call: a single call of a small product
#: (a few µs) is decided by one thread wake-up or one interrupt, a block's mean is not
BLOCK_S, MAX_REPS = 1e-4, 64
#: two measurements of a threshold agree when within this factor of each other (:func:`settle_when_two_agree`)
AGREE_FACTOR = 4
#: quiet processes whose walk of a threshold disagreed with the one before, after which the default stands
MAX_TRIES = 4
#: the machine is not quiet while the hypervisor takes more than this share of its CPUs' time
#: (:func:`stolen`), over at least MIN_TICKS clock ticks of all CPUs together (0.1 s on two)
MAX_STEAL, MIN_TICKS = 0.10, 20
STAT_FILE = "/proc/stat"
#: ``/proc/stat``'s clock ticks per second (``USER_HZ``)
TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
#: its fourth field: runnable threads now / all threads (a few bytes to read, against /proc/stat's kilobytes)
LOADAVG_FILE = "/proc/loadavg"
#: the cache's format: 2 adds each timing's conditions (:func:`conditions`); a file of another
#: format is ignored and its classes timed again, not misread
FORMAT = 2
#: a timing is *noisy* where a candidate's median sample exceeds its fastest by more than this
#: share (:func:`spread`), or other processes' threads were runnable as it began
#: (:func:`others_running`): kept, but timed again by the next quiet process (:meth:`Tuner.backend`)
MAX_SPREAD = 0.5
#: runnable threads of other processes, per core, above which the machine is not quiet (0 on two cores)
MAX_OTHERS_PER_CORE = 0.25
#: quiet processes that may time a noisy entry again before it stands for the machine
MAX_RETIMES = 3
#: ``TW_TUNING_RUNQUEUE=0``: other processes' runnable threads are not looked at (:func:`others_running`
#: is 0; the load average and steal alone say :func:`quiet`), nor their CPU time during a walk
#: (:class:`Watch`): where ``/proc/loadavg`` and ``/proc/stat`` count a whole host (a container), and in
#: the test suite, whose choices must not depend on its neighbours
RUNQUEUE = os.environ.get("TW_TUNING_RUNQUEUE", "1").strip() != "0"
INCUMBENT = "mkl"
#: sides of the square products timed for a serial threshold (32 K .. 16.8 M multiply-adds)
SERIAL_LADDER = (32, 48, 64, 96, 128, 192, 256)
#: the one-thread threshold where two walks disagree: the ladder's middle rung, 128^3 (2.1 M)
SERIAL_DEFAULT = SERIAL_LADDER[len(SERIAL_LADDER) // 2 + 1] ** 3


def shape_class(m, n, k, dtype, trans_a, trans_b, count=1):
    """The bucket a product's timing stands for: ``dtype:flags:log2 buckets of M,N,K``, and of the
    number of products for a stack of them (``count`` > 1: ``...,b<bucket>``)."""
    flags = ("T" if trans_a else "N") + ("T" if trans_b else "N")
    stack = f",b{count.bit_length()}" if count > 1 else ""
    return f"{dtype}:{flags}:{m.bit_length()},{n.bit_length()},{k.bit_length()}{stack}"


def cpu_model():
    """The CPU's model string (``/proc/cpuinfo``'s model name where there is one)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(("model name", "Model", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


#: the instruction-set extensions that change which kernels a library runs (and so which choice wins)
ISA_FLAGS = ("avx512f", "avx512_bf16", "amx_tile", "avx2", "fma", "asimd", "sve")


def cpu_generation(cpuinfo="/proc/cpuinfo"):
    """What tells two CPUs with one model string apart: the x86 family/model numbers and the vector
    extensions present (virtual machines often report only "AMD EPYC" for a Zen 3 without
    AVX-512 and a Zen 4 with it, whose fastest kernels differ). ``""`` where nothing is known.

    >>> isinstance(cpu_generation(), str)
    True
    """
    fields = {}
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    break                                   # the first processor's block is enough
                name, _, value = line.partition(":")
                fields.setdefault(name.strip(), value.strip())
    except OSError:
        return ""
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    parts = [f"{k}={fields[k]}" for k in ("cpu family", "model", "CPU implementer", "CPU part") if k in fields]
    parts += [f for f in ISA_FLAGS if f in flags]
    return " ".join(parts)


#: the environment variables that set the BLAS libraries' thread counts (MKL's, OpenBLAS's, and
#: OpenMP's, which both read where their own is unset)
THREAD_VARIABLES = ("MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")


def blas_threads(environ=os.environ):
    """The BLAS thread counts this process was started with (:data:`THREAD_VARIABLES` that are
    set), ``{}`` where none is: the libraries then take one thread per core.

    Why in the machine key: a class's ``mkl`` candidate runs on MKL's own threads, so a process
    started with ``MKL_NUM_THREADS=1`` on two cores timed it on one thread and kept it in the file
    every two-thread process reads (its class name counts the runtime's split parts, not MKL's).
    Read from the environment, not the libraries: a process holding its BLAS at one thread for a
    moment (``threads.single_threaded_blas``, a split's blocks) when its tuner is made would
    otherwise key the file by that moment.

    >>> blas_threads({"OMP_NUM_THREADS": " 1", "HOME": "/root"})
    {'OMP_NUM_THREADS': '1'}
    """
    return {name: environ[name].strip() for name in THREAD_VARIABLES if name in environ}


def machine_key(versions):
    """What a cached choice is only valid for: CPU model and generation, core count, library
    versions, and the BLAS thread counts set by the environment (:func:`blas_threads`; only where
    set, so the key of a process with the libraries' defaults is that of the files written before)."""
    key = {"cpu": cpu_model(), "generation": cpu_generation(), "cores": os.cpu_count() or 0,
           "versions": dict(sorted(versions.items()))}
    threads = blas_threads()
    if threads:
        key["blas_threads"] = threads
    return key


def cache_path():
    """``$TW_TUNING_CACHE``, else ``<user cache dir>/tensorweave/gemm-tuning.json``."""
    explicit = os.environ.get("TW_TUNING_CACHE")
    if explicit:
        return explicit
    return os.path.join(user_cache_dir(), "gemm-tuning.json")


def sibling_path(name):
    """``name`` in the GEMM tuning file's folder: where the other choices' caches live, so one
    ``$TW_TUNING_CACHE`` moves them all (``sibling_path("conv-tuning.json")``)."""
    return os.path.join(os.path.dirname(os.path.abspath(cache_path())), name)


def user_cache_dir():
    """``<$XDG_CACHE_HOME or ~/.cache>/tensorweave``: where per-machine caches go."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tensorweave")


def quiet():
    """Whether the machine is quiet enough for a timing to be kept on disk: its load average
    (last minute) under its core count, no other process's thread runnable beyond
    :data:`MAX_OTHERS_PER_CORE` *now* (:func:`others_running`: the minute's average lags a burst;
    issue 18 tune25: a fresh file timed at load 0.9 kept MKL's two threads at 7,574 µs against
    875 on one thread: a neighbour's burst, by its signature), and the hypervisor
    not taking the CPUs (:func:`stolen`).
    A timing under a heavier load holds for the process that made it only: other processes'
    threads decide it (two MKL threads lost to one on every product up to 256x256x256 at load 14
    on two cores, where a quiet machine's crossover is far lower), and it would otherwise stand
    for the machine for good."""
    try:
        calm = os.getloadavg()[0] < (os.cpu_count() or 1)
    except (OSError, AttributeError):   # no load average (not Unix)
        calm = True
    return calm and not crowded() and not stolen()


def crowded():
    """Whether other processes' runnable threads (:func:`others_running`) exceed
    :data:`MAX_OTHERS_PER_CORE` of the cores right now."""
    return others_running() > MAX_OTHERS_PER_CORE * (os.cpu_count() or 1)


def others_running():
    """Runnable threads of other processes at this moment: the runnable count of
    ``/proc/loadavg`` less this process's threads in state R (0 where there is no such file).
    A few µs where nothing else runs (the caller's own thread is the one runnable). 0 under
    :data:`RUNQUEUE` off.

    >>> others_running() >= 0
    True
    """
    if not RUNQUEUE:
        return 0
    try:
        with open(LOADAVG_FILE, "rb") as f:
            found = re.match(rb"\S+ \S+ \S+ (\d+)/", f.read())
    except OSError:
        return 0
    running = int(found.group(1)) if found else 0
    if running <= 1:
        return 0
    mine = 0
    try:
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue                # the thread ended meanwhile
            mine += stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3] == b"R"
    except OSError:
        mine = 1
    return max(0, running - max(mine, 1))


def spread(times):
    """The largest share by which a candidate's median sample exceeds its fastest one, over
    ``{backend: [seconds]}``: 0 where each candidate's samples agree.

    >>> spread({"a": [1.0, 1.1, 1.2], "b": [2.0, 4.0, 4.0]})
    1.0
    """
    return max((_median(ts) / min(ts) - 1 if min(ts) > 0 else 0.0 for ts in times.values() if ts), default=0.0)


def conditions(times, others_before):
    """What a timing was made under, saved with its entry: the load average, other processes'
    runnable threads before it (``others``; after it :func:`quiet` decides whether it is kept),
    the samples' :func:`spread`, and ``noisy`` where the spread or the others make it doubtful.

    >>> conditions({"a": [1.0, 1.0, 1.0]}, 0)["noisy"], conditions({"a": [1.0, 2.0, 2.0]}, 0)["noisy"]
    (False, True)
    """
    try:
        load = round(os.getloadavg()[0], 2)
    except (OSError, AttributeError):
        load = None
    share = round(spread(times), 3)
    noisy = share > MAX_SPREAD or others_before > MAX_OTHERS_PER_CORE * (os.cpu_count() or 1)
    return {"load": load, "others": others_before, "spread": share, "noisy": bool(noisy)}


def spare_core():
    """Whether a core is to spare besides the caller's: load average under the core count less
    one (and :func:`stolen` false). Threshold walks, which time one thread against every core's,
    ask for it as well as :func:`quiet`: on two cores at load 1.0-2.0 two processes' walks agreed
    on 33.5 M multiply-adds, at load 0.6-0.8 on 0.88-2.1 M (issue 18, session 16)."""
    try:
        return os.getloadavg()[0] < (os.cpu_count() or 1) - 1 and not stolen()
    except (OSError, AttributeError):
        return not stolen()


def _cpu_ticks():
    """``/proc/stat``'s ``cpu`` line: user nice system idle iowait irq softirq steal, in clock
    ticks of all CPUs together since boot, or None where there is no such file."""
    try:
        with open(STAT_FILE, "rb") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if len(fields) < 9 or fields[0] != b"cpu":
        return None
    return [int(v) for v in fields[1:9]]


def _cpu_jiffies():
    """``(total, steal)``: the CPUs' time and the part the hypervisor gave other guests, in clock
    ticks since boot (``/proc/stat``'s ``cpu`` line), or None where there is no such file."""
    ticks = _cpu_ticks()
    return None if ticks is None else (sum(ticks), ticks[7])


def busy_seconds():
    """The CPUs' busy time since boot, all CPUs together, in seconds: ``/proc/stat``'s ticks but
    idle and iowait (steal counts: the hypervisor's other guests had the CPU), or None where there
    is no such file. Counted in clock ticks, so any interval's figure is off by up to one tick
    per CPU (:func:`tick_error`)."""
    ticks = _cpu_ticks()
    return None if ticks is None else (sum(ticks) - ticks[3] - ticks[4]) / TICKS_PER_S


def tick_error():
    """Seconds by which an interval's :func:`busy_seconds` may be off: one clock tick per CPU."""
    return (os.cpu_count() or 1) / TICKS_PER_S


def stolen():
    """Whether the hypervisor took more than :data:`MAX_STEAL` of the CPUs' time since the
    previous sample (the one before this call, at least :data:`MIN_TICKS` ago; the first is taken
    at import). Why: inside a virtual machine another guest can take the cores while the load
    average stays low (issue 18, sessions 18-19: 8-43 % steal at load under 1.3, every framework
    2-4x slower), and a timing then measures the other guest. No steal counter (not Linux): False.

    >>> stolen() in (True, False)
    True
    """
    now = _cpu_jiffies()
    last = _steal["last"]
    if now is None:
        return False
    if last is None or now[0] < last[0]:
        _steal["last"] = now
    elif now[0] - last[0] >= MIN_TICKS:
        _steal["busy"] = now[1] - last[1] > MAX_STEAL * (now[0] - last[0])
        _steal["last"] = now
    return _steal["busy"]


_steal = {"last": _cpu_jiffies(), "busy": False}     # the previous /proc/stat sample, the verdict since


def _clock():
    return time.perf_counter()


def _process_clock():
    return time.process_time()


#: a walk is disturbed where the rest of the machine (other processes, the hypervisor's other
#: guests) used more than this share of one core while it ran, beyond :func:`tick_error`
MAX_OTHERS_SHARE = 0.25


class Watch:
    """Whether other processes used the CPUs while a walk ran (:meth:`disturbed`): one of its looks
    (:meth:`look`, after every timed round) found another process's thread runnable (:func:`crowded`,
    two reads in a row), or the CPUs' busy time over the walk (:func:`busy_seconds`) exceeded this
    process's own CPU time by more than :data:`MAX_OTHERS_SHARE` of the walk's wall time, beyond
    :func:`tick_error`. Under ``TW_TUNING_RUNQUEUE=0`` other processes are not looked at
    (:data:`RUNQUEUE`): never disturbed.

    Why during the walk, not only before and after it (:func:`quiet`, :func:`spare_core`): a walk
    times one thread against every core's, and another process on the other core for part of it
    makes the threads lose at the rungs it overlaps. On the AMD EPYC of issue 18 session 22 walks
    made while a benchmark's processes ran ended at the ladder's top (threads slower at every
    rung) on a machine that looked quiet before and after, and two such walks settled the
    one-thread threshold there: every product of the mlp and the encoder ran on one core.

    >>> watch = Watch()
    >>> watch.look(); watch.disturbed() in (True, False)
    True
    """

    def __init__(self):
        self.crowded = False
        self.others_ms = None
        self.start = (_clock(), _process_clock(), busy_seconds())

    def look(self):
        """Notes whether another process's thread is runnable now (a few µs where none is): seen
        by two reads in a row, because a look comes right as the round's own threads (the split's
        helper, MKL's spinning worker) go to sleep, and one of them runnable in ``/proc/loadavg``
        but asleep by the time this process's threads are read counts as another process's."""
        self.crowded = self.crowded or crowded() and crowded()

    def disturbed(self):
        """Whether the rest of the machine used the CPUs since the watch began (see the class);
        leaves the CPU seconds it used, in ms, in ``others_ms`` (None without ``/proc/stat``)."""
        if not RUNQUEUE:
            return False
        self.look()
        busy, wall, own = busy_seconds(), _clock() - self.start[0], _process_clock() - self.start[1]
        if busy is None or self.start[2] is None:
            return self.crowded
        others = busy - self.start[2] - own
        self.others_ms = round(others * 1e3, 1)
        return self.crowded or others > MAX_OTHERS_SHARE * wall + tick_error()


_timing = threading.local()      # .clock, .reps: this thread's measure() clock and block size; .watch: its walk's look


def _time_call(backend, run):
    """Seconds one ``run()`` of ``backend`` takes (tests replace this to fake a faster one), by
    the clock :func:`measure` was given (wall time unless told otherwise): the mean of a block of
    the block size :func:`measure` set for ``backend`` (one call where none is set)."""
    clock = getattr(_timing, "clock", None) or _clock
    reps = getattr(_timing, "reps", 1)
    t0 = clock()
    for _ in range(reps):
        run()
    return (clock() - t0) / reps


def block_reps(seconds):
    """Calls of ``seconds`` each that fill one timed block (:data:`BLOCK_S`): 1 .. :data:`MAX_REPS`.

    >>> block_reps(1e-3), block_reps(2e-5), block_reps(0.0)
    (1, 5, 64)
    """
    return max(1, min(MAX_REPS, int(-(-BLOCK_S // seconds)) if seconds > 0 else MAX_REPS))


def _median(xs):
    xs = sorted(xs)
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else 0.5 * (xs[mid - 1] + xs[mid])


def measure(runners, clock=None):
    """``{backend: [seconds of each timed call]}`` of each runner in ``runners``
    (``{backend: callable}``), after one untimed warm-up each (first-call costs: thread
    start-up, page faults), timed in interleaved rounds; inside a :func:`serial_threshold` walk on
    this thread, its :meth:`Watch.look` after each round.

    ``clock``: what a call is timed by (default wall time). Candidates that all run on the calling
    thread alone are timed by ``time.thread_time``: the CPU time of this thread does not grow
    while other processes hold the core, so a preemption in one candidate's call does not make
    it lose (on 2 cores at load 15-20 the same one-thread product read 0.66 or 26 ms of wall
    time from one call to the next).

    Each timed block follows an untimed lead-in call of the same candidate (its threads awake, its
    operands in cache: a pool idle since the warm-up pays its wake-up there, not in the block): a
    call timed right after another candidate's starts while that library's idle workers still
    spin on the other core (OpenBLAS's ~2 ms, MKL's ``KMP_BLOCKTIME``), so the candidate that
    follows the longer spinner used to lose: on an Intel Xeon at load 2, MKL's threaded
    128x784 @ 784x512 read 93-124 GFLOP/s call by call against 174-182 in blocks of its own calls
    (``benchmarks/bench_gemm_backends.py --interleave call``). The lead-in is that block, at one
    extra call per timed one.

    Each timed sample is a block of consecutive calls (:data:`BLOCK_S`, sized by the candidate's
    first lead-in call) and counts as their mean: timed by single calls, the one-thread threshold
    came out anywhere from 0.88 to 16.8 M multiply-adds in six quiet processes (issue 18, session
    15), and at load 11 the one-thread / two-thread ratio of a 64^3 product spread 8.4x over ten
    measurements by single calls against 1.3x by blocks (session 16)."""
    tick = clock or _clock
    watch = getattr(_timing, "watch", None)
    call = {}               # seconds of a call: the warm-up's, then the first lead-in's
    for name, run in runners.items():
        t0 = tick()
        run()
        call[name] = tick() - t0
    times = {name: [] for name in runners}
    start = _clock()
    _timing.clock = clock
    try:
        for rounds in range(MAX_CALLS):
            if rounds >= MIN_CALLS and _clock() - start > BUDGET_S:
                break
            for name, run in runners.items():
                t0 = tick()
                run()           # lead-in: wakes this candidate's threads; the previous one's spinners meet it
                if rounds == 0:
                    call[name] = tick() - t0
                _timing.reps = block_reps(call[name])
                times[name].append(_time_call(name, run))
            if watch is not None:
                watch()                 # (between rounds: its few µs are in no timed block)
    finally:
        _timing.clock = None
        _timing.reps = 1
    return times


def _winner(summary, incumbent):
    best = min(summary, key=summary.get)
    if incumbent in summary and summary[best] > (1 - MARGIN) * summary[incumbent]:
        return incumbent
    return best


def pick(times, incumbent=INCUMBENT):
    """``(backend, settled)`` for ``{backend: [seconds]}``: the incumbent unless another is
    :data:`MARGIN` faster by the median and by the fastest call; settled when both agree."""
    by_median = _winner({name: _median(ts) for name, ts in times.items()}, incumbent)
    by_min = _winner({name: min(ts) for name, ts in times.items()}, incumbent)
    if by_median == by_min:
        return by_median, True
    return (incumbent if incumbent in times else by_median), False


def serial_threshold(runners_for, ladder=SERIAL_LADDER, work_of=lambda side: side ** 3):
    """``(work, settled)``: products of fewer than ``work`` multiply-adds should run on one thread.

    Why: a threaded GEMM hands work to its other threads and waits for them; for a small
    product that costs more than it saves (32x64 @ 64x192, a GRU step: 70 µs on two MKL
    threads against 54 on one, and the second thread's spinning doubles the CPU time), and on
    a busy machine each hand-off can wait for a descheduled thread. ``runners_for(side)`` gives
    ``{"serial": run, "threaded": run, ...}`` for a ``side``-cubed product (one or more threaded
    ways besides one thread); from the largest side down, the threshold falls to each side where
    any threaded way wins by :data:`MARGIN` (one thread
    is the incumbent: it also leaves the other core to the rest of the process). Where threads
    never win, every product up to twice the largest timed one runs on one thread.
    ``work_of(rung)``: the size a rung stands for (a product's multiply-adds by default;
    ``split_passes`` times elementwise passes by bytes).

    Settled where the rest of the machine left the CPUs alone while the walk ran (:class:`Watch`,
    looked at after every timed round); its CPU milliseconds are left for the caller
    (:func:`walk_others_ms`). A rung whose median and fastest call disagree stops the walk (one
    thread, the incumbent, keeps it) without unsettling it: that is the crossover's rung, where the
    ways are within noise of each other, so the walk's answer is good to that rung (two processes'
    walks one rung apart :func:`agree`). Before session 23 such a tie unsettled the walk and the
    :meth:`Tuner.threshold` of two processes counted it as a disagreement: the AMD EPYC's walks of
    64³ and 96³ spent :data:`MAX_TRIES` without settling.

    The walk's two ends, ``(threads won on every rung, threads won on none)``, are left for
    :meth:`Tuner.threshold` on the calling thread (:func:`walk_ends`): a threshold settled at one
    says the ladder did not reach the crossover.

    >>> walk = {side: {"serial": lambda: None, "threaded": lambda: None} for side in (2, 4)}
    >>> work, settled = serial_threshold(walk.get, ladder=(2, 4))
    >>> work in (8, 64, 128) and walk_ends()
    (8, 128)
    """
    work = 2 * work_of(ladder[-1])
    _timing.ends = (work_of(min(ladder)), work)
    watch = Watch()
    _timing.watch = watch.look
    try:
        for side in sorted(ladder, reverse=True):
            if pick(measure(runners_for(side)), incumbent="serial")[0] == "serial":
                break
            work = work_of(side)
    finally:
        _timing.watch = None
    settled = not watch.disturbed()
    _timing.others_ms = watch.others_ms
    return work, settled


def walk_others_ms():
    """CPU ms the rest of the machine used during the last :func:`serial_threshold` walk on this
    thread (:class:`Watch`), or None."""
    return getattr(_timing, "others_ms", None)


def walk_ends():
    """``(bottom, top)`` of the last :func:`serial_threshold` walk on this thread, or None."""
    return getattr(_timing, "ends", None)


def edge(value, ends):
    """``"bottom"`` or ``"top"`` where a threshold ``value`` is one of its walk's ``ends``
    (:func:`walk_ends`), else None: at the top, the threads lost on every rung (every product up to
    twice the largest rung runs on one thread); at the bottom, they won on every rung. Either way
    the crossover lies outside the ladder, which only the flag in the file then says (issue 18,
    session 21: the Xeon's file had ``stack-serial`` at the bottom and ``einsum-split`` at the top).

    >>> edge(64, (8, 64)), edge(8, (8, 64)), edge(27, (8, 64)), edge(8, None)
    ('top', 'bottom', None, None)
    """
    if not ends or value not in ends:
        return None
    return "top" if value == ends[1] else "bottom"


def agree(first, second, default, factor=AGREE_FACTOR):
    """``(value, settled)`` from two measurements ``(value, settled)`` (two walks of a threshold,
    two :func:`pick` s of a choice): where both settled and agree, their value, settled; otherwise
    ``default``, not settled. Numbers agree when within ``factor`` of each other and then give the
    larger (the incumbent's side: fewer products moved off it); anything else (a backend's name)
    agrees when equal.

    >>> agree((100, True), (300, True), 50), agree((100, True), (900, True), 50)
    ((300, True), (50, False))
    >>> agree(("mkl", True), ("numpy", True), "one"), agree(("mkl", True), ("mkl", False), "one")
    (('one', False), ('one', False))
    """
    (a, ok_a), (b, ok_b) = first, second
    if ok_a and ok_b:
        if isinstance(a, (int, float)) and isinstance(b, (int, float)):
            low, high = sorted((a, b))
            if high <= factor * low:
                return high, True
        elif a == b:
            return a, True
    return default, False


def settle_when_two_agree(measure_once, default, factor=AGREE_FACTOR):
    """``(value, settled, ms)``: ``measure_once()`` (``(value, settled)``: :func:`serial_threshold`'s
    walk, or :func:`pick` of a :func:`measure`) run twice in this process, settled where the two
    :func:`agree`; ``ms``: what the two runs cost. (:meth:`Tuner.threshold` compares walks of two
    *processes* instead: two walks of one process share its moment's load.)

    Why two: a walk is a few ms of timings, and one draw stood for the machine until the cache was
    deleted; the one-thread threshold of one quiet Intel Xeon came out 0.88, 2.1, 7.1 and 16.8 M
    multiply-adds in six fresh processes (issue 18, session 15). Two runs that agree are evidence
    of the machine; two that do not are evidence of noise.

    >>> draws = iter([(100, True), (300, True), (100, True), (900, True)])
    >>> [settle_when_two_agree(lambda: next(draws), 50)[:2] for _ in range(2)]
    [(300, True), (50, False)]
    """
    t0 = _clock()
    first, second = measure_once(), measure_once()
    ms = round((_clock() - t0) * 1e3, 2)
    return agree(first, second, default, factor) + (ms,)


def _retimes(entry, field="retimes"):
    """How many times quiet processes timed ``entry``'s class again (``field``: ``rewalks`` for a
    threshold walked again); 0 where none, :data:`MAX_RETIMES` where not a count."""
    count = entry.get(field, 0)
    return count if type(count) is int and count >= 0 else MAX_RETIMES


class Tuner:
    """Per-shape-class choices for one machine, loaded from and saved to ``path``.

    >>> import tempfile, os
    >>> folder = tempfile.TemporaryDirectory()
    >>> t = Tuner(os.path.join(folder.name, "t.json"), {"cpu": "x"}, {"mkl", "numpy"})
    >>> chosen = t.choose("c", {"mkl": lambda: None, "numpy": lambda: None})
    >>> chosen in ("mkl", "numpy") and t.backend("c") == chosen
    True
    >>> folder.cleanup()
    """

    def __init__(self, path, key, backends):
        self.path, self.key, self.backends = path, key, frozenset(backends)
        self.retimed = set()    # noisy classes this process has timed again (once each)
        self.rewalked = set()   # top-edge thresholds this process has walked again (once each)
        self.choices = self._read()
        self.thresholds = self._read("thresholds")

    def _file(self):
        """The file's contents when it is a valid cache of this machine, else None."""
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError, UnicodeDecodeError):
            return None
        if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("machine") != self.key:
            return None
        return data

    def _read(self, part="choices"):
        """The valid entries of the file's ``part`` (``choices``: shape class -> backend;
        ``thresholds``: name -> a non-negative int ``value``); ``{}`` for anything else."""
        entries = (self._file() or {}).get(part)
        if not isinstance(entries, dict):
            return {}
        if part == "thresholds":
            def valid(entry):
                value = entry.get("value")
                return type(value) is int and value >= 0
        else:
            def valid(entry):
                return entry.get("backend") in self.backends
        return {name: entry for name, entry in entries.items()
                if isinstance(name, str) and isinstance(entry, dict) and valid(entry)
                and entry.get("settled", True) is True}

    def _tries(self):
        """The file's unsettled thresholds left by quiet processes: ``{name: entry}``, ``walk`` the
        last one's walk (None where it did not settle in itself), ``tries`` how many walks
        disagreed with the one left before them."""
        entries = (self._file() or {}).get("thresholds")
        if not isinstance(entries, dict):
            return {}
        return {name: entry for name, entry in entries.items()
                if isinstance(name, str) and isinstance(entry, dict) and entry.get("settled") is False
                and type(entry.get("tries")) is int and entry["tries"] >= 0
                and (entry.get("walk") is None or type(entry["walk"]) is int and entry["walk"] >= 0)
                and type(entry.get("value")) is int and entry["value"] >= 0}

    def _write(self):
        """Saves the choices and thresholds atomically; a cache that cannot be written is skipped
        silently (read-only home): the choice still holds for this process."""
        def settled(entries):
            return {name: entry for name, entry in entries.items() if entry.get("settled", True)}
        tried = {name: entry for name, entry in self.thresholds.items() if "tries" in entry}
        data = {"format": FORMAT, "machine": self.key, "choices": {**self._read(), **settled(self.choices)},
                "thresholds": {**self._tries(), **tried, **self._read("thresholds"), **settled(self.thresholds)}}
        folder = os.path.dirname(os.path.abspath(self.path))
        try:
            os.makedirs(folder, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".gemm-tuning-", suffix=".tmp", dir=folder)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    json.dump(data, f, indent=1, sort_keys=True)
                os.replace(tmp, self.path)
            except BaseException:
                os.unlink(tmp)
                raise
        except OSError:
            pass

    def backend(self, cls):
        """The cached backend of shape class ``cls``, or None when it has not been tuned, or when
        it is due to be timed again: its entry was *noisy* (:func:`conditions`), timed again fewer
        than :data:`MAX_RETIMES` times, not yet by this process, and the machine is :func:`quiet`
        now (a few ms, once per process and class; the caller times it as a new class)."""
        entry = self.choices.get(cls)
        if entry is None:
            return None
        if entry.get("noisy") is True and cls not in self.retimed and _retimes(entry) < MAX_RETIMES and quiet():
            return None
        return entry["backend"]

    def choose(self, cls, runners, incumbent=INCUMBENT, clock=None, settle=True):
        """The backend for ``cls``: cached, or measured now with ``runners`` (each computes the
        product; the last one run leaves its result in place; ``clock`` as :func:`measure`'s)
        and saved. ``settle=False``: the caller knows a candidate was not timed at its steady
        speed (its compiled code not ready): the choice holds for this process only."""
        found = self.backend(cls)
        if found is not None:
            return found
        before = others_running()
        times = measure(runners, clock)
        return self.record(cls, times, incumbent, settle, before)

    def record(self, cls, times, incumbent=INCUMBENT, settle=True, others_before=0):
        """Keeps the :func:`pick` of ``{backend: [seconds]}`` for ``cls`` with its
        :func:`conditions`, on disk where it settled on a quiet machine (``settle``: see
        :meth:`choose`). Timing a noisy entry again spends one of its :data:`MAX_RETIMES`; where
        the new timing does not settle, the old entry stands (its choice, for this process too)."""
        choice, settled = pick(times, incumbent)
        return self.keep(cls, {"backend": choice, "settled": settled and settle and quiet()}, times, others_before)

    def keep(self, cls, entry, times, others_before=0):
        """Keeps ``entry`` (``backend``, ``settled``; more fields of the caller's) for ``cls`` with each
        candidate's median of ``times`` (``<backend>_us``) and the :func:`conditions` it was timed
        under, on disk where settled; returns the backend the class takes now. Where ``cls`` had a
        settled entry, this timing spends one of its :data:`MAX_RETIMES`, and an unsettled one
        leaves the old entry (its choice) standing. :meth:`record` keeps a :func:`pick`; a thin
        class's rounds (``gemm._thin_timing``) keep their own agreement the same way."""
        if entry["backend"] not in self.backends:
            # the file's reader drops such an entry: the class would be timed again in every process
            raise ValueError(f"tuning class {cls}: way {entry['backend']!r} is not one this tuner keeps "
                             f"({', '.join(sorted(self.backends))}); add it to the tuner's ways")
        old = self.choices.get(cls)
        self.retimed.add(cls)
        entry = {**entry, **{f"{name}_us": round(_median(ts) * 1e6, 1) for name, ts in times.items()},
                 **conditions(times, others_before)}
        if old is not None and old.get("settled", True):
            entry["retimes"] = _retimes(old) + 1
            if not entry["settled"]:
                entry = {**old, "retimes": entry["retimes"]}
        self.choices[cls] = entry
        if entry.get("settled", True):      # (an older file's entry standing may carry no field)
            self._write()
        return entry["backend"]

    def threshold(self, name, walk, default):
        """The cached threshold ``name``, or ``default`` until two quiet processes' walks
        (``walk()``: ``(value, settled)``) :func:`agree`: each quiet process walks once and leaves
        its walk in the file (``walk``, unsettled), and the first whose walk agrees with the one
        left there settles the threshold for the machine (saved with what its walk cost, ``ms``).
        Two processes, not two walks of one: in six fresh processes at load 2.0-2.4, two walks in
        each agreed every time yet settled on 0.88, 2.1 and 33.5 M multiply-adds (issue 18,
        session 16) — one process's walks share its moment's load.

        On a busy machine (not :func:`quiet`, or no :func:`spare_core`) nothing is timed: the
        process takes ``default`` (at load 12 on two cores one walk took 110-200 ms, its threaded
        calls waiting for descheduled threads, and its answer, threads losing everywhere, could not
        be kept anyway). A walk that does not settle (:func:`serial_threshold`'s: the rest of the
        machine used the CPUs while it ran) is no evidence: it is left out of the file and spends
        no try (a walk left records the others' CPU ms, ``others_ms``, where known). A threshold settled
        at an end of its walk's ladder is flagged there (``edge``, :func:`edge`); one at the top
        (threads lost on every rung, which load elsewhere also produces) is walked again by later
        quiet processes (:meth:`_walk_again`). Bounded: a walk that disagrees with the one left
        before counts a try (``tries``); after :data:`MAX_TRIES` of them the default stands for
        the machine and no process walks again (a cold process pays one walk, tens of ms, and only
        until the machine settles or gives up)."""
        entry = self.thresholds.get(name)
        if entry is not None:
            return self._walk_again(name, entry, walk)
        left = self._tries().get(name, {})
        tries, earlier = left.get("tries", 0), left.get("walk")
        walked = quiet() and spare_core() and tries < MAX_TRIES
        value, agreed, ms, ends, now, others_ms = default, False, 0.0, None, (None, False), None
        if walked:
            now, ends, ms, others_ms = self._walk(walk)
            if type(earlier) is int:
                value, agreed = agree((earlier, True), now, default)
        settled = agreed and quiet() and spare_core()
        entry = self.thresholds[name] = {"value": int(value), "settled": settled, "ms": ms}
        if settled and edge(value, ends):
            entry["edge"] = edge(value, ends)
        if walked and not agreed:
            entry["tries"] = tries + (type(earlier) is int and now[1])
            entry["walk"] = int(now[0]) if now[1] else earlier
            if others_ms is not None:
                entry["others_ms"] = others_ms
        if entry["settled"] or walked:
            self._write()
        return entry["value"]

    def _walk(self, walk):
        """``(walk(), its ends, ms, the others' CPU ms)`` (:func:`walk_ends`, :func:`walk_others_ms`:
        None for a walk that is no :func:`serial_threshold`)."""
        t0 = _clock()
        _timing.ends = _timing.others_ms = None
        now = walk()
        return now, walk_ends(), round((_clock() - t0) * 1e3, 2), walk_others_ms()

    def _walk_again(self, name, entry, walk):
        """The settled threshold ``entry``'s value, after walking it again where it lies at its
        ladder's top (``edge: "top"``), the machine is quiet with a core to spare, this process has
        not walked it again yet, and fewer than :data:`MAX_RETIMES` processes have (``rewalks``).
        Why: threads losing on every rung is also what load from other processes during the walks
        gives, and before session 23 nothing looked during a walk (:class:`Watch`): the AMD EPYC's
        file kept ``serial-ways:float32`` at the top from two walks made while a benchmark ran, and
        the mlp's and the encoder's products ran on one core. A settled walk that :func:`agree` s
        with the value confirms it; one that does not is left as ``challenger``, and the next such
        walk that agrees with the challenger settles both walks' value in its place. A disturbed
        walk changes nothing and spends nothing."""
        rewalks = _retimes(entry, "rewalks")
        if (entry.get("edge") != "top" or name in self.rewalked or rewalks >= MAX_RETIMES
                or not (quiet() and spare_core())):
            return entry["value"]
        self.rewalked.add(name)
        now, ends, ms, _ = self._walk(walk)
        if not (now[1] and quiet() and spare_core()):
            return entry["value"]
        again = {**entry, "rewalks": rewalks + 1}
        challenger = entry.get("challenger")
        if agree((entry["value"], True), now, None)[1]:
            again.pop("challenger", None)
        elif type(challenger) is int and agree((challenger, True), now, None)[1]:
            value = agree((challenger, True), now, None)[0]
            again = {"value": int(value), "settled": True, "ms": ms, "rewalks": rewalks + 1}
            if edge(value, ends):
                again["edge"] = edge(value, ends)
        else:
            again["challenger"] = int(now[0])
        self.thresholds[name] = again
        self._write()
        return again["value"]
