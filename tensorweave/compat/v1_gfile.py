"""TF1's ``tf.gfile`` (CamelCase names) over ``tw.io.gfile``: ``Exists``, ``GFile``/``Open``/
``FastGFile``, ``Glob``, ``MakeDirs``, ``ListDirectory``, ``Walk``, ``Copy``, ``Rename``...

>>> import os, tempfile
>>> import tensorweave.compat.v1 as tf
>>> d = tempfile.mkdtemp()
>>> with tf.gfile.GFile(os.path.join(d, "a.txt"), "w") as f:
...     _ = f.write("hi")
>>> tf.gfile.Exists(os.path.join(d, "a.txt")), tf.gfile.ListDirectory(d)
(True, ['a.txt'])
"""
from tensorweave.io import gfile as _g

__all__ = ["Copy", "DeleteRecursively", "Exists", "FastGFile", "GFile", "Glob", "IsDirectory", "ListDirectory",
           "MakeDirs", "MkDir", "Open", "Remove", "Rename", "Stat", "Walk"]

GFile = Open = _g.GFile


def FastGFile(name, mode="r"):  # noqa: N802 - TF1's name
    """TF1's unbuffered-read file object: the same as ``GFile`` here."""
    return _g.GFile(name, mode)


def Exists(filename):  # noqa: N802
    return _g.exists(filename)


def IsDirectory(dirname):  # noqa: N802
    return _g.isdir(dirname)


def ListDirectory(dirname):  # noqa: N802
    return _g.listdir(dirname)


def Glob(filename):  # noqa: N802
    return _g.glob(filename)


def MakeDirs(dirname):  # noqa: N802
    return _g.makedirs(dirname)


def MkDir(dirname):  # noqa: N802
    return _g.mkdir(dirname)


def Remove(filename):  # noqa: N802
    return _g.remove(filename)


def DeleteRecursively(dirname):  # noqa: N802
    return _g.rmtree(dirname)


def Rename(oldname, newname, overwrite=False):  # noqa: N802
    return _g.rename(oldname, newname, overwrite=overwrite)


def Copy(oldpath, newpath, overwrite=False):  # noqa: N802
    return _g.copy(oldpath, newpath, overwrite=overwrite)


def Stat(filename):  # noqa: N802
    return _g.stat(filename)


def Walk(top, in_order=True):  # noqa: N802
    return _g.walk(top, topdown=in_order)
