"""``tw.onnx``: export Keras models to ONNX (needs the optional ``onnx`` package:
``pip install 'tensorweave[onnx]'``).

The exporter converts layer by layer from the model's structure (``Sequential``, functional
``Model`` graphs, and models nested in either), so the ONNX graph reads like the Keras model:
Dense is MatMul + Add, Conv2D is Conv, LSTM is ONNX's LSTM op. The ONNX model takes and returns
tensors laid out as the Keras model does (channels-last images stay channels-last); Transposes
to ONNX's channels-first convolutions are added inside, once per run of convolutional layers.
The batch dimension is symbolic (``"batch"``), so any batch size runs.

Supported: Dense, Activation, Dropout, Identity, Flatten, Reshape, Permute; Conv1D/2D/3D (with
groups, dilations, "causal"), Conv1D/2D/3DTranspose, DepthwiseConv2D, SeparableConv2D; Max and
Average pooling 1D/2D/3D and their global forms; BatchNormalization, LayerNormalization;
Embedding (with ``mask_zero``); Add, Subtract, Multiply, Average, Maximum, Minimum, Concatenate,
Dot; LSTM, GRU, SimpleRNN (and ``RNN`` over their cells), Bidirectional. Activations: linear,
relu, sigmoid, tanh, softmax, log_softmax, elu, selu, gelu, softplus, softsign, swish/silu,
relu6, leaky_relu, hard_sigmoid, exponential. Anything else raises
:class:`UnsupportedLayerError` naming the layer and its class.

>>> import os, tempfile
>>> import numpy as np
>>> import pytest; onnx = pytest.importorskip("onnx")  # the doctest needs the optional package
>>> from onnx.reference import ReferenceEvaluator
>>> import tensorweave.onnx
>>> from tensorweave import keras
>>> model = keras.Sequential([keras.Input(shape=(4,), name="x"), keras.layers.Dense(3, activation="softmax")])
>>> path = os.path.join(tempfile.mkdtemp(), "model.onnx")
>>> proto = tensorweave.onnx.export(model, path)
>>> [n.op_type for n in proto.graph.node]
['MatMul', 'Add', 'Softmax']
>>> x = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
>>> (y,) = ReferenceEvaluator(path).run(None, {"x": x})
>>> bool(np.allclose(y, model.predict(x, verbose=0), atol=1e-6))
True
"""

from tensorweave.onnx._layers import UnsupportedLayerError

__all__ = ["export", "UnsupportedLayerError", "supported_layers"]


def _require_onnx():
    try:
        import onnx  # noqa: F401
    except ImportError as e:
        raise ImportError("tw.onnx.export needs the optional 'onnx' package. Hint: pip install 'tensorweave[onnx]' "
                          "(or pip install 'onnx>=1.15')") from e


def export(model, path=None, opset=17, input_names=None, output_names=None, check=True):
    """Writes ``model`` (a built Keras ``Sequential`` or functional ``Model``) as an ONNX file at
    ``path`` and returns the ``onnx.ModelProto``.

    ``opset``: the ONNX opset to target (default 17; 13 and above work). ``input_names`` /
    ``output_names``: names of the graph's inputs and outputs, one per model input/output (by
    default the Keras input layers' names and the output layers' names). ``check``: validate the
    model with ``onnx.checker.check_model(full_check=True)`` before writing (a failure means an
    exporter bug, and nothing is written). The file is written atomically (a temporary file in
    the same folder, then a rename); ``path=None`` only returns the proto.

    Raises :class:`UnsupportedLayerError` for a layer without an ONNX equivalent, naming it.

    >>> import pytest; onnx = pytest.importorskip("onnx")
    >>> import tensorweave.onnx
    >>> from tensorweave import keras
    >>> x = keras.Input(shape=(8, 8, 3), name="image")
    >>> y = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(x)
    >>> y = keras.layers.GlobalAveragePooling2D()(y)
    >>> proto = tensorweave.onnx.export(keras.Model(x, y))
    >>> [n.op_type for n in proto.graph.node]
    ['Transpose', 'Conv', 'Relu', 'ReduceMean']
    >>> [d.dim_param or d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim]
    ['batch', 8, 8, 3]
    """
    _require_onnx()
    from tensorweave.onnx._export import export as _export
    return _export(model, path, opset=opset, input_names=input_names, output_names=output_names, check=check)


def supported_layers():
    """The names of the Keras layer classes ``export`` converts.

    >>> import tensorweave.onnx
    >>> "LSTM" in tensorweave.onnx.supported_layers()
    True
    """
    from tensorweave.onnx import _layers
    _layers.register_builtin()
    return _layers.supported_layers()
