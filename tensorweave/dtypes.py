"""``tw.dtypes`` (TF's ``tf.dtypes``): the dtype objects, ``DType``, ``as_dtype``, ``cast``,
``saturate_cast`` and ``complex``.

>>> import tensorweave as tw
>>> tw.dtypes.saturate_cast(tw.constant([300.0, -5.0]), tw.uint8).numpy()
array([255,   0], dtype=uint8)
"""
from tensorweave.core.dtypes import (DType, as_dtype, bfloat16, complex64, complex128, float16, float32,  # noqa: F401
                                     float64, int8, int16, int32, int64, resource, string, uint8, uint16, uint32,
                                     uint64, variant)
from tensorweave.core.dtypes import bool_ as bool  # noqa: F401,A004 - TF's name
from tensorweave.ops.complex_ops import complex  # noqa: F401,A004
from tensorweave.ops.math_ops import cast, saturate_cast  # noqa: F401

double = float64
half = float16
