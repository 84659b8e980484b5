"""Merge layers: Add, Subtract, Multiply, Average, Maximum, Minimum, Concatenate, Dot, and their
functional forms (``add([a, b])`` ...), with Keras 3 arguments.

Each takes a list of tensors. The element-wise ones broadcast as NumPy over the non-batch
dimensions (an input of lower rank gets trailing dimensions of size 1, as Keras); shapes that
cannot broadcast raise an error naming the layer and every input shape. Masks of the inputs are
combined (a step is kept only where every input keeps it).

>>> import numpy as np
>>> from tensorweave.keras.layers.merge import Add, Concatenate
>>> a, b = np.ones((2, 3), np.float32), np.full((2, 3), 2.0, np.float32)
>>> Add()([a, b]).numpy()[0], Concatenate()([a, b]).shape
(array([3., 3., 3.], dtype=float32), TensorShape([2, 6]))
"""
import tensorweave as tw
from tensorweave.keras.engine.layer import Layer

__all__ = ["Add", "Subtract", "Multiply", "Average", "Maximum", "Minimum", "Concatenate", "Dot", "add", "subtract",
           "multiply", "average", "maximum", "minimum", "concatenate", "dot"]


def _fmt(shapes):
    return ", ".join(str(tuple(s)) for s in shapes)


class Merge(Layer):
    """Base of the element-wise merges: checks the list of input shapes, broadcasts, and reduces
    with ``_merge_function``."""

    min_inputs = 1

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def _check_list(self, input_shape):
        if not isinstance(input_shape, (list, tuple)) or not input_shape or \
                not all(isinstance(s, (list, tuple)) for s in input_shape):
            raise ValueError(f"A merge layer should be called on a list of inputs. Received: input_shape={input_shape} "
                             f"(not a list of shapes). Layer '{self.name}' ({type(self).__name__})")
        if len(input_shape) < self.min_inputs:
            raise ValueError(f"A merge layer should be called on a list of at least {self.min_inputs} input(s). "
                             f"Got {len(input_shape)} inputs. Full input_shape received: {_fmt(input_shape)}. "
                             f"Layer '{self.name}' ({type(self).__name__})")

    def _elementwise_shape(self, input_shapes):
        self._check_list(input_shapes)
        shapes = [tuple(s) for s in input_shapes]
        batches = {s[0] for s in shapes if s} - {None}
        if len(batches) > 1:
            raise ValueError(f"Cannot merge tensors with different batch sizes. Layer '{self.name}' "
                             f"({type(self).__name__}) received tensors with shapes {_fmt(shapes)}")
        rank = max(len(s) for s in shapes)
        # lower-rank inputs get trailing size-1 dimensions (see call)
        padded = [s + (1,) * (rank - len(s)) for s in shapes]
        out = [None if not batches else batches.pop()]
        for i in range(1, rank):
            dims = {s[i] for s in padded}
            known = dims - {None}
            if len(known - {1}) > 1:
                raise ValueError(f"Inputs have incompatible shapes. Layer '{self.name}' ({type(self).__name__}) "
                                 f"received shapes {_fmt(shapes)}: dimension {i} is {sorted(known)}, which do not "
                                 f"broadcast. Hint: all inputs must have the same shape (or size 1 on an axis)")
            big = known - {1}
            out.append(big.pop() if big else (None if None in dims else 1))
        return tuple(out)

    def build(self, input_shape):
        self._elementwise_shape(input_shape)
        self.built = True

    def compute_output_shape(self, input_shape):
        return self._elementwise_shape(input_shape)

    def call(self, inputs):
        if not isinstance(inputs, (list, tuple)):
            raise ValueError(f"A merge layer should be called on a list of inputs. Layer '{self.name}' "
                             f"({type(self).__name__}) received {inputs!r}")
        ranks = [x.shape.rank for x in inputs]
        if None not in ranks and len(set(ranks)) > 1:
            top = max(ranks)
            expanded = []
            for x in inputs:
                for _ in range(top - x.shape.rank):
                    x = tw.expand_dims(x, -1)
                expanded.append(x)
            inputs = expanded
        return self._merge_function(list(inputs))

    def _merge_function(self, inputs):
        raise NotImplementedError

    def compute_mask(self, inputs, mask=None):
        if mask is None:
            return None
        if not isinstance(mask, (list, tuple)):
            raise ValueError(f"`mask` should be a list. Received: mask={mask!r}")
        if len(mask) != len(inputs):
            raise ValueError(f"The lists `inputs` and `mask` should have the same length. Received: inputs="
                             f"{len(inputs)} tensors and mask={len(mask)} masks. Layer '{self.name}'")
        masks = [tw.cast(tw.convert_to_tensor(m), tw.bool) for m in mask if m is not None]
        if not masks:
            return None
        out = masks[0]
        for m in masks[1:]:
            out = tw.logical_and(out, m)
        return out


class Add(Merge):
    """Sum of the inputs.

    >>> import numpy as np
    >>> from tensorweave.keras.layers.merge import Add
    >>> Add()([np.ones((1, 2), np.float32)] * 3).numpy()
    array([[3., 3.]], dtype=float32)
    """

    def _merge_function(self, inputs):
        out = inputs[0]
        for x in inputs[1:]:
            out = tw.add(out, x)
        return out


class Subtract(Merge):
    """``inputs[0] - inputs[1]`` (exactly two inputs)."""

    min_inputs = 2

    def build(self, input_shape):
        super().build(input_shape)
        if len(input_shape) != 2:
            raise ValueError(f"A `Subtract` layer should be called on exactly 2 inputs. Layer '{self.name}' received "
                             f"{len(input_shape)} inputs with shapes {_fmt(input_shape)}")

    def _merge_function(self, inputs):
        if len(inputs) != 2:
            raise ValueError(f"A `Subtract` layer should be called on exactly 2 inputs. Layer '{self.name}' received "
                             f"{len(inputs)} inputs")
        return tw.subtract(inputs[0], inputs[1])


class Multiply(Merge):
    """Element-wise product of the inputs."""

    def _merge_function(self, inputs):
        out = inputs[0]
        for x in inputs[1:]:
            out = tw.multiply(out, x)
        return out


class Average(Merge):
    """Element-wise mean of the inputs."""

    def _merge_function(self, inputs):
        out = inputs[0]
        for x in inputs[1:]:
            out = tw.add(out, x)
        return out / len(inputs)


class Maximum(Merge):
    """Element-wise maximum of the inputs."""

    def _merge_function(self, inputs):
        out = inputs[0]
        for x in inputs[1:]:
            out = tw.maximum(out, x)
        return out


class Minimum(Merge):
    """Element-wise minimum of the inputs."""

    def _merge_function(self, inputs):
        out = inputs[0]
        for x in inputs[1:]:
            out = tw.minimum(out, x)
        return out


class Concatenate(Merge):
    """Joins the inputs along ``axis`` (default the last); every other dimension must match.

    >>> import numpy as np
    >>> from tensorweave.keras.layers.merge import Concatenate
    >>> Concatenate(axis=1)([np.zeros((2, 3, 4), np.float32), np.zeros((2, 5, 4), np.float32)]).shape
    TensorShape([2, 8, 4])
    """

    def __init__(self, axis=-1, **kwargs):
        super().__init__(**kwargs)
        self.axis = int(axis)

    def _concat_shape(self, input_shape):
        self._check_list(input_shape)
        shapes = [tuple(s) for s in input_shape]
        rank = len(shapes[0])
        if any(len(s) != rank for s in shapes):
            raise ValueError(f"A `Concatenate` layer requires inputs with matching shapes except for the "
                             f"concatenation axis. Layer '{self.name}' received inputs of different ranks: "
                             f"input_shape={_fmt(shapes)}")
        if not -rank <= self.axis < rank:
            raise ValueError(f"Invalid axis {self.axis} for layer '{self.name}' (Concatenate): inputs have rank "
                             f"{rank}; input_shape={_fmt(shapes)}")
        axis = self.axis % rank
        out = []
        for i in range(rank):
            dims = [s[i] for s in shapes]
            if i == axis:
                out.append(None if None in dims else sum(dims))
                continue
            known = {d for d in dims if d is not None}
            if len(known) > 1:
                raise ValueError(f"A `Concatenate` layer requires inputs with matching shapes except for the "
                                 f"concatenation axis ({self.axis}). Layer '{self.name}' received: "
                                 f"input_shape={_fmt(shapes)} (dimension {i} differs)")
            out.append(known.pop() if known else None)
        return tuple(out)

    def build(self, input_shape):
        self._concat_shape(input_shape)
        self.built = True

    def compute_output_shape(self, input_shape):
        return self._concat_shape(input_shape)

    def call(self, inputs):
        return tw.concat(list(inputs), axis=self.axis)

    def compute_mask(self, inputs, mask=None):
        if mask is None:
            return None
        if not isinstance(mask, (list, tuple)) or len(mask) != len(inputs):
            raise ValueError(f"`mask` should be a list of {len(inputs)} masks (one per input) for layer "
                             f"'{self.name}'. Received: mask={mask!r}")
        if all(m is None for m in mask):
            return None
        # each input's mask over all its dimensions; the output mask drops the last one
        full = []
        for x, m in zip(inputs, mask):
            x = tw.convert_to_tensor(x)
            if m is None:
                full.append(tw.cast(tw.ones_like(x), tw.bool))
                continue
            m = tw.cast(tw.convert_to_tensor(m), tw.bool)
            if m.shape.rank < x.shape.rank:
                m = tw.logical_and(tw.expand_dims(m, -1), tw.cast(tw.ones_like(x), tw.bool))
            full.append(m)
        return tw.reduce_any(tw.concat(full, axis=self.axis), axis=-1)

    def get_config(self):
        return {**super().get_config(), "axis": self.axis}


class Dot(Merge):
    """Dot product of two inputs along ``axes`` (an int, or one axis per input), per example:
    ``(batch, n, d)`` and ``(batch, m, d)`` with ``axes=2`` give ``(batch, n, m)``. With
    ``normalize=True`` the inputs are L2-normalized along those axes first (cosine similarity).

    >>> import numpy as np
    >>> from tensorweave.keras.layers.merge import Dot
    >>> Dot(axes=1)([np.array([[1.0, 2.0]], np.float32), np.array([[3.0, 4.0]], np.float32)]).numpy()
    array([[11.]], dtype=float32)
    """

    min_inputs = 2

    def __init__(self, axes, normalize=False, **kwargs):
        super().__init__(**kwargs)
        if isinstance(axes, int):
            self.axes = axes
        elif isinstance(axes, (list, tuple)) and len(axes) == 2 and all(isinstance(a, int) for a in axes):
            self.axes = tuple(axes)
        else:
            raise TypeError(f"Invalid type/value for argument `axes`: expected an int or a list/tuple of 2 ints. "
                            f"Received: axes={axes!r}")
        self.normalize = bool(normalize)
        self.supports_masking = False

    def _axes_for(self, shape1, shape2):
        pair = (self.axes, self.axes) if isinstance(self.axes, int) else self.axes
        out = []
        for a, s in zip(pair, (shape1, shape2)):
            if not -len(s) < a < len(s) or a % len(s) == 0:
                raise ValueError(f"Invalid axes {self.axes!r} for layer '{self.name}' (Dot): an axis must be a "
                                 f"non-batch dimension of inputs shaped {_fmt([shape1, shape2])}")
            out.append(a % len(s))
        return out

    def _dot_shape(self, input_shape):
        if not isinstance(input_shape, (list, tuple)) or len(input_shape) != 2 or \
                not all(isinstance(s, (list, tuple)) for s in input_shape):
            raise ValueError(f"A `Dot` layer should be called on a list of 2 inputs. Layer '{self.name}' received: "
                             f"input_shape={input_shape}")
        s1, s2 = (tuple(s) for s in input_shape)
        a1, a2 = self._axes_for(s1, s2)
        if s1[a1] is not None and s2[a2] is not None and s1[a1] != s2[a2]:
            raise ValueError(f"Incompatible input shapes: axis values {s1[a1]} (at axis {a1}) != {s2[a2]} "
                             f"(at axis {a2}). Full input shapes: {s1}, {s2}. Layer '{self.name}' (Dot)")
        if s1[0] is not None and s2[0] is not None and s1[0] != s2[0]:
            raise ValueError(f"Cannot take the dot product of tensors with different batch sizes. Layer "
                             f"'{self.name}' (Dot) received shapes {s1}, {s2}")
        out = (s1[0] if s1[0] is not None else s2[0],) + tuple(
            d for i, d in enumerate(s1) if i not in (0, a1)) + tuple(d for i, d in enumerate(s2) if i not in (0, a2))
        return out if len(out) > 1 else out + (1,)

    def build(self, input_shape):
        self._dot_shape(input_shape)
        self.built = True

    def compute_output_shape(self, input_shape):
        return self._dot_shape(input_shape)

    def call(self, inputs):
        if not isinstance(inputs, (list, tuple)) or len(inputs) != 2:
            raise ValueError(f"A `Dot` layer should be called on a list of 2 inputs. Layer '{self.name}'")
        x1, x2 = inputs
        r1, r2 = x1.shape.rank, x2.shape.rank
        a1, a2 = self._axes_for(x1.shape.as_list(), x2.shape.as_list())
        if self.normalize:
            x1 = tw.nn.l2_normalize(x1, axis=a1)
            x2 = tw.nn.l2_normalize(x2, axis=a2)
        # a batched contraction as an einsum: shared batch letter, shared contracted letter
        letters = iter("bcdefghijklmnopqrstuvwxy")
        batch, contracted = "a", "z"
        s1 = [batch] + [contracted if i == a1 else next(letters) for i in range(1, r1)]
        s2 = [batch] + [contracted if i == a2 else next(letters) for i in range(1, r2)]
        out = [batch] + [c for c in s1[1:] if c != contracted] + [c for c in s2[1:] if c != contracted]
        y = tw.einsum(f"{''.join(s1)},{''.join(s2)}->{''.join(out)}", x1, x2)
        return tw.expand_dims(y, -1) if len(out) == 1 else y

    def compute_mask(self, inputs, mask=None):
        return None

    def get_config(self):
        return {**super().get_config(), "axes": self.axes, "normalize": self.normalize}


# ---- functional forms ----------------------------------------------------------------------------
def add(inputs, **kwargs):
    """``Add(**kwargs)(inputs)``."""
    return Add(**kwargs)(inputs)


def subtract(inputs, **kwargs):
    return Subtract(**kwargs)(inputs)


def multiply(inputs, **kwargs):
    return Multiply(**kwargs)(inputs)


def average(inputs, **kwargs):
    return Average(**kwargs)(inputs)


def maximum(inputs, **kwargs):
    return Maximum(**kwargs)(inputs)


def minimum(inputs, **kwargs):
    return Minimum(**kwargs)(inputs)


def concatenate(inputs, axis=-1, **kwargs):
    return Concatenate(axis=axis, **kwargs)(inputs)


def dot(inputs, axes=-1, normalize=False, **kwargs):
    return Dot(axes=axes, normalize=normalize, **kwargs)(inputs)
