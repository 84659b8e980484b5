"""Winograd or im2col for a 3x3 stride-1 convolution: chosen by timing both on this machine, per
shape class and per kind (forward, input gradient, filter gradient), remembered on disk.

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
does where it applies (no timing); unset (or ``auto``) chooses by measurement.

>>> from tensorweave.kernels.cpu import conv_choice
>>> conv_choice.shape_class("forward", 64, 32, 32, 16, 16, ((1, 1), (1, 1)))
'forward:n4,h6,w6,c5,o5,p1111'
"""
import os

from tensorweave.kernels.cpu import gemm, gemm_tuning

MODE = os.environ.get("TW_CONV_WINOGRAD", "auto").strip().lower()
KINDS = ("forward", "input", "filter")
#: images of the batch the two algorithms are timed on (per-image cost is what differs)
PROBE_IMAGES = 8
BACKENDS = ("winograd", "im2col")
_state = {"tuner": None}
_chosen = {}            # shape class -> backend, this process (settled or not)


def shape_class(kind, n, h, w, c, o, pads):
    """The bucket a timing stands for: the kind, log2 buckets of the batch up to
    :data:`PROBE_IMAGES` (a batch of one runs one tile on BLAS's threads, a larger one tiles on
    one thread each), of height, width and channels, and the padding."""
    flat = "".join(str(int(v)) for pair in pads for v in pair)
    batch = min(n, PROBE_IMAGES).bit_length()
    return f"{kind}:n{batch},h{h.bit_length()},w{w.bit_length()},c{c.bit_length()},o{o.bit_length()},p{flat}"


def cache_path():
    """``conv-tuning.json`` in the folder of the GEMM tuning file."""
    return os.path.join(os.path.dirname(os.path.abspath(gemm_tuning.cache_path())), "conv-tuning.json")


def tuner():
    """This process's :class:`gemm_tuning.Tuner` of convolution algorithms (its file read on first use)."""
    if _state["tuner"] is None:
        _state["tuner"] = gemm_tuning.Tuner(cache_path(), gemm.machine_key(), BACKENDS)
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
    cls = shape_class(kind, n, h, w, c, o, pads)
    found = _chosen.get(cls)
    if found is None:
        found = tuner().backend(cls)
        if found is None:
            if not _compiled(kernels):
                return True                     # twins still answering: the earlier default, unrecorded
            found = tuner().choose(cls, runners(), incumbent="winograd")
        _chosen[cls] = found
    return found == "winograd"
