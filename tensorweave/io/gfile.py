"""``tw.io.gfile``: TensorFlow's file API over the local file system (``os``, ``shutil``, ``glob``).

>>> import os, tempfile
>>> import tensorweave as tw
>>> d = tempfile.mkdtemp()
>>> with tw.io.gfile.GFile(os.path.join(d, "a.txt"), "w") as f:
...     _ = f.write("hello")
>>> tw.io.gfile.listdir(d), tw.io.gfile.exists(os.path.join(d, "a.txt"))
(['a.txt'], True)
"""
import glob as _glob
import os
import shutil

from tensorweave.core import errors

__all__ = ["GFile", "exists", "glob", "isdir", "listdir", "makedirs", "mkdir", "remove", "rename", "rmtree",
           "stat", "walk", "copy", "join", "split"]


def _p(path):
    return os.fsdecode(path) if isinstance(path, bytes) else os.fspath(path)


class GFile:
    """A file object (``open``'s) with TF's names: ``read``, ``write``, ``readline``, ``readlines``,
    ``size``, ``seek``, ``tell``, ``flush``, ``close``; a context manager and an iterator of lines."""

    def __init__(self, name, mode="r"):
        self.name, self.mode = _p(name), mode
        try:
            self._f = open(self.name, mode if "b" in mode else mode, **({} if "b" in mode else {"encoding": "utf-8"}))
        except FileNotFoundError:
            raise errors.NotFoundError(f"{self.name}; No such file or directory") from None

    def __getattr__(self, name):
        return getattr(self._f, name)

    def size(self):
        return os.path.getsize(self.name)

    def read(self, n=-1):
        return self._f.read(n)

    def write(self, data):
        return self._f.write(data)

    def __iter__(self):
        return iter(self._f)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()

    def close(self):
        self._f.close()


def exists(path):
    return os.path.exists(_p(path))


def glob(pattern):
    return sorted(_glob.glob(_p(pattern)))


def isdir(path):
    return os.path.isdir(_p(path))


def listdir(path):
    try:
        return sorted(os.listdir(_p(path)))
    except FileNotFoundError:
        raise errors.NotFoundError(f"Could not find directory {_p(path)}") from None


def makedirs(path):
    os.makedirs(_p(path), exist_ok=True)


def mkdir(path):
    os.mkdir(_p(path))


def remove(path):
    try:
        os.remove(_p(path))
    except FileNotFoundError:
        raise errors.NotFoundError(f"{_p(path)}; No such file or directory") from None


def rename(src, dst, overwrite=False):
    if not overwrite and os.path.exists(_p(dst)):
        raise errors.FailedPreconditionError(f"{_p(dst)} already exists. Hint: pass overwrite=True")
    os.replace(_p(src), _p(dst))


def rmtree(path):
    shutil.rmtree(_p(path))


def copy(src, dst, overwrite=False):
    if not overwrite and os.path.exists(_p(dst)):
        raise errors.FailedPreconditionError(f"{_p(dst)} already exists. Hint: pass overwrite=True")
    shutil.copyfile(_p(src), _p(dst))


class _Stat:
    def __init__(self, st):
        self.length, self.mtime_nsec, self.is_directory = st.st_size, st.st_mtime_ns, os.path.isdir


def stat(path):
    st = os.stat(_p(path))
    out = _Stat(st)
    out.is_directory = os.path.isdir(_p(path))
    return out


def walk(top, topdown=True, onerror=None):
    for d, subdirs, files in os.walk(_p(top), topdown=topdown, onerror=onerror):
        yield d, sorted(subdirs), sorted(files)


join = os.path.join
split = os.path.split
