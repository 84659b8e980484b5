"""Kernels of the fused nodes the elementwise fusion pass makes (``runtime/passes/fusion.py``).

A fused node's attrs are data: ``program``, one step per original node, ``(op type, (arg, ...))``
with args ``"a<j>"`` (external input ``j``) or ``"v<n>"`` (the value of step ``n``); ``kinds``
(per external input: a full-size array, or a broadcast scalar); ``shape``, ``dtype``, ``names``.
The registered kernels are factories (``_tw_factory``): a plan calls them once when it is bound
and runs what they return. The loop's source is generated only from validated steps and the
``expr`` trait of each op type (the registry's templates), so a plan read from a file cannot put
code of its own into it; the loop is compiled with numba once per process per source and dtype.

>>> import numpy as np
>>> k = fused_elementwise((("Mul", ("a0", "a1")), ("Exp", ("v0",))), (True, False), (3,), "float64", ("m", "e"))
>>> k(np.array([0.0, 1.0, 2.0]), np.float64(0.5)).round(4).tolist()
[1.0, 1.6487, 2.7183]
"""
import functools
import re
import threading

import numpy as np

from tensorweave.core import errors
from tensorweave.core.registry import _OPS, register_kernel
from tensorweave.kernels.cpu import split_passes

_CACHE = {}
_LOCK = threading.Lock()
_ARG = re.compile(r"^([av])([0-9]{1,6})$")


def program_lines(program, kinds):
    """``(lines, root)`` of the loop body for a validated ``program`` (ValueError otherwise)."""
    if not isinstance(program, (tuple, list)) or not program or len(program) > 4096:
        raise ValueError("fused program must be a non-empty list of steps")
    lines = []
    for n, step in enumerate(program):
        if not (isinstance(step, (tuple, list)) and len(step) == 2 and isinstance(step[0], str)
                and isinstance(step[1], (tuple, list))):
            raise ValueError(f"fused program step {n} must be (op type, (args...))")
        op_type, args = step
        opdef = _OPS.get(op_type)
        traits = opdef.traits if opdef is not None else {}
        if "expr" not in traits or traits.get("elementwise") != len(args):
            raise ValueError(f"fused program step {n}: {op_type!r} is not a fusable op of {len(args)} inputs")
        refs = []
        for a in args:
            m = _ARG.match(a) if isinstance(a, str) else None
            if m is None:
                raise ValueError(f"fused program step {n}: bad argument {a!r}")
            j = int(m.group(2))
            if m.group(1) == "a":
                if j >= len(kinds):
                    raise ValueError(f"fused program step {n}: input a{j} out of range ({len(kinds)} inputs)")
                refs.append(f"a{j}[i]" if kinds[j] else f"a{j}")
            else:
                if j >= n:
                    raise ValueError(f"fused program step {n}: v{j} is not computed yet")
                refs.append(f"v{j}")
        lines.append(f"        v{n} = " + traits["expr"].format(*refs))
    return lines, f"v{len(program) - 1}"


def _source(lines, root, n, inplace=None):
    """``_fused(out, a0, ..)``, or with ``inplace=k`` ``_fused(a0, ..)`` storing into ``a<k>``:
    a separate loop, because LLVM only vectorises a loop whose store may overlap a load when
    it can see that they are the same address."""
    params = [f"a{j}" for j in range(n)]
    if inplace is None:
        head, dest = ", ".join(["out"] + params), "out"
    else:
        head, dest = ", ".join(params), f"a{inplace}"
    return (f"def _fused({head}):\n    for i in range({dest}.shape[0]):\n" + "\n".join(lines)
            + f"\n        {dest}[i] = {root}\n")


def _compile(src, dtype):
    key = (src, dtype)
    with _LOCK:
        fn = _CACHE.get(key)
        if fn is None:
            from tensorweave.kernels.cpu.jit import njit
            ns = {"np": np, "T": getattr(np, dtype)}
            exec(compile(src, f"<tensorweave fused {len(_CACHE)}>", "exec"), ns)  # noqa: S102 - generated
            fn = _CACHE[key] = njit(ns["_fused"], error_model="numpy")
    return fn


def _loop_args(xs, kinds, npdt, size, names):
    """The compiled loop's arguments: full-size inputs flat and contiguous, scalars as scalars."""
    args = []
    for x, full in zip(xs, kinds):
        a = np.asarray(x, npdt)
        if full:
            if a.size != size:
                raise ValueError(f"fused nodes {names}: an input has {a.size} elements, expected {size}")
            args.append(np.ascontiguousarray(a).reshape(-1))
        else:
            args.append(a.reshape(-1)[0])
    return args


def make_kernel(lines, root, kinds, shape, dtype, names):
    """The fused node's kernel: ``kernel(*inputs, inplace=-1)``; with ``inplace=k`` the result is
    written into input ``k`` (the memory pass sets it only for a dead, freshly allocated input)."""
    npdt = np.dtype(dtype)
    shape = tuple(shape)
    size = int(np.prod(shape))
    n = len(kinds)
    variants = {}

    def variant(k):
        fn = variants.get(k)
        if fn is None:
            fn = variants[k] = _compile(_source(lines, root, n, None if k < 0 else k), dtype)
        return fn

    def fused_elementwise(*xs, inplace=-1):
        args = _loop_args(xs, kinds, npdt, size, names)
        if inplace >= 0:
            o = xs[inplace]
            if not (isinstance(o, np.ndarray) and o.dtype == npdt and o.flags.c_contiguous and o.flags.writeable
                    and o.shape == shape):
                inplace = -1
        try:
            if inplace >= 0:
                out = xs[inplace]
                split_passes.flat_by_rows(variant(inplace), args, shape, size * npdt.itemsize)
            else:
                out = np.empty(shape, npdt)
                split_passes.flat_by_rows(variant(-1), [out.reshape(-1)] + args, shape, size * npdt.itemsize)
        except Exception as e:  # noqa: BLE001 - name the fused nodes
            raise errors.InternalError(f"in fused nodes {names}: {type(e).__name__}: {e}") from e
        return out
    fused_elementwise.fused_source = _source(lines, root, n)
    return fused_elementwise


# ---- a reduction at the end of a group -------------------------------------------------------------
# Reductions that may end a fused loop: (initial value, update).
_REDUCE = {"Sum": ("0.0", "acc += {v}"), "Mean": ("0.0", "acc += {v}"),
           "Max": ("-np.inf", "acc = np.maximum(acc, {v})"), "Min": ("np.inf", "acc = np.minimum(acc, {v})")}


def _reduce_source(lines, root, n, reduce_type):
    """``_fused(out, cols, a0, ..)``: per row of ``cols`` elements, the group's expression
    reduced into a float64 accumulator (Sum/Mean: more accurate than a float32 sum; Max/Min:
    exact), stored rounded to ``out``'s dtype."""
    init, step = _REDUCE[reduce_type]
    head = ", ".join(["out", "cols"] + [f"a{j}" for j in range(n)])
    body = "\n".join("    " + line for line in lines)
    mean = " / cols" if reduce_type == "Mean" else ""
    return (f"def _fused({head}):\n    for r in range(out.shape[0]):\n        acc = {init}\n"
            f"        for c in range(cols):\n            i = r * cols + c\n{body}\n"
            f"            {step.format(v=root)}\n        out[r] = acc{mean}\n")


def make_reduce_kernel(lines, root, kinds, shape, dtype, names, reduce_type, rows, out_shape):
    """The kernel of a group ending in a reduction: ``kernel(*inputs) -> [out_shape]``."""
    npdt = np.dtype(dtype)
    size = int(np.prod(shape))
    fn = []

    def fused_reduction(*xs):
        if not fn:
            fn.append(_compile(_reduce_source(lines, root, len(kinds), reduce_type), dtype))
        args = _loop_args(xs, kinds, npdt, size, names)
        out = np.empty(rows, npdt)
        try:
            fn[0](out, size // rows, *args)
        except Exception as e:  # noqa: BLE001 - name the fused nodes
            raise errors.InternalError(f"in fused nodes {names}: {type(e).__name__}: {e}") from e
        return out.reshape(out_shape)
    fused_reduction.fused_source = _reduce_source(lines, root, len(kinds), reduce_type)
    return fused_reduction


def _check_meta(kinds, shape, dtype):
    if dtype not in ("float32", "float64"):
        raise ValueError(f"fused loops run float32/float64, got {dtype!r}")
    if not all(isinstance(k, bool) for k in kinds) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise ValueError("fused node: kinds must be booleans and shape non-negative ints")


def fused_elementwise(program, kinds, shape, dtype, names, inplace=-1):
    """Kernel factory of ``FusedElementwise`` (``inplace=k``: the result goes into input ``k``)."""
    _check_meta(kinds, shape, dtype)
    lines, root = program_lines(program, kinds)
    kernel = make_kernel(lines, root, list(kinds), shape, dtype, list(names))
    return kernel if inplace < 0 else functools.partial(kernel, inplace=inplace)


def fused_reduction(program, kinds, shape, dtype, names, reduce_type, rows, out_shape):
    """Kernel factory of ``FusedReduction``."""
    _check_meta(kinds, shape, dtype)
    if reduce_type not in _REDUCE:
        raise ValueError(f"fused reduction must be one of {sorted(_REDUCE)}, got {reduce_type!r}")
    lines, root = program_lines(program, kinds)
    return make_reduce_kernel(lines, root, list(kinds), shape, dtype, list(names), reduce_type, rows, out_shape)


def inplace_kernel(op_type, k):
    """``op_type`` (an op with the ``inplace`` trait) computed into its input ``k``: by the op's CPU
    kernel where that takes ``out=`` (marked ``_tw_out``: the Relu kernel's vector loop, 15-21 µs a
    call for 65,536 float32 where the trait's ``np.maximum`` took 38; AMD EPYC Zen 4, session 26),
    else by the trait's function (the ops layer, which cannot import a kernel).

    >>> import numpy as np
    >>> x = np.array([-1.0, 2.0])
    >>> inplace_kernel("Relu", 0)(x) is x, x.tolist()
    (True, [0.0, 2.0])
    """
    opdef = _OPS[op_type]
    own = opdef.kernels.get("CPU")
    f = own if getattr(own, "_tw_out", False) else opdef.traits["inplace"]

    def kernel(*xs):
        with np.errstate(all="ignore"):
            return f(*xs, out=xs[k])
    kernel.__name__ = f"{op_type}_inplace{k}"
    return kernel


REDUCE_TYPES = frozenset(_REDUCE)
fused_elementwise._tw_factory = True
fused_reduction._tw_factory = True
register_kernel("FusedElementwise", "CPU")(fused_elementwise)
register_kernel("FusedReduction", "CPU")(fused_reduction)
