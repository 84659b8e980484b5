"""Runs a kernel's work over tiles of the batch, side by side on the intra-op threads.

A convolution tiled over the batch (``conv_kernels``) does per tile an im2col copy, a GEMM
and maybe a col2im. With ``kernels.threads.intra_op_threads()`` > 1 (BLAS's thread count)
:func:`over_tiles` runs the tiles on that many threads, each calling BLAS single-threaded,
instead of one thread calling a threaded BLAS per tile: the copies run in parallel too, and
no tile waits on another thread inside BLAS. Under the executor's thread policy (heavy ops
side by side only when BLAS leaves cores free) the count never oversubscribes the cores.
The helper threads are the calling thread's runtime's (``Runtime.intra_op_pool``): each
in-process rank has its own, so one rank's tiles never wait in another rank's queue.

>>> import numpy as np
>>> out = np.zeros(10)
>>> def run(b0, b1, scratch):
...     out[b0:b1] = np.arange(b0, b1)
>>> over_tiles(10, 8, 32, run)   # 4 images per tile
>>> out.tolist()
[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]
"""
import contextlib
import itertools
import threading

import numpy as np

from tensorweave.core.context import current_runtime
from tensorweave.kernels import threads
from tensorweave.kernels.cpu import gemm

_here = threading.local()    # .serial: this thread's tiles run on it alone (see on_this_thread)


@contextlib.contextmanager
def on_this_thread():
    """Within: :func:`over_tiles` called on this thread runs every tile on this thread. For a
    kernel that already runs two pieces of work side by side on the intra-op threads
    (``conv_pair_kernels``): a piece's tiles must not queue behind it in the same pool."""
    was = getattr(_here, "serial", False)
    _here.serial = True
    try:
        yield
    finally:
        _here.serial = was


def over_tiles(n, per_image_bytes, tile_bytes, run, blas=True, share=None):
    """Calls ``run(b0, b1, scratch)`` for tiles ``b0:b1`` of a batch of ``n`` images, as many
    per tile as fit ``tile_bytes`` at ``per_image_bytes`` each (at least one); ``scratch`` is a
    dict for buffers reused by one thread's tiles (see :func:`buffer`).

    With several intra-op threads (BLAS's count) the tiles run on that many threads, each
    with single-threaded BLAS, claiming tiles one at a time: a threaded BLAS call syncs its
    threads once per block of the GEMM's inner dimension, and on a busy machine each sync can
    wait a scheduler time slice for a descheduled thread (the filter gradient, a long inner
    dimension, measured up to 50x slower that way), while here a late thread only delays
    its own tile. Whatever else ``run`` does (im2col copies, col2im) runs on the same threads.
    ``run`` must write disjoint outputs per tile (or keep per-tile partials), so that results
    do not depend on the thread count. ``blas=False`` (``run`` calls no BLAS: the batch norm's
    compiled passes) leaves BLAS's thread count alone: setting it and restoring it took ~25 µs
    of the calling thread per call through ``threadpoolctl`` (issue 18 session 19). ``share``: the
    threads to use, already at most one per core, instead of the intra-op count capped at the
    cores (``conv_batch1.over_bands``: the calling thread's share, ``gemm.threads_here``).

    A helper that has not started when this thread runs out of tiles is cancelled, not waited
    for: on a busy machine a woken helper often first runs a scheduler slice later, and this
    thread, having done every tile itself, then waited milliseconds for a helper with nothing
    left to do (a batch-1 layer's ~100 µs bands: 1.3 ms wall against 0.65 on one thread, load
    13, issue 18 pred25). A started helper may be running a tile: that one is waited for."""
    nb = max(1, min(n, tile_bytes // max(1, per_image_bytes)))
    starts = range(0, n, nb)
    # (one tile: no need to ask BLAS for its thread count, ~20 µs through threadpoolctl)
    # (inside gemm.blocks_here a product is out on the helper thread: the tiles stay here)
    nt = 1 if len(starts) <= 1 or getattr(_here, "serial", False) or gemm.inside_blocks_here() else \
        min(min(threads.intra_op_threads(), threads.cores()) if share is None else share, len(starts))
    if nt <= 1:
        scratch = {}
        for b0 in starts:
            run(b0, min(n, b0 + nb), scratch)
        return
    claims = itertools.count()   # next() on a count is atomic under the GIL

    def worker():
        scratch = {}
        i = next(claims)
        while i < len(starts):
            run(starts[i], min(n, starts[i] + nb), scratch)
            i = next(claims)
    with threads.single_threaded_blas() if blas else contextlib.nullcontext():
        pool = current_runtime().intra_op_pool()
        helpers = [pool.submit(worker) for _ in range(nt - 1)]
        worker()
        for h in helpers:
            if not h.cancel():      # started: it may be running a tile
                h.result()


def buffer(scratch, key, shape, dtype, fill=None, axis=0):
    """A ``shape`` view of a buffer kept in ``scratch``, reallocated when ``shape[axis]`` (the
    dimension that varies between tiles) outgrows it; ``fill``: its initial value."""
    buf = scratch.get(key)
    if buf is None or buf.shape[axis] < shape[axis]:
        buf = scratch[key] = np.empty(shape, dtype) if fill is None else np.full(shape, fill, dtype)
    return buf[(slice(None),) * axis + (slice(shape[axis]),)]
