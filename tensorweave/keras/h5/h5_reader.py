"""Reading HDF5 files that may come from anyone: h5py, opened on a regular file we opened,
with every object checked before its data is read.

What a Keras ``.h5`` file may hold here: groups, hard links, numeric datasets (no object,
variable-length, compound or reference types; no external or virtual storage) whose
decompressed size is bounded by the file's size, and string attributes of bounded length.
Soft and external links are refused (they would reach other files). Nothing in the file is
ever turned into code: the model config is plain JSON, checked like our own formats.
"""
import os

import numpy as np

from tensorweave.saving import validation as V
from tensorweave.saving.validation import LoadError, fail

MAX_DEPTH = 64                  # group nesting
MAX_OBJECTS = 1 << 20           # groups + datasets in one file
MAX_INFLATE = 1000              # a dataset may be this many times larger than the file (compression)
MAX_ATTR_BYTES = V.MAX_JSON_BYTES


def h5py_module():
    """h5py, or an ImportError saying how to get it (it is the optional ``h5`` extra)."""
    try:
        import h5py
    except ImportError:
        raise ImportError("Reading and writing Keras .h5 files needs h5py: pip install 'tensorweave[h5]' "
                          "(or pip install h5py). tensorweave's own formats (.keras, .weights.safetensors) "
                          "need nothing extra.") from None
    return h5py


class H5File:
    """A checked, read-only view of an HDF5 file (use as a context manager)."""

    def __init__(self, path, error=LoadError):
        self.path = os.fspath(path)
        self._error = error
        h5py = h5py_module()
        try:
            self._fh = V.open_regular(self.path, self.path, error)
        except OSError as e:
            raise error(f"{self.path}: cannot be read ({e.strerror or e})") from None
        self.size = os.fstat(self._fh.fileno()).st_size
        self._budget = self.size * MAX_INFLATE + (1 << 20)
        try:
            self.file = h5py.File(self._fh, "r")
        except (OSError, ValueError) as e:
            self._fh.close()
            raise error(f"{self.path}: not an HDF5 file ({e})") from None
        self._count = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        try:
            self.file.close()
        finally:
            self._fh.close()

    def _fail(self, where, message):
        raise self._error(f"{self.path}: {where}: {message}")

    # ---- structure ------------------------------------------------------------------------------
    def group(self, name, parent=None):
        """The subgroup ``name`` of ``parent`` (the root by default), or None when absent."""
        h5py = h5py_module()
        parent = self.file if parent is None else parent
        if name not in parent:
            return None
        link = parent.get(name, getlink=True)
        if not isinstance(link, h5py.HardLink):
            self._fail(f"{parent.name}/{name}", f"is a {type(link).__name__}; only plain groups and datasets are "
                                                "read (a link could reach another file)")
        obj = parent[name]
        if not isinstance(obj, h5py.Group):
            self._fail(obj.name, "expected a group, found a dataset")
        if obj.name.count("/") > MAX_DEPTH:
            self._fail(obj.name, f"groups nested deeper than {MAX_DEPTH}")
        return obj

    def children(self, group):
        """``[(name, kind)]`` of a group's members (kind ``"group"`` or ``"dataset"``), checked."""
        h5py = h5py_module()
        out = []
        for name in group:
            self._count += 1
            if self._count > MAX_OBJECTS:
                self._fail(group.name, f"more than {MAX_OBJECTS} objects")
            V.check_string(name, f"{self.path}: {group.name}", "member name", V.MAX_NAME)
            link = group.get(name, getlink=True)
            if not isinstance(link, h5py.HardLink):
                self._fail(f"{group.name}/{name}", f"is a {type(link).__name__}; only plain groups and datasets "
                                                   "are read (a link could reach another file)")
            cls = group.get(name, getclass=True)
            out.append((name, "group" if cls is h5py.Group else "dataset" if cls is h5py.Dataset else "other"))
        return out

    def array(self, group, name):
        """The dataset ``name`` of ``group`` as a NumPy array, after checking type and size."""
        h5py = h5py_module()
        where = f"{group.name}/{name}".replace("//", "/")
        if name not in group:
            self._fail(where, "is missing")
        link = group.get(name, getlink=True)
        if not isinstance(link, h5py.HardLink):
            self._fail(where, f"is a {type(link).__name__}, not a dataset")
        ds = group[name]
        if not isinstance(ds, h5py.Dataset):
            self._fail(where, "expected a dataset, found a group")
        nbytes = self._checked_bytes(ds, where)
        dt = ds.dtype
        self._budget -= nbytes
        if self._budget < 0:
            self._fail(where, f"holds more data ({nbytes} bytes of shape {ds.shape}) than a {self.size}-byte file "
                              "can (a compression bomb?)")
        try:
            return np.asarray(ds[()], dtype=dt.newbyteorder("="))
        except (OSError, ValueError, TypeError) as e:
            self._fail(where, f"cannot be read ({e})")

    def _checked_bytes(self, ds, where):
        """The bytes of a dataset's data, once its type and storage are known to be plain."""
        h5py = h5py_module()
        dt = ds.dtype
        if dt.kind not in "biuf" or dt.fields is not None or dt.subdtype is not None or h5py.check_dtype(vlen=dt):
            self._fail(where, f"has dtype {dt}; only numbers are read")
        if ds.external or ds.is_virtual:
            self._fail(where, "keeps its data outside the file (external or virtual storage); refused")
        if len(ds.shape) > V.MAX_RANK:
            self._fail(where, f"has rank {len(ds.shape)}")
        return V.num_elements(ds.shape) * dt.itemsize

    def dataset_bytes(self, group):
        """``(largest, total)`` bytes of the numeric datasets under ``group``, from their metadata:
        the most a model rebuilt from the file's config may allocate."""
        biggest = total = 0
        stack = [group]
        while stack:
            g = stack.pop()
            for name, kind in self.children(g):
                if kind == "group":
                    stack.append(self.group(name, g))
                elif kind == "dataset":
                    n = self._checked_bytes(g[name], f"{g.name}/{name}")
                    biggest, total = max(biggest, n), total + n
        return biggest, total

    # ---- attributes -----------------------------------------------------------------------------
    def attr(self, obj, name, default=None):
        """A string (or list of strings) attribute, bounded in size; ``default`` when absent."""
        where = f"{obj.name} attribute {name!r}"
        if name not in obj.attrs:
            return default
        try:
            value = obj.attrs[name]
        except (OSError, ValueError, TypeError) as e:
            self._fail(where, f"cannot be read ({e})")
        if isinstance(value, np.ndarray):
            if value.size == 0 and value.ndim == 1:
                return []       # h5py writes an empty list as an empty float array
            if value.dtype.kind not in "SUO" or value.ndim != 1:
                self._fail(where, f"expected a list of strings, found {value.dtype} of shape {value.shape}")
            if value.size > V.MAX_LIST:
                self._fail(where, f"{value.size} entries")
            return [self._text(v, where) for v in value.tolist()]
        return self._text(value, where)

    def _text(self, value, where):
        if isinstance(value, (bytes, np.bytes_)):
            if len(value) > MAX_ATTR_BYTES:
                self._fail(where, f"{len(value)} bytes is over the limit")
            try:
                return bytes(value).decode("utf-8")
            except UnicodeDecodeError:
                self._fail(where, "is not UTF-8 text")
        if isinstance(value, str):
            if len(value) > MAX_ATTR_BYTES:
                self._fail(where, f"{len(value)} characters is over the limit")
            return value
        self._fail(where, f"expected text, found {type(value).__name__}")

    def json_attr(self, obj, name):
        """A JSON attribute parsed strictly (size, depth, no NaN), or None when absent."""
        text = self.attr(obj, name)
        if text is None:
            return None
        if not isinstance(text, str):
            self._fail(f"attribute {name!r}", "expected a JSON string")
        return V.parse_json(text.encode("utf-8"), f"{self.path}: attribute {name!r}")
