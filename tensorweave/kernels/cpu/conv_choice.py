"""Winograd or im2col for a 3x3 stride-1 convolution, planes or im2col for a few-channel one
(``conv_planes``): chosen by timing both on this machine, per shape class and per kind (forward,
input gradient, filter gradient), remembered on disk.

Why: which algorithm wins depends on the CPU and the shape. On the AMD EPYC (Zen 4) of
BENCHMARKS.md Winograd won every ResNet layer by 1.3-2.3x, but its transforms run one vector
loop per 6x6 window and channel row, so with few channels on a CPU with narrow vectors, or a
GEMM library much faster than the transforms, im2col + GEMM can win; hard-coding either is
tuning for one machine. So the first convolution of a class times both on a slice of its batch
(:data:`PROBE_IMAGES` images: a few ms, once per machine), interleaved, with
``gemm_tuning``'s rules: Winograd (the earlier default) stays unless im2col is
``gemm_tuning.MARGIN`` faster by the median and by the fastest call; a timing made while the
machine was busy, or whose median and fastest call disagree, holds for this process only.

A class is timed only once the Winograd transforms (and col2im) are compiled: their NumPy twins
answer while numba compiles in the background, and timing a twin would pick im2col for the
wrong reason; until then Winograd runs, as before, and nothing is recorded.

Choices live in ``conv-tuning.json`` next to the GEMM tuning file (``gemm_tuning.cache_path``),
keyed by the CPU model, cores and library versions (``gemm.machine_key``); plain JSON, checked
on read (``gemm_tuning.Tuner``). ``TW_CONV_WINOGRAD=0`` never uses Winograd, ``=1`` always
does where it applies (no timing); unset (or ``auto``) chooses by measurement. ``TW_CONV_PLANES``
likewise for planes against im2col (:func:`use_planes`), ``TW_CONV_POINTWISE`` for a 1x1
convolution as one GEMM (``conv_pointwise``) against im2col (:func:`use_pointwise`), and
``TW_CONV_STACKS`` for a Winograd tile's 36 products through NumPy against ``gemm.matmul``
(:func:`numpy_stacks`). Every candidate is timed by the
process's CPU time (all tile over the same threads; wall time on a shared machine measures the
neighbours), on its slice cut into tiles as the whole batch is (``conv_tiles.cut_as``): the slice's
own cut gave Winograd one-image tiles where the batch's hold three to eight, and im2col won classes
it loses in the step (issue 18, session 18: the ResNet's 16-channel input gradient and 64-channel
forward and input gradient, 1.2-1.7x slower by CPU on the whole batch). The cache's machine key carries
:data:`PROBE_METHOD`, so choices timed the earlier way are not read.

>>> from tensorweave.kernels.cpu import conv_choice
>>> conv_choice.shape_class("forward", 64, 32, 32, 16, 16, ((1, 1), (1, 1)))
'forward:n4,h6,w6,c5,o5,p1111'
"""
import functools
import os
import time

import numpy as np

from tensorweave.kernels import threads
from tensorweave.kernels.cpu import conv_tiles, gemm, gemm_tuning

MODE = os.environ.get("TW_CONV_WINOGRAD", "auto").strip().lower()
PLANES_MODE = os.environ.get("TW_CONV_PLANES", "auto").strip().lower()
POINTWISE_MODE = os.environ.get("TW_CONV_POINTWISE", "auto").strip().lower()
STACKS_MODE = os.environ.get("TW_CONV_STACKS", "auto").strip().lower()
KINDS = ("forward", "input", "filter")
#: images of the batch the two algorithms are timed on (per-image cost is what differs)
PROBE_IMAGES = 8
BACKENDS = ("winograd", "im2col", "planes", "pointwise", "gemm", "numpy")
#: how a class is timed, part of the cache's machine key: 2 = on a slice cut into tiles as its whole
#: batch, by process CPU time (session 18); entries without it were timed on the slice's own tiles
PROBE_METHOD = 2
_state = {"tuner": None}
_chosen = {}            # shape class -> backend, this process (settled or not)
_class_strings = {}     # (builder, its arguments) -> the class string (see _remembered)
#: class strings remembered (a process seeing ever new shapes builds the later ones per call)
CLASS_KEYS = 4096


def _remembered(build):
    """``build`` (a pure function of hashable arguments to a class string), its answers kept:
    every convolution asks for its class, and building the string took 4-12 µs of a batch-1
    convolution's ~270 (issue 18 session 17: ``planes_class`` 12.0 µs, thread CPU, load 6).
    Unhashable arguments (a list) build the string on every call."""
    @functools.wraps(build)
    def remembered(*args):
        key = (build, args)
        try:
            return _class_strings[key]
        except KeyError:
            pass
        except TypeError:
            return build(*args)
        got = build(*args)
        if len(_class_strings) < CLASS_KEYS:
            _class_strings[key] = got
        return got
    return remembered


@_remembered
def shape_class(kind, n, h, w, c, o, pads):
    """The bucket a timing stands for: the kind, log2 buckets of the batch up to
    :data:`PROBE_IMAGES` (a batch of one runs one tile on BLAS's threads, a larger one tiles on
    one thread each), of height, width and channels, and the padding."""
    flat = "".join(str(int(v)) for pair in pads for v in pair)
    batch = min(n, PROBE_IMAGES).bit_length()
    return f"{kind}:n{batch},h{h.bit_length()},w{w.bit_length()},c{c.bit_length()},o{o.bit_length()},p{flat}"


@_remembered
def planes_class(kind, n, sizes, c, o, ksize, pads, strides, dilations):
    """:func:`shape_class` for any rank, with the window's geometry (``conv_planes``'s copy
    depends on it): log2 buckets of the batch, sizes and output channels, the exact channels.

    >>> planes_class("filter", 64, (32, 32), 3, 16, (3, 3), ((1, 1), (1, 1)), (1, 1), (1, 1))
    'planes-filter:n4,s6x6,c3,o5,k3x3,st1x1,d1x1,p1111'
    """
    def joined(values):
        return "x".join(str(int(v)) for v in values)
    flat = "".join(str(int(v)) for pair in pads for v in pair)
    return (f"planes-{kind}:n{min(n, PROBE_IMAGES).bit_length()},s{joined(s.bit_length() for s in sizes)},"
            f"c{c},o{o.bit_length()},k{joined(ksize)},st{joined(strides)},d{joined(dilations)},p{flat}")


@_remembered
def pointwise_class(kind, n, sizes, c, o, strides):
    """:func:`shape_class` of a 1x1 convolution without padding (``conv_pointwise``): log2 buckets
    of the batch, sizes and channels, the exact strides.

    >>> pointwise_class("forward", 64, (32, 32), 16, 32, (2, 2))
    'pointwise-forward:n4,s6x6,c5,o6,st2x2'
    """
    sizes_ = "x".join(str(int(s).bit_length()) for s in sizes)
    return (f"pointwise-{kind}:n{min(n, PROBE_IMAGES).bit_length()},s{sizes_},c{c.bit_length()},"
            f"o{o.bit_length()},st{'x'.join(str(int(s)) for s in strides)}")


def cache_path():
    """``conv-tuning.json`` in the folder of the GEMM tuning file."""
    return gemm_tuning.sibling_path("conv-tuning.json")


def tuner():
    """This process's :class:`gemm_tuning.Tuner` of convolution algorithms (its file read on first use)."""
    if _state["tuner"] is None:
        _state["tuner"] = gemm_tuning.Tuner(cache_path(), {**gemm.machine_key(), "probe": PROBE_METHOD}, BACKENDS)
    return _state["tuner"]


def reset():
    """Forgets this process's choices and tuner (tests; a changed cache path)."""
    _state["tuner"] = None
    _chosen.clear()


def _compiled(kernels):
    """Whether every numba kernel in ``kernels`` has a compiled version (not its twin): a JIT
    compile, or loops built at install (``aot.attach``, which numba's ``overloads`` does not list)."""
    return all(getattr(kn, "overloads", None) or getattr(kn, "aot_signatures", None) for kn in kernels)


def use_winograd(kind, n, h, w, c, o, pads, runners, kernels=()):
    """Whether a convolution of this class runs Winograd. ``runners``: a function returning
    ``{"winograd": run, "im2col": run}`` (each computes the kind on a slice of the batch),
    called only when the class is timed; ``kernels``: the numba kernels the runners use, which
    must be compiled before a timing counts."""
    if MODE in ("0", "false", "off", "never"):
        return False
    if MODE in ("1", "true", "on", "always"):
        return True
    found = _faster(shape_class(kind, n, h, w, c, o, pads), runners, kernels, "winograd", n)
    return found in (None, "winograd")          # None: twins still answering, the earlier default


def use_planes(kind, n, sizes, c, o, ksize, pads, strides, dilations, runners, kernels=()):
    """Whether a few-channel convolution of this class runs by planes (``conv_planes``) rather
    than im2col (the incumbent: planes must be ``gemm_tuning.MARGIN`` faster); arguments as
    :func:`use_winograd`'s, ``runners`` returning ``{"planes": run, "im2col": run}``."""
    forced = _forced(PLANES_MODE)
    if forced is not None:
        return forced
    cls = planes_class(kind, n, sizes, c, o, ksize, pads, strides, dilations)
    return _faster(cls, runners, kernels, "im2col", n) == "planes"


def use_pointwise(kind, n, sizes, c, o, strides, runners):
    """Whether a 1x1 convolution without padding of this class runs as one GEMM over the batch
    (``conv_pointwise``) rather than by im2col (the incumbent: it must be ``gemm_tuning.MARGIN``
    faster); ``runners`` returns ``{"pointwise": run, "im2col": run}``. No compiled loops on
    either side (BLAS and NumPy copies), so a first call times at once."""
    forced = _forced(POINTWISE_MODE)
    if forced is not None:
        return forced
    return _faster(pointwise_class(kind, n, sizes, c, o, strides), runners, (), "im2col", n) == "pointwise"


def numpy_stacks(dtype, count, m, k, n, transposed=False):
    """Whether a Winograd tile's stack of ``count`` products ``[m, k] @ [k, n]`` (``transposed``:
    the left operand a transposed view) runs as ``np.matmul`` on the tiles' one-thread BLAS rather
    than ``gemm.matmul(..., one_thread=True)`` (the incumbent: NumPy must be
    ``gemm_tuning.MARGIN`` faster). Where ``gemm`` measured NumPy's OpenBLAS the faster library
    on one thread for the stack, both make the same call, and its checks and class look-ups cost
    ~30 µs a stack: 20-40 % of a 16-channel tile's 36 products (issue 18 session 20, thread CPU at
    load 13: 111 against 77 µs for 36 of 192x16 @ 16x16; the same bits)."""
    forced = _forced(STACKS_MODE)
    if forced is not None:
        return forced
    cls = (f"stacks:{np.dtype(dtype).char},b{count},m{m.bit_length()},k{k.bit_length()},n{n.bit_length()},"
           f"t{int(transposed)}")
    found = _chosen.get(cls)
    if found is None:
        with threads.single_threaded_blas():         # as in the tiles, where the stacks run
            found = _faster(cls, lambda: _stack_runners(dtype, count, m, k, n, transposed), (), "gemm", 1)
    return found == "numpy"


def _stack_runners(dtype, count, m, k, n, transposed):
    """``{"gemm": run, "numpy": run}``: a stack of random products of the class, each way."""
    rng = np.random.default_rng(m * n * k)
    a = rng.standard_normal((count, k, m) if transposed else (count, m, k)).astype(dtype)
    a = a.transpose(0, 2, 1) if transposed else a
    b = rng.standard_normal((count, k, n)).astype(dtype)
    out = np.empty((count, m, n), dtype)
    return {"gemm": lambda: gemm.matmul(a, b, out=out, one_thread=True), "numpy": lambda: np.matmul(a, b, out=out)}


def _forced(mode):
    """True/False where a ``TW_CONV_*`` switch forces a path, None where it is measured."""
    if mode in ("0", "false", "off", "never"):
        return False
    if mode in ("1", "true", "on", "always"):
        return True
    return None


def _faster(cls, runners, kernels, incumbent, n):
    """The backend of class ``cls``: this process's, the cache's, or timed now (process CPU time,
    the runners' slices cut into tiles as a batch of ``n``); None (nothing recorded) while a kernel
    in ``kernels`` is not compiled yet."""
    found = _chosen.get(cls)
    if found is None:
        found = tuner().backend(cls)
        if found is None:
            if not _compiled(kernels):
                return None
            with conv_tiles.cut_as(n):
                found = tuner().choose(cls, runners(), incumbent=incumbent, clock=time.process_time)
        _chosen[cls] = found
    return found
