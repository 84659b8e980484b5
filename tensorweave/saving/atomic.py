"""Durable, atomic replacement of files and directories, and the crash hook of the save tests.

* :func:`fsync_dir` makes a rename inside a directory survive a power cut.
* :func:`replace_dir` puts a complete directory (written under a temporary name beside its
  target) in place of an existing one. On Linux it swaps the two names in one step
  (``renameat2(RENAME_EXCHANGE)``): at every moment the target holds the old or the new
  directory, never nothing. Where that call is missing it renames the old directory aside
  (``.<name>.old-*``) and the new one in; a kill between the two leaves only the aside copy,
  which :func:`recover_dir` (the next save) puts back and readers fall back to.
* :func:`lock_temporary` / :func:`remove_stale` : a writer holds an exclusive ``flock`` on its
  temporary file or directory while it works, so the next writer removes the leftovers of
  killed writers (the lock died with them) and never those of a writer still running.

**Crash hook (tests only).** ``TENSORWEAVE_CHECKPOINT_CRASH_AT=<stage>[:<n>]`` makes the
process exit at once (``os._exit(86)``, no cleanup, like a kill) the ``n``-th time (default
1) it reaches ``<stage>`` (:func:`crash_point`); with ``TENSORWEAVE_CHECKPOINT_CRASH_KILL=1``
it sends itself ``SIGKILL`` instead (``kill -9``: how a Ray worker's death is tested).

>>> import os, tempfile
>>> parent = tempfile.mkdtemp()
>>> target, new = os.path.join(parent, "model"), os.path.join(parent, ".model.tmp-1")
>>> for d, text in ((target, "old"), (new, "new")):
...     os.mkdir(d)
...     with open(os.path.join(d, "f"), "w") as f:
...         _ = f.write(text)
>>> replace_dir(new, target)
>>> open(os.path.join(target, "f")).read(), os.listdir(parent)
('new', ['model'])
"""
import ctypes
import errno
import os
import shutil

CRASH_ENV = "TENSORWEAVE_CHECKPOINT_CRASH_AT"
CRASH_KILL_ENV = "TENSORWEAVE_CHECKPOINT_CRASH_KILL"
CRASH_EXIT_CODE = 86
_crash_counts = {}


def crash_point(stage):
    """Exits the process here when the crash hook names this stage (see the module docstring)."""
    spec = os.environ.get(CRASH_ENV)
    if not spec:
        return
    name, _, nth = spec.partition(":")
    if name != stage:
        return
    _crash_counts[stage] = _crash_counts.get(stage, 0) + 1
    if _crash_counts[stage] == (int(nth) if nth else 1):
        if os.environ.get(CRASH_KILL_ENV):
            import signal
            os.kill(os.getpid(), signal.SIGKILL)
        os._exit(CRASH_EXIT_CODE)


def fsync_dir(directory):
    """Makes a rename inside ``directory`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# ---- swapping two directory names ---------------------------------------------------------------------
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_renameat2 = None


def _load_renameat2():
    global _renameat2
    if _renameat2 is None:
        fn = False
        if os.uname().sysname == "Linux":
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                fn = libc.renameat2
                fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
                fn.restype = ctypes.c_int
            except (OSError, AttributeError):
                fn = False
        _renameat2 = fn
    return _renameat2 or None


def exchange(a, b):
    """Swaps the names ``a`` and ``b`` atomically; False where the system cannot (old kernel
    or C library, a file system without support, not Linux)."""
    fn = _load_renameat2()
    if fn is None:
        return False
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), a)


def aside_prefix(target):
    """Name prefix of the copies of ``target`` that the fallback path renames aside."""
    return f".{os.path.basename(target)}.old-"


def replace_dir(new, target, stage_prefix="saved_model_"):
    """Puts the directory ``new`` at ``target`` (which may exist) atomically, then removes the
    old one. Crash stages: ``<prefix>swapped`` (new in place, old not yet removed) and, on
    the fallback path, ``<prefix>old_aside`` (old renamed aside, new not yet in)."""
    parent = os.path.dirname(os.path.abspath(target))
    if not os.path.lexists(target):
        os.rename(new, target)
        fsync_dir(parent)
        return
    if exchange(new, target):
        fsync_dir(parent)
        crash_point(stage_prefix + "swapped")
        shutil.rmtree(new, ignore_errors=True)        # (now the old directory)
        return
    old = os.path.join(parent, aside_prefix(target) + os.path.basename(new).rpartition("-")[2])
    os.rename(target, old)
    fsync_dir(parent)
    crash_point(stage_prefix + "old_aside")
    os.rename(new, target)
    fsync_dir(parent)
    crash_point(stage_prefix + "swapped")
    shutil.rmtree(old, ignore_errors=True)


def aside_copies(target):
    """Directories the fallback path of :func:`replace_dir` left aside for ``target``, newest first."""
    parent = os.path.dirname(os.path.abspath(target))
    prefix = aside_prefix(target)
    try:
        names = [n for n in os.listdir(parent) if n.startswith(prefix)]
    except OSError:
        return []
    paths = [os.path.join(parent, n) for n in names]
    paths = [p for p in paths if os.path.isdir(p) and not os.path.islink(p)]
    return sorted(paths, key=lambda p: os.stat(p).st_mtime_ns, reverse=True)


def recover_dir(target, complete):
    """After a kill on the fallback path: puts the newest aside copy for which
    ``complete(path)`` holds back at ``target`` when ``target`` is missing, and removes the
    other aside copies (they are older versions). Returns True when it put one back."""
    restored = False
    for p in aside_copies(target):
        if not restored and not os.path.lexists(target) and complete(p):
            os.rename(p, target)
            fsync_dir(os.path.dirname(os.path.abspath(target)))
            restored = True
        else:
            shutil.rmtree(p, ignore_errors=True)
    return restored


# ---- temporaries of killed writers ------------------------------------------------------------------------
def lock_temporary(path):
    """Takes an exclusive lock on the temporary file or directory ``path`` for as long as the
    returned descriptor is open (close it when the write is over); None where locks do not exist."""
    try:
        import fcntl
    except ImportError:
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def unlock(fd):
    if fd is not None:
        os.close(fd)


def remove_stale(directory, prefixes):
    """Removes the entries of ``directory`` whose names start with one of ``prefixes`` and
    that no live writer holds locked (temporaries of killed writes). Never follows links."""
    try:
        import fcntl
    except ImportError:
        return
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        if not name.startswith(tuple(prefixes)):
            continue
        path = os.path.join(directory, name)
        if os.path.islink(path):
            continue
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue                       # a writer is still working on it
        try:
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.remove(path)
        except OSError:
            pass
        finally:
            os.close(fd)
