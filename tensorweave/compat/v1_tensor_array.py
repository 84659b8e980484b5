"""``tf.TensorArray`` as a value: one tensor of shape ``[size, *element_shape]``.

TF's TensorArray is a resource with a "flow"; here it is the stacked tensor itself, so every
method is ordinary differentiable ops: ``unstack`` keeps the tensor, ``read(i)`` gathers row
``i``, ``write(i, v)`` returns a new TensorArray with row ``i`` replaced (a scatter; with
``dynamic_size=True`` the tensor first grows to ``i + 1`` rows), ``stack`` returns it. This
covers the uses of TF1 RNN code — inputs unstacked and read inside a loop body (``raw_rnn``'s
``loop_fn``), outputs written and stacked. compat.v1's ``tf.while_loop`` (:func:`while_loop`)
takes TensorArrays among its loop variables, as TF1 code passes them: each travels through the
loop as its stacked tensor (an empty one's element shape comes from one trace of the body).

>>> import tensorweave as tw
>>> from tensorweave.compat.v1_tensor_array import TensorArray
>>> ta = TensorArray(tw.float32, size=3)
>>> ta = ta.write(0, [1.0, 2.0]).write(2, [5.0, 6.0])
>>> ta.stack().numpy().tolist(), ta.read(2).numpy().tolist()
([[1.0, 2.0], [0.0, 0.0], [5.0, 6.0]], [5.0, 6.0])
"""
import tensorweave as tw
from tensorweave.core import dtypes as _dt
from tensorweave.core import nest
from tensorweave.core.context import building_graph
from tensorweave.core.shape import TensorShape

__all__ = ["TensorArray", "while_loop"]


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
        value = tw.zeros(tw.concat([rows, tw.shape(element)], 0), dtype=self._dtype)
        dims = element.shape.as_list() if element.shape.is_fully_defined() else None
        if dims is not None and all(dims):      # zeros of a computed shape has no static shape: give it back
            value = tw.reshape(value, [-1] + dims)
        return value

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


def _probe_element_shapes(body, flat, structure, empty):
    """The element shapes the body writes into the empty TensorArrays ``empty`` (indices into
    ``flat``): one trace of ``body`` in a scratch function graph (its nodes never run)."""
    from tensorweave.core.graph import FuncGraph, get_default_graph
    from tensorweave.ops.array_ops import placeholder
    g = FuncGraph("tensor_array_probe", outer_graph=get_default_graph())
    with g.as_default():
        args = [v if isinstance(v, TensorArray) else placeholder(v.dtype, v.shape) for v in flat]
        out = body(*nest.pack_sequence_as(structure, args))
    out_flat = nest.flatten(out)
    shapes = {}
    for i in empty:
        ta = out_flat[i] if i < len(out_flat) else None
        if not isinstance(ta, TensorArray) or ta._value is None:
            raise ValueError(f"tf.while_loop: loop variable {i} is a TensorArray the body neither writes nor returns "
                             "as a TensorArray. Hint: give it an element_shape, or return ta.write(...)")
        shapes[i] = ta._value.shape[1:]
    return shapes


def while_loop(cond, body, loop_vars, shape_invariants=None, parallel_iterations=10, back_prop=True,
               swap_memory=False, name=None, maximum_iterations=None, return_same_structure=False):
    """TF1's ``tf.while_loop``: ``tw.while_loop`` whose loop variables may also be TensorArrays."""
    single = not isinstance(loop_vars, (list, tuple))
    structure = [loop_vars] if single else list(loop_vars) if isinstance(loop_vars, tuple) else loop_vars
    flat = nest.flatten(structure)
    arrays = [i for i, v in enumerate(flat) if isinstance(v, TensorArray)]
    if not arrays:
        return tw.while_loop(cond, body, loop_vars, shape_invariants, parallel_iterations, back_prop, swap_memory,
                             maximum_iterations, name)
    if building_graph() is None:    # eagerly the body runs as Python: TensorArrays pass as they are
        step = 0
        while (maximum_iterations is None or step < int(maximum_iterations)) and bool(cond(*structure)):
            out = body(*structure)
            structure, step = [out] if single else list(out), step + 1
        return structure[0] if single else (tuple(structure) if isinstance(loop_vars, tuple) else structure)
    empty = [i for i in arrays if flat[i]._value is None and not flat[i]._element_shape.is_fully_defined()]
    shapes = _probe_element_shapes(body, flat, structure, empty) if empty else {}
    templates = {i: flat[i] for i in arrays}
    tensors, invariants = [], []
    given = nest.flatten_up_to(structure, [shape_invariants] if single else shape_invariants) \
        if shape_invariants is not None else [None] * len(flat)
    for i, v in enumerate(flat):
        if i in templates:
            ta = v
            if ta._value is None:
                elem = shapes.get(i, ta._element_shape)
                if not elem.is_fully_defined():
                    raise ValueError(f"tf.while_loop: TensorArray loop variable {i} gets elements of shape {elem}; "
                                     "its element shape must be static. Hint: give element_shape= when creating it")
                size = tw.reshape(tw.cast(ta._size, tw.int32), [1])
                value = tw.zeros(tw.concat([size, tw.constant(elem.as_list(), tw.int32)], 0), ta._dtype)
            else:
                value = ta._value
            tensors.append(value)
            elem = value.shape[1:]
            invariants.append(TensorShape([None] + (elem.as_list() if elem.rank is not None else [])))
        else:
            t = tw.convert_to_tensor(v)
            tensors.append(t)
            invariants.append(TensorShape(given[i]) if given[i] is not None else t.shape)

    def rebuild(vals):
        return nest.pack_sequence_as(structure, [templates[i]._with(t) if i in templates else t
                                                 for i, t in enumerate(vals)])

    def flat_body(*vals):
        out = body(*rebuild(list(vals)))
        out = nest.flatten([out] if single else out)
        return [o.stack() if isinstance(o, TensorArray) else o for o in out]
    res = tw.while_loop(lambda *vals: cond(*rebuild(list(vals))), flat_body, tensors, shape_invariants=invariants,
                        maximum_iterations=maximum_iterations, name=name)
    out = rebuild(list(res))
    return out[0] if single else (tuple(out) if isinstance(loop_vars, tuple) else out)
