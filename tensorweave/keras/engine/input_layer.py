"""``Input``: the entry of a functional model (a KerasTensor made by an ``InputLayer``).

>>> from tensorweave import keras
>>> keras.Input(shape=(28, 28, 1), name="image").shape
(None, 28, 28, 1)
"""
import numpy as np

import tensorweave as tw
from tensorweave.keras.engine.keras_tensor import KerasTensor, Node
from tensorweave.keras.engine.layer import Layer


class InputLayer(Layer):
    def __init__(self, shape=None, batch_size=None, dtype=None, sparse=False, batch_shape=None, name=None,
                 input_tensor=None, input_shape=None, **kwargs):
        if shape is None and input_shape is not None:
            shape = input_shape
        if batch_shape is None:
            if shape is None:
                raise ValueError("Input needs `shape` (without the batch dimension) or `batch_shape`")
            _check_shape(shape)
            batch_shape = (batch_size,) + tuple(shape)
        _check_shape(batch_shape)
        super().__init__(name=name, dtype=dtype or "float32")
        self.batch_shape = tuple(batch_shape)
        self.sparse = sparse
        self.built = True
        self._inbound_nodes.append(Node(self, (), {}, KerasTensor(self.batch_shape, self._dtype, name=self.name)))

    @property
    def input(self):
        return self.output

    def get_config(self):
        return {"batch_shape": self.batch_shape, "dtype": self.dtype, "sparse": self.sparse, "name": self.name}


def Input(shape=None, batch_size=None, dtype=None, sparse=None, batch_shape=None, name=None, tensor=None):
    """A symbolic input: ``keras.Input(shape=(784,))`` (the batch dimension is added, as None)."""
    return InputLayer(shape=shape, batch_size=batch_size, dtype=dtype, sparse=bool(sparse),
                      batch_shape=batch_shape, name=name).output


def _check_shape(shape):
    try:
        dims = tuple(shape)
    except TypeError:
        dims = None
    if dims is None:
        raise ValueError(f"Cannot convert '{shape!r}' to a shape. Hint: pass a tuple such as shape=(28, 28, 1)")
    for d in dims:
        if d is None:
            continue
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)):
            raise ValueError(f"Cannot convert '{shape!r}' to a shape. Found invalid dimension '{d!r}' of type "
                             f"'{type(d)}'. ")
        if d < 0:
            raise ValueError(f"Cannot convert '{shape!r}' to a shape. Negative dimensions are not allowed.")


def standardize_input(model, index, x, spec):
    """``x`` (a value given to ``model`` for the ``Input`` KerasTensor ``spec``) as a tensor of the
    Input's dtype, after checking its static shape against the Input's, as Keras does."""
    if not isinstance(x, tw.Tensor):
        if getattr(x, "_is_variable", False):
            x = x.value()
        else:
            arr = np.asarray(x)
            x = tw.convert_to_tensor(arr.astype(spec.dtype.np_dtype) if arr.dtype.kind in "biuf" and
                                     (spec.dtype.is_numeric or spec.dtype.is_bool) else x)
    shape = x.shape.as_list() if x.shape.rank is not None else None
    expected = spec.shape
    if shape is not None and (len(shape) != len(expected) or any(
            a is not None and b is not None and a != b for a, b in zip(expected, shape))):
        raise ValueError(f"Input {index} with name '{spec.name}' of layer '{model.name}' is incompatible with the "
                         f"layer: expected shape={expected}, found shape={tuple(shape)}. Hint: the model was "
                         f"built for inputs of shape {expected} (None: any size)")
    if x.dtype is not spec.dtype and (x.dtype.is_numeric or x.dtype.is_bool) and \
            (spec.dtype.is_numeric or spec.dtype.is_bool):
        x = tw.cast(x, spec.dtype)   # uint8 images into a float Input, as Keras does
    return x
