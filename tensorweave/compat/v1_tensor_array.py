"""``tf.TensorArray`` as a value: one tensor of shape ``[size, *element_shape]``.

TF's TensorArray is a resource with a "flow"; here it is the stacked tensor itself, so every
method is ordinary differentiable ops: ``unstack`` keeps the tensor, ``read(i)`` gathers row
``i``, ``write(i, v)`` returns a new TensorArray with row ``i`` replaced (a scatter; with
``dynamic_size=True`` the tensor first grows to ``i + 1`` rows), ``stack`` returns it. This
covers the uses of TF1 RNN code — inputs unstacked and read inside a loop body (``raw_rnn``'s
``loop_fn``), outputs written and stacked — but a TensorArray is not itself a loop variable
of ``tw.while_loop`` (pass ``ta.stack()`` instead).

>>> import tensorweave as tw
>>> from tensorweave.compat.v1_tensor_array import TensorArray
>>> ta = TensorArray(tw.float32, size=3)
>>> ta = ta.write(0, [1.0, 2.0]).write(2, [5.0, 6.0])
>>> ta.stack().numpy().tolist(), ta.read(2).numpy().tolist()
([[1.0, 2.0], [0.0, 0.0], [5.0, 6.0]], [5.0, 6.0])
"""
import tensorweave as tw
from tensorweave.core import dtypes as _dt
from tensorweave.core.shape import TensorShape

__all__ = ["TensorArray"]


class TensorArray:
    """``tf.TensorArray(dtype, size, dynamic_size, ..., element_shape)``; see the module doc."""

    def __init__(self, dtype, size=None, dynamic_size=None, clear_after_read=None, tensor_array_name=None,
                 handle=None, flow=None, infer_shape=True, element_shape=None, colocate_with_first_write_call=True,
                 name=None, _value=None):
        self._dtype = _dt.as_dtype(dtype)
        self._dynamic = bool(dynamic_size)
        if size is None and not self._dynamic and _value is None:
            raise ValueError("TensorArray: size must be given unless dynamic_size=True")
        self._size = 0 if size is None else size
        self._element_shape = TensorShape(element_shape)
        self._value = _value
        self._name = name or tensor_array_name or "TensorArray"

    def _with(self, value):
        return TensorArray(self._dtype, size=self._size, dynamic_size=self._dynamic,
                           element_shape=self._element_shape, name=self._name, _value=value)

    @property
    def dtype(self):
        return self._dtype

    @property
    def element_shape(self):
        if self._value is not None and self._value.shape.rank is not None:
            return self._value.shape[1:]
        return self._element_shape

    @property
    def flow(self):
        return self.stack()

    def _empty(self, element):
        rows = tw.reshape(tw.cast(self._size, tw.int32), [1])
        return tw.zeros(tw.concat([rows, tw.shape(element)], 0), dtype=self._dtype)

    def unstack(self, value, name=None):
        """The rows of ``value`` (first axis) as the elements."""
        value = tw.convert_to_tensor(value, dtype=self._dtype)
        if value.shape.rank == 0:
            raise ValueError("TensorArray.unstack: the value must have at least one dimension")
        return self._with(value)

    def scatter(self, indices, value, name=None):
        value = tw.convert_to_tensor(value, dtype=self._dtype)
        idx = tw.reshape(tw.cast(tw.convert_to_tensor(indices), tw.int32), [-1, 1])
        base = self._grown(tw.reduce_max(idx) + 1, value[0])
        return self._with(tw.tensor_scatter_nd_update(base, idx, value))

    def _grown(self, rows, element):
        """The stacked tensor with at least ``rows`` rows (zeros appended) when dynamic."""
        base = self._value if self._value is not None else self._empty(element)
        if not self._dynamic:
            return base
        extra = tw.maximum(tw.cast(rows, tw.int32) - tw.shape(base)[0], 0)
        pad = tw.zeros(tw.concat([tw.reshape(extra, [1]), tw.shape(base)[1:]], 0), dtype=self._dtype)
        return tw.concat([base, pad], 0)

    def write(self, index, value, name=None):
        """A TensorArray with element ``index`` set to ``value``."""
        value = tw.convert_to_tensor(value, dtype=self._dtype)
        i = tw.cast(tw.convert_to_tensor(index), tw.int32)
        base = self._grown(i + 1, value)
        return self._with(tw.tensor_scatter_nd_update(base, tw.reshape(i, [1, 1]), value[None]))

    def read(self, index, name=None):
        if self._value is None:
            raise ValueError("TensorArray.read: nothing has been written or unstacked")
        return tw.gather(self._value, tw.cast(tw.convert_to_tensor(index), tw.int32))

    def gather(self, indices, name=None):
        if self._value is None:
            raise ValueError("TensorArray.gather: nothing has been written or unstacked")
        return tw.gather(self._value, tw.cast(tw.convert_to_tensor(indices), tw.int32))

    def stack(self, name=None):
        """All elements stacked along a new first axis."""
        if self._value is None:
            if self._element_shape.is_fully_defined():
                return tw.zeros([self._size] + self._element_shape.as_list(), dtype=self._dtype)
            raise ValueError("TensorArray.stack: nothing has been written, and the element shape is unknown")
        return self._value

    def concat(self, name=None):
        v = self.stack()
        return tw.reshape(v, tw.concat([[-1], tw.shape(v)[2:]], 0))

    def size(self, name=None):
        if self._value is None:
            return tw.convert_to_tensor(self._size, dtype=tw.int32)
        return tw.shape(self._value)[0]

    def identity(self):
        return self

    def mark_used(self):
        pass

    def close(self, name=None):
        return tw.no_op()
