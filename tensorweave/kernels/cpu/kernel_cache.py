"""numba's compiled kernels kept on disk, so a process does not compile again what an earlier one did.

A cold process used to spend most of its first training step compiling (measured on a loaded
2-core EPYC: mlp 10 s, cnn 39 s, lstm 21 s, fasttext 7 s, against steps of milliseconds); with
the cache only the first process on a machine pays that. :func:`enable` (called by ``jit.njit``)
gives a compiled function numba's file cache with the locator below.

- **Opt-in**: off by default (each process compiles), because numba's cache files are pickles and
  tensorweave loads no pickle from a file unless the user asks: ``TW_KERNEL_CACHE=1`` uses
  ``<$XDG_CACHE_HOME or ~/.cache>/tensorweave/kernels``, ``TW_KERNEL_CACHE=<dir>`` that directory
  (one subdirectory per source folder; never beside the sources, so an installed or read-only
  package works the same).
- **Trust**: numba's cache files are pickles, which loading runs as code. tensorweave reads no
  pickle from a file someone else could have written: the directory must be a real directory
  (not a symbolic link) owned by this user with no permissions for group or others (it is
  created ``0700``), in a parent only its owner or root can change (or a sticky one) — the trust
  Python gives its own bytecode cache. Anything else: no cache, one warning. Model files,
  checkpoints, datasets and the GEMM tuning cache hold no pickles at all.
- **Freshness**: numba's index keys an entry by numba's version, the function's bytecode and
  the CPU (name and features); the source stamp here covers, besides the function's own file,
  every module of ``kernels/cpu`` (size and modification time) and NumPy's version: a kernel
  inlines compiled functions of other modules (``rnn_activations`` into the LSTM step), whose
  edits numba's own stamp (one file) would miss.
- **What**: top-level functions of tensorweave's modules. Closures (their cells may hold
  per-process values) and generated functions (the fused elementwise loops) compile in each
  process.

>>> from tensorweave.kernels.cpu import kernel_cache
>>> kernel_cache.unsafe("/nonexistent/kernels")
'cannot stat it: No such file or directory'
>>> kernel_cache.cacheable(kernel_cache.unsafe)      # a top-level function of tensorweave
True
"""
import hashlib
import inspect
import os
import stat
import sys
import tempfile
import threading
import warnings

import numpy as np
from numba.core import caching

from tensorweave.kernels.cpu.gemm_tuning import user_cache_dir

_PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # .../tensorweave
_KERNELS = os.path.dirname(os.path.abspath(__file__))
_state = {"checked": False, "dir": None}
_stamps = {}
_ready = set()
_lock = threading.Lock()


def directory():
    """The cache directory of this process, or None when caching is off or the directory is not
    private to this user (decided once, on first use)."""
    if not _state["checked"]:
        with _lock:
            if not _state["checked"]:
                _state["dir"] = _choose_directory()
                _state["checked"] = True
    return _state["dir"]


def _choose_directory():
    # Off unless asked for: the project loads no pickle from a file by default (SECURITY.md).
    explicit = os.environ.get("TW_KERNEL_CACHE")
    if explicit is None or explicit.strip().lower() in ("0", "", "off", "false", "no"):
        return None
    on = explicit.strip().lower() in ("1", "on", "true", "yes")
    path = os.path.abspath(os.path.join(user_cache_dir(), "kernels") if on else explicit)
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError:
        return None                                   # read-only home: compile in each process
    why = unsafe(path)
    if why:
        warnings.warn(f"tensorweave: compiled-kernel cache {path} not used ({why}); kernels are compiled "
                      "in each process. Fix its permissions (chmod 700) or set TW_KERNEL_CACHE.", RuntimeWarning,
                      stacklevel=2)
        return None
    return path


def unsafe(path):
    """Why ``path`` may not hold a cache whose files are loaded as code, or None."""
    uid = os.geteuid() if hasattr(os, "geteuid") else None
    try:
        st = os.lstat(path)
        parent = os.stat(os.path.dirname(path))
    except OSError as e:
        return f"cannot stat it: {e.strerror}"
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory (a link or a file)"
    if uid is not None and st.st_uid != uid:
        return "owned by another user"
    if st.st_mode & 0o077:
        return f"group/other permissions {stat.filemode(st.st_mode)}"
    if uid is not None and parent.st_uid not in (uid, 0):
        return "its parent belongs to another user"
    if parent.st_mode & 0o022 and not parent.st_mode & stat.S_ISVTX:
        return "its parent is writable by others"
    return None


def _stamp(py_file):
    """What the compiled code of a function in ``py_file`` depends on besides its bytecode."""
    stamp = _stamps.get(py_file)
    if stamp is None:
        h = hashlib.sha256(np.__version__.encode())
        files = {py_file} | {os.path.join(_KERNELS, f) for f in os.listdir(_KERNELS) if f.endswith(".py")}
        for f in sorted(files):
            st = os.stat(f)
            h.update(f"{os.path.basename(f)}:{st.st_size}:{st.st_mtime_ns};".encode())
        stamp = _stamps[py_file] = h.hexdigest()
    return stamp


class _Locator(caching._CacheLocator):
    def __init__(self, py_func, py_file, root):
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        self._path = os.path.join(root, self.get_suitable_cache_subpath(py_file))

    def ensure_cache_path(self):
        if self._path not in _ready:
            os.makedirs(self._path, mode=0o700, exist_ok=True)
            tempfile.TemporaryFile(dir=self._path).close()      # writable?
            _ready.add(self._path)

    def get_cache_path(self):
        return self._path

    def get_source_stamp(self):
        return _stamp(self._py_file)

    def get_disambiguator(self):
        return str(self._lineno)

    @classmethod
    def from_function(cls, py_func, py_file):
        root = directory()
        if root is None:
            return None
        self = cls(py_func, py_file, root)
        try:
            self.ensure_cache_path()
        except OSError:
            return None
        return self


class _Impl(caching.CompileResultCacheImpl):
    """numba's compile-result cache with the locator above only (not numba's own list, nor
    ``NUMBA_CACHE_LOCATOR_CLASSES``): tensorweave's kernels are never cached beside the sources."""

    def __init__(self, py_func):
        self._lineno = py_func.__code__.co_firstlineno
        source = inspect.getfile(py_func)
        self._locator = _Locator.from_function(py_func, source)
        if self._locator is None:
            raise OSError("no usable kernel cache directory")
        modname = os.path.splitext(os.path.basename(source))[0]
        self._filename_base = self.get_filename_base(f"{modname}.{py_func.__qualname__}",
                                                     getattr(sys, "abiflags", ""))


class _FunctionCache(caching.FunctionCache):
    _impl_class = _Impl


def cacheable(fn):
    """Whether ``fn`` may be cached: a top-level function of a tensorweave source file."""
    if "<locals>" in fn.__qualname__ or fn.__closure__:
        return False
    try:
        source = os.path.abspath(inspect.getfile(fn))
    except TypeError:
        return False
    return source.startswith(_PACKAGE + os.sep) and source.endswith(".py") and os.path.isfile(source)


def enable(dispatcher, fn):
    """Give ``dispatcher`` (``numba.njit(fn, cache=False)``) the on-disk cache when ``fn`` is
    cacheable and the directory usable; otherwise it compiles in each process, as before."""
    if not cacheable(fn) or directory() is None or not hasattr(dispatcher, "_cache"):
        return False
    try:
        dispatcher._cache = _FunctionCache(fn)       # what Dispatcher.enable_caching does, our locator
    except OSError:
        return False
    return True
