"""Whether the calling thread has its core to itself now: a one-thread call timed by the wall
clock and by the thread's own CPU clock, which agree only while no other process takes the core.

Why: a class's timed way (split over the intra-op threads, MKL's threads or one thread) is kept on
disk for the machine when ``gemm_tuning.quiet`` says the machine is quiet, and that reads the
one-minute load average, which lags a burst of other processes by tens of seconds. On this
project's 2-vCPU Xeon the file held ``threads:float32:NN:8,10,9,p2`` (encoder2_predict's Q/K/V
product, 128x256 @ 256x768) as "one thread" from timings of 0.96 ms on one thread against 5.75 on
MKL's two threads and 1.23 split — a product that takes ~0.3 ms on one quiet core: every later
process ran it on one core (issue 18, session 21, enc25). A call of the one-thread candidate just
before the timing shows such a burst directly: its wall time runs past its thread's CPU time
while the thread waits for its core. A timing that follows a probe which did not have its core is
used by this process and not kept (``gemm.timed_choice``).

``TW_OWN_CORE=0`` answers True without probing (the test suite pins it so: a timing's
settling must not depend on what else the machine runs).

>>> from tensorweave.kernels.cpu import own_core
>>> own_core.probe(lambda: sum(range(1000)), wall=iter([0.0, 1.0]).__next__, cpu=iter([0.0, 0.9]).__next__)
True
>>> own_core.probe(lambda: None, wall=iter([0.0, 2.0]).__next__, cpu=iter([0.0, 1.0]).__next__)
False
"""
import os
import time

#: wall time over thread CPU time above which the probe's thread waited for its core
FACTOR = 1.25
#: the probe calls ``run`` until this much wall time has passed (one call where a call is longer;
#: at most :data:`MAX_CALLS`): one short call is decided by a single timer interrupt
MIN_S, MAX_CALLS = 1e-3, 8


def probing():
    """Whether :func:`had_core` probes (``TW_OWN_CORE`` is not ``0``)."""
    return os.environ.get("TW_OWN_CORE", "1") != "0"


def had_core(run, factor=FACTOR, wall=time.perf_counter, cpu=time.thread_time):
    """:func:`probe`, or True without a call under ``TW_OWN_CORE=0``."""
    return not probing() or probe(run, factor, wall, cpu)


def probe(run, factor=FACTOR, wall=time.perf_counter, cpu=time.thread_time):
    """Whether ``run()`` (work on the calling thread alone) had the core: called until
    :data:`MIN_S` of wall time (at most :data:`MAX_CALLS` calls), its wall time at most ``factor``
    times the thread's CPU time. ``wall`` and ``cpu`` are the clocks (tests script them)."""
    w0, c0 = wall(), cpu()
    calls = 0
    while True:
        run()
        calls += 1
        w, c = wall() - w0, cpu() - c0
        if w >= MIN_S or calls >= MAX_CALLS:
            return w <= factor * c
