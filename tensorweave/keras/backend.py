"""Keras backend utilities: float type, image data format, unique layer names, session reset,
and the tf.keras 2 helpers still found in programs (``int_shape``, ``get_value``/``set_value``, ...).

>>> from tensorweave.keras import backend
>>> backend.clear_session()
>>> backend.unique_name("dense"), backend.unique_name("dense")
('dense', 'dense_1')
"""
import re
import threading

_lock = threading.Lock()
_name_counts = {}
_floatx = ["float32"]
_epsilon = [1e-7]


def floatx():
    return _floatx[0]


def set_floatx(value):
    _floatx[0] = str(value)


def epsilon():
    return _epsilon[0]


def set_epsilon(value):
    _epsilon[0] = float(value)


def unique_name(base):
    """``base``, then ``base_1``, ``base_2`` ... (per process, reset by clear_session)."""
    with _lock:
        n = _name_counts.get(base, 0)
        _name_counts[base] = n + 1
    return base if n == 0 else f"{base}_{n}"


def snake_case(name):
    name = name.lstrip("_") or "layer"  # scope names may not start with "_"
    s = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub(r"([a-z])([A-Z])", r"\1_\2", s).lower()


def clear_session():
    """Resets layer-name counters (as Keras' clear_session)."""
    with _lock:
        _name_counts.clear()


_image_data_format = ["channels_last"]


def image_data_format():
    return _image_data_format[0]


def set_image_data_format(data_format):
    if data_format not in ("channels_last", "channels_first"):
        raise ValueError(f"The `data_format` argument must be one of {{'channels_first', 'channels_last'}}. "
                         f"Received: data_format={data_format!r}")
    _image_data_format[0] = data_format


def backend():
    """The name of the backend (``"tensorweave"``)."""
    return "tensorweave"


def is_keras_tensor(x):
    from tensorweave.keras.engine.keras_tensor import KerasTensor
    return isinstance(x, KerasTensor)


def int_shape(x):
    """The static shape as a tuple of ints and None (a KerasTensor, tensor, variable or array)."""
    shape = x.shape
    if isinstance(shape, tuple):
        return shape
    if hasattr(shape, "as_list"):
        return None if shape.rank is None else tuple(shape.as_list())
    return tuple(shape)


def ndim(x):
    shape = int_shape(x)
    return None if shape is None else len(shape)


def dtype(x):
    import tensorweave as tw
    return tw.as_dtype(x.dtype).name


def get_value(x):
    """A variable's (or tensor's) value as a NumPy array."""
    import numpy as np
    return np.asarray(x.numpy() if hasattr(x, "numpy") else x)


def batch_get_value(xs):
    return [get_value(x) for x in xs]


def set_value(x, value):
    import numpy as np
    x.assign(np.asarray(value, dtype=x.dtype.np_dtype))


def batch_set_value(tuples):
    for x, value in tuples:
        set_value(x, value)


def variable(value, dtype=None, name=None, constraint=None):
    import numpy as np
    import tensorweave as tw
    return tw.Variable(np.asarray(value, dtype=dtype or floatx()), name=name, constraint=constraint)


def constant(value, dtype=None, shape=None, name=None):
    import numpy as np
    import tensorweave as tw
    arr = np.asarray(value, dtype=dtype or floatx())
    return tw.constant(np.broadcast_to(arr, shape) if shape is not None else arr, name=name)


def cast(x, dtype):
    import tensorweave as tw
    return tw.cast(x, dtype)


def count_params(x):
    import numpy as np
    return int(np.prod(int_shape(x)))
