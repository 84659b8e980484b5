"""How a convolution's batch is cut into tiles (``tiles.over_tiles``), and whether each tile's
GEMM then runs on one thread.

At least one tile per core whenever the batch allows: the tiles then run side by side, each with
its GEMM on one thread (``gemm.matmul(..., one_thread=True)``: MKL or OpenBLAS, whichever measured
faster on one thread for the product's shape class, cached per machine). Before, a batch whose
column buffers fit one tile (the ResNet's 1x1 stride-2 shortcuts: 64 images of 16x16x16 in
1 MB) ran as one GEMM on MKL's threads, whose thread hand-offs at an inner dimension of 16 took
2.5 ms where OpenBLAS on one thread took 0.18 (AMD EPYC, BENCHMARKS.md issue 18 session 11).
A batch of one image stays one tile: its GEMM keeps the size-measured threads of
``gemm.serial_work`` (batch-1 inference).

Several tiles per core (:data:`TILES_PER_CORE`, none under :data:`MIN_TILE_BYTES`): the
intra-op helper thread starts a little after the calling thread and claims tiles as it comes
free, so with one tile per core a late helper left the calling thread both tiles (the ResNet's
1x1 stride-2 shortcuts: 80 % of their CPU time on the calling thread; BENCHMARKS.md issue 18,
session 12), and finer tiles even out the last one's wait.

The cut depends on the cores the process may use, not on the thread setting, so results do not
change with ``tw.config.threading``. ``TW_CONV_ONE_THREAD=0`` restores the earlier behaviour
(tiles as the byte budget gives them, each GEMM's threads by its size), for comparisons.

A timing on a slice of a batch (``conv_choice``: 8 of the ResNet's 64 images) cuts its tiles as for
the whole batch (:func:`cut_as`): cut for 8 images, Winograd's tiles held one image where the batch's
hold three to eight (a 64-channel 8x8 layer: 36 GEMMs of 4 rows per tile instead of 32), and the
timing read 0.24 ms per image where the batch runs at 0.07, so im2col won classes it loses by 1.2-1.7x
in the step (issue 18, session 18).

>>> from tensorweave.kernels.cpu import conv_tiles
>>> conv_tiles.split(64, 16384, 1 << 20, cores=2)   # 64 images of 16 KB: 8 tiles of 8
(131072, True)
>>> conv_tiles.split(1, 16384, 1 << 20, cores=2)
(1048576, False)
"""
import contextlib
import os
import threading

from tensorweave.kernels import threads

ENABLED = os.environ.get("TW_CONV_ONE_THREAD", "1") != "0"
#: tiles per core a batch is cut into at least (when its images allow it) ...
TILES_PER_CORE = 4
#: ... unless tiles would hold fewer bytes than this (a tile's fixed costs: a claim, a GEMM call)
MIN_TILE_BYTES = 64 << 10
_timing = threading.local()     # .batch: the batch a timing on a slice of it stands for (cut_as)


@contextlib.contextmanager
def cut_as(n):
    """While inside, on this thread, a batch of fewer than ``n`` images (a timing's slice of a batch of
    ``n``) is cut into tiles of the size a batch of ``n`` gets, with one-thread GEMMs as there.

    >>> with cut_as(64):
    ...     split(8, 73728, 1 << 20, cores=2)      # tiles of 8 images, as in the batch of 64
    (589824, True)
    >>> split(8, 73728, 1 << 20, cores=2)          # alone: tiles of one image
    (73728, True)
    """
    saved = getattr(_timing, "batch", 0)
    _timing.batch = n
    try:
        yield
    finally:
        _timing.batch = saved


def batch(n):
    """``n``, or the whole batch a timing on ``n`` of its images stands for (:func:`cut_as`)."""
    return max(n, getattr(_timing, "batch", 0))


def split(n, per_image_bytes, tile_bytes, cores=None):
    """``(tile_bytes, one_thread)`` for ``over_tiles(n, per_image_bytes, tile_bytes, run)``: the
    tile size lowered so that a batch of ``n`` makes at least ``cores`` tiles, and
    :data:`TILES_PER_CORE` per core where tiles stay over :data:`MIN_TILE_BYTES` (never under one
    image), and whether there is more than one tile (then each tile's GEMM is one-threaded)."""
    if not ENABLED:
        return tile_bytes, False
    n = batch(n)
    cores = threads.cores() if cores is None else cores
    per_image_bytes = max(1, per_image_bytes)
    images = max(1, min(n, tile_bytes // per_image_bytes))
    if n >= 2 and cores >= 2:
        finer = max(-(-n // (cores * TILES_PER_CORE)), -(-MIN_TILE_BYTES // per_image_bytes))
        images = min(images, -(-n // cores), finer)
    return (images * per_image_bytes if n >= 2 else tile_bytes), images < n
