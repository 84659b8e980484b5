"""Source datasets: slices of arrays, a single element, integer ranges, Python generators.

Slices, single elements and ranges are *random access*: they can hand out any element, a
contiguous run or a gather of elements by index, so batching and shuffling over them work on
whole arrays at once (see ``iterators.IndexIter``).
"""
import gzip
import os

import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core import errors, nest
from tensorweave.core.convert import to_numpy
from tensorweave.core.shape import TensorShape, as_shape, fmt
from tensorweave.core.tensor_spec import TensorSpec
from tensorweave.data import structure
from tensorweave.data.dataset import Dataset, apply_fn
from tensorweave.data.iterators import IndexIter, _Iter


def index_count(idx):
    """Number of indices in ``idx`` (a ``slice(start, stop, step)`` with explicit ints, or an array)."""
    if isinstance(idx, slice):
        return len(range(idx.start, idx.stop, idx.step))
    return len(idx)


class TensorSliceDataset(Dataset):
    def __init__(self, tensors):
        super().__init__()
        spec, flat = structure.normalize(tensors)
        specs = structure.flat_specs(spec)
        n = None
        for i, a in enumerate(flat):
            if a.ndim == 0:
                raise errors.InvalidArgumentError(
                    f"from_tensor_slices: component {i} is a scalar (shape []); every component needs a "
                    "first dimension to slice. Hint: use from_tensors for a single element.")
            if n is None:
                n, first = a.shape[0], i
            elif a.shape[0] != n:
                raise errors.InvalidArgumentError(
                    f"from_tensor_slices: Dimensions {n} and {a.shape[0]} are not compatible: every component "
                    f"needs the same first dimension, but component {first} has shape {fmt(flat[first].shape)} "
                    f"and component {i} has shape {fmt(a.shape)}.")
        self._arrays = flat
        self._n = 0 if n is None else n
        self._spec = structure.pack(spec, [TensorSpec(s.shape[1:], s.dtype) for s in specs])

    def _cardinality(self):
        return self._n

    def _indexable(self):
        return True

    def _length(self):
        return self._n

    def _element(self, i):
        # a[i, ...] is a 0-d *array* for 1-D a (a[i] would be a NumPy scalar, or a str for strings).
        return tuple(a[i, ...] for a in self._arrays)

    def _take(self, idx):
        return tuple(a[idx] for a in self._arrays)

    def _make_iter(self):
        return IndexIter(self)


class TensorDataset(Dataset):
    def __init__(self, tensors):
        super().__init__()
        self._spec, self._flat = structure.normalize(tensors)

    def _cardinality(self):
        return 1

    def _indexable(self):
        return True

    def _length(self):
        return 1

    def _element(self, i):
        return self._flat

    def _take(self, idx):
        k = index_count(idx)
        return tuple(np.repeat(a[None], k, axis=0) for a in self._flat)

    def _make_iter(self):
        return IndexIter(self)


class RangeDataset(Dataset):
    def __init__(self, start, stop, step, dtype):
        super().__init__()
        if step == 0:
            raise errors.InvalidArgumentError("range: step must not be 0")
        if not dtype.is_integer and not dtype.is_floating:
            raise TypeError(f"range: output_type must be numeric, got {dtype.name}")
        self._start, self._stop, self._step, self._dtype = start, stop, step, dtype
        self._n = len(range(start, stop, step))
        self._spec = TensorSpec([], dtype)

    def _cardinality(self):
        return self._n

    def _indexable(self):
        return True

    def _length(self):
        return self._n

    def _element(self, i):
        return (np.asarray(self._start + i * self._step, self._dtype.np_dtype),)

    def _take(self, idx):
        if isinstance(idx, slice):
            idx = np.arange(idx.start, idx.stop, idx.step, dtype=np.int64)
        return ((self._start + idx.astype(np.int64) * self._step).astype(self._dtype.np_dtype),)

    def _make_iter(self):
        return IndexIter(self)


def _signature(output_types, output_shapes, output_signature):
    if output_signature is not None:
        if output_types is not None or output_shapes is not None:
            raise TypeError("from_generator: give either output_signature or output_types/output_shapes, "
                            "not both")
        for s in nest.flatten(output_signature):
            if not isinstance(s, TensorSpec):
                raise TypeError(f"from_generator: output_signature must be a structure of tw.TensorSpec, "
                                f"got {s!r}")
        return structure.lists_to_tuples(output_signature)
    if output_types is None:
        raise TypeError("from_generator: output_signature (or the legacy output_types) is required")
    output_types = structure.lists_to_tuples(output_types)
    types = nest.flatten(output_types)
    if output_shapes is None:
        shapes = [TensorShape(None)] * len(types)
    else:
        shapes = [as_shape(s) for s in nest.flatten_up_to(output_types, output_shapes)]
    return nest.pack_sequence_as(output_types, [TensorSpec(s, _dt.as_dtype(t)) for s, t in zip(shapes, types)])


class GeneratorDataset(Dataset):
    def __init__(self, generator, output_types, output_shapes, args, output_signature):
        super().__init__()
        if not callable(generator):
            raise TypeError(f"from_generator: `generator` must be callable, got {generator!r}")
        self._generator = generator
        self._spec = _signature(output_types, output_shapes, output_signature)
        self._args = () if args is None else tuple(
            structure.to_numpy_value(structure.as_array(a)) for a in structure.lists_to_tuples(args))

    def _make_iter(self):
        return _GeneratorIter(self)


class _GeneratorIter(_Iter):
    # The Python generator's frame is not saveable: a checkpoint can only record `_count`
    # (elements produced) and re-run the generator that far.
    _state_fields = ("_count",)

    def __init__(self, ds):
        self._ds = ds
        self._it = None
        self._count = 0
        self._done = False
        self._specs = structure.flat_specs(ds._spec)

    def next(self):
        if self._done:
            raise StopIteration
        if self._it is None:
            self._it = iter(apply_fn(self._ds._generator, self._ds._args))
        try:
            value = apply_fn(next, (self._it,))
        except StopIteration:
            self._done = True
            raise
        self._count += 1
        return self._convert(value)

    def _convert(self, value):
        spec = self._ds._spec
        try:
            leaves = nest.flatten_up_to(spec, structure.lists_to_tuples(value)) if structure.is_structure(spec) \
                else [value]
        except (TypeError, ValueError, KeyError):
            raise errors.InvalidArgumentError(
                "`generator` yielded an element that did not match the expected structure. The expected "
                f"structure was {spec}, but the yielded element was {value!r}.") from None
        out = []
        for s, v in zip(self._specs, leaves):
            try:
                a = to_numpy(v.numpy() if hasattr(v, "numpy") else v, s.dtype)
            except (TypeError, ValueError):
                raise errors.InvalidArgumentError(
                    "`generator` yielded an element that could not be converted to the expected type. The "
                    f"expected type was {s.dtype.name}, but the yielded element was {v!r}.") from None
            if not isinstance(a, np.ndarray):
                a = np.asarray(a)
            if not s.shape.is_compatible_with(a.shape):
                raise errors.InvalidArgumentError(
                    f"`generator` yielded an element of shape {fmt(a.shape)} where an element of shape "
                    f"{fmt(s.shape)} was expected.")
            out.append(a)
        return tuple(out)

    def close(self):
        close = getattr(self._it, "close", None)
        if close is not None:
            close()
        self._done = True



class TextLineDataset(Dataset):
    """The lines of one or more text files as scalar string tensors (``tf.data.TextLineDataset``),
    without their line endings, file after file. ``compression_type="GZIP"`` reads gzip files.

    >>> import os, tempfile
    >>> import tensorweave as tw
    >>> import tensorweave.data
    >>> path = os.path.join(tempfile.mkdtemp(), "a.txt")
    >>> _ = open(path, "w").write("first line\\nsecond\\n")
    >>> [line.numpy() for line in tw.data.TextLineDataset(path)]
    ['first line', 'second']
    """

    def __init__(self, filenames, compression_type=None, buffer_size=None, num_parallel_reads=None, name=None):
        super().__init__()
        names = structure.as_array(filenames)
        self._files = [os.fspath(str(f)) for f in names.reshape(-1)]
        if compression_type not in (None, "", "GZIP"):
            raise errors.InvalidArgumentError(
                f"TextLineDataset: compression_type must be None, '' or 'GZIP', got {compression_type!r}")
        self._gzip = compression_type == "GZIP"
        self._spec = TensorSpec([], _dt.string)

    def _make_iter(self):
        return _TextLineIter(self._files, self._gzip)


class _TextLineIter(_Iter):
    # (file index, lines read in it): enough to reopen the file and skip to the position.
    _state_fields = ("_file", "_line")

    def __init__(self, files, use_gzip):
        self._files, self._gzip = files, use_gzip
        self._file, self._line, self._fh = 0, 0, None

    def next(self):
        while self._file < len(self._files):
            if self._fh is None:
                path = self._files[self._file]
                self._fh = gzip.open(path, "rt", encoding="utf-8", newline="") if self._gzip \
                    else open(path, encoding="utf-8", newline="")
            line = self._fh.readline()
            if line:
                self._line += 1
                if line.endswith("\n"):
                    line = line[:-2] if line.endswith("\r\n") else line[:-1]
                arr = np.empty((), dtype=object)
                arr[()] = line
                return (arr,)
            self.close()
            self._file, self._line = self._file + 1, 0
        raise StopIteration

    def close(self):
        if self._fh is not None:
            self._fh.close()
            self._fh = None
