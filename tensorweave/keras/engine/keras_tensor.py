"""KerasTensor: a symbolic value (shape with None batch, dtype) flowing through the functional API.

Calling a layer on KerasTensors records a :class:`Node` (layer, arguments, outputs); a
functional ``Model`` replays the nodes in order on real tensors.

>>> from tensorweave import keras
>>> x = keras.Input(shape=(3,))
>>> x.shape
(None, 3)
"""
import tensorweave as tw
from tensorweave.core import nest


class SymbolicTensorError(TypeError):
    """A KerasTensor reached an op outside a layer (``keras.engine.op_dispatch`` turns the call of a
    public op into a layer; anything else gets this message)."""


class KerasTensor:
    """Shape and dtype of a value in a functional model, and the node that produces it."""

    def __init__(self, shape, dtype="float32", name=None, node=None, index=0):
        self.shape = tuple(None if d is None else int(d) for d in shape)
        self.dtype = tw.as_dtype(dtype)
        self.name = name
        self.node = node
        self.index = index
        self.mask_shape = None   # the shape of its Keras mask, when the layer that makes it gives one

    @property
    def ndim(self):
        return len(self.shape)

    def __repr__(self):
        return f"<KerasTensor shape={self.shape}, dtype={self.dtype.name}, name={self.name}>"

    def __hash__(self):
        return id(self)

    def _tw_tensor_(self, dtype=None):
        raise SymbolicTensorError(
            f"{self!r} is a symbolic placeholder of a functional Keras model; it has no value. Public "
            "tensorweave ops (tw.reduce_sum, tw.nn.relu, ...) called on it become layers of the model; "
            "other functions must be wrapped in a layer: keras.layers.Lambda(fn)(x), or a Layer subclass "
            "whose call() applies fn")

    def __array__(self, dtype=None, copy=None):
        self._tw_tensor_()

    # Python operators on KerasTensors become small op layers in the functional graph.
    def _op(self, fn, name, *others):
        from tensorweave.keras.layers.core import OpLambda
        return OpLambda(fn, name=name)(self, *others)

    def __add__(self, o):
        return self._op(tw.add, "add", o)

    def __radd__(self, o):
        return self._op(lambda a, b: tw.add(b, a), "add", o)

    def __sub__(self, o):
        return self._op(tw.subtract, "subtract", o)

    def __rsub__(self, o):
        return self._op(lambda a, b: tw.subtract(b, a), "subtract", o)

    def __mul__(self, o):
        return self._op(tw.multiply, "multiply", o)

    def __rmul__(self, o):
        return self._op(lambda a, b: tw.multiply(b, a), "multiply", o)

    def __truediv__(self, o):
        return self._op(tw.divide, "truediv", o)

    def __matmul__(self, o):
        return self._op(tw.matmul, "matmul", o)

    def __rtruediv__(self, o):
        return self._op(lambda a, b: tw.divide(b, a), "truediv", o)

    def __floordiv__(self, o):
        return self._op(tw.floordiv, "floordiv", o)

    def __mod__(self, o):
        return self._op(tw.floormod, "mod", o)

    def __pow__(self, o):
        return self._op(tw.pow, "pow", o)

    def __rpow__(self, o):
        return self._op(lambda a, b: tw.pow(b, a), "pow", o)

    def __rmatmul__(self, o):
        return self._op(lambda a, b: tw.matmul(b, a), "matmul", o)

    def __lt__(self, o):
        return self._op(tw.less, "less", o)

    def __le__(self, o):
        return self._op(tw.less_equal, "less_equal", o)

    def __gt__(self, o):
        return self._op(tw.greater, "greater", o)

    def __ge__(self, o):
        return self._op(tw.greater_equal, "greater_equal", o)

    def __and__(self, o):
        return self._op(tw.logical_and, "logical_and", o)

    def __or__(self, o):
        return self._op(tw.logical_or, "logical_or", o)

    def __invert__(self):
        return self._op(tw.logical_not, "logical_not")

    def __abs__(self):
        return self._op(tw.abs, "abs")

    def __neg__(self):
        return self._op(tw.negative, "negative")

    def __getitem__(self, key):
        return self._op(lambda a: a[key], "getitem")


class Node:
    """One call of a layer in a functional model."""

    def __init__(self, layer, args, kwargs, outputs):
        self.layer = layer
        self.args = args
        self.kwargs = kwargs
        self.outputs = outputs   # the (nested) KerasTensor outputs
        flat = nest.flatten(outputs)
        for i, t in enumerate(flat):
            t.node, t.index = self, i
        self.input_tensors = [t for t in nest.flatten((args, kwargs)) if isinstance(t, KerasTensor)]

    @property
    def parents(self):
        return [t.node for t in self.input_tensors if t.node is not None]


def is_keras_tensor(x):
    return isinstance(x, KerasTensor)


def any_symbolic(structure):
    return any(isinstance(t, KerasTensor) for t in nest.flatten(structure))
