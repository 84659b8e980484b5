"""TensorShape: a static shape whose rank or dimensions may be unknown (``None``).

>>> import tensorweave as tw
>>> s = tw.TensorShape([None, 3])
>>> s.merge_with([2, None]).as_list()
[2, 3]
"""
import operator


class TensorShape:
    __slots__ = ("_dims",)

    def __init__(self, dims):
        if dims is None:
            self._dims = None
        elif isinstance(dims, TensorShape):
            self._dims = dims._dims
        else:
            try:
                it = iter(dims)
            except TypeError:
                it = iter((dims,))
            out = []
            for d in it:
                if d is None or (hasattr(d, "value") and d.value is None):
                    out.append(None)
                else:
                    try:  # ints and objects with __index__ only: int(2.5) would make it 2 silently
                        d = operator.index(getattr(d, "value", d))
                    except TypeError:
                        raise TypeError(f"Dimension value must be an integer or None, got {d!r} of type "
                                        f"{type(d).__name__}") from None
                    if d < 0:
                        if d == -1:
                            out.append(None)
                            continue
                        raise ValueError(f"Dimension {d} must be >= 0")
                    out.append(d)
            self._dims = tuple(out)

    @classmethod
    def unknown(cls):
        return cls(None)

    @property
    def dims(self):
        return None if self._dims is None else list(self._dims)

    @property
    def rank(self):
        return None if self._dims is None else len(self._dims)

    ndims = rank

    def is_fully_defined(self):
        return self._dims is not None and None not in self._dims

    def as_list(self):
        if self._dims is None:
            raise ValueError("as_list() is not defined on an unknown TensorShape.")
        return list(self._dims)

    def as_tuple(self):
        return self._dims

    def num_elements(self):
        if not self.is_fully_defined():
            return None
        n = 1
        for d in self._dims:
            n *= d
        return n

    def is_compatible_with(self, other):
        other = as_shape(other)
        if self._dims is None or other._dims is None:
            return True
        if len(self._dims) != len(other._dims):
            return False
        return all(a is None or b is None or a == b for a, b in zip(self._dims, other._dims))

    def merge_with(self, other):
        other = as_shape(other)
        if self._dims is None:
            return other
        if other._dims is None:
            return self
        if not self.is_compatible_with(other):
            raise ValueError(f"Shapes {self} and {other} are not compatible")
        return TensorShape([a if a is not None else b for a, b in zip(self._dims, other._dims)])

    def with_rank(self, rank):
        if self._dims is None:
            return TensorShape([None] * rank)
        if len(self._dims) != rank:
            raise ValueError(f"Shape {self} must have rank {rank}")
        return self

    def concatenate(self, other):
        other = as_shape(other)
        if self._dims is None or other._dims is None:
            return TensorShape(None)
        return TensorShape(self._dims + other._dims)

    def __len__(self):
        if self._dims is None:
            raise ValueError("Cannot take the length of a shape with unknown rank.")
        return len(self._dims)

    def __iter__(self):
        if self._dims is None:
            raise ValueError("Cannot iterate over a shape with unknown rank.")
        return iter(self._dims)

    def __getitem__(self, key):
        if self._dims is None:
            return TensorShape(None) if isinstance(key, slice) else None
        if isinstance(key, slice):
            return TensorShape(self._dims[key])
        return self._dims[key]

    def __eq__(self, other):
        try:
            other = as_shape(other)
        except (TypeError, ValueError):
            return NotImplemented
        return self._dims == other._dims

    def __hash__(self):
        return hash(self._dims)

    def __repr__(self):
        return f"TensorShape({self.dims})"

    def __str__(self):
        if self._dims is None:
            return "<unknown>"
        return "(" + ", ".join("None" if d is None else str(d) for d in self._dims) + ("," if len(self._dims) == 1 else "") + ")"

    def __bool__(self):
        return self._dims is not None

    def __add__(self, other):
        return self.concatenate(other)


def as_shape(value):
    return value if isinstance(value, TensorShape) else TensorShape(value)


def fmt(shape):
    """Short text of a shape for error messages: ``[2,3]``, ``[?,3]``, ``<unknown>``."""
    shape = as_shape(shape)
    if shape._dims is None:
        return "<unknown>"
    return "[" + ",".join("?" if d is None else str(d) for d in shape._dims) + "]"


def broadcast_static(a, b):
    """NumPy broadcasting on static shapes with unknown dims; raises ValueError when incompatible."""
    a, b = as_shape(a), as_shape(b)
    if a._dims is None or b._dims is None:
        return TensorShape(None)
    da, db = a._dims, b._dims
    n = max(len(da), len(db))
    da = (1,) * (n - len(da)) + da
    db = (1,) * (n - len(db)) + db
    out = []
    for x, y in zip(da, db):
        if x == 1:
            out.append(y)
        elif y == 1:
            out.append(x)
        elif x is None:
            out.append(y)
        elif y is None or x == y:
            out.append(x)
        else:
            raise ValueError(f"Incompatible shapes for broadcasting: {fmt(a)} and {fmt(b)}")
    return TensorShape(out)
