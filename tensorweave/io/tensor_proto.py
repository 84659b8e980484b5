"""``tf.io.serialize_tensor``/``parse_tensor`` and sparse serialisation, in TensorFlow's public
``TensorProto`` wire format (``tensor.proto``: ``dtype = 1``, ``tensor_shape = 2`` with
``dim = 2 {size = 1}``, ``tensor_content = 4`` raw little-endian bytes, ``string_val = 8``, and the
typed ``*_val`` fields, which TF repeats the last of when shorter than the tensor). The bytes
equal TF's for the same tensor.

>>> import tensorweave as tw
>>> data = tw.io.serialize_tensor(tw.constant([1, 2], tw.int32))
>>> data.numpy().hex()
'080312041202080222080100000002000000'
>>> tw.io.parse_tensor(data, tw.int32).numpy().tolist()
[1, 2]
"""
import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.tensor import Tensor
from tensorweave.io.example_pb import DecodeError, _fields, _ld, _read_varint, _signed64, _tag, _varint

_ENUM = {v: k for k, v in _dt._TF_ENUM.items()}          # dtype name -> DataType number
_VAL_FIELDS = {5: ("<f", np.float32), 6: ("<d", np.float64), 13: (None, np.float16)}


def _as_array(t):
    if isinstance(t, (bytes, str)):
        return t        # np.asarray would make fixed-width bytes and drop trailing NULs
    return t.numpy() if isinstance(t, Tensor) else np.asarray(t, dtype=object)


def encode_tensor(value):
    """The TensorProto bytes of a tensor (or array)."""
    t = value if isinstance(value, Tensor) else convert_to_tensor(value)
    dtype = t.dtype
    if dtype.name not in _ENUM or dtype in (_dt.resource, _dt.variant):
        raise TypeError(f"serialize_tensor: dtype {dtype.name} has no TensorProto encoding here")
    a = np.asarray(t.numpy())
    # proto3 leaves zero-valued scalars out: a dimension of size 0 is an empty Dim message
    shape = b"".join(_ld(2, _tag(1, 0) + _varint(int(d)) if d else b"") for d in a.shape)
    out = _tag(1, 0) + _varint(_ENUM[dtype.name]) + _ld(2, shape)
    if dtype is _dt.string:
        for v in a.reshape(-1):
            out += _ld(8, v.encode("utf-8") if isinstance(v, str) else bytes(v))
    elif a.size:
        out += _ld(4, np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tobytes())
    return out


def decode_tensor(data, out_type=None):
    """A NumPy array (object array for strings) from TensorProto bytes."""
    buf = memoryview(bytes(data))
    dtype_num, dims, content, strings, vals = None, [], None, [], []
    for f, w, v in _fields(buf, 0, len(buf)):
        if f == 1 and w == 0:
            dtype_num = v
        elif f == 2 and w == 2:
            for g, gw, gv in _fields(buf, v[0], v[1]):
                if g == 2 and gw == 2:
                    size = 0
                    for h, hw, hv in _fields(buf, gv[0], gv[1]):
                        if h == 1 and hw == 0:
                            size = _signed64(hv)
                    dims.append(size)
        elif f == 4 and w == 2:
            content = bytes(buf[v[0]:v[1]])
        elif f == 8 and w == 2:
            strings.append(bytes(buf[v[0]:v[1]]))
        elif w == 2 and f in (5, 6, 7, 10, 11, 13, 16, 17):
            vals.append((f, bytes(buf[v[0]:v[1]])))
        elif w in (0, 1, 5) and f in (5, 6, 7, 10, 11, 13, 16, 17):
            vals.append((f, v))
    name = _dt._TF_ENUM.get(dtype_num)
    if name is None:
        raise DecodeError(f"parse_tensor: unknown or missing DataType {dtype_num}")
    dtype = _dt.as_dtype(name)
    if out_type is not None and _dt.as_dtype(out_type) is not dtype:
        raise TypeError(f"parse_tensor: the tensor is {dtype.name} but out_type is {_dt.as_dtype(out_type).name}")
    if any(d < 0 for d in dims):
        raise DecodeError(f"parse_tensor: negative dimension in shape {dims}")
    n = int(np.prod(dims)) if dims else 1
    if dtype is _dt.string:
        if len(strings) != n:
            raise DecodeError(f"parse_tensor: {len(strings)} strings for a shape {dims} tensor")
        out = np.empty(n, dtype=object)
        out[:] = strings
        return out.reshape(dims)
    np_dt = dtype.np_dtype
    if content is not None:
        if len(content) != n * np_dt.itemsize:
            raise DecodeError(f"parse_tensor: {len(content)} content bytes for a {dtype.name} tensor of shape {dims}")
        return np.frombuffer(content, np_dt.newbyteorder("<")).astype(np_dt).reshape(dims)
    flat = _typed_values(vals, np_dt)
    if len(flat) == 0:
        return np.zeros(dims, np_dt)
    if len(flat) < n:                     # TF repeats the last value
        flat = np.concatenate([flat, np.full(n - len(flat), flat[-1], np_dt)])
    return flat[:n].astype(np_dt).reshape(dims)


def _typed_values(vals, np_dt):
    out = []
    for f, v in vals:
        if isinstance(v, bytes) and f in (5, 6):      # packed floats/doubles
            out.extend(np.frombuffer(v, "<f4" if f == 5 else "<f8").tolist())
        elif isinstance(v, bytes):                     # packed varints
            p = 0
            while p < len(v):
                x, p = _read_varint(v, p, len(v))
                out.append(_signed64(x) if f in (7, 10) else x)
        elif f in (5, 6):
            out.append(np.frombuffer(v, "<f4" if f == 5 else "<f8")[0])
        else:
            out.append(_signed64(v) if f in (7, 10) else v)
    if np_dt == np.float16 or np_dt.name == "bfloat16":
        return np.asarray(out, np.uint16).view(np_dt)
    return np.asarray(out).astype(np_dt) if out else np.zeros(0, np_dt)


def _string_scalar(b):
    arr = np.empty((), dtype=object)
    arr[()] = b
    return convert_to_tensor(arr, dtype=_dt.string)


def serialize_tensor(tensor, name=None):
    """The TensorProto bytes of ``tensor`` as a scalar string tensor."""
    return _string_scalar(encode_tensor(tensor))


def parse_tensor(serialized, out_type, name=None):
    """The tensor in TensorProto bytes (``out_type`` must be its dtype)."""
    v = _as_array(serialized)
    v = v[()] if isinstance(v, np.ndarray) else v
    arr = decode_tensor(v.encode() if isinstance(v, str) else v, out_type)
    return convert_to_tensor(arr, dtype=_dt.as_dtype(out_type))


def serialize_sparse(sp_input, out_type=_dt.string, name=None):
    """``[3]`` strings: the serialised indices, values and dense shape of a SparseTensor."""
    parts = [encode_tensor(sp_input.indices), encode_tensor(sp_input.values), encode_tensor(sp_input.dense_shape)]
    out = np.empty(3, dtype=object)
    out[:] = parts
    return convert_to_tensor(out, dtype=_dt.string)


def serialize_many_sparse(sp_input, out_type=_dt.string, name=None):
    """``[batch, 3]`` strings: one serialised SparseTensor per row of a batched SparseTensor."""
    from tensorweave.sparse.sparse_tensor import SparseTensor
    ind, vals, shape = (_as_array(x) for x in (sp_input.indices, sp_input.values, sp_input.dense_shape))
    rows = []
    for b in range(int(shape[0])):
        m = ind[:, 0] == b
        sub = SparseTensor(ind[m][:, 1:], vals[m], shape[1:])
        rows.append([encode_tensor(sub.indices), encode_tensor(sub.values), encode_tensor(sub.dense_shape)])
    out = np.empty((len(rows), 3), dtype=object)
    for i, r in enumerate(rows):
        out[i, :] = r
    return convert_to_tensor(out, dtype=_dt.string)


def deserialize_many_sparse(serialized_sparse, dtype, rank=None, name=None):
    """A batched SparseTensor from ``[batch, 3]`` serialised SparseTensors (shape: the per-dim maximum)."""
    from tensorweave.sparse.sparse_tensor import SparseTensor
    s = _as_array(serialized_sparse).reshape(-1, 3)
    inds, vals, shapes = [], [], []
    for b, (i, v, sh) in enumerate(s):
        ii = decode_tensor(i, _dt.int64)
        inds.append(np.concatenate([np.full((len(ii), 1), b, np.int64), ii.reshape(len(ii), -1)], axis=1))
        vals.append(decode_tensor(v, dtype))
        shapes.append(decode_tensor(sh, _dt.int64))
    shape = np.concatenate([[len(s)], np.max(shapes, axis=0)]) if shapes else np.zeros(1, np.int64)
    rank_ = len(shape)
    return SparseTensor(np.concatenate(inds).reshape(-1, rank_) if inds else np.zeros((0, rank_), np.int64),
                        convert_to_tensor(np.concatenate(vals) if vals else np.zeros(0, _dt.as_dtype(dtype).np_dtype),
                                          dtype=_dt.as_dtype(dtype)), shape.astype(np.int64))


class TensorProto:
    """A ``TensorProto`` message holding a tensor (``tw.make_tensor_proto``): ``dtype``, ``tensor_shape``
    (a list of sizes) and the value; ``SerializeToString``/``FromString`` use the wire format above."""

    def __init__(self, array):
        self._array = array

    @property
    def dtype(self):
        return _ENUM[_dt.from_numpy(self._array.dtype).name if self._array.dtype != object else "string"]

    @property
    def tensor_shape(self):
        return list(self._array.shape)

    def SerializeToString(self, deterministic=None):  # noqa: N802 - protobuf's name
        return encode_tensor(convert_to_tensor(self._array, dtype=_dt.string if self._array.dtype == object else None))

    @classmethod
    def FromString(cls, data):  # noqa: N802
        return cls(decode_tensor(data))

    def __repr__(self):
        return f"TensorProto(dtype={self.dtype}, tensor_shape={self.tensor_shape})"


def make_tensor_proto(values, dtype=None, shape=None, verify_shape=False, allow_broadcast=False):
    """A :class:`TensorProto` of ``values`` (cast to ``dtype``, reshaped or broadcast to ``shape``)."""
    t = convert_to_tensor(values, dtype=dtype)
    a = np.asarray(t.numpy(), dtype=object if t.dtype is _dt.string else t.dtype.np_dtype)
    if shape is not None:
        shape = [int(d) for d in shape]
        if verify_shape and list(a.shape) != shape:
            raise TypeError(f"make_tensor_proto: expected shape {shape}, got {list(a.shape)}")
        a = np.broadcast_to(a, shape) if a.size == 1 or allow_broadcast else a.reshape(shape)
    return TensorProto(np.array(a))


def make_ndarray(tensor):
    """The NumPy array held by a :class:`TensorProto`."""
    return np.array(tensor._array)
