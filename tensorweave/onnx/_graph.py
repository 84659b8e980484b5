"""The ONNX graph under construction: nodes, initializers, unique names, and values that carry
their layout.

A Keras tensor and the ONNX tensor standing for it need not share an axis order: ONNX's Conv
and pooling ops want channels first while a Keras model is usually channels last. Rather than
wrapping every convolution in a pair of Transposes, each :class:`Value` records ``perm``: the
ONNX tensor is ``transpose(keras_tensor, perm)``. Layers that do not care about the axis order
(activations, batch normalization, element-wise merges, global pooling) work in whatever order
they receive and pass it on; a layer that needs a particular order asks :meth:`Graph.layout`
for it, which emits one Transpose (and remembers it, so a value shared by two consumers is
transposed once). A channels-last ``Conv2D -> BatchNormalization -> ReLU -> MaxPooling2D``
stack therefore becomes one Transpose, the four ops in NCHW, and one Transpose back.

Everything here needs the ``onnx`` package; the module imports without it so that the
package's doctests and ``import tensorweave.onnx`` work on a machine that lacks it.
"""
import hashlib

import numpy as np

try:
    from onnx import helper, numpy_helper
except ImportError:  # export() raises the install hint; importing stays possible
    helper = numpy_helper = None

INT64_MIN = np.iinfo(np.int64).min


def identity_perm(rank):
    return tuple(range(rank))


def compose_target(current, target):
    """The Transpose ``perm`` that turns a tensor laid out as ``current`` into ``target``
    (both relative to the Keras order)."""
    return [current.index(axis) for axis in target]


class Value:
    """One ONNX tensor standing for one Keras tensor.

    ``shape`` and ``dtype`` are the Keras tensor's (static shape, None where unknown);
    ``perm`` says how the ONNX tensor's axes map onto them (ONNX axis ``j`` is Keras axis
    ``perm[j]``); ``mask`` is the Value of the Keras mask riding on this tensor, if any
    (``(batch, steps)`` booleans, always in Keras order).
    """

    __slots__ = ("name", "shape", "dtype", "perm", "mask")

    def __init__(self, name, shape, dtype, perm=None, mask=None):
        self.name = name
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.perm = tuple(perm) if perm is not None else identity_perm(len(self.shape))
        self.mask = mask

    @property
    def rank(self):
        return len(self.shape)

    def onnx_axis(self, keras_axis):
        """Where Keras axis ``keras_axis`` (negative allowed) sits in the ONNX tensor."""
        return self.perm.index(keras_axis % self.rank)

    def __repr__(self):
        return f"Value({self.name!r}, shape={self.shape}, dtype={self.dtype}, perm={self.perm})"


class Graph:
    """Collects nodes and initializers, hands out unique names, and knows the target opset."""

    def __init__(self, opset):
        self.opset = int(opset)
        self.nodes = []
        self.initializers = []
        self._names = set()
        self._layout_cache = {}
        self._const_cache = {}

    def subgraph(self):
        """A graph for a control-flow body (Scan): its own nodes, but the parent's names (ONNX
        forbids a body to redefine an outer name) and the parent's initializers (a body may read
        outer values, so its weights live once, outside)."""
        sub = Graph.__new__(Graph)
        sub.opset = self.opset
        sub.nodes = []
        sub.initializers = self.initializers
        sub._names = self._names
        sub._layout_cache = {}
        sub._const_cache = self._const_cache
        return sub

    # ---- names -----------------------------------------------------------------------------
    def reserve(self, name):
        """Claims ``name`` exactly (graph inputs and outputs); raises if it is taken."""
        if name in self._names:
            raise ValueError(f"The ONNX tensor name {name!r} is used twice; pass distinct input_names/output_names")
        self._names.add(name)
        return name

    def unique(self, hint):
        hint = "".join(c if c.isalnum() or c in "_./:-" else "_" for c in str(hint)) or "t"
        name, i = hint, 1
        while name in self._names:
            name = f"{hint}_{i}"
            i += 1
        self._names.add(name)
        return name

    # ---- constants -------------------------------------------------------------------------
    def const(self, array, hint="const", dtype=None):
        """An initializer holding ``array``. Equal small integer constants (shapes, axes) are
        shared, and so are equal arrays under the same hint: a layer called twice in a model
        (shared weights) stores its weights once."""
        arr = np.ascontiguousarray(np.asarray(array, dtype=dtype))
        digest = hashlib.sha1(arr.tobytes()).digest()
        small_int = arr.dtype.kind in "iub" and arr.size <= 16
        key = (None if small_int else hint, arr.dtype.str, arr.shape, digest)
        name = self._const_cache.get(key)
        if name is None:
            name = self.unique(hint)
            self.initializers.append(numpy_helper.from_array(arr, name))
            self._const_cache[key] = name
        return name

    def ints(self, values, hint="axes"):
        return self.const(np.asarray(values, dtype=np.int64), hint)

    # ---- nodes -----------------------------------------------------------------------------
    def op(self, op_type, inputs, hint, n_out=1, outputs=None, domain=None, **attrs):
        """Appends a node; returns its output name (or list of names when ``n_out`` > 1)."""
        if outputs is None:
            outputs = [self.unique(f"{hint}" if n_out == 1 else f"{hint}_out{i}") for i in range(n_out)]
        attrs = {k: v for k, v in attrs.items() if v is not None}
        node = helper.make_node(op_type, [i if i is not None else "" for i in inputs], outputs,
                                name=self.unique(f"{hint}/{op_type}"), domain=domain, **attrs)
        self.nodes.append(node)
        return outputs[0] if n_out == 1 else outputs

    # ---- layouts ---------------------------------------------------------------------------
    def layout(self, value, target):
        """The ONNX name of ``value`` laid out as ``target`` (a perm relative to Keras order)."""
        target = tuple(target)
        if value.perm == target:
            return value.name
        key = (value.name, target)
        if key not in self._layout_cache:
            self._layout_cache[key] = self.op("Transpose", [value.name], f"{value.name}_T",
                                              perm=compose_target(value.perm, target))
        return self._layout_cache[key]

    def keras(self, value):
        """The ONNX name of ``value`` in Keras' own axis order."""
        return self.layout(value, identity_perm(value.rank))

    # ---- opset-dependent helpers --------------------------------------------------------------
    def reduce(self, op_type, x, axes, keepdims, hint):
        """ReduceMean/Max/Sum...: the axes are an attribute before opset 18 (13 for ReduceSum)
        and an input after."""
        axes = [int(a) for a in axes]
        takes_input = self.opset >= (13 if op_type == "ReduceSum" else 18)
        if takes_input:
            return self.op(op_type, [x, self.ints(axes)], hint, keepdims=int(keepdims))
        return self.op(op_type, [x], hint, axes=axes, keepdims=int(keepdims))

    def squeeze(self, x, axes, hint):
        return self.op("Squeeze", [x, self.ints(axes)], hint)

    def unsqueeze(self, x, axes, hint):
        return self.op("Unsqueeze", [x, self.ints(axes)], hint)

    def reverse(self, x, axis, hint):
        """``x`` reversed along ``axis`` (a Slice with step -1)."""
        return self.op("Slice", [x, self.ints([-1]), self.ints([INT64_MIN]), self.ints([axis]), self.ints([-1])],
                       hint)

    def dim(self, x, axis, hint):
        """``shape(x)[axis]`` as a 1-element int64 tensor (for building shapes at run time)."""
        shape = self.op("Shape", [x], f"{hint}_shape")
        return self.op("Gather", [shape, self.ints([axis])], f"{hint}_dim", axis=0)

    def zeros_like_batch(self, x, batch_axis, size, dtype, hint):
        """Zeros ``[batch, size]`` with the batch size of ``x`` at run time."""
        shape = self.op("Concat", [self.dim(x, batch_axis, hint), self.ints([size])], f"{hint}_zshape", axis=0)
        value = numpy_helper.from_array(np.zeros([1], dtype=dtype), "value")
        return self.op("ConstantOfShape", [shape], hint, value=value)


def onnx_dtype(dtype):
    """The TensorProto element type of a NumPy dtype."""
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
