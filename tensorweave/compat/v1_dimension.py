"""TF1's ``tf.Dimension``: one dimension of a shape, known (an int) or not (None), with TF1's
arithmetic (unknown stays unknown) and compatibility rules, and ``tf.dimension_at_index``.

>>> import tensorweave.compat.v1 as tf
>>> d = tf.Dimension(3)
>>> (d * 2).value, (d + tf.Dimension(None)).value, d.is_compatible_with(None)
(6, None, True)
"""

__all__ = ["Dimension", "dimension_at_index"]


class Dimension:
    """A shape dimension: ``value`` is an int or None (unknown)."""

    __slots__ = ("_value",)

    def __init__(self, value):
        if isinstance(value, Dimension):
            value = value.value
        if value is not None:
            if isinstance(value, bool) or not hasattr(value, "__index__"):
                raise TypeError(f"Dimension value must be integer or None or have an __index__ method, got {value!r}")
            value = int(value.__index__())
            if value < 0:
                raise ValueError(f"Dimension {value} must be >= 0")
        self._value = value

    @property
    def value(self):
        return self._value

    def __repr__(self):
        return f"Dimension({self._value!r})"

    def __str__(self):
        return "?" if self._value is None else str(self._value)

    def __int__(self):
        if self._value is None:
            raise TypeError("Cannot convert an unknown Dimension to an int")
        return self._value

    __index__ = __int__

    def __hash__(self):
        return hash(self._value)

    def __eq__(self, other):
        other = _as(other)
        if other is NotImplemented:
            return NotImplemented
        return None if self._value is None or other.value is None else self._value == other.value

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is None or eq is NotImplemented else not eq

    def is_compatible_with(self, other):
        other = Dimension(other.value if isinstance(other, Dimension) else other)
        return self._value is None or other.value is None or self._value == other.value

    def assert_is_compatible_with(self, other):
        if not self.is_compatible_with(other):
            raise ValueError(f"Dimensions {self} and {Dimension(other)} are not compatible")

    def merge_with(self, other):
        other = Dimension(other.value if isinstance(other, Dimension) else other)
        self.assert_is_compatible_with(other)
        return Dimension(self._value if self._value is not None else other.value)

    def _op(self, other, fn):
        other = _as(other)
        if other is NotImplemented:
            return NotImplemented
        if self._value is None or other.value is None:
            return Dimension(None)
        return Dimension(fn(self._value, other.value))

    def __add__(self, other):
        return self._op(other, lambda a, b: a + b)

    __radd__ = __add__

    def __sub__(self, other):
        return self._op(other, lambda a, b: a - b)

    def __rsub__(self, other):
        return _as(other)._op(self, lambda a, b: a - b)

    def __mul__(self, other):
        return self._op(other, lambda a, b: a * b)

    __rmul__ = __mul__

    def __floordiv__(self, other):
        return self._op(other, lambda a, b: a // b)

    def __rfloordiv__(self, other):
        return _as(other)._op(self, lambda a, b: a // b)

    def __mod__(self, other):
        return self._op(other, lambda a, b: a % b)

    def _compare(self, other, fn):
        other = _as(other)
        if other is NotImplemented:
            return NotImplemented
        return None if self._value is None or other.value is None else fn(self._value, other.value)

    def __lt__(self, other):
        return self._compare(other, lambda a, b: a < b)

    def __le__(self, other):
        return self._compare(other, lambda a, b: a <= b)

    def __gt__(self, other):
        return self._compare(other, lambda a, b: a > b)

    def __ge__(self, other):
        return self._compare(other, lambda a, b: a >= b)


def _as(value):
    if isinstance(value, Dimension):
        return value
    try:
        return Dimension(value)
    except (TypeError, ValueError):
        return NotImplemented


def dimension_at_index(shape, index):
    """``shape[index]`` as a ``Dimension`` (an unknown one when the rank is unknown)."""
    from tensorweave.core.shape import as_shape
    s = as_shape(shape)
    if s.rank is None:
        return Dimension(None)
    return Dimension(s.as_list()[index])
