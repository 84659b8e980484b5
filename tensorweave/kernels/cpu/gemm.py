"""Matrix products of the CPU kernels: Intel MKL's GEMM where the optional ``mkl`` package is
installed (``pip install tensorweave[mkl]``, x86-64), NumPy's BLAS (OpenBLAS in NumPy's
wheels) otherwise.

Why a second library: on the shapes of small-batch training — 128 rows against 512-9216
wide layers — MKL's ``sgemm`` is 10-40 % faster than OpenBLAS on two cores, mostly from
better two-thread scaling at small M (128x784 @ 784x512: 390-460 µs against 480-630). Callers:
the MatMul kernels, im2col convolutions, the recurrent kernels; docs/design/kernels.md has the
training-step figures.

- Plain 2-D float32/float64 products of at least :data:`MIN_WORK` multiply-adds go to MKL,
  the thin ones (a 10-class output layer) too: OpenBLAS would run those on its threads,
  and two libraries' idle workers spinning side by side fight over the cores (the mlp step
  took 5.3 ms instead of 3.2 when its three thin products stayed in OpenBLAS). Smaller
  products, which OpenBLAS runs on the calling thread, and batched ones stay in NumPy.
- Threads: MKL is loaded with tensorweave (before ``kernels.threads`` takes stock of the
  BLAS libraries), so ``tw.config.threading`` and ``single_threaded_blas()`` set its thread
  count as OpenBLAS's. Its idle OpenMP workers spin ``KMP_BLOCKTIME`` ms (set here to
  :data:`IDLE_SPIN_MS` unless the user set it; OpenMP's default, 200 ms, would keep cores
  from tensorweave's own threads — see kernels/threads.py for OpenBLAS's counterpart). After
  the call of a threaded class chosen onto MKL's threads they sleep at once
  (:func:`_sleeping_after`): the step's next work is on tensorweave's own threads.
- The call goes through a compiled (numba) stub that hands MKL the arrays' addresses: ~3 µs
  a call against ~9 through ``ctypes`` (``ndarray.ctypes.data`` alone is ~1.2 µs an array);
  the LSTM's step loop makes ~160 products a training step. MKL's address is an argument of
  the stub, so its machine code is cached on disk like the other kernels.
- Which library runs a product can be measured instead of assumed (on AMD EPYC MKL's GEMM runs
  at less than half OpenBLAS's speed): with ``TW_BLAS_TUNE=1`` under ``TW_BLAS=auto`` the first
  product of each *threaded* shape class times both libraries' threaded calls for a few ms and
  the class keeps the faster, cached on disk per machine (gemm_tuning.py), in place of the split
  (below); one-thread products take the one-thread choice with tuning on or off (since session
  14). Opt-in still: per-class choices can put both libraries' thread pools in one step (once the
  mlp step 5.3 ms instead of 3.2), and the default's measured split already beat it on the mlp
  step (session 14 on Zen 3: wall 10.2 ms a step default, 15.2 tuned at load 1.8; process CPU
  18.7 / 21.8 at load 35; BENCHMARKS.md). Without it threaded products are split or left to MKL's threads by
  :func:`_threaded_choice`. ``TW_BLAS=numpy`` keeps every product in NumPy, ``mkl`` sends every
  eligible threaded one to MKL (failing if MKL is missing).
- Small products run on one thread (:func:`serial_work`: a size measured once per machine, under
  which one thread beats all of them), on whichever library is faster on one thread for the shape
  class (MKL, or NumPy's OpenBLAS with its count set to 1 around the call), timed by default on the
  class's first product: waking a second thread for a GRU step's 32x64 @ 64x192 cost more than the
  product, and on AMD EPYC OpenBLAS beat MKL on one thread on every small product timed
  (BENCHMARKS.md, issue 18 session 10). The recurrent kernels' compiled step loops call MKL from
  inside (:func:`gemm_rows`, :func:`compiled_gemm`).
- Every product that runs on one thread, whatever the reason, takes that one-thread choice: small
  ones, a convolution's tiles (``one_thread=True``), each block of a split product (its own
  class's), and any product where the calling thread's share of the cores is one thread
  (:func:`threads_here`: an in-process rank thread capped by :func:`limit_split_here`, a one-thread
  ``tw.config.threading`` run or Ray worker, a helper thread), stacks included; the recurrent
  loops' products already did under ``rnn_gemm.LOOP_SERIAL_WORK`` (every benchmark loop's). Before session 14 the last went to MKL's threaded call,
  which on one thread runs its generic kernels on AMD (48-59 % of a data-parallel rank's samples on
  Zen 3; OpenBLAS 2.10 against MKL's 2.67 ms for 128x784 @ 784x512). A one-thread OpenBLAS call
  holds OpenBLAS's count at 1 (:func:`_openblas_one_thread`), so it never wakes OpenBLAS's pool.
  ``TW_GEMM_SHARE=0`` restores the old routing (an A/B switch).
- Thin products under that size (fewer than :data:`MIN_PART` rows: a batch-1 ``predict``'s
  layers) whose other operand is large (:data:`THIN_BYTES`) run at memory speed, where a second
  core adds its cache and bandwidth: per shape class, one thread, MKL's threads, OpenBLAS's threads
  or a split of the columns is timed on a quiet machine once the model's thin weights have all run,
  over copies of the weight holding as many bytes as they do, until two timings agree
  (:func:`_thin_choice`, :func:`_came_round`; one thread until then).
- Products above that size are split over the intra-op threads (blocks of rows or columns, each a
  one-thread call), left to MKL's threads or run on the calling thread alone, per shape class by a
  timing made on a quiet machine (:func:`_threaded_choice`; the split where not timed): on AMD EPYC
  MKL's two threads ran the mlp's 128-row products slowly and spun between them; on the 2-vCPU Xeon
  they cost a quarter to a third more CPU than one thread (issue 18 session 19). ``TW_GEMM_SPLIT=0`` keeps MKL's threads.
- Sharing a process with PyTorch: ``torch.set_num_threads(n)`` sets the calling thread's MKL
  thread count for this MKL too (2048x2048 products at one core's speed after
  ``torch.set_num_threads(1)``); results are unaffected.

>>> import numpy as np
>>> from tensorweave.kernels.cpu import gemm
>>> a = np.arange(6, dtype=np.float32).reshape(2, 3)
>>> gemm.matmul(a, a.T).tolist()
[[5.0, 14.0], [14.0, 50.0]]
"""
import contextlib
import ctypes
import functools
import glob
import itertools
import os
import sys
import threading
import time

import numpy as np
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic

from tensorweave.kernels.cpu import gemm_tuning
from tensorweave.kernels.cpu import jit
from tensorweave.kernels.cpu import own_core
from tensorweave.kernels.cpu import spin_share
from tensorweave.kernels.cpu import stack_route
from tensorweave.kernels.cpu import thin_layout
from tensorweave.kernels.cpu.jit import njit_twin

#: smallest M*N*K sent to MKL (OpenBLAS's own threshold for using its threads)
MIN_WORK = 1 << 16
#: ms an idle MKL (OpenMP) worker spins before sleeping
IDLE_SPIN_MS = 1

_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112
_MAX_INT = 2 ** 31 - 1          # MKL's LP64 interface: 32-bit sizes
_lib = None                      # the loaded MKL runtime, or None
_gemm = {}                       # dtype -> cblas_?gemm (empty: products stay in NumPy)
_gemm_batch = {}                 # dtype -> cblas_?gemm_batch_strided (stacks of products)
_decided = [False]               # load() has run
_tuning = {"on": False, "tuner": None}   # auto mode with timing; the Tuner, made on first use
_chosen = {}                     # this process's shape classes (as tuples: cheap keys) -> backend
_gemm_serial = {}                # dtype -> cblas_?gemm on one MKL thread (MKL_Set_Num_Threads_Local)
_serial_work = {}                # dtype -> products under this many multiply-adds run on one thread
_serial_chosen = {}              # shape class (tuple) -> "mkl1" or "numpy1": the library for one thread
#: held while a one-thread class is timed: a tiled kernel's threads meet the same class at once,
#: and two timings of a near-tie could pick MKL on one tile and OpenBLAS on the other (one call's
#: bits then depended on the race; issue 18 session 21, flake25)
_serial_timing = threading.Lock()
_openblas = {}                   # "get"/"set": NumPy's OpenBLAS thread count (ctypes), when found
_split_chosen = {}               # threaded shape class (tuple) + parts [+ "T"] -> "mkl", "rows", "cols", "mklT", "one"
_split = {"on": True,            # TW_GEMM_SPLIT=0: threaded products stay on the library's threads
          "share": True,         # TW_GEMM_SHARE=0: a one-thread share's products on MKL's threaded call
          "sleep": True,         # TW_GEMM_SPIN=1: MKL's workers spin after a threaded class's call
          "direct": True,        # a one-thread share's product straight to its class's library (tests: off)
          "pair": True}          # TW_GEMM_PAIR_THREADS=1: an "mkl" class inside blocks_here on MKL's threads

#: narrowest block of rows or columns a split product gives one thread (a multiple of every
#: kernel's register block, so a part keeps full-width micro-kernels and aligned columns)
MIN_PART = 16


def _library_path():
    """``libmkl_rt`` of the ``mkl`` package (installed into the environment's lib/), or None."""
    for prefix in dict.fromkeys((sys.prefix, sys.base_prefix)):
        found = sorted(glob.glob(os.path.join(prefix, "lib", "libmkl_rt.so*")))
        if found:
            return found[0]
    return None


def load():
    """Loads MKL unless ``TW_BLAS=numpy``; returns whether products now go to MKL. Runs when
    tensorweave is imported; later calls return the first answer."""
    global _lib
    if _decided[0]:
        return _lib is not None
    choice = os.environ.get("TW_BLAS", "auto").lower()
    if choice not in ("auto", "mkl", "numpy"):
        raise ValueError(f"TW_BLAS={choice!r}: expected 'auto', 'mkl' or 'numpy'")
    path = None if choice == "numpy" else _library_path()
    if path is None and choice == "mkl":
        raise ImportError("TW_BLAS=mkl but no MKL runtime was found: pip install 'tensorweave[mkl]'")
    _decided[0] = True
    _tuning["on"] = choice == "auto" and os.environ.get("TW_BLAS_TUNE", "0") == "1"
    _split["on"] = choice == "auto" and os.environ.get("TW_GEMM_SPLIT", "1") != "0"
    _split["share"] = os.environ.get("TW_GEMM_SHARE", "1") != "0"
    _split["sleep"] = os.environ.get("TW_GEMM_SPIN", "0") != "1"
    _split["pair"] = os.environ.get("TW_GEMM_PAIR_THREADS", "0") != "1"
    if path is None:
        return False
    os.environ.setdefault("KMP_BLOCKTIME", str(IDLE_SPIN_MS))
    lib = ctypes.CDLL(path)
    set_local = getattr(lib, "MKL_Set_Num_Threads_Local", None)
    for dtype, name in ((np.float32, "cblas_sgemm"), (np.float64, "cblas_dgemm")):
        _gemm[np.dtype(dtype)] = _compiled_call(getattr(lib, name))
        if set_local is not None:
            _gemm_serial[np.dtype(dtype)] = _compiled_call(getattr(lib, name), set_local, 1)
        if hasattr(lib, name + "_batch_strided"):       # MKL 2020 and later
            _gemm_batch[np.dtype(dtype)] = _batch_call(getattr(lib, name + "_batch_strided"), dtype)
    _lib = lib
    return True


@intrinsic
def _cblas_gemm(typingctx, fn, trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc):
    """Calls the ``cblas_?gemm`` at address ``fn`` (row-major, alpha 1, beta 0) with the arrays'
    data pointers (the address is an argument: the compiled code does not depend on where this
    process loaded MKL)."""
    if not (isinstance(a, types.Array) and a.dtype in (types.float32, types.float64)):
        return None
    sig = types.void(fn, trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc)

    def codegen(context, builder, signature, args):
        ints = signature.args
        i32 = ir.IntType(32)
        real = context.get_value_type(ints[6].dtype)
        fnty = ir.FunctionType(ir.VoidType(), [i32] * 6 + [real, real.as_pointer(), i32, real.as_pointer(), i32,
                                                             real, real.as_pointer(), i32])

        def int32(i):
            return context.cast(builder, args[i], ints[i], types.int32)

        def data(i):
            return context.make_array(ints[i])(context, builder, args[i]).data
        target = builder.inttoptr(args[0], fnty.as_pointer())
        builder.call(target, [ir.Constant(i32, _ROW_MAJOR), int32(1), int32(2), int32(3), int32(4), int32(5),
                              ir.Constant(real, 1.0), data(6), int32(7), data(8), int32(9),
                              ir.Constant(real, 0.0), data(10), int32(11)])
        return context.get_dummy_value()
    return sig, codegen


@intrinsic
def _set_threads_local(typingctx, fn, n):
    """Calls ``MKL_Set_Num_Threads_Local(n)`` at address ``fn``; returns the previous setting."""
    sig = types.int32(fn, n)

    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        target = builder.inttoptr(args[0], ir.FunctionType(i32, [i32]).as_pointer())
        return builder.call(target, [context.cast(builder, args[1], signature.args[1], types.int32)])
    return sig, codegen


_ctypes_gemm = {}                # (address, dtype) -> the cblas_?gemm as a ctypes function
_ctypes_set = {}                 # address -> MKL_Set_Num_Threads_Local as a ctypes function


def _ctypes_call(fn, trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc):
    """:func:`_call` through ``ctypes`` (the same MKL call, ~6 µs slower), while it compiles."""
    key = (fn, a.dtype)
    if key not in _ctypes_gemm:
        real = ctypes.c_float if a.dtype == np.float32 else ctypes.c_double
        i, p = ctypes.c_int, ctypes.c_void_p
        proto = ctypes.CFUNCTYPE(None, i, i, i, i, i, i, real, p, i, p, i, real, p, i)
        _ctypes_gemm[key] = proto(fn)
    _ctypes_gemm[key](_ROW_MAJOR, trans_a, trans_b, m, n, k, 1.0, a.ctypes.data, lda, b.ctypes.data, ldb,
                      0.0, c.ctypes.data, ldc)


@njit_twin(_ctypes_call)
def _call(fn, trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc):
    _cblas_gemm(fn, trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc)


def _ctypes_call_threads(set_local, threads, fn, trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc):
    """:func:`_call_threads` through ``ctypes``, while it compiles."""
    with _mkl_local_threads(set_local, threads):
        _ctypes_call(fn, trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc)


@contextlib.contextmanager
def _mkl_local_threads(set_local, threads):
    """The calling thread's MKL thread count set to ``threads`` inside, through ``ctypes``
    (``set_local``: the address of ``MKL_Set_Num_Threads_Local``)."""
    if set_local not in _ctypes_set:
        _ctypes_set[set_local] = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)(set_local)
    before = _ctypes_set[set_local](threads)
    try:
        yield
    finally:
        _ctypes_set[set_local](before)


@njit_twin(_ctypes_call_threads)
def _call_threads(set_local, threads, fn, trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc):
    """:func:`_call` on ``threads`` MKL threads (the calling thread's setting, restored after;
    ~0.1 µs here against ~2.7 through ``ctypes``)."""
    before = _set_threads_local(set_local, threads)
    _cblas_gemm(fn, trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc)
    _set_threads_local(set_local, before)


#: ``set_threads_local(address of MKL_Set_Num_Threads_Local, n)`` from compiled code
set_threads_local = _set_threads_local


@jit.njit
def gemm_rows(fn, a, b, c):
    """``c = a @ b`` by the ``cblas_?gemm`` at ``fn``, from compiled code (the step loops of
    the recurrent kernels): 2-D operands with unit inner strides (row views of a larger array
    are fine), alpha 1, beta 0."""
    item = a.itemsize
    _cblas_gemm(fn, _NO_TRANS, _NO_TRANS, a.shape[0], b.shape[1], a.shape[1], a, a.strides[0] // item,
                b, b.strides[0] // item, c, c.strides[0] // item)


def call_rows(fn, set_local, threads, a, b, c):
    """:func:`gemm_rows` on ``threads`` MKL threads, from Python (the same MKL call)."""
    item = a.itemsize
    _call_threads(set_local, threads, fn, _NO_TRANS, _NO_TRANS, a.shape[0], b.shape[1], a.shape[1], a,
                  a.strides[0] // item, b, b.strides[0] // item, c, c.strides[0] // item)


def compiled_gemm(dtype, m, n, k):
    """``(cblas_?gemm address, MKL_Set_Num_Threads_Local address, threads)`` for a loop of
    compiled code making ``m x k @ k x n`` products (:func:`gemm_rows`), ``threads`` 1 under
    :func:`serial_work` and 0 (MKL's own count) above (``rnn_gemm.plan`` runs every product under
    its ``LOOP_SERIAL_WORK``, 2 x 256^3, on the class's one-thread library, OpenBLAS included; a
    loop's products above that on a one-thread share still go to MKL, see kernels.md); None where such products must not go
    to MKL from compiled code: no MKL (or one without a per-thread setting), or per-class
    tuning on (its choice is made in :func:`matmul`)."""
    dtype = np.dtype(dtype)
    serial = _gemm_serial.get(dtype)
    if serial is None or _tuning["on"]:
        return None
    return serial.args[2], serial.args[0], 1 if m * n * k < serial_work(dtype) else 0


def serial_library(dtype, m, n, k):
    """``"mkl1"`` or ``"numpy1"``: the one-thread library :func:`matmul` runs an ``m x k @ k x n``
    product (no transposes) of this shape class on, timed now on scratch operands when the class is
    new, as :func:`matmul` times its first product. For compiled loops that call the library
    themselves (``rnn_gemm.py``); MKL with a per-thread setting must be loaded."""
    dtype = np.dtype(dtype)
    got = _serial_chosen.get((dtype.char, _NO_TRANS, _NO_TRANS, m.bit_length(), n.bit_length(), k.bit_length(), 1))
    if got is not None:       # (a loop's plan asks on every call: no scratch operands once known)
        return got
    a, b, out = np.zeros((m, k), dtype), np.zeros((k, n), dtype), np.empty((m, n), dtype)
    args = (a, b, out, (_NO_TRANS, k), (_NO_TRANS, n), m, n, k,
            functools.partial(_gemm_serial[dtype], _NO_TRANS, _NO_TRANS, m, n, k, a, k, b, n, out, n))
    got = _serial_library(*args)
    return _serial_library(*args) if got == "done" else got


def _address(fn):
    return ctypes.cast(fn, ctypes.c_void_p).value


def _compiled_call(fn, set_local=None, threads=0):
    """``call(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc)``: ``c = a @ b`` by the
    ``cblas_?gemm`` ``fn`` from compiled code (~3 µs a call; ``ctypes`` ~9); given MKL's
    ``MKL_Set_Num_Threads_Local`` (``set_local``), on ``threads`` threads."""
    if set_local is None:
        return functools.partial(_call, _address(fn))
    return functools.partial(_call_threads, _address(set_local), threads, _address(fn))


def _batch_call(fn, dtype):
    """``call(trans_a, trans_b, m, n, k, a, lda, stride_a, b, ldb, stride_b, c, ldc, stride_c, count)``:
    ``count`` products ``c[i] = a[i] @ b[i]`` in one MKL call (``cblas_?gemm_batch_strided``), which
    spreads the stack over its threads once. Through ``ctypes``: one call per stack, so its ~10 µs
    do not matter."""
    real = ctypes.c_float if dtype == np.float32 else ctypes.c_double
    i, p = ctypes.c_int, ctypes.c_void_p
    proto = ctypes.CFUNCTYPE(None, i, i, i, i, i, i, real, p, i, i, p, i, i, real, p, i, i, i)(
        ctypes.cast(fn, ctypes.c_void_p).value)

    def call(trans_a, trans_b, m, n, k, a, lda, stride_a, b, ldb, stride_b, c, ldc, stride_c, count):
        proto(_ROW_MAJOR, trans_a, trans_b, m, n, k, 1.0, a.ctypes.data, lda, stride_a, b.ctypes.data, ldb,
              stride_b, 0.0, c.ctypes.data, ldc, stride_c, count)
    return call


def _mkl_version():
    buf = ctypes.create_string_buffer(256)
    _lib.MKL_Get_Version_String(buf, len(buf))
    return buf.value.decode("ascii", "replace").strip()


#: every way a class of :func:`tuner` may choose (here, and the einsum, attention and fused-block
#: classes of other modules): the cache file's reader keeps no other name
WAYS = ("mkl", "numpy", "mkl1", "numpy1", "rows", "cols", "one", "par", "mklT", "shared", "caller", "apart")


def tuner():
    """The :class:`gemm_tuning.Tuner` of this process (made, and its cache file read, on first use)."""
    if _tuning["tuner"] is None:
        _tuning["tuner"] = gemm_tuning.Tuner(gemm_tuning.cache_path(), machine_key(), WAYS)
    return _tuning["tuner"]


#: the field of a kept timing's entry whose probe had the core (:func:`timed_choice`)
PROBED = "own_core"


def timed_choice(cls, runners, incumbent, probe):
    """``tuner().choose(cls, runners, incumbent=incumbent)``, kept on disk only where the calling
    thread had its core for ``probe()`` (a one-thread candidate; ``own_core.had_core``) just before
    the timing, and then marked :data:`PROBED`: the quiet check's load average lags a burst of
    other processes, and a class timed in one stays on the machine's file for good (issue 18,
    enc25; a threaded class's entry without the mark is timed again, :func:`_cached_threaded`)."""
    t = tuner()
    if not own_core.had_core(probe):
        return t.choose(cls, runners, incumbent=incumbent, settle=False)
    got = t.choose(cls, runners, incumbent=incumbent)
    entry = getattr(t, "choices", {}).get(cls)      # (tests' scripted tuners keep none)
    if own_core.probing() and entry is not None and entry.get("settled") and not entry.get(PROBED):
        entry[PROBED] = True
        t._write()
    return got


def machine_key():
    """What this process's tuning results hold for (CPU, cores, both libraries' versions)."""
    return gemm_tuning.machine_key({"numpy": np.__version__, "mkl": _mkl_version() if _lib is not None else ""})


def choice(m, n, k, dtype=np.float32, trans_a=False, trans_b=False, count=1):
    """The backend this process uses for an ``m x k @ k x n`` product's shape class (a stack of
    ``count`` of them), or None when that class has not been tuned (or tuning is off)."""
    return _chosen.get((np.dtype(dtype).char, _TRANS if trans_a else _NO_TRANS, _TRANS if trans_b else _NO_TRANS,
                        m.bit_length(), n.bit_length(), k.bit_length(), count.bit_length()))


def library():
    """``"mkl"`` or ``"numpy"``: where large 2-D float products may go (with tuning on, each
    shape class still picks between the two, see :func:`choice`)."""
    return "mkl" if _lib is not None else "numpy"


def serial_work(dtype=np.float32):
    """Products of fewer multiply-adds than this run on one MKL thread (0: none do), measured
    once per machine (``gemm_tuning.serial_threshold``, a few ms on the first product that could
    go either way) and cached with the shape classes' choices. Single-core machines, and MKLs
    without a per-thread setting, measure nothing."""
    dtype = np.dtype(dtype)
    got = _serial_work.get(dtype)
    if got is None:
        if dtype not in _gemm_serial or _cores() < 2:
            got = 0
        elif (threads_here() or _cores()) < _cores() or inside_blocks_here():
            # not walked from a thread that may not use every core (a tile's helper or the caller
            # inside ``tiles.over_tiles``, a rank capped at one thread): the other core is busy
            # with the region's other work, threads lose at every rung, and two such walks settled
            # the AMD EPYC's threshold at the ladder's top (cnn's first product above the default
            # ran inside its convolution's tiles, session 22). The default for this call; the
            # first product on a thread that may use every core walks.
            return gemm_tuning.SERIAL_DEFAULT
        else:
            got = tuner().threshold(f"serial-ways:{dtype.name}", lambda: gemm_tuning.serial_threshold(
                functools.partial(_thread_runners, dtype)), gemm_tuning.SERIAL_DEFAULT)
        _serial_work[dtype] = got
    return got


def _openblas_threads():
    """``(get, set)`` of NumPy's OpenBLAS thread count through ``ctypes`` (~1 µs a call; through
    threadpoolctl ~10), or None where NumPy's BLAS is not an OpenBLAS exporting them."""
    if "found" not in _openblas:
        from tensorweave.kernels import threads
        _openblas["found"] = None
        # NumPy's own first (its wheel's numpy.libs/): SciPy may have loaded another OpenBLAS
        home = os.path.realpath(os.path.dirname(np.__file__))
        libs = sorted((lib for lib in threads._blas() if lib.internal_api == "openblas"),
                      key=lambda lib: not os.path.realpath(lib.filepath).startswith(home))
        for lib in libs[:1]:
            try:
                so = ctypes.CDLL(lib.filepath)
            except OSError:
                continue
            for get, put in (("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),
                             ("openblas_get_num_threads64_", "openblas_set_num_threads64_"),
                             ("openblas_get_num_threads", "openblas_set_num_threads")):
                if hasattr(so, get) and hasattr(so, put):
                    getter, setter = getattr(so, get), getattr(so, put)
                    getter.restype, setter.argtypes = ctypes.c_int, (ctypes.c_int,)
                    _openblas["found"] = (getter, setter)
                    _openblas["library"] = so       # its cblas_?gemm, for compiled loops (rnn_gemm.py)
                    break
    return _openblas["found"]


def _numpy_serial(a, b, out):
    """``np.matmul(a, b, out=out)`` with NumPy's OpenBLAS on one thread. OpenBLAS's count is
    process-wide (as for ``threads.single_threaded_blas``): a product another thread runs at the
    same moment may run on one thread too; results do not depend on it. :func:`_openblas_one_thread`'s
    count taken by hand, without its generator: 1.5 µs a call instead of 4.4 (a batch-1
    ``predict``'s products are 2-40 µs each)."""
    _hold_one_thread()
    try:
        np.matmul(a, b, out=out)
    finally:
        _release_one_thread()


_one = {"depth": 0, "before": None}     # callers inside _openblas_one_thread, the count to restore
_one_lock = threading.Lock()


@contextlib.contextmanager
def _openblas_one_thread():
    """NumPy's OpenBLAS on one thread while any caller is inside (counted, like
    ``threads.single_threaded_blas`` but through ``ctypes``: ~1 µs instead of ~10): two threads
    each saving and restoring the count around their own call could leave it at 1 for good."""
    _hold_one_thread()
    try:
        yield
    finally:
        _release_one_thread()


def _hold_one_thread():
    """Enters :func:`_openblas_one_thread`'s hold (the first holder saves the count and sets 1)."""
    with _one_lock:
        if _one["depth"] == 0:
            _one["before"] = _openblas["found"][0]()
            _openblas["found"][1](1)
        _one["depth"] += 1


def _release_one_thread():
    """Leaves the hold (the last holder restores the count saved by the first)."""
    with _one_lock:
        _one["depth"] -= 1
        if _one["depth"] == 0:
            _openblas["found"][1](_one["before"])


def _serial_library(a, b, out, op_a, op_b, m, n, k, run_mkl, count=1, seen=None):
    """``"mkl1"`` or ``"numpy1"`` for a product under :func:`serial_work` (or a stack of ``count``):
    the faster library on one thread for its shape class, timed by default (both candidates
    single-threaded, so no thread pools mix: on AMD EPYC OpenBLAS was 1.3-3x faster on every small
    product timed, 1x784 @ 784x512 30 against 40 µs) and cached per machine like the tuned classes;
    a product timed now is left in ``out`` (``"done"``). ``seen``: the class key when the caller
    has it already.

    A timing made while MKL's one-thread stub (:func:`_call_threads`) is not yet compiled for the
    operands' types holds for this process only (not written to disk): that call then runs through
    its ``ctypes`` twin, which on 1x512 @ 512x512 took 30 µs against the compiled stub's 13 (and
    OpenBLAS's 23) on the Intel Xeon of issue 18 session 15 — before, such timings chose OpenBLAS
    for good. The stub is built at install (``aot_kernels``), so a fresh process times the real
    call."""
    if seen is None:
        seen = (a.dtype.char, op_a[0], op_b[0], m.bit_length(), n.bit_length(), k.bit_length(), count.bit_length())
    got = _serial_chosen.get(seen)
    if got is not None:
        return got
    if _openblas_threads() is None:
        got = _serial_chosen[seen] = "mkl1"
        return got
    with _serial_timing:            # one thread times a class; the others wait and take its choice
        got = _serial_chosen.get(seen)
        if got is not None:
            return got
        cls = "serial:" + gemm_tuning.shape_class(m, n, k, a.dtype.name, op_a[0] == _TRANS, op_b[0] == _TRANS, count)
        got = tuner().backend(cls)
        if got is not None:
            _serial_chosen[seen] = got
            return got
        _serial_chosen[seen] = tuner().choose(cls, {"mkl1": run_mkl, "numpy1": lambda: _numpy_serial(a, b, out)},
                                              incumbent="mkl1", clock=time.thread_time,
                                              settle=count > 1 or _stub_compiled(a, b, out))
        return "done"


def _stub_compiled(a, b, out):
    """Whether :func:`_call_threads` (MKL on one thread) is compiled for these operands' types
    (JIT or built at install), so that a call of it runs MKL, not its ``ctypes`` twin."""
    return _stub_ready((0, 0, 0, _NO_TRANS, _NO_TRANS, 1, 1, 1, a, 1, b, 1, out, 1))


def _stub_ready(args):
    """Whether :func:`_call_threads` is compiled for ``args``'s types. Where the ahead-of-time
    build serves them, forcing a JIT compile anyway cost a cold process 0.5-1.1 s (the
    one-thread threshold's first walk, issue 18 session 16)."""
    from tensorweave.kernels.cpu import loop_choice
    return loop_choice.compiled(_call_threads, args)


def _cores():
    # kernels.threads by its sys.modules entry: the import statement here cost ~0.9 µs a call
    # (thread CPU, load 12), more than threads.cores() itself; it is imported after MKL is
    # loaded (it takes stock of the BLAS libraries), so not at this module's top
    threads = sys.modules.get("tensorweave.kernels.threads")
    if threads is None:
        from tensorweave.kernels import threads
    return threads.cores()


def _rung_operands(dtype, side):
    """``(a, b, out)`` of the one-thread threshold's ``side``-cubed rung (:func:`_thread_runners`):
    seeded operands and the output every way writes.

    >>> a, b, out = _rung_operands(np.float32, 4)
    >>> a.shape, b.shape, out.shape, out.dtype.name
    ((4, 4), (4, 4), (4, 4), 'float32')
    """
    rng = np.random.default_rng(side)
    a, b = rng.standard_normal((2, side, side)).astype(np.dtype(dtype))
    return a, b, np.empty((side, side), np.dtype(dtype))


def _thread_runners(dtype, side, operands=None):
    """``{"serial": run, "threaded": run, "split": run}`` of a ``side``-cubed product ``a @ b`` into
    ``out`` (``operands``, :func:`_rung_operands` where None): MKL on one
    thread, MKL on one thread per core, and row blocks of MKL's one-thread call shared with the
    runtime's helper threads (:func:`share_tasks`, as the split a threaded class may choose runs;
    only where this thread may split, :func:`split_parts`). Both threaded ways are timed because
    either may be the one that wins: on an AMD EPYC (Zen 4, AVX2) MKL's own threads lost to its
    one thread at every rung (256³: 0.89-1.0 ms CPU against 0.55-0.67) while the split did not,
    and a walk timing MKL's threads alone settled every product up to 33.5 M multiply-adds on
    one thread, so the mlp's and the encoder's products never used the second core (session 22)."""
    dtype = np.dtype(dtype)
    a, b, out = operands or _rung_operands(dtype, side)
    fn = _gemm[dtype].args[-1]
    set_local = _gemm_serial[dtype].args[0]

    def on(threads):
        args = (set_local, threads, fn, _NO_TRANS, _NO_TRANS, side, side, side, a, side, b, side, out, side)
        if not _stub_ready(args):
            jit.compile_now(_call_threads, *args)     # time MKL, not the ctypes twin
        return lambda: _call_threads(*args)
    runners = {"serial": on(1), "threaded": on(_cores())}
    parts = split_parts()
    if parts > 1:                 # MKL's one-thread call per block, as "serial" (no class timed)
        rows = -(-side // parts)
        blocks = [functools.partial(_call_threads, set_local, 1, fn, _NO_TRANS, _NO_TRANS, min(rows, side - i),
                                    side, side, a[i:i + rows], side, b, side, out[i:i + rows], side)
                  for i in range(0, side, rows)]
        runners["split"] = lambda: share_tasks(blocks, parts)
    return runners


def _operand(x):
    """``(transpose flag, leading dimension)`` of a 2-D array BLAS can read in place, or None."""
    if not x.flags.aligned:
        return None
    item = x.itemsize
    s0, s1 = x.strides
    if s1 == item and s0 % item == 0 and s0 >= item * max(1, x.shape[1]):
        return _NO_TRANS, s0 // item
    if s0 == item and s1 % item == 0 and s1 >= item * max(1, x.shape[0]):
        return _TRANS, s1 // item
    return None


def _stack_operand(x, count):
    """``(transpose flag, leading dimension, stride between matrices)`` of a 2-D matrix or a 3-D
    stack of ``count`` matrices that BLAS can read in place (a 2-D one, or a stack of one, is
    broadcast: stride 0), or None."""
    if x.ndim == 2 or x.shape[0] == 1:
        op = _operand(x if x.ndim == 2 else x[0])
        return None if op is None else op + (0,)
    op = _operand(x[0])
    step = x.strides[0]
    if op is None or step <= 0 or step % x.itemsize or step // x.itemsize > _MAX_INT or x.shape[0] != count:
        return None
    return op + (step // x.itemsize,)


def _choose(a, b, out, op_a, op_b, m, n, k, count, run_mkl):
    """``"mkl"`` or ``"numpy"`` for this product under tuning (its shape class timed once per machine;
    a product timed now is left in ``out`` and answers ``"done"``)."""
    seen = (a.dtype.char, op_a[0], op_b[0], m.bit_length(), n.bit_length(), k.bit_length(), count.bit_length())
    backend = _chosen.get(seen)
    if backend is None:
        cls = gemm_tuning.shape_class(m, n, k, a.dtype.name, op_a[0] == _TRANS, op_b[0] == _TRANS, count)
        backend = _chosen[seen] = tuner().backend(cls)   # tuned by an earlier process
        if backend is None:   # a new shape class: the timing runs leave the product in out
            _chosen[seen] = tuner().choose(cls, {"mkl": run_mkl, "numpy": lambda: np.matmul(a, b, out=out)})
            return "done"
    return backend


def _batched(a, b, out, one_thread=False):
    """A stack of products (``np.matmul``'s broadcasting of one 3-D operand against a 2-D one or a
    stack of one) through one MKL call, or None where it cannot go there. Why not NumPy: its
    stacked ``matmul`` calls OpenBLAS once per matrix, each call waking and joining OpenBLAS's
    threads; on a shared machine every one of those joins can wait for a descheduled thread
    (multi-head attention's 64 products of 128x64 @ 64x128: 1.8 ms quiet, 0.1-1.5 s at load 30-40;
    MKL's batched call 9-15 ms at that load). With ``one_thread`` (see :func:`matmul`), or for a
    stack under the size measured to need no threads (``stack_route.on_one_thread``), no thread
    joins at all, and the library is the one measured faster on one thread for the stack's class."""
    fn = _gemm_batch.get(a.dtype) if a.dtype == b.dtype and max(a.ndim, b.ndim) == 3 else None
    if fn is None or min(a.ndim, b.ndim) < 2:
        return None
    count = max(a.shape[0] if a.ndim == 3 else 1, b.shape[0] if b.ndim == 3 else 1)
    (m, k), n = a.shape[-2:], b.shape[-1]
    if b.shape[-2] != k or count * m * n * k < MIN_WORK or max(m, n, k, count) > _MAX_INT or count * m * n > _MAX_INT:
        return None
    op_a, op_b = _stack_operand(a, count), _stack_operand(b, count)
    if op_a is None or op_b is None or out is not None and (
            out.shape != (count, m, n) or out.dtype != a.dtype or not out.flags.c_contiguous or not out.flags.writeable
            or np.may_share_memory(out, a) or np.may_share_memory(out, b)):
        return None
    out = np.empty((count, m, n), a.dtype) if out is None else out
    if not one_thread and a.dtype in _gemm_serial and stack_route.on_one_thread(a.dtype, count * m * n * k):
        one_thread = True       # a stack the threads do not pay for (measured, stack_route.py)

    def run_mkl():
        fn(op_a[0], op_b[0], m, n, k, a, op_a[1], op_a[2], b, op_b[1], op_b[2], out, n, m * n, count)
    if one_thread:
        threaded = run_mkl

        def run_mkl():
            with _mkl_local_threads(_gemm_serial[a.dtype].args[0], 1):
                threaded()
        backend = _serial_library(a, b, out, op_a, op_b, m, n, k, run_mkl, count)
        if backend == "done":     # timed now: computed again by the choice, as every later call
            backend = _serial_library(a, b, out, op_a, op_b, m, n, k, run_mkl, count)
        if backend == "numpy1":
            _numpy_serial(a, b, out)
        elif backend == "mkl1":
            run_mkl()
        return out
    if _tuning["on"]:
        backend = _choose(a, b, out, op_a, op_b, m, n, k, count, run_mkl)
        if backend == "done":     # (the first call's bits are the choice's, see _run_2d)
            backend = _choose(a, b, out, op_a, op_b, m, n, k, count, run_mkl)
        if backend == "numpy":
            np.matmul(a, b, out=out)
        if backend != "mkl":
            return out
    run_mkl()
    return out


#: a 2-D product's geometry (shapes, strides, dtypes) -> its BLAS operands, or False where it stays
#: in NumPy; see :func:`matmul`
_geometry = {}
#: geometries remembered (a process seeing ever new shapes keeps the first ones)
GEOMETRY_KEYS = 4096


def _product(a, b):
    """``(op_a, op_b, m, n, k, shape class)`` of a 2-D product BLAS can run in place into a new
    C-contiguous output, or False. Depends only on the operands' shapes, strides and dtypes (not
    on which library the class runs on: that is looked up per call, so settings changed later
    hold), so :func:`matmul` remembers it per geometry."""
    if a.ndim != 2 or b.ndim != 2 or a.dtype != b.dtype or a.dtype not in _gemm:
        return False
    (m, k), n = a.shape, b.shape[1]
    if m * n * k < MIN_WORK or max(m, n, k) > _MAX_INT or k != b.shape[0]:
        return False
    op_a, op_b = _operand(a), _operand(b)
    if op_a is None or op_b is None:
        return False
    return op_a, op_b, m, n, k, (a.dtype.char, op_a[0], op_b[0], m.bit_length(), n.bit_length(), k.bit_length(), 1)


def matmul(a, b, out=None, one_thread=False):
    """``a @ b`` (into ``out`` when given, as ``np.matmul``), through MKL for large enough 2-D
    float32/float64 operands of one dtype, and for stacks of them (a 3-D operand against a 2-D one
    or a stack of the same count, see :func:`_batched`).

    ``one_thread``: the caller runs products side by side on its own threads (a convolution's
    tiles, ``tiles.over_tiles``), so this one runs on one thread whatever its size, on whichever
    library measured faster on one thread for its shape class (as products under
    :func:`serial_work` do): at a stride-2 input gradient's tile, 2048x32 @ 32x144, MKL took 0.78 ms
    against OpenBLAS's 0.23 on one thread of an AMD EPYC.

    A product without ``out`` (every MatMul node's) looks its checks up by the operands' geometry:
    a repeated shape (each step of a training loop, each ``predict`` request) pays one dict lookup
    instead of the stride checks."""
    if out is None and a.ndim == 2 and b.ndim == 2:
        key = (a.shape, a.strides, a.dtype, b.shape, b.strides, b.dtype)
        geometry = _geometry.get(key)
        if geometry is None:
            geometry = _product(a, b)
            # not for a dtype without MKL now (tests empty _gemm): a remembered False is final below
            if len(_geometry) < GEOMETRY_KEYS and a.dtype in _gemm:
                _geometry[key] = geometry
        if geometry is False:     # not for BLAS (small, odd strides or dtype): as _matmul_checked ends
            return np.matmul(a, b)
        if not (a.flags.aligned and b.flags.aligned) or _gemm.get(a.dtype) is None:
            return _matmul_checked(a, b, None, one_thread)
        op_a, op_b, m, n, k, seen = geometry
        out = np.empty((m, n), a.dtype)
        share = _thread_share
        if share.parts == 1 and share.here is None and _split["share"] and _split["direct"] \
                and _openblas.get("found") is not None:
            # a one-thread share (an in-process rank thread): :func:`route` is "one" whatever the
            # size, and once the class's one-thread library is chosen the product is that call
            # alone (the same call :func:`_run_one` makes: the same bits), without its Python
            # (~10 µs a product, held GIL a rank thread's neighbour waits for; issue 13 dp23)
            backend = _serial_chosen.get(seen)
            serial = _gemm_serial.get(a.dtype)
            if backend == "mkl1" and serial is not None:
                serial(op_a[0], op_b[0], m, n, k, a, op_a[1], b, op_b[1], out, n)
                return out
            if backend == "numpy1" and serial is not None:
                _numpy_serial(a, b, out)
                return out
        return _run_2d(a, b, out, op_a, op_b, (_NO_TRANS, n), m, n, k, seen, one_thread)
    return _matmul_checked(a, b, out, one_thread)


def _matmul_checked(a, b, out, one_thread=False):
    """:func:`matmul` with every check made on this call."""
    if a.ndim == 3 or b.ndim == 3:
        got = _batched(a, b, out, (one_thread or _share() == 1) and a.dtype in _gemm_serial)
        return np.matmul(a, b, out=out) if got is None else got
    fn = _gemm.get(a.dtype) if a.ndim == 2 and b.ndim == 2 and a.dtype == b.dtype else None
    if fn is None:
        return np.matmul(a, b, out=out)
    (m, k), n = a.shape, b.shape[1]
    if m * n * k < MIN_WORK or max(m, n, k) > _MAX_INT or k != b.shape[0]:
        return np.matmul(a, b, out=out)
    op_a, op_b = _operand(a), _operand(b)
    if out is None:
        out = np.empty((m, n), a.dtype)
    elif np.may_share_memory(out, a) or np.may_share_memory(out, b):
        return np.matmul(a, b, out=out)   # NumPy copies overlapping operands first
    op_c = _operand(out) if out.shape == (m, n) and out.dtype == a.dtype and out.flags.writeable else None
    if op_a is None or op_b is None or op_c is None or op_c[0] != _NO_TRANS:
        return np.matmul(a, b, out=out)
    seen = (a.dtype.char, op_a[0], op_b[0], m.bit_length(), n.bit_length(), k.bit_length(), 1)
    return _run_2d(a, b, out, op_a, op_b, op_c, m, n, k, seen, one_thread)


def _mkl_runner(fn, a, b, out, op_a, op_b, op_c, m, n, k):
    """``run()``: the checked 2-D product into ``out`` by MKL's ``fn`` (threaded or one-thread)."""
    return lambda: fn(op_a[0], op_b[0], m, n, k, a, op_a[1], b, op_b[1], out, op_c[1])


def _mkl_flipped(fn, a, flipped, out, op_a, op_c, m, n, k):
    """``run()``: :func:`_mkl_runner`'s product with its ``k x n`` operand (a variable's weight)
    read as its transpose ``flipped`` (``n x k``, ``thin_layout``): MKL's NT call, backend ``"mklT"``."""
    return lambda: fn(op_a[0], _TRANS, m, n, k, a, op_a[1], flipped, k, out, op_c[1])


def _run_2d(a, b, out, op_a, op_b, op_c, m, n, k, seen, one_thread=False):
    """The checked 2-D product into ``out``, on the library (and threads) its size and class take.

    A product runs on one thread when it is small (:func:`serial_work`), when the caller says so
    (``one_thread``), or when the calling thread's share of the cores is one thread
    (:func:`threads_here`: an in-process rank thread, a one-thread ``tw.config.threading`` run or
    Ray worker, one core): all three take the library measured faster on one thread for the shape
    class (:func:`_serial_library`). Before, the third went to MKL's threaded call, which on one
    thread runs MKL's generic kernels on AMD (a DP rank's 128x784 @ 784x512: 2.67 ms against
    OpenBLAS's 2.10 on one Zen 3 thread). Which of these ways a product takes is :func:`route`'s
    answer, which ``gemm_route.decision`` reports."""
    fn = _gemm[a.dtype]
    way, parts = _way(a.dtype, m, n, k, one_thread)
    if way in ("thin", "one"):
        if way == "thin":
            backend = _thin_choice(a, b, out, op_a, op_b, op_c, m, n, k, seen, parts)
            if backend == "mkl":
                fn(op_a[0], op_b[0], m, n, k, a, op_a[1], b, op_b[1], out, op_c[1])
                return out
            if backend == "mklT":     # a variable's weight, transposed once (thin_layout)
                _mkl_flipped(fn, a, thin_layout.transposed(b), out, op_a, op_c, m, n, k)()
                return out
            if backend == "cols":
                _run_split("cols", a, b, out, op_a, op_b, op_c, k, parts)
                return out
            if backend == "numpy":
                return np.matmul(a, b, out=out)
            if backend == "par":
                _run_thin_blocks(a, b, out, op_a, op_b, n, parts)
                return out
        return _run_one(a, b, out, op_a, op_b, op_c, m, n, k, seen)

    run_mkl = _mkl_runner(fn, a, b, out, op_a, op_b, op_c, m, n, k)
    if way == "threads":
        run_mkl = _sleeping_after(run_mkl)
    if way == "tuned":
        backend = _choose(a, b, out, op_a, op_b, m, n, k, 1, run_mkl)
        if backend == "done":     # (as above: the first call's bits are the choice's)
            backend = _choose(a, b, out, op_a, op_b, m, n, k, 1, run_mkl)
        if backend == "numpy":
            return np.matmul(a, b, out=out)
    elif way == "threads":
        backend = _threaded_choice(a, b, out, op_a, op_b, op_c, m, n, k, seen, parts, run_mkl)
        if backend == "mklT":
            run_mkl = _sleeping_after(_mkl_flipped(fn, a, thin_layout.transposed(b), out, op_a, op_c, m, n, k))
        elif backend == "one":
            return _run_one(a, b, out, op_a, op_b, op_c, m, n, k, seen)
        elif backend != "mkl":
            _run_split(backend, a, b, out, op_a, op_b, op_c, k, parts)
            return out
        elif _in_pair(a.dtype):
            run_mkl = _mkl_runner(_gemm_serial[a.dtype], a, b, out, op_a, op_b, op_c, m, n, k)
    run_mkl()
    return out


def _in_pair(dtype):
    """Whether a ``"mkl"`` class runs on MKL's one-thread call here: inside :func:`blocks_here`
    (issue 18, mlp30), where the calling thread's share is one core, another product running beside it on the
    other (``runtime/overlap.py``: the mlp's dX2 on the caller, dW2 on the helper). MKL's threaded
    call from both threads made four threads on two cores and woke an OpenMP worker per product
    (the mlp step's timeline, ``bench_step_timeline.py``: two of its six hand-offs a step);
    :func:`blocks_here` promises every block on this thread. Same library, so the bits of its
    threaded call where MKL cuts the threads' work along M and N only (every mlp shape, MKL
    2026.2: ``tests/test_mlp30_pair_one_thread.py``).
    ``TW_GEMM_PAIR_THREADS=1`` keeps MKL's threads there (the A/B switch).

    >>> _in_pair(np.dtype(np.float32))
    False
    """
    return _split["pair"] and inside_blocks_here() and dtype in _gemm_serial


def _sleeping_after(run_mkl):
    """``run_mkl()`` (a threaded MKL call of a ``"threads"`` class) with MKL's OpenMP workers
    sent to sleep as soon as it ends: the calling thread's OpenMP block time is 0 for this call
    (``kmp_set_blocktime``, the caller's own value restored after; ~1 µs a call), instead of the
    workers spinning :data:`IDLE_SPIN_MS` on the other core. Why: what follows such a product in a
    training step is the calling thread's small ops and the helper thread's work (a product
    started early beside the caller's, a split's blocks, a split pass), and a worker spinning
    1 ms after each call took that core from the helper (the mlp step: an OpenMP worker 1.1 ms of
    CPU a step next to the helper's 1.45, issue 18 session 16). The class's timing
    (:func:`_threaded_choice`) runs this same call, so MKL's threads are chosen over a split only
    where they win with the wake-up each call then pays. Other threaded MKL calls (a thin
    product's, a stack's, the recurrent loops') keep the block time: they follow one another.
    ``TW_GEMM_SPIN=1`` leaves the workers spinning here too (an A/B switch)."""
    if not _split["sleep"]:
        return run_mkl

    def run():
        found = _omp.get("found")
        if found is None:
            run_mkl()
            if "found" not in _omp:     # looked up once, after MKL's first threaded call loaded it
                _omp["found"] = _omp_blocktime()
            return
        get, put = found
        before = get()
        put(0)
        try:
            run_mkl()
        finally:
            put(before)
    return run


_omp = {}                        # "found": MKL's OpenMP runtime's (kmp_get_blocktime, kmp_set_blocktime), or None


def _omp_blocktime(path=None):
    """``(get, set)`` of the calling thread's OpenMP block time in the OpenMP runtime MKL threads
    with (Intel's ``libiomp5``, beside ``libmkl_rt``), through ``ctypes``, where that runtime is
    loaded (MKL loads it for its first threaded call; MKL on another threading layer has none);
    None otherwise."""
    path = path or os.path.join(os.path.dirname(_library_path() or ""), "libiomp5.so")
    try:
        lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
        get, put = lib.kmp_get_blocktime, lib.kmp_set_blocktime
    except (OSError, AttributeError):
        return None
    get.restype, put.argtypes = ctypes.c_int, (ctypes.c_int,)
    return get, put


def route(dtype, m, n, k, one_thread=False):
    """The way :func:`_run_2d` takes a checked ``m x k @ k x n`` product of ``dtype`` (one MKL
    takes) now, by size and the calling thread's share of the cores:

    - ``"thin"``: under :func:`serial_work`, fewer than :data:`MIN_PART` rows against a
      :data:`THIN_BYTES` operand, with a second thread to be had: :func:`_thin_choice`;
    - ``"one"``: on one thread (small, ``one_thread``, or a one-thread share): :func:`_run_one`;
    - ``"tuned"``: ``TW_BLAS_TUNE=1``, the class's library by timing (:func:`_choose`);
    - ``"threads"``: split over :func:`split_parts` threads or MKL's, by timing
      (:func:`_threaded_choice`);
    - ``"mkl"``: MKL's threaded call (``TW_GEMM_SPLIT=0``, a forced ``TW_BLAS``).

    One function for the product's path and for reports (``gemm_route.decision``), so the two
    cannot drift: the report once missed the thin route.

    >>> route(np.dtype(np.float32), 64, 64, 64, one_thread=True) in ("one", "mkl")
    True
    """
    return _way(dtype, m, n, k, one_thread)[0]


def _way(dtype, m, n, k, one_thread=False):
    """``(route, parts)``: :func:`route`'s answer and, for ``"thin"`` and ``"threads"``, the
    :func:`split_parts` it was decided with, so that the product's path reads the calling
    thread's share once (it asked three times per thin product before issue 18 session 17)."""
    limit = _serial_work.get(dtype)
    small = m * n * k < (serial_work(dtype) if limit is None else limit)
    share = None if one_thread or small else _share()
    if (one_thread or small or share == 1) and dtype in _gemm_serial:
        if small and not one_thread and m < MIN_PART and k * n * dtype.itemsize >= THIN_BYTES \
                and _split["on"] and not inside_blocks_here():
            parts = split_parts()
            if parts > 1:
                return "thin", parts
        return "one", None
    if _tuning["on"]:
        return "tuned", None
    # _share() is split_parts() where products may be split (the same count, read once)
    parts = share if share is not None and _split["on"] else split_parts()
    return ("threads", parts) if parts > 1 else ("mkl", None)


def _run_one(a, b, out, op_a, op_b, op_c, m, n, k, seen):
    """The checked 2-D product into ``out`` on one thread, on the library measured faster on one
    thread for its class (:func:`_serial_library`)."""
    run_mkl = _mkl_runner(_gemm_serial[a.dtype], a, b, out, op_a, op_b, op_c, m, n, k)
    backend = _serial_library(a, b, out, op_a, op_b, m, n, k, run_mkl, seen=seen)
    if backend == "done":
        # timed now, the product left by the last candidate run: computed again by the choice,
        # so the class's first call gives the bits of every later one (MKL and OpenBLAS differ)
        backend = _serial_library(a, b, out, op_a, op_b, m, n, k, run_mkl, seen=seen)
    if backend == "numpy1":
        _numpy_serial(a, b, out)
    else:
        run_mkl()
    return out


#: bytes of the ``k x n`` operand from which a thin product (fewer than :data:`MIN_PART` rows:
#: batch-1 ``predict``'s layers) under :func:`serial_work` may still be worth two threads: it reads
#: the whole operand for few multiply-adds, so it runs at memory speed, and a second core brings
#: its own cache and bandwidth (the mlp's 1x784 @ 784x512 reads 1.6 MB for 0.4 M multiply-adds)
THIN_BYTES = 1 << 18
#: timings of a thin class at most; the choice is kept (on disk) once two in a row agree
THIN_ROUNDS = 3
_thin_chosen = {}                # thin shape class (tuple) + (parts, var) -> "one", "mkl", "numpy", "cols", "par", "mklT"
_thin_pending = set()            # their keys whose choice waits for thin_gemm's loop to compile


def _thin_choice(a, b, out, op_a, op_b, op_c, m, n, k, seen, parts=None):
    """``"one"`` (one thread, :func:`_run_one`), ``"mkl"`` (MKL's own threads), ``"numpy"``
    (NumPy's OpenBLAS on its threads), ``"cols"`` (a split on the runtime's Python threads,
    :func:`_run_split`), ``"par"`` (column blocks on numba's pool, ``thin_gemm``) or, for a
    variable's weight, ``"mklT"`` (MKL's threads on its transpose, ``thin_layout``) for a thin
    product under :func:`serial_work` whose ``k x n`` operand is at least :data:`THIN_BYTES`, by
    its class's timing (:func:`_thin_class`; wall time: the candidates
    differ in threads; :func:`_thin_timing`). One thread is the incumbent, and stays without a
    timing where no second thread is to be had (:func:`split_parts` 1, inside
    :func:`blocks_here`, ``TW_GEMM_SPLIT=0``) or the machine is busy (``gemm_tuning.quiet``: as for
    :func:`_threaded_choice`, a two-thread timing there measures the other processes). Why timed:
    :func:`serial_work` is measured on cubes, whose work grows faster than their operands; a
    batch-1 layer's product is bound by memory, not arithmetic, so one core's bandwidth and cache,
    not its multiply-adds, is what a second thread adds (PyTorch's batch-1 mlp, on MKL's threads,
    took 0.081 ms a request on the Intel Xeon of issue 18 session 15; tensorweave on one thread
    0.210). The caller computes the product with the choice even after a timing, so every call of
    a class gives the same bits. Until ``thin_gemm``'s parallel loop is compiled (in the
    background, never on this thread) a timing holds for the process only and the class is timed
    again, with the loop, once it is (``_thin_pending``). ``parts``: :func:`split_parts`, where
    the caller has read it (:func:`_way`)."""
    if not _split["on"] or getattr(_thread_share, "here", None) is not None:   # inside blocks_here
        return "one"
    parts = split_parts() if parts is None else parts
    if parts < 2:
        return "one"
    var = op_b[0] == _NO_TRANS and thin_layout.applies(b)
    key = seen + (parts, var)
    got = _thin_chosen.get(key)
    if got is None or key in _thin_pending:
        cls = _thin_class(m, n, k, a.dtype.name, op_a, op_b, parts, var)
        if got is None:
            got = tuner().backend(cls)
        elif not (gemm_tuning.quiet() and _thin_ready(a, b, out, op_a, op_b, n, parts)):
            return got                  # waiting for the parallel loop (or quiet): the process's choice
        else:
            got = None                  # the loop is ready: time the class again, with it
        if got is None and gemm_tuning.quiet():
            if not _came_round(b):      # timed once the model's thin weights have all run once
                return _thin_chosen.get(key, "one")
            got, pending = _thin_timing(cls, a, b, op_a, op_b, op_c, m, n, k, seen, parts, var)
            (_thin_pending.add if pending else _thin_pending.discard)(key)
        _thin_chosen[key] = got or "one"
    return _thin_chosen[key]


def _thin_class(m, n, k, dtype, op_a, op_b, parts, var):
    """A thin class's name in the tuning cache: ``thinvar:`` where the ``k x n`` operand is a
    variable's weight (``var``: the transposed layout, ``thin_layout``, is a candidate too; issue 18
    pred23), ``thincold:`` otherwise (the ``thin:`` entries timed hot before issue 18 pred20 are
    ignored).

    >>> _thin_class(1, 512, 784, "float32", (_NO_TRANS, 784), (_NO_TRANS, 512), 2, True)
    'thinvar:float32:NN:1,10,10,p2'
    """
    base = gemm_tuning.shape_class(m, n, k, dtype, op_a[0] == _TRANS, op_b[0] == _TRANS)
    return ("thinvar:" if var else "thincold:") + base + f",p{parts}"


#: thin weights a process has run while a thin class waited for its timing (data address -> bytes,
#: in the order first run): the weight set a class is timed over (:func:`_came_round`); at most
#: this many (a set that large times at once, over every part's L2 twice, as before issue 18 session 18)
THIN_SET_MAX = 64
_thin_set = {}


def _came_round(b):
    """Whether the weight ``b`` was seen by an untimed thin class's product before (noted now
    otherwise, and False). Why: a batch-1 ``predict`` runs its layers' thin products in turn, each
    reading its own weight, so when the first weight comes round again, every layer's weight is
    noted and the class is timed with each call as far (in bytes read) from its weight's last
    reading as in the model (:func:`_thin_timing`). Timed alone over copies that cover every part's
    L2 twice (issue 18 pred20), every candidate read from L3, but in the model two threads keep
    half of all the weights each in their L2 where they fit (the mlp's 2.6 MB: 1.3 MB a core)
    while one thread cannot: the timing was biased against two threads. The bytes that count are
    those noted from the weight on (:func:`_cycle_bytes`). Weights of classes chosen already (from
    disk) are not noted, and a freed weight's address may be reused: the set
    is the model's as far as a process can tell cheaply. A full set (:data:`THIN_SET_MAX`) answers
    True at once."""
    address = b.__array_interface__["data"][0]
    if address in _thin_set or len(_thin_set) >= THIN_SET_MAX:
        return True
    _thin_set[address] = b.nbytes
    return False


def _cycle_bytes(b):
    """Bytes of the weights noted from ``b`` on (``b`` included), 0 where ``b`` is not noted: what a
    forward pass reads between two reads of ``b``. Not the whole set: the weights of a model run
    before (a throw-away warm-up copy, a model since freed) come earlier in it.

    >>> w = np.ones((4, 4), np.float32)
    >>> _cycle_bytes(w)
    0
    """
    address, total = b.__array_interface__["data"][0], 0
    for noted, nbytes in list(_thin_set.items()):     # (a copy: another thread may note one meanwhile)
        if total or noted == address:
            total += nbytes
    return total


def _thin_args(a, b, out, op_a, op_b, n, parts):
    """``thin_gemm``'s loop arguments for the product into ``out`` in ``parts`` column blocks."""
    from tensorweave.kernels.cpu import thin_gemm
    return thin_gemm.arguments(a, b, out, op_a[0], op_a[1], op_b[0], op_b[1], n, parts, block_size(n, parts))


def _thin_ready(a, b, out, op_a, op_b, n, parts):
    """Whether ``thin_gemm``'s parallel loop can be timed now (see ``thin_gemm.ready``)."""
    from tensorweave.kernels.cpu import thin_gemm
    return thin_gemm.ready(_thin_args(a, b, out, op_a, op_b, n, parts))


def _thin_timing(cls, a, b, op_a, op_b, op_c, m, n, k, seen, parts, var=False):
    """The thin class ``cls``'s backend (:func:`_thin_choice`), timed now on copies of ``a`` and
    ``b`` and recorded in the tuner.

    Two things make a thin product's timing differ from the product in a model, and both are
    handled here:

    - The weights are cold there. A batch-1 forward pass reads each layer's weights once, then
      the other layers' (the mlp's 2.6 MB in all), so a layer's weights come from L3, not from the
      core's L2; timed alone, one thread finds the operand in its L2 on every call after the first
      (1x784 @ 784x512 on one MKL thread: 31 µs hot against 76 over rotating copies, 1x512 @
      512x512 18 against 46, thread CPU at load 4.6 on the Intel Xeon of issue 18). So every
      timed call takes the next of enough copies of ``b`` that together they exceed every part's
      L2 (:func:`_l2_bytes`) twice over: each candidate is timed reading from L3 (a weight that
      large alone is timed without copies: the copies take at most that much memory). Since issue
      18 session 18 the copies hold, where fewer, as many bytes as the model's thin weights
      (:func:`_came_round`): reading from L3 biased the timing against two threads, which in the
      model keep their halves of all the weights in their L2 where those fit.
    - Two threads' wall time on a shared machine swings from call to call, and a single timing
      that happened to land in a burst of load chose one thread for good (``one_us`` 110 against
      ``mkl_us`` 222 on disk, where a quiet timing read MKL's threads 35 % faster). So the class is
      timed up to :data:`THIN_ROUNDS` times (``gemm_tuning.measure``/``pick``, interleaved, the
      incumbent ``one`` kept unless beaten by the tuner's margin by median and fastest call) until
      two timings in a row pick the same backend, each settled; only then is the choice written
      to disk. Without two that agree (or on a machine that turned busy meanwhile) the process
      keeps ``one``, untimed classes elsewhere are unaffected, and the next process measures
      again.

    ``var``: ``b`` is a variable's weight, so MKL's threads on its transpose (``"mklT"``,
    ``thin_layout``) are a candidate too, each copy with its own transpose."""
    copies = -(-2 * parts * _l2_bytes() // max(1, b.nbytes))   # 1: b alone is cold (no copy made)
    cycle = _cycle_bytes(b)
    if cycle:           # as many bytes as the model's thin weights (nearest): each call as far from
        copies = min(copies, max(1, round(cycle / max(1, b.nbytes))))   # its weight's last read
    bs = [b] + [b.copy(order="K") for _ in range(copies - 1)]
    outs = [np.empty((m, n), a.dtype) for _ in range(2)]

    def one(a, b, out):
        _run_one(a, b, out, op_a, op_b, op_c, m, n, k, seen)

    def mkl(a, b, out):
        _gemm[a.dtype](op_a[0], op_b[0], m, n, k, a, op_a[1], b, op_b[1], out, op_c[1])

    def numpy(a, b, out):
        np.matmul(a, b, out=out)

    def cols(a, b, out):
        _run_split("cols", a, b, out, op_a, op_b, op_c, k, parts)

    def par(a, b, out):
        _run_thin_blocks(a, b, out, op_a, op_b, n, parts)
    runners = {"one": one, "mkl": mkl}
    if var:         # a variable's weight: MKL's threads on its transpose too (each copy's own, not
        flipped = {id(x): thin_layout.transpose(x) for x in bs}     # kept unless chosen)

        def mklT(a, b, out):
            _mkl_flipped(_gemm[a.dtype], a, flipped[id(b)], out, op_a, op_c, m, n, k)()
        runners["mklT"] = mklT
    if _openblas_threads() is not None:
        runners["numpy"] = numpy
    pending = False
    if n >= 2 * MIN_PART:
        runners["cols"] = cols
        from tensorweave.kernels.cpu import thin_gemm
        if _thin_ready(a, b, outs[0], op_a, op_b, n, parts):
            runners["par"] = par
        else:       # timed again once the loop is compiled; meanwhile the choice is the process's
            pending = thin_gemm.possible()
    one(a, b, outs[0])                  # the one-thread library chosen before the timing
    runners = _rotating(runners, a, bs, outs)
    others = gemm_tuning.others_running()
    before, (choice, agreed) = None, ("one", False)
    for rounds in range(1, THIN_ROUNDS + 1):
        times = gemm_tuning.measure(runners)
        picked = gemm_tuning.pick(times, incumbent="one")
        if before is not None:
            choice, agreed = gemm_tuning.agree(before, picked, "one")   # both settled, the same backend
            if agreed:
                break
        before = picked
    agreed = agreed and gemm_tuning.quiet()
    choice = choice if agreed else "one"
    # kept with the last round's timings and their conditions (a noisy one is timed again by the
    # next quiet process, as the other classes' are: gemm_tuning.Tuner.backend)
    choice = tuner().keep(cls, {"backend": choice, "settled": agreed and not pending, "rounds": rounds}, times,
                          others)
    return choice, pending


def _run_thin_blocks(a, b, out, op_a, op_b, n, parts):
    """The thin product into ``out`` as ``parts`` column blocks on numba's pool (``thin_gemm``)."""
    from tensorweave.kernels.cpu import thin_gemm
    thin_gemm.run(a, b, out, op_a[0], op_a[1], op_b[0], op_b[1], n, parts, block_size(n, parts))


def _rotating(runners, a, bs, outs):
    """``{name: call()}`` for ``{name: run(a, b, out)}``: each call, whichever runner's, runs on
    the next of the copies ``bs`` in turn (so a copy is read again only after all the others
    were) into one of ``outs`` (alternately)."""
    turn = itertools.count()

    def rotating(run):
        def call():
            i = next(turn)
            run(a, bs[i % len(bs)], outs[i % len(outs)])
        return call
    return {name: rotating(run) for name, run in runners.items()}


def _l2_bytes(cache="/sys/devices/system/cpu/cpu0/cache"):
    """The L2 cache of a core in bytes, as Linux's sysfs ``cache`` folder lists it (read once per
    process); 2 MiB where it cannot be read.

    >>> _l2_bytes("/no/such/folder") > 0
    True
    """
    if cache not in _l2:
        _l2[cache] = 2 << 20
        for index in sorted(glob.glob(os.path.join(cache, "index*"))):
            try:
                with open(os.path.join(index, "level"), encoding="ascii") as f:
                    level = f.read().strip()
                with open(os.path.join(index, "size"), encoding="ascii") as f:
                    size = f.read().strip()
            except OSError:
                continue
            digits, unit = (size[:-1], size[-1]) if size[-1:] in "KM" else (size, "")
            if level == "2" and digits.isdigit():
                _l2[cache] = int(digits) << {"K": 10, "M": 20, "": 0}[unit]
                break
    return _l2[cache]


_l2 = {}                         # sysfs cache folder -> a core's L2 bytes, read once


def split_parts():
    """Threads a product above :func:`serial_work` may be split over (1: not split):
    :func:`threads_here`, and 1 under ``TW_GEMM_SPLIT=0``, a forced ``TW_BLAS`` and without NumPy's
    OpenBLAS; inside :func:`blocks_here`, its count (cut as for that many threads, all run on this
    one)."""
    here = getattr(_thread_share, "here", None)
    if here is not None:
        return here
    return (threads_here() or 1) if _split["on"] else 1


def threads_here():
    """The calling thread's share of the cores for one product: the intra-op thread count
    (OpenBLAS's, which ``tw.config.threading`` sets as MKL's, and which a Ray worker started with
    one CPU has at 1), at most one per core and at most the calling thread's own cap
    (:func:`limit_split_here`: an in-process rank's); 1 on a tiled kernel's helper thread
    (``tiles.over_tiles``: its products run on one thread beside the caller's); None without
    NumPy's OpenBLAS (then no one-thread library choice is made for that reason). Where it is 1, a
    product runs on one thread whatever its size, on the library measured faster on one thread
    for its class (:func:`_run_2d`). ~1 µs: OpenBLAS's count is read by a C call each time (a
    user may change it, through threadpoolctl, at any moment); whether this is a helper thread is
    looked up once per thread (:func:`_on_helper`)."""
    if _openblas_threads() is None:
        return None
    share = _thread_share
    helper = share.helper
    if helper is None:
        helper = share.helper = _on_helper(threading.current_thread().name)
    cap = share.parts
    if helper or cap is not None and cap <= 1:
        # (a rank thread's cap of one answers without OpenBLAS's count: that read is a ctypes
        # call, which drops the GIL, and the other rank thread took it there several times a step)
        return 1
    parts = min(_openblas["found"][0](), _cores())
    return parts if cap is None else max(1, min(parts, cap))


def _on_helper(name):
    """Whether a thread of this name is one of the runtime's helper threads: the pool names them
    ``<prefix>_<n>`` after its ``thread_name_prefix`` ``tw-<runtime>-intra`` (before issue 18
    session 18 only a name ending in ``-intra`` itself matched, which no pool thread has).

    >>> _on_helper("tw-default-intra_0"), _on_helper("tw-default-intra"), _on_helper("MainThread")
    (True, True, False)
    """
    return name.endswith(_HELPER) or name.rpartition("_")[0].endswith(_HELPER)


def _share():
    """The calling thread's share for a product above :func:`serial_work`: :func:`split_parts`
    where products may be split (the same count), else :func:`threads_here`; None without NumPy's
    OpenBLAS and under ``TW_GEMM_SHARE=0`` (products on a one-thread share then go to MKL's
    threaded call, as before issue 18 session 14: an A/B switch, ``bench_gemm_split.py --other
    noshare``)."""
    if not _split["share"] or _openblas_threads() is None:
        return None
    return split_parts() if _split["on"] else threads_here()


class _ThreadShare(threading.local):
    """``here`` (:func:`blocks_here`'s parts) and ``parts`` (:func:`limit_split_here`'s cap), None
    on a thread that set neither; ``helper``, whether the thread is a runtime helper (None until
    :func:`threads_here` first asks on it). Class defaults, because a ``getattr(local, name, None)`` that
    misses raises and catches an AttributeError inside: 1.4 µs against 0.3 (thread CPU, load 12),
    and a batch-1 thin product asked 8 times (``route``, ``split_parts`` x3, ``_thin_choice``).

    >>> share = _ThreadShare()
    >>> share.here, share.parts, share.helper, share.__dict__
    (None, None, None, {})
    """
    here = None
    parts = None
    helper = None      # threads_here's answer to "a runtime helper thread?", once known


#: the calling thread's own cap on split parts (OpenBLAS's count is process-wide: an in-process
#: rank thread's share of the cores is per thread, like MKL's count there)
_thread_share = _ThreadShare()


@contextlib.contextmanager
def blocks_here(parts):
    """Within, on this thread: a product above :func:`serial_work` is cut into the blocks of a
    ``parts``-way split (:func:`split_parts` answers ``parts``), and every block (and every task
    :func:`share_tasks` is given) runs on this thread, none handed to a helper. For two products
    run side by side, one per thread (``runtime/overlap.py``: while the calling thread computes a
    product, a helper computes another): each has the blocks, so the bits, it has when split
    over ``parts`` threads, whichever thread runs it and whether or not the two overlap. A product
    whose class chose MKL's threads takes MKL's one-thread call here (:func:`_in_pair`).

    >>> with blocks_here(2):
    ...     split_parts()
    2
    """
    before = getattr(_thread_share, "here", None)
    _thread_share.here = parts
    try:
        yield
    finally:
        _thread_share.here = before


def inside_blocks_here():
    """Whether this thread is inside :func:`blocks_here` (its work shared with no helper)."""
    return getattr(_thread_share, "here", None) is not None


def limit_split_here(parts):
    """Caps :func:`split_parts` on the calling thread at ``parts`` (``None``: no cap); returns the
    previous cap. ``distribute/rank_threads.py`` sets a rank thread's share with it, so two ranks
    on two cores do not each split their products over both cores."""
    before = getattr(_thread_share, "parts", None)
    _thread_share.parts = parts
    return before


#: the end of the runtime's helper threads' names (``Runtime.intra_op_pool``)
_HELPER = "-intra"


def _threaded_choice(a, b, out, op_a, op_b, op_c, m, n, k, seen, parts, run_mkl):
    """``"mkl"`` (the library's own threads), ``"rows"`` / ``"cols"`` (:func:`_run_split`) or
    ``"mklT"`` (below) for a
    product above :func:`serial_work`, by its shape class's timing (``threads:<class>,p<parts>``
    in the tuning cache). The caller computes the product with the choice even after a timing
    (one more product, once per class), so every call of a class gives the same bits.

    Why measured: on AMD EPYC MKL's two threads ran the mlp's 128x784 @ 784x512 at a third of
    OpenBLAS's speed and spun its idle thread between products (process CPU 1.8x JAX's), while on
    Intel its threaded GEMM is the fastest of all; a split keeps no pool spinning (each part is a
    one-thread call) but pays a hand-off to the helper thread and reads the unsplit operand once
    per part. The split along the longer side of the output is the incumbent: the other
    candidates must beat it by the tuner's margin by median and fastest call. On a busy machine
    (load average over the cores, ``gemm_tuning.quiet``) the class is not timed: two-thread
    timings there measure the other processes (the mlp's 128x784 @ 784x512 read 11 ms on MKL's
    threads against 25 split in one process and 20 against 7 in the next, at load 15-20), so the
    process keeps the incumbent, which spins no pool, until a quiet process measures. Nor inside
    :func:`blocks_here`, where a split's blocks would be timed on one thread.

    A product of fewer than :data:`MIN_PART` rows over a variable's ``k x n`` weight (a batch-1
    layer above :func:`serial_work`: the cnn's 1x9216 @ 9216x128) has a class of its own,
    ``threadsvar:``, with MKL's threads on the weight's kept transpose (``"mklT"``,
    ``thin_layout``) a candidate too (issue 18 pred23).

    ``"one"`` (:func:`_run_one`: the whole product on the calling thread) is a candidate too (issue
    18 session 19, mlp23): on this project's 2-vCPU Xeon the mlp's threaded classes cost 24-37 %
    more CPU on MKL's two threads than on one (thread and process CPU, load 8), and with every
    threaded class forced onto one thread the mlp step took 9.45 ms of process CPU against 12.08
    (10 of 10 alternated rounds, load 8.8) — whether one thread also wins the wall on a quiet
    machine is this timing's to say. A cached choice timed without it (no ``one_us``) is timed again."""
    var = m < MIN_PART and op_b[0] == _NO_TRANS and thin_layout.applies(b)
    key = seen + ((parts, "T") if var else (parts,))
    got = _split_chosen.get(key)
    if got is None:
        cls = ("threadsvar:" if var else "threads:") + gemm_tuning.shape_class(
            m, n, k, a.dtype.name, op_a[0] == _TRANS, op_b[0] == _TRANS) + f",p{parts}"
        can_time = getattr(_thread_share, "here", None) is None and gemm_tuning.quiet()
        spun = parts == 2 and _spin_ready(a.dtype)
        if can_time and spun:
            _drop_unspun(cls)
        got = _split_chosen[key] = _cached_threaded(cls, can_time)
        if got is None:
            runners = {"mkl": run_mkl, "one": functools.partial(_run_one, a, b, out, op_a, op_b, op_c, m, n, k, seen)}
            if var:
                runners["mklT"] = _sleeping_after(_mkl_flipped(_gemm[a.dtype], a, thin_layout.transpose(b), out,
                                                               op_a, op_c, m, n, k))     # (not kept unless chosen)
            for axis, size in (("rows", m), ("cols", n)):
                if size >= 2 * MIN_PART:
                    runners[axis] = functools.partial(_run_split, axis, a, b, out, op_a, op_b, op_c, k, parts)
            incumbent = max((axis for axis in ("rows", "cols") if axis in runners),
                            key=lambda axis: m if axis == "rows" else n, default="mkl")
            if can_time:
                got = timed_choice(cls, runners, incumbent, runners["one"])
                if spun:
                    _mark(cls, SPUN)
            else:   # see the docstring: no timing under load, nor of blocks run on one thread
                got = incumbent
            _split_chosen[key] = got
    return got


#: the field of a threaded class's kept timing whose splits ran their blocks with ``spin_share``'s
#: helper: an entry without it (its splits timed on the Python pool, before issue 18 mlp28) is
#: timed again by a quiet process that has the helper
SPUN = "spin"


def _spin_ready(dtype):
    """Whether a two-part split of ``dtype`` can run on ``spin_share``'s helper in this process."""
    return _spin_helper(dtype) is not None


def _mkl_addresses(dtype):
    """``(cblas_?gemm, MKL_Set_Num_Threads_Local)`` addresses of MKL's one-thread call for
    ``dtype``, or None (no MKL with a per-thread setting)."""
    serial = _gemm_serial.get(dtype)
    args = getattr(serial, "args", ())
    return (args[2], args[0]) if len(args) == 3 else None


def _spin_helper(dtype):
    """``spin_share``'s helper for splits of ``dtype`` (MKL's per-thread count of its thread at 1
    where MKL is loaded), or None where it cannot be had now (``spin_share.shared``)."""
    mkl = _mkl_addresses(dtype)
    return spin_share.shared(mkl[1] if mkl is not None else 0)


def _drop_unspun(cls):
    """Drops threaded class ``cls``'s entry where its splits were timed without the helper."""
    t = tuner()
    entry = t.choices.get(cls)
    if entry is not None and not entry.get(SPUN) and ("rows_us" in entry or "cols_us" in entry):
        t.choices.pop(cls, None)


def _mark(cls, field):
    """Marks ``cls``'s settled entry with ``field`` (written to the cache file)."""
    t = tuner()
    entry = getattr(t, "choices", {}).get(cls)      # (tests' scripted tuners keep none)
    if entry is not None and entry.get("settled") and not entry.get(field):
        entry[field] = True
        t._write()


def _cached_threaded(cls, can_time):
    """The tuning cache's choice for threaded class ``cls``, or None where there is none, or where
    it was timed without the one-thread candidate (an entry with timings but no ``one_us``: made
    before issue 18 session 19) or without the own-core probe (no :data:`PROBED` mark: kept on the
    load average's word alone, before session 21) and this call ``can_time`` it again (the entry
    is then dropped; where it cannot, the old choice stands for this process)."""
    t = tuner()
    entry = t.choices.get(cls)
    stale = entry is not None and ("one_us" not in entry or own_core.probing() and not entry.get(PROBED))
    if can_time and stale and any(name.endswith("_us") for name in entry):
        t.choices.pop(cls, None)
        return None
    return t.backend(cls)


def _run_split(axis, a, b, out, op_a, op_b, op_c, k, parts, after=None, extra=()):
    """``out = a @ b`` as blocks of ``out``'s rows or columns (multiples of :data:`MIN_PART`, about
    :data:`CHUNKS` per part), each a one-thread product (on the library measured faster on one
    thread for the block's own class: a short last block's may differ), taken in turn by this thread and ``parts - 1`` of the runtime's
    helper threads from a shared counter (:func:`share_tasks`). The bits are those of a
    one-thread call of the whole product on the same library for every shape of the mlp step and
    their transposes, in MKL and OpenBLAS (both block K the same way for any M, N); OpenBLAS's
    small-matrix kernels (100x300 @ 300x70) differ from its blocked ones by a few ulps, as they do
    between any two sizes. Which thread computes a block does not change its bits.

    ``after(i, j)``, when given, runs on each block's thread right after the block's product
    (``i:j`` its rows or columns), while the block is in that core's cache (see
    :func:`matmul_then`). ``extra``: more tasks (callables) taken from the same counter after the
    blocks, so they share the product's one hand-off to the helper threads.

    NumPy's OpenBLAS is held at one thread (:func:`_openblas_one_thread`) only while some block
    runs on it: where every block's class runs on MKL's one-thread call (the mlp's on Intel),
    setting OpenBLAS's count to 1 and back around the blocks bought nothing and cost two C calls
    and the count's lock on every split product (2-3 µs, issue 18 session 16)."""
    m, n = out.shape
    size = m if axis == "rows" else n
    step = block_size(size, parts)
    if axis == "rows":
        pieces = [(a[i:i + step], b, out[i:i + step]) for i in range(0, size, step)]
    else:
        pieces = [(a, b[:, i:i + step], out[:, i:i + step]) for i in range(0, size, step)]
    # each block on its own shape class's one-thread library (a short last block may be of another
    # class than the full ones: it runs as a product of that class alone would)
    runners = {}
    for piece in pieces:
        if piece[2].shape not in runners:
            runners[piece[2].shape] = _part_runner(piece, op_a, op_b, op_c, k)
    if after is None and not extra and _spun(axis, a, b, out, op_a, op_b, op_c, k, parts, step, len(pieces),
                                             runners):
        return
    if after is None:
        tasks = [functools.partial(runners[piece[2].shape], *piece) for piece in pieces]
    else:
        def run(a, b, out, i):
            runners[out.shape](a, b, out)
            after(i, min(size, i + step))
        tasks = [functools.partial(run, *piece, i) for piece, i in zip(pieces, range(0, size, step))]
    if any(run is _numpy_part for run in runners.values()):
        with _openblas_one_thread():
            share_tasks(tasks + list(extra), parts)
    else:   # every block on MKL's one-thread call: OpenBLAS's count is left alone (see the docstring)
        share_tasks(tasks + list(extra), parts)


def _spun(axis, a, b, out, op_a, op_b, op_c, k, parts, step, blocks, runners):
    """Whether the split ran its blocks with ``spin_share``'s helper (compiled code, no GIL, the
    helper spinning between products): two parts, every block on one library's one-thread call
    (MKL's, or NumPy's OpenBLAS held at one thread: the ``cblas_?gemm`` call the Python path
    makes, the same bits), the helper ready and free (False: the caller runs the split the
    Python way)."""
    if parts != 2 or blocks < 2 or not spin_share.enabled():
        return False
    library = {getattr(run, "library", None) for run in runners.values()}
    if len(library) != 1 or None in library or inside_blocks_here():
        return False
    numpy = library == {"numpy1"}
    helper = _spin_helper(a.dtype)
    found = _openblas_gemm(a.dtype) if numpy else _mkl_addresses(a.dtype)
    if helper is None or found is None:
        return False
    fn, set_local, wide = found if numpy else found + (0,)
    m, n = out.shape
    with _openblas_one_thread() if numpy else contextlib.nullcontext():
        return helper.run(fn, set_local, wide, op_a[0], op_b[0], m, n, k, a, op_a[1], b, op_b[1], out, op_c[1],
                          0 if axis == "rows" else 1, step, blocks)


_openblas_calls = {}             # dtype -> (NumPy's OpenBLAS cblas_?gemm address, 0, 1: ILP64), or None


def _openblas_gemm(dtype):
    """``(address, 0, wide)`` of NumPy's OpenBLAS ``cblas_?gemm`` for ``dtype`` (``wide``: its
    ILP64 interface), or None where it is not found (``rnn_gemm.openblas_gemm``)."""
    if dtype not in _openblas_calls:
        from tensorweave.kernels.cpu import rnn_gemm
        found = rnn_gemm.openblas_gemm(dtype)
        _openblas_calls[dtype] = None if found is None else (found[0], 0, int(found[1] == rnn_gemm.ILP64))
    return _openblas_calls[dtype]


#: blocks per part of a split product (:func:`block_size`). More would let a helper thread that
#: starts late (the machine busy) find fewer blocks left, but cost CPU per block: with 4 the mlp
#: step's CPU was no lower and its wall no better at load 14-18 (issue 18, session 13)
CHUNKS = {"per_part": 1}


def block_size(size, parts):
    """Rows or columns of one block when ``size`` of them are split for ``parts`` threads: about
    ``CHUNKS["per_part"]`` blocks per part, a multiple of :data:`MIN_PART`.

    >>> block_size(512, 2), block_size(100, 2), block_size(100, 3)
    (256, 64, 48)
    """
    step = -(-size // (parts * max(1, CHUNKS["per_part"])))
    return -(-step // MIN_PART) * MIN_PART


def share_tasks(tasks, parts):
    """Runs every task (a callable) on this thread and ``parts - 1`` helper threads (the runtime's
    intra-op pool), each thread taking the next task not yet taken (an ``itertools.count``: one C
    call, atomic under the GIL) until none is left. Returns when every task is done, having waited
    only for tasks a helper already took: a helper that starts after the caller took the last one
    (its core busy with other processes) finds nothing to do and touches nothing. The first error
    of any task is raised after every task taken has ended. Inside :func:`blocks_here` every
    task runs on this thread.

    >>> done = []
    >>> share_tasks([lambda: done.append(1), lambda: done.append(2)], 1)
    >>> sorted(done)
    [1, 2]
    """
    if len(tasks) < 2 or parts < 2 or inside_blocks_here():
        for task in tasks:
            task()
        return
    from tensorweave.core.context import current_runtime
    taken = itertools.count()
    state = {"left": len(tasks), "error": None}
    lock, finished = threading.Lock(), threading.Event()

    def work():
        while True:
            i = next(taken)
            if i >= len(tasks):
                return
            try:
                tasks[i]()
            except BaseException as e:  # noqa: BLE001 - raised on the calling thread
                state["error"] = state["error"] or e
            with lock:
                state["left"] -= 1
                if state["left"] == 0:
                    finished.set()
    pool = current_runtime().intra_op_pool()
    for _ in range(min(parts, len(tasks)) - 1):
        pool.submit(work)
    work()
    finished.wait()
    if state["error"] is not None:
        raise state["error"]


def _part_runner(piece, op_a, op_b, op_c, k):
    """``run(a, b, out)`` of one block of a split product on one thread, on the library measured
    faster on one thread for the block's class (timed on ``piece`` when the class is new)."""
    a, b, out = piece
    m, n = out.shape
    mkl1 = _gemm_serial.get(a.dtype)

    def run_mkl1(a, b, out):
        mkl1(op_a[0], op_b[0], out.shape[0], out.shape[1], k, a, op_a[1], b, op_b[1], out, op_c[1])
    if mkl1 is None:
        return _numpy_part
    got = _serial_library(a, b, out, op_a, op_b, m, n, k, functools.partial(run_mkl1, a, b, out))
    if got == "done":
        got = _serial_library(a, b, out, op_a, op_b, m, n, k, None)
    run_mkl1.library = "mkl1"           # (what spin_share's helper calls instead, :func:`_spun`)
    return run_mkl1 if got == "mkl1" else _numpy_part


def matmul_then(a, b, after, extra=(), scratch=None):
    """``out = a @ b`` (a new array, the bits of :func:`matmul`'s), then ``after(out, i, j)`` over
    blocks ``i:j`` of its rows covering them all, and every task of ``extra`` (callables
    independent of the product: the other variables' updates of a grouped optimizer step). Where
    the product's class runs split by rows (:func:`_threaded_choice`), each block's call follows
    its own product on its own thread while the block is in that core's cache, and the extra tasks
    are taken by the same threads from the same counter (:func:`share_tasks`: one hand-off);
    split otherwise, the row blocks' calls and the extra tasks are shared after the product, or all
    run on the calling thread, by the timing of :func:`after_way`; on one thread, ``after(out, 0,
    m)`` then the tasks. For an epilogue that only reads and writes its rows' elements (an
    optimizer update of a weight gradient: ``fused_kernels.matmul_group_apply_adam``), so the
    result does not depend on the blocks nor on the threads. ``scratch``: ``scratch()`` makes an
    ``after`` doing the same work on copies, for that timing (None: not timed, shared)."""
    geometry = _product(a, b) if a.ndim == 2 and b.ndim == 2 else False
    parts = 1
    if geometry is not False and a.flags.aligned and b.flags.aligned:
        op_a, op_b, m, n, k, seen = geometry
        if route(a.dtype, m, n, k) == "threads":
            parts = split_parts()
            out = np.empty((m, n), a.dtype)
            op_c = (_NO_TRANS, n)
            run_mkl = _sleeping_after(_mkl_runner(_gemm[a.dtype], a, b, out, op_a, op_b, op_c, m, n, k))
            if _threaded_choice(a, b, out, op_a, op_b, op_c, m, n, k, seen, parts, run_mkl) == "rows":
                _run_split("rows", a, b, out, op_a, op_b, op_c, k, parts, lambda i, j: after(out, i, j), extra)
                return out
    out = matmul(a, b)
    m = out.shape[0]
    if parts > 1 and after_way(out, parts, scratch) == "caller":
        parts = 1
    step = block_size(m, parts) if parts > 1 else max(m, 1)
    share_tasks([functools.partial(after, out, i, min(m, i + step)) for i in range(0, m, step)] + list(extra),
                parts)
    return out


_after_chosen = {}               # (dtype char, rows, columns bit lengths, parts) -> "shared" or "caller"


def after_way(out, parts, scratch=None):
    """``"shared"`` or ``"caller"``: how :func:`matmul_then` runs the epilogue of a product that was
    not split by rows (``out``: its result; ``parts``: the threads it may share over) — its row
    blocks and extra tasks shared with the helper threads after the product (a second hand-off:
    the product's own threads, MKL's or a split's, are done), or all on the calling thread.
    Measured, per class ``after:<dtype>:<rows>,<columns>,p<parts>`` (bit lengths) in the tuning
    cache, on ``scratch()``'s copies (the real epilogue writes variables), the shared way the
    incumbent: an optimizer update is a pass bound by memory, and a second core may add
    bandwidth or only cost a wake-up (the mlp's 670 k-element Adam: 0.26 ms on one thread, 0.33 ms
    shared at load 2 on the AMD EPYC; issue 18 mlp29). The extra tasks follow the timed blocks'
    way; they are not timed (they update other variables). Untimed (shared) without ``scratch``,
    on a busy machine (``gemm_tuning.quiet``) or inside :func:`blocks_here`. Same bits either way:
    the epilogue is elementwise."""
    m, n = out.shape
    key = (out.dtype.char, m.bit_length(), n.bit_length(), parts)
    got = _after_chosen.get(key)
    if got is None:
        cls = f"after:{out.dtype.name}:{m.bit_length()},{n.bit_length()},p{parts}"
        got = tuner().backend(cls)
        if got is None and scratch is not None and not inside_blocks_here() and gemm_tuning.quiet():
            run = scratch()
            step = block_size(m, parts)
            blocks = [functools.partial(run, out, i, min(m, i + step)) for i in range(0, m, step)]
            caller = functools.partial(run, out, 0, m)
            got = timed_choice(cls, {"shared": lambda: share_tasks(blocks, parts), "caller": caller},
                               "shared", caller)
        got = _after_chosen[key] = got if got in ("shared", "caller") else "shared"
    return got


def _numpy_part(a, b, out):
    """A block of a split product in NumPy (inside :func:`_openblas_one_thread`: one thread)."""
    np.matmul(a, b, out=out)


_numpy_part.library = "numpy1"
