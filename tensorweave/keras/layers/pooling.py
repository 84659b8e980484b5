"""Pooling layers: MaxPooling1D/2D/3D, AveragePooling1D/2D/3D and the global poolings
(Keras 3 names, arguments and defaults).

``strides=None`` means ``strides=pool_size``; ``padding`` is ``"valid"`` or ``"same"`` (with
``"same"``, an average counts only the real, unpadded elements of its window, as TensorFlow).
``GlobalAveragePooling1D`` takes a ``mask`` (from ``Embedding(mask_zero=True)``) and averages only
the unmasked steps.

>>> import numpy as np
>>> from tensorweave.keras.layers.pooling import GlobalAveragePooling1D, MaxPooling2D
>>> MaxPooling2D()(np.arange(16, dtype=np.float32).reshape(1, 4, 4, 1)).numpy()[0, :, :, 0]
array([[ 5.,  7.],
       [13., 15.]], dtype=float32)
>>> x = np.array([[[1.0], [3.0], [100.0]]], np.float32)
>>> GlobalAveragePooling1D()(x, mask=np.array([[True, True, False]])).numpy()
array([[2.]], dtype=float32)
"""
import tensorweave as tw
from tensorweave.keras.engine.layer import InputSpec, Layer
from tensorweave.keras.layers.conv import (check_rank, conv_output_length, normalize_tuple, spatial_layout,
                                           standardize_data_format, standardize_padding, tw_data_format)

__all__ = ["MaxPooling1D", "MaxPooling2D", "MaxPooling3D", "AveragePooling1D", "AveragePooling2D",
           "AveragePooling3D", "GlobalAveragePooling1D", "GlobalAveragePooling2D", "GlobalAveragePooling3D",
           "GlobalMaxPooling1D", "GlobalMaxPooling2D", "GlobalMaxPooling3D", "MaxPool1D", "MaxPool2D", "MaxPool3D",
           "AvgPool1D", "AvgPool2D", "AvgPool3D", "GlobalAvgPool1D", "GlobalAvgPool2D", "GlobalAvgPool3D",
           "GlobalMaxPool1D", "GlobalMaxPool2D", "GlobalMaxPool3D"]


class BasePooling(Layer):
    """Shared by the windowed poolings: a ``pool_size`` window moved by ``strides``."""

    rank = None
    pool_mode = None  # "max" or "average"

    def __init__(self, pool_size=2, strides=None, padding="valid", data_format=None, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        r = self.rank
        self.pool_size = normalize_tuple(pool_size, r, "pool_size")
        self.strides = self.pool_size if strides is None else normalize_tuple(strides, r, "strides")
        self.padding = standardize_padding(padding)
        self.data_format = standardize_data_format(data_format)
        self.input_spec = InputSpec(ndim=r + 2)

    def build(self, input_shape):
        check_rank(self, input_shape, self.rank + 2, spatial_layout(self.rank, self.data_format))
        self.built = True

    def call(self, inputs):
        fn = tw.nn.max_pool if self.pool_mode == "max" else tw.nn.avg_pool
        return fn(inputs, ksize=list(self.pool_size), strides=list(self.strides), padding=self.padding.upper(),
                  data_format=tw_data_format(self.rank, self.data_format))

    def compute_output_shape(self, input_shape):
        s = tuple(input_shape)
        sp = s[1:-1] if self.data_format == "channels_last" else s[2:]
        out = [conv_output_length(n, k, self.padding, st) for n, k, st in zip(sp, self.pool_size, self.strides)]
        return (s[0], *out, s[-1]) if self.data_format == "channels_last" else (s[0], s[1], *out)

    def get_config(self):
        return {**super().get_config(), "pool_size": self.pool_size, "padding": self.padding,
                "strides": self.strides, "data_format": self.data_format}


class MaxPooling1D(BasePooling):
    """Max over windows of ``pool_size`` steps.

    >>> import numpy as np
    >>> from tensorweave.keras.layers.pooling import MaxPooling1D
    >>> MaxPooling1D(pool_size=2, strides=1)(np.array([[[1.0], [5.0], [2.0]]], np.float32)).numpy().ravel()
    array([5., 5.], dtype=float32)
    """

    rank, pool_mode = 1, "max"


class MaxPooling2D(BasePooling):
    """Max over ``pool_size`` windows of rows and cols (default 2x2, strides = pool_size)."""

    rank, pool_mode = 2, "max"

    def __init__(self, pool_size=(2, 2), strides=None, padding="valid", data_format=None, name=None, **kwargs):
        super().__init__(pool_size, strides, padding, data_format, name=name, **kwargs)


class MaxPooling3D(BasePooling):
    rank, pool_mode = 3, "max"

    def __init__(self, pool_size=(2, 2, 2), strides=None, padding="valid", data_format=None, name=None, **kwargs):
        super().__init__(pool_size, strides, padding, data_format, name=name, **kwargs)


class AveragePooling1D(BasePooling):
    """Mean over windows of ``pool_size`` steps."""

    rank, pool_mode = 1, "average"


class AveragePooling2D(BasePooling):
    """Mean over ``pool_size`` windows of rows and cols.

    >>> import numpy as np
    >>> from tensorweave.keras.layers.pooling import AveragePooling2D
    >>> AveragePooling2D(padding="same")(np.ones((1, 3, 3, 1), np.float32)).numpy()[0, :, :, 0]
    array([[1., 1.],
           [1., 1.]], dtype=float32)
    """

    rank, pool_mode = 2, "average"

    def __init__(self, pool_size=(2, 2), strides=None, padding="valid", data_format=None, name=None, **kwargs):
        super().__init__(pool_size, strides, padding, data_format, name=name, **kwargs)


class AveragePooling3D(BasePooling):
    rank, pool_mode = 3, "average"

    def __init__(self, pool_size=(2, 2, 2), strides=None, padding="valid", data_format=None, name=None, **kwargs):
        super().__init__(pool_size, strides, padding, data_format, name=name, **kwargs)


# ---- global poolings --------------------------------------------------------------------------------
class BaseGlobalPooling(Layer):
    """Reduces all spatial axes; ``keepdims=True`` keeps them with size 1."""

    rank = None

    def __init__(self, data_format=None, keepdims=False, **kwargs):
        super().__init__(**kwargs)
        self.data_format = standardize_data_format(data_format)
        self.keepdims = bool(keepdims)
        self.input_spec = InputSpec(ndim=self.rank + 2)

    @property
    def _spatial_axes(self):
        first = 1 if self.data_format == "channels_last" else 2
        return list(range(first, first + self.rank))

    def build(self, input_shape):
        check_rank(self, input_shape, self.rank + 2, spatial_layout(self.rank, self.data_format))
        self.built = True

    def compute_output_shape(self, input_shape):
        s = list(input_shape)
        axes = self._spatial_axes
        if self.keepdims:
            return tuple(1 if i in axes else d for i, d in enumerate(s))
        return tuple(d for i, d in enumerate(s) if i not in axes)

    def get_config(self):
        return {**super().get_config(), "data_format": self.data_format, "keepdims": self.keepdims}


class _GlobalAverage(BaseGlobalPooling):
    def call(self, inputs):
        return tw.reduce_mean(inputs, axis=self._spatial_axes, keepdims=self.keepdims)


class _GlobalMax(BaseGlobalPooling):
    def call(self, inputs):
        return tw.reduce_max(inputs, axis=self._spatial_axes, keepdims=self.keepdims)


class GlobalAveragePooling1D(_GlobalAverage):
    """Mean over the steps of ``(batch, steps, features)``; with a ``mask`` ``(batch, steps)``
    only the unmasked steps count. The mask stops here (the output has no steps).

    A row whose steps are all masked gives 0 rather than Keras' 0/0 = NaN, so that a padded
    empty sequence cannot poison a training step.

    >>> import numpy as np
    >>> from tensorweave.keras.layers.pooling import GlobalAveragePooling1D
    >>> GlobalAveragePooling1D(keepdims=True)(np.ones((2, 5, 3), np.float32)).shape
    TensorShape([2, 1, 3])
    """

    rank = 1

    def __init__(self, data_format=None, keepdims=False, **kwargs):
        super().__init__(data_format=data_format, keepdims=keepdims, **kwargs)
        self.supports_masking = True

    def call(self, inputs, mask=None):
        if mask is None:
            return super().call(inputs)
        steps_axis = self._spatial_axes[0]
        w = tw.cast(tw.convert_to_tensor(mask), inputs.dtype)
        w = tw.expand_dims(w, 2 if self.data_format == "channels_last" else 1)
        total = tw.reduce_sum(inputs * w, axis=steps_axis, keepdims=self.keepdims)
        count = tw.reduce_sum(w, axis=steps_axis, keepdims=self.keepdims)
        return tw.div_no_nan(total, count)

    def compute_mask(self, inputs, mask=None):
        return None


class GlobalAveragePooling2D(_GlobalAverage):
    """Mean over rows and cols.

    >>> import numpy as np
    >>> from tensorweave.keras.layers.pooling import GlobalAveragePooling2D
    >>> GlobalAveragePooling2D()(np.ones((2, 4, 4, 3), np.float32)).shape
    TensorShape([2, 3])
    """

    rank = 2


class GlobalAveragePooling3D(_GlobalAverage):
    rank = 3


class GlobalMaxPooling1D(_GlobalMax):
    """Max over the steps of ``(batch, steps, features)``."""

    rank = 1


class GlobalMaxPooling2D(_GlobalMax):
    """Max over rows and cols.

    >>> import numpy as np
    >>> from tensorweave.keras.layers.pooling import GlobalMaxPooling2D
    >>> GlobalMaxPooling2D(data_format="channels_first", keepdims=True)(np.ones((2, 3, 4, 4), np.float32)).shape
    TensorShape([2, 3, 1, 1])
    """

    rank = 2


class GlobalMaxPooling3D(_GlobalMax):
    rank = 3


# Keras' aliases
MaxPool1D, MaxPool2D, MaxPool3D = MaxPooling1D, MaxPooling2D, MaxPooling3D
AvgPool1D, AvgPool2D, AvgPool3D = AveragePooling1D, AveragePooling2D, AveragePooling3D
GlobalAvgPool1D, GlobalAvgPool2D, GlobalAvgPool3D = GlobalAveragePooling1D, GlobalAveragePooling2D, \
    GlobalAveragePooling3D
GlobalMaxPool1D, GlobalMaxPool2D, GlobalMaxPool3D = GlobalMaxPooling1D, GlobalMaxPooling2D, GlobalMaxPooling3D
