"""Freed host memory kept for the next training step instead of handed back to the OS.

glibc's malloc serves blocks above a moving threshold (at most 32 MiB) with fresh ``mmap``
pages and returns free space at the top of its heap to the OS. A training step allocates
and frees the same large activations and gradients every step, so every step page-faulted
them in again and the kernel zeroed them: 3,100 faults and 12-16 ms of system time per cnn
step (125 ms), none with the thresholds below. The cost is that up to
:data:`RETAINED_BYTES` of freed memory stays in the process, as frameworks' own caching
allocators keep theirs. ``TW_HOST_MEMORY_RETAIN_MB=0`` leaves malloc as it was.

>>> from tensorweave.runtime import host_memory
>>> host_memory.retain_freed_memory(0)     # 0: leave malloc's own policy
False
"""
import ctypes
import os

#: Free heap kept before malloc trims (the cnn step's transients are ~150 MB; 64 MB still
#: trimmed every step).
RETAINED_BYTES = 256 << 20
#: Blocks up to this size come from the heap (glibc's largest mmap threshold on 64-bit).
HEAP_BLOCK_LIMIT = 32 << 20

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def retain_freed_memory(nbytes=RETAINED_BYTES):
    """Keeps up to ``nbytes`` of freed memory in the heap (glibc only); returns whether set."""
    if nbytes <= 0:
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):   # not glibc
        return False
    trim = min(int(nbytes), 2 ** 31 - 1)        # mallopt takes a C int
    return bool(mallopt(_M_MMAP_THRESHOLD, HEAP_BLOCK_LIMIT)) and bool(mallopt(_M_TRIM_THRESHOLD, trim))


def configure_from_environment():
    """Applies ``TW_HOST_MEMORY_RETAIN_MB`` (default :data:`RETAINED_BYTES`) at import."""
    mb = os.environ.get("TW_HOST_MEMORY_RETAIN_MB")
    if mb is None:
        return retain_freed_memory(RETAINED_BYTES)
    try:
        nbytes = int(float(mb) * (1 << 20))
    except ValueError:
        raise ValueError(f"TW_HOST_MEMORY_RETAIN_MB must be a number of MiB (0: leave malloc alone), "
                         f"got {mb!r}") from None
    return retain_freed_memory(nbytes)
