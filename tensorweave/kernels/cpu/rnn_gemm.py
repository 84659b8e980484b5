"""The per-step products of the recurrent kernels' step loops (``gru_kernels.py``,
``lstm_kernels.py``, ``simple_rnn_kernels.py``), called from compiled code.

A step loop makes the same small product every step (``h @ recurrent_kernel``: 32x64 @ 64x192 for
the gru benchmark, 32x128 @ 128x512 for the lstm), with ~10-50 µs of work per step: a trip through
Python and ``gemm.matmul``'s checks per step cost as much again. So each loop is one numba call
that calls the BLAS library itself (:func:`rows`), and the loop's function is written once, in
plain Python taking the product as ``mm`` (:func:`rows` when compiled, :func:`matmul_rows` on the
path without a compiled library): run as Python it is the twin that answers while numba compiles
(``jit.njit_twin``), making the very same library calls, so the bits do not depend on when the
compile finished.

Which library and how many threads (:func:`plan`): one thread for products under
:data:`LOOP_SERIAL_WORK` (or ``gemm.serial_work``, if larger), on whichever library ``gemm.matmul``
uses on one thread for the shape class (MKL, or NumPy's OpenBLAS: ``gemm.serial_library``, timed
once per machine); else MKL on its threads. The thread setting is made once around the whole loop (MKL's per-thread one,
or OpenBLAS's process-wide count as ``gemm._numpy_serial`` does, so that a product another thread
runs meanwhile may run on one thread too; results do not depend on it).

NumPy's OpenBLAS (the ``scipy-openblas64`` build in NumPy's wheels) has the ILP64 interface: its
``cblas_?gemm`` takes 64-bit sizes, MKL's (``mkl_rt``'s default LP64) 32-bit ones; :data:`LP64` /
:data:`ILP64` tell :func:`rows` which call to make.

>>> import numpy as np
>>> from tensorweave.kernels.cpu import rnn_gemm
>>> a = np.ones((2, 3), np.float32)
>>> c = np.empty((2, 2), np.float32)
>>> rnn_gemm.matmul_rows(rnn_gemm.LP64, 0, a, a.T.copy(), c)
>>> c.tolist()
[[3.0, 3.0], [3.0, 3.0]]
"""
import ctypes

import numpy as np
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic

from tensorweave.kernels.cpu import gemm, gemm_tuning, loop_choice
from tensorweave.kernels.cpu.jit import njit_twin

LP64, ILP64 = 0, 1
#: a loop's products under this many multiply-adds run on one thread, whatever ``gemm.serial_work``
#: says: between two products of a loop the single-threaded step pass runs, through which a second
#: BLAS thread spins (a core for the whole loop) or after which it must be woken again. The lstm
#: kernels (32x128 @ 128x512 a step, above this machine's quiet ``serial_work`` of 96^3) at load 13:
#: 36 ms CPU / 180-197 ms wall on one thread against 55 / 275-330 on MKL's two. The bound is the
#: largest product ``gemm_tuning.serial_threshold`` ever assigns one thread (twice 256^3): larger
#: products take long enough for a hand-off per step to pay.
LOOP_SERIAL_WORK = 2 * gemm_tuning.SERIAL_LADDER[-1] ** 3
_ROW_MAJOR, _NO_TRANS = 101, 111


@intrinsic
def _cblas_gemm_ilp64(typingctx, fn, m, n, k, a, lda, b, ldb, c, ldc):
    """``c = a @ b`` by the ILP64 ``cblas_?gemm`` at address ``fn`` (row-major, no transposes,
    alpha 1, beta 0): ``gemm._cblas_gemm``'s call with 64-bit sizes."""
    if not (isinstance(a, types.Array) and a.dtype in (types.float32, types.float64)):
        return None
    sig = types.void(fn, m, n, k, a, lda, b, ldb, c, ldc)

    def codegen(context, builder, signature, args):
        kinds = signature.args
        i32, i64 = ir.IntType(32), ir.IntType(64)
        real = context.get_value_type(kinds[4].dtype)
        fnty = ir.FunctionType(ir.VoidType(), [i32, i32, i32, i64, i64, i64, real, real.as_pointer(), i64,
                                               real.as_pointer(), i64, real, real.as_pointer(), i64])

        def size(i):
            return context.cast(builder, args[i], kinds[i], types.int64)

        def data(i):
            return context.make_array(kinds[i])(context, builder, args[i]).data
        builder.call(builder.inttoptr(args[0], fnty.as_pointer()),
                     [ir.Constant(i32, _ROW_MAJOR), ir.Constant(i32, _NO_TRANS), ir.Constant(i32, _NO_TRANS),
                      size(1), size(2), size(3), ir.Constant(real, 1.0), data(4), size(5), data(6), size(7),
                      ir.Constant(real, 0.0), data(8), size(9)])
        return context.get_dummy_value()
    return sig, codegen


_protos = {}                     # (interface, address, dtype char) -> the cblas_?gemm through ctypes


def _ctypes_rows(interface, fn, a, b, c):
    """:func:`rows` through ``ctypes`` (the same library call), while it compiles."""
    key = (interface, fn, a.dtype.char)
    if key not in _protos:
        real = ctypes.c_float if a.dtype == np.float32 else ctypes.c_double
        i, n, p = ctypes.c_int, ctypes.c_int64 if interface == ILP64 else ctypes.c_int, ctypes.c_void_p
        _protos[key] = ctypes.CFUNCTYPE(None, i, i, i, n, n, n, real, p, n, p, n, real, p, n)(fn)
    item = a.itemsize
    _protos[key](_ROW_MAJOR, _NO_TRANS, _NO_TRANS, a.shape[0], b.shape[1], a.shape[1], 1.0, a.ctypes.data,
                 a.strides[0] // item, b.ctypes.data, b.strides[0] // item, 0.0, c.ctypes.data, c.strides[0] // item)


@njit_twin(_ctypes_rows)
def rows(interface, fn, a, b, c):
    """``c = a @ b`` by the ``cblas_?gemm`` at address ``fn`` (:data:`LP64` or :data:`ILP64`),
    from compiled code: 2-D operands with unit inner strides (row views of a larger array are fine)."""
    if interface == ILP64:
        item = a.itemsize
        _cblas_gemm_ilp64(fn, a.shape[0], b.shape[1], a.shape[1], a, a.strides[0] // item, b,
                          b.strides[0] // item, c, c.strides[0] // item)
    else:
        gemm.gemm_rows(fn, a, b, c)


def matmul_rows(interface, fn, a, b, c):
    """``mm`` of the loops' Python path (no library to call from compiled code): ``gemm.matmul``."""
    gemm.matmul(a, b, out=c)


def run(loop, plan, *args):
    """``loop(mm, interface, fn, *args)`` (a step loop made by ``jit.njit_twin`` of itself) compiled
    under ``plan`` (:func:`plan`), or, without one, its Python twin with ``gemm.matmul``."""
    if plan is None:
        return loop.twin(matmul_rows, LP64, 0, *args)
    return plan.run(loop, *args)


class Plan:
    """A loop's products: ``interface``/``fn`` for :func:`rows`, and the thread setting to hold
    around the loop (``swap(n)`` sets it and returns the one before)."""

    __slots__ = ("interface", "fn", "threads", "swap")

    def __init__(self, interface, fn, threads, swap):
        self.interface, self.fn, self.threads, self.swap = interface, fn, threads, swap

    def run(self, loop, *args):
        """``loop(rows, interface, fn, *args)`` under the plan's thread setting (restored after);
        by ``loop.with_rows(interface, fn, *args)`` where the loop has that twin with the call
        built in (what ``aot_kernels`` can list): compiled or its Python twin, whichever was
        measured faster for the shape class (``loop_choice``)."""
        before = self.swap(self.threads)
        try:
            with_rows = getattr(loop, "with_rows", None)
            if with_rows is not None:
                return loop_choice.run(with_rows, self.interface, self.fn, *args)
            return loop(rows, self.interface, self.fn, *args)
        finally:
            self.swap(before)


_mkl_swaps = {}                  # address of MKL_Set_Num_Threads_Local -> it through ctypes


def _mkl_swap(set_local):
    if set_local not in _mkl_swaps:
        _mkl_swaps[set_local] = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)(set_local)
    return _mkl_swaps[set_local]


def _openblas_swap(n):
    get, put = gemm._openblas_threads()
    before = get()
    put(n)
    return before


def openblas_gemm(dtype):
    """``(address, interface)`` of NumPy's OpenBLAS ``cblas_?gemm`` for ``dtype``, or None."""
    if gemm._openblas_threads() is None:
        return None
    so, c = gemm._openblas["library"], "s" if np.dtype(dtype) == np.float32 else "d"
    # the scipy-openblas64 wheels prefix and suffix their symbols; other ILP64 builds only suffix them
    for name, interface in ((f"scipy_cblas_{c}gemm64_", ILP64), (f"cblas_{c}gemm64_", ILP64), (f"cblas_{c}gemm", LP64)):
        if hasattr(so, name):
            return ctypes.cast(getattr(so, name), ctypes.c_void_p).value, interface
    return None


def plan(dtype, m, n, k):
    """The :class:`Plan` of a loop making ``m x k @ k x n`` products of ``dtype``, or None where
    they are not called from compiled code (empty products, other dtypes; and products over
    :data:`LOOP_SERIAL_WORK` where ``gemm.compiled_gemm`` has no answer: no MKL, or per-class
    tuning on, which then chooses per product in ``gemm.matmul``).

    Under that bound the loop runs on one thread, on the library measured faster on one thread for
    the class (``gemm.serial_library``), or NumPy's OpenBLAS where MKL is not loaded
    (``TW_BLAS=numpy``): before, those loops ran in Python through ``gemm.matmul``."""
    dtype = np.dtype(dtype)
    if m * n * k == 0 or dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        return None
    compiled = gemm.compiled_gemm(dtype, m, n, k)
    serial = gemm._gemm_serial.get(dtype)
    if compiled is not None:
        fn, set_local, threads = compiled
    elif m * n * k < LOOP_SERIAL_WORK:
        fn, set_local = (serial.args[2], serial.args[0]) if serial is not None else (None, None)
        threads = 1
    else:
        return None
    if m * n * k < LOOP_SERIAL_WORK:
        threads = 1
    if threads == 1 and (fn is None or gemm.serial_library(dtype, m, n, k) == "numpy1"):
        found = openblas_gemm(dtype)
        if found is not None:
            return Plan(found[1], found[0], 1, _openblas_swap)
    if fn is None:
        return None
    return Plan(LP64, fn, threads, _mkl_swap(set_local))
