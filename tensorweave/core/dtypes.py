"""DTypes: the element types a tensor can hold.

TensorFlow's rule applies: ops never promote between tensor dtypes (users cast
explicitly), and a Python scalar takes the dtype of the tensor it meets.

>>> import tensorweave as tw
>>> tw.as_dtype("float32") is tw.float32
True
>>> tw.bfloat16.is_floating
True
"""
import ml_dtypes
import numpy as np


class DType:
    """An element type; compares by identity, prints as ``tw.float32``."""

    __slots__ = ("name", "np_dtype", "is_floating", "is_integer", "is_bool", "is_unsigned", "is_complex", "_hash")

    def __init__(self, name, np_dtype, kind):
        self.name = name
        self.np_dtype = np.dtype(np_dtype) if np_dtype is not None else None
        self.is_floating = kind == "float"
        self.is_integer = kind in ("int", "uint")
        self.is_unsigned = kind == "uint"
        self.is_bool = kind == "bool"
        self.is_complex = kind == "complex"
        self._hash = hash(name)

    @property
    def as_numpy_dtype(self):
        return self.np_dtype.type

    @property
    def is_numeric(self):
        return self.is_floating or self.is_integer or self.is_complex

    @property
    def real_dtype(self):
        """The dtype of the real and imaginary parts (the dtype itself when not complex)."""
        return {"complex64": float32, "complex128": float64}.get(self.name, self)

    @property
    def size(self):
        return self.np_dtype.itemsize

    @property
    def min(self):
        return ml_dtypes.finfo(self.np_dtype).min if self.is_floating else np.iinfo(self.np_dtype).min

    @property
    def max(self):
        return ml_dtypes.finfo(self.np_dtype).max if self.is_floating else np.iinfo(self.np_dtype).max

    def __repr__(self):
        return f"tw.{self.name}"

    def __hash__(self):
        return self._hash

    def __eq__(self, other):
        if isinstance(other, DType):
            return self is other
        try:
            return self is as_dtype(other)
        except TypeError:
            return False

    def __reduce__(self):
        return as_dtype, (self.name,)


bool_ = DType("bool", np.bool_, "bool")
int8 = DType("int8", np.int8, "int")
uint8 = DType("uint8", np.uint8, "uint")
int16 = DType("int16", np.int16, "int")
uint16 = DType("uint16", np.uint16, "uint")
int32 = DType("int32", np.int32, "int")
uint32 = DType("uint32", np.uint32, "uint")
int64 = DType("int64", np.int64, "int")
uint64 = DType("uint64", np.uint64, "uint")
float16 = DType("float16", np.float16, "float")
bfloat16 = DType("bfloat16", ml_dtypes.bfloat16, "float")
float32 = DType("float32", np.float32, "float")
float64 = DType("float64", np.float64, "float")
complex64 = DType("complex64", np.complex64, "complex")
complex128 = DType("complex128", np.complex128, "complex")
string = DType("string", np.object_, "string")
# A handle to a stateful resource (a variable); its value is a Python object.
resource = DType("resource", None, "resource")
# An opaque Python value (a list of tensors, a py_function token ...).
variant = DType("variant", None, "variant")

ALL = (bool_, int8, uint8, int16, uint16, int32, uint32, int64, uint64, float16, bfloat16,
       float32, float64, complex64, complex128, string, resource, variant)
FLOATING = (float16, bfloat16, float32, float64)
INTEGER = (int8, uint8, int16, uint16, int32, uint32, int64, uint64)
NUMERIC = FLOATING + INTEGER

_BY_NAME = {d.name: d for d in ALL}
_BY_NAME.update({"bool_": bool_, "float": float32, "double": float64, "half": float16, "str": string,
                 "object": string})
# DataType numbers from TensorFlow's public types.proto.
_TF_ENUM = {1: "float32", 2: "float64", 3: "int32", 4: "uint8", 5: "int16", 6: "int8", 7: "string", 8: "complex64",
            9: "int64", 10: "bool", 14: "bfloat16", 17: "uint16", 18: "complex128", 19: "float16", 20: "resource",
            21: "variant", 22: "uint32", 23: "uint64"}
_BY_NP = {d.np_dtype: d for d in ALL if d.np_dtype is not None and d is not string}
_BY_NP[np.dtype(np.object_)] = string


def as_dtype(value):
    """Converts a DType, NumPy dtype/type, or name (``"float32"``) to a :class:`DType`."""
    if isinstance(value, DType):
        return value
    if isinstance(value, str):
        d = _BY_NAME.get(value)
        if d is None:
            raise TypeError(f"Unknown dtype name {value!r}; expected one of {sorted(_BY_NAME)}")
        return d
    if type(value) is int:
        # TensorFlow's DataType enum numbers (``tf.zeros(1, 1)`` is float32 zeros, as in TF).
        d = _BY_NAME.get(_TF_ENUM.get(value, ""))
        if d is None:
            raise TypeError(f"Cannot convert {value!r} to a tensorweave dtype: not a TensorFlow DataType "
                            f"number (known: {sorted(_TF_ENUM)})")
        return d
    if value is bool:
        return bool_
    if value is int:
        return int32
    if value is float:
        return float32
    try:
        npd = np.dtype(value)
    except TypeError:
        raise TypeError(f"Cannot convert {value!r} to a tensorweave dtype") from None
    d = _BY_NP.get(npd)
    if d is None:
        if npd.kind in "US":
            return string
        raise TypeError(f"Unsupported dtype {npd}")
    return d


def from_numpy(np_dtype):
    """Fast path for kernels' outputs: the DType of a NumPy dtype."""
    d = _BY_NP.get(np_dtype)
    if d is None:
        return as_dtype(np_dtype)
    return d
