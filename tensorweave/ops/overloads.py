"""Python operators on tensors and variables (``x + y``, ``x @ y``, ``x[1:]``, ``x < y`` ...).

As in TF2, ``==`` and ``!=`` compare elementwise (shapes that do not broadcast compare unequal);
tensors hash by identity.
"""
from tensorweave.core.shape import broadcast_static
from tensorweave.core.tensor import Tensor
from tensorweave.ops import array_ops as A
from tensorweave.ops import bitwise_ops as B
from tensorweave.ops import math_ops as M
from tensorweave.ops.variables import Variable


def _r(fn):
    return lambda self, other: fn(other, self)


def _pow(x, y):
    return M.pow(x, y)


_BINARY = {
    "add": M.add, "sub": M.subtract, "mul": M.multiply, "truediv": M.divide, "floordiv": M.floordiv,
    "mod": M.floormod, "pow": _pow, "matmul": M.matmul,
}


def install(cls):
    for name, fn in _BINARY.items():
        setattr(cls, f"__{name}__", (lambda f: lambda self, other: f(self, other))(fn))
        setattr(cls, f"__r{name}__", (lambda f: lambda self, other: f(other, self))(fn))
    cls.__neg__ = lambda self: M.negative(self)
    cls.__pos__ = lambda self: self
    cls.__abs__ = lambda self: M.abs(self)
    # ~ & | ^ are logical on bool tensors and bitwise on integers, as in TF.
    cls.__invert__ = B.invert_op
    cls.__and__ = B.and_op
    cls.__rand__ = lambda self, o: B.and_op(o, self)
    cls.__or__ = B.or_op
    cls.__ror__ = lambda self, o: B.or_op(o, self)
    cls.__xor__ = B.xor_op
    cls.__rxor__ = lambda self, o: B.xor_op(o, self)
    cls.__lt__ = lambda self, o: M.less(self, o)
    cls.__le__ = lambda self, o: M.less_equal(self, o)
    cls.__gt__ = lambda self, o: M.greater(self, o)
    cls.__ge__ = lambda self, o: M.greater_equal(self, o)
    cls.__eq__ = _eq
    cls.__ne__ = _ne
    cls.__hash__ = lambda self: id(self)
    if cls is Tensor:
        cls.__getitem__ = lambda self, key: A.getitem(self, key)


def _eq(self, other):
    if other is None or not _comparable(other):
        return False
    if not _broadcastable(self, other):
        return A.constant(False)
    return M.equal(self, other)


def _ne(self, other):
    if other is None or not _comparable(other):
        return True
    if not _broadcastable(self, other):
        return A.constant(True)
    return M.not_equal(self, other)


def _broadcastable(x, y):
    """False when both shapes are known and do not broadcast: then ``==`` is a scalar False and
    ``!=`` True, as TF's operators (``tf.equal`` itself raises)."""
    if not isinstance(y, (Tensor, Variable)):
        return True
    try:
        broadcast_static(x.shape, y.shape)
    except ValueError:
        return False
    return True


def _comparable(other):
    import numpy as np
    return isinstance(other, (Tensor, Variable, int, float, bool, np.ndarray, np.generic, list, tuple))


install(Tensor)
install(Variable)
