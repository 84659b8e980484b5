"""A NumPy ufunc's own inner loop, called from compiled code: the very routine (its SIMD
``exp``, say) NumPy runs for a contiguous array, so a compiled kernel gets NumPy's bits.

NumPy dispatches a ufunc's contiguous float loop to the build for this CPU (AVX-512 ``exp``
here); a compiled ``np.exp`` is LLVM's, whose last bits differ. :func:`unary_loop` reads the
loop NumPy chose from the ufunc object (``PyUFuncObject.functions``, the C layout NumPy 1.x and
2.x share: after the object head ``nin, nout, nargs, identity`` as ints, then ``functions``,
``data``, ``ntypes``, ``reserved1``, ``name``, ``types``), checks the record (name, arity, the
type row) and then that the loop gives the ufunc's bits on a probe of ordinary and special
values; anything else answers None (callers keep NumPy). :func:`call_unary` calls it from
numba (``nogil``: the loop itself takes no lock).

>>> import numpy as np
>>> fn, data = unary_loop(np.exp, np.float32)
>>> x = np.linspace(-30, 5, 7, dtype=np.float32); out = np.empty_like(x)
>>> apply_unary(fn, data, x, out); bool((out == np.exp(x)).all())
True
"""
import ctypes

import numpy as np
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic

from tensorweave.kernels.cpu import jit

#: per (ufunc name, dtype): ``(loop address, data address)`` or None, found once per process
_found = {}
_LOOP = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_ssize_t),
                         ctypes.POINTER(ctypes.c_ssize_t), ctypes.c_void_p)


class _UFunc(ctypes.Structure):
    _fields_ = [("refcnt", ctypes.c_ssize_t), ("type", ctypes.c_void_p), ("nin", ctypes.c_int),
                ("nout", ctypes.c_int), ("nargs", ctypes.c_int), ("identity", ctypes.c_int),
                ("functions", ctypes.POINTER(ctypes.c_void_p)), ("data", ctypes.POINTER(ctypes.c_void_p)),
                ("ntypes", ctypes.c_int), ("reserved1", ctypes.c_int), ("name", ctypes.c_char_p),
                ("types", ctypes.POINTER(ctypes.c_char))]


def _probe(dtype):
    """Ordinary values over the range a softmax meets (and past it), edges and specials."""
    x = np.concatenate([np.linspace(-110, 90, 4001), [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-38, -1e-45]])
    return x.astype(dtype)


def unary_loop(ufunc, dtype):
    """``(address, data)`` of ``ufunc``'s one-input loop for contiguous ``dtype`` arrays, proven to
    give ``ufunc``'s bits on :func:`_probe`; None where not found or not equal."""
    dtype = np.dtype(dtype)
    key = (ufunc.__name__, dtype)
    if key not in _found:
        _found[key] = None
        rec = _UFunc.from_address(id(ufunc))
        if rec.nin == 1 and rec.nout == 1 and rec.name == ufunc.__name__.encode():
            for i in range(rec.ntypes):
                if rec.types[2 * i] == rec.types[2 * i + 1] == bytes([dtype.num]) and rec.functions[i]:
                    loop = (rec.functions[i], rec.data[i] or 0)
                    x = _probe(dtype)
                    out = np.empty_like(x)
                    _ctypes_unary(*loop, x, out)
                    with np.errstate(all="ignore"):
                        want = ufunc(x)
                    if out.tobytes() == want.tobytes():
                        _found[key] = loop
                    break
    return _found[key]


def _ctypes_unary(fn, data, x, out):
    args = (ctypes.c_char_p * 2)(x.ctypes.data, out.ctypes.data)
    dims, steps = (ctypes.c_ssize_t * 1)(x.size), (ctypes.c_ssize_t * 2)(x.itemsize, out.itemsize)
    _LOOP(fn)(args, dims, steps, data or None)


@intrinsic
def call_unary(typingctx, fn, data, x, out):
    """Calls the ufunc loop at address ``fn`` (``data``: its data pointer) over the contiguous
    1-D arrays ``x`` into ``out`` (``out`` may be ``x``)."""
    if not (isinstance(x, types.Array) and isinstance(out, types.Array)):
        return None

    def codegen(context, builder, signature, args):
        i8p, intp = ir.IntType(8).as_pointer(), context.get_value_type(types.intp)
        fnty = ir.FunctionType(ir.VoidType(), [i8p.as_pointer(), intp.as_pointer(), intp.as_pointer(), i8p])
        ax = context.make_array(signature.args[2])(context, builder, args[2])
        ao = context.make_array(signature.args[3])(context, builder, args[3])
        ptrs = builder.alloca(i8p, size=ir.Constant(ir.IntType(32), 2))
        builder.store(builder.bitcast(ax.data, i8p), ptrs)
        builder.store(builder.bitcast(ao.data, i8p), builder.gep(ptrs, [ir.Constant(ir.IntType(32), 1)]))
        dims = builder.alloca(intp)
        builder.store(builder.extract_value(ax.shape, 0), dims)
        steps = builder.alloca(intp, size=ir.Constant(ir.IntType(32), 2))
        builder.store(ax.itemsize, steps)
        builder.store(ao.itemsize, builder.gep(steps, [ir.Constant(ir.IntType(32), 1)]))
        target = builder.inttoptr(args[0], fnty.as_pointer())
        builder.call(target, [ptrs, dims, steps, builder.inttoptr(args[1], i8p)])
        return context.get_dummy_value()
    return types.void(fn, data, x, out), codegen


@jit.njit
def apply_unary(fn, data, x, out):
    """:func:`call_unary` (compiled callers inline the intrinsic; this is the callable form)."""
    call_unary(fn, data, x, out)
