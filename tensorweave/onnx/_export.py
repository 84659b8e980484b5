"""Walks a Keras model's layer graph and assembles, checks and writes the ONNX model."""
import os
import tempfile

from tensorweave.core import nest
from tensorweave.onnx import _layers
from tensorweave.onnx._graph import Graph, Value, helper, onnx_dtype
from tensorweave.onnx._layers import UnsupportedLayerError, unsupported

MIN_OPSET = 13  # Softmax over one axis, Squeeze/Unsqueeze/Split with tensor inputs
_PROTOBUF_LIMIT = 2 ** 31 - 1


def _kt_class():
    from tensorweave.keras.engine.keras_tensor import KerasTensor
    return KerasTensor


def _model_tensors(model):
    """The model's input and output KerasTensors (a Sequential has them once it is built)."""
    from tensorweave.keras.engine.functional import Functional
    from tensorweave.keras.engine.sequential import Sequential
    if not isinstance(model, (Functional, Sequential)) or type(model).call not in (Functional.call, Sequential.call):
        name = getattr(model, "name", model)
        raise UnsupportedLayerError(
            f"tw.onnx.export converts Sequential and functional models layer by layer; '{name}' "
            f"({type(model).__name__}) defines its own call. Hint: build it with keras.Sequential or "
            "keras.Model(inputs, outputs)")
    inputs, outputs = getattr(model, "inputs", None), getattr(model, "outputs", None)
    if not inputs or not outputs:
        raise ValueError(f"Model '{model.name}' ({type(model).__name__}) has no defined inputs yet. Hint: start it "
                         "with keras.Input(shape=...), or call it once on data, before exporting")
    return list(inputs), list(outputs)


def _topological(model, inputs, outputs):
    """The layer calls between ``inputs`` and ``outputs``, each after the calls it reads from."""
    stop = {id(t) for t in inputs}
    order, seen = [], set()
    stack = [(t.node, False) for t in reversed(outputs) if id(t) not in stop]
    for t in outputs:
        if t.node is None:
            raise ValueError(f"Output {t} of model '{model.name}' was not produced by a layer call")
    # iterative depth-first search (deep models would exhaust Python's recursion limit)
    while stack:
        node, expanded = stack.pop()
        if id(node) in seen:
            continue
        if expanded:
            seen.add(id(node))
            order.append(node)
            continue
        stack.append((node, True))
        for t in reversed(node.input_tensors):
            if id(t) in stop:
                continue
            if t.node is None:
                raise ValueError(f"Tensor {t} in model '{model.name}' has no producing layer")
            if id(t.node) not in seen:
                stack.append((t.node, False))
    return order


class _Converter:
    def __init__(self, graph):
        self.g = graph

    def model(self, model, input_values, keep_masks=False):
        """Emits ``model`` applied to ``input_values``; returns the output Values."""
        from tensorweave.keras.engine.input_layer import InputLayer
        KerasTensor = _kt_class()
        inputs, outputs = _model_tensors(model)
        if len(input_values) != len(inputs):
            raise ValueError(f"Model '{model.name}' expects {len(inputs)} input(s), got {len(input_values)}")
        values = {}
        for t, v in zip(inputs, input_values):
            values[id(t)] = v if keep_masks else Value(v.name, v.shape, v.dtype, v.perm)
        for node in _topological(model, inputs, outputs):
            layer = node.layer
            if isinstance(layer, InputLayer):
                raise ValueError(f"Model '{model.name}' reads the keras.Input '{layer.name}', which is not one of its "
                                 "inputs")

            def sub(v):
                return values[id(v)] if isinstance(v, KerasTensor) else v
            first = node.args[0] if node.args else None
            if any(not isinstance(a, KerasTensor) for a in nest.flatten(first)):
                raise unsupported(layer, "it is called on a constant (not a model tensor)",
                                  "make the constant a layer weight or a model input")
            if any(isinstance(a, KerasTensor) for a in nest.flatten(node.args[1:])):
                raise unsupported(layer, "it takes model tensors as extra positional arguments")
            ins = [sub(t) for t in nest.flatten(first)]
            kwargs = nest.map_structure(sub, dict(node.kwargs))
            out_kts = nest.flatten(node.outputs)
            specs = [(kt.shape, kt.dtype.np_dtype) for kt in out_kts]
            outs = self.layer(layer, ins, kwargs, specs)
            if len(outs) != len(out_kts):
                raise AssertionError(f"converter for {type(layer).__name__} returned {len(outs)} outputs, "
                                     f"expected {len(out_kts)}")
            for kt, v in zip(out_kts, outs):
                values[id(kt)] = v
        return [values[id(t)] for t in outputs]

    def layer(self, layer, inputs, kwargs, specs):
        from tensorweave.keras.engine.functional import Functional
        from tensorweave.keras.engine.sequential import Sequential
        if isinstance(layer, (Functional, Sequential)) and type(layer).call in (Functional.call, Sequential.call):
            # a model used as a layer: Sequential passes masks in, a functional model starts without
            outs = self.model(layer, inputs, keep_masks=isinstance(layer, Sequential))
            return [Value(v.name, v.shape, v.dtype, v.perm) for v in outs]
        entry = _layers.lookup(layer)
        if entry is None:
            raise unsupported(layer, "there is no ONNX converter for this layer class",
                              f"supported layers: {', '.join(_layers.supported_layers())}")
        fn, mask_aware = entry
        in_masks = [v.mask for v in inputs if isinstance(v, Value) and v.mask is not None]
        if in_masks and not mask_aware and layer._call_has_mask:
            raise unsupported(layer, "a Keras mask (from Embedding(mask_zero=True)) reaches it and changes its result")
        outs = fn(self.g, layer, inputs, kwargs, specs)
        if not mask_aware:
            # Keras passes the mask on through layers that support masking, and drops it elsewhere
            # (new Values: a converter may hand back its input's Value, which others still read)
            keep = in_masks[0] if in_masks and len(inputs) == 1 and layer.supports_masking else None
            outs = [Value(v.name, v.shape, v.dtype, v.perm, mask=keep) for v in outs]
        return outs


def _dim_protos(shape, first_name, rest_prefix):
    dims = []
    for i, d in enumerate(shape):
        if d is not None:
            dims.append(int(d))
        elif i == 0:
            dims.append(first_name)  # every input and output shares one symbolic batch size
        else:
            dims.append(f"{rest_prefix}_dim{i}" if rest_prefix else None)
    return dims


def _io_names(given, defaults, what, taken=()):
    if given is None:
        names, used = [], set(taken)
        for base in defaults:
            name, i = base, 1
            while name in used:
                name, i = f"{base}_{i}", i + 1
            used.add(name)
            names.append(name)
        return names
    given = [given] if isinstance(given, str) else list(given)
    if len(given) != len(defaults):
        raise ValueError(f"{what} has {len(given)} name(s), but the model has {len(defaults)}: pass one name each")
    if len(set(given)) != len(given):
        raise ValueError(f"{what} repeats a name: {given}")
    return given


def _default_name(t, fallback):
    if t.node is None:
        return t.name or fallback
    # a layer with several outputs (an LSTM's states): the first keeps the layer's name
    return t.node.layer.name if t.index == 0 else f"{t.node.layer.name}_out{t.index}"


def build_model_proto(model, opset, input_names=None, output_names=None):
    """The ONNX ModelProto for ``model`` (not yet checked or written)."""
    import onnx
    import tensorweave as tw
    _layers.register_builtin()
    max_opset = onnx.defs.onnx_opset_version()
    if not MIN_OPSET <= int(opset) <= max_opset:
        raise ValueError(f"opset={opset} is not supported: tw.onnx.export writes opsets {MIN_OPSET} to {max_opset} "
                         f"(the installed onnx {onnx.__version__} knows up to {max_opset})")
    inputs, outputs = _model_tensors(model)
    in_names = _io_names(input_names, [_default_name(t, "input") for t in inputs], "input_names")
    out_names = _io_names(output_names, [_default_name(t, "output") for t in outputs], "output_names",
                          taken=in_names)
    g = Graph(opset)
    for n in in_names + out_names:
        g.reserve(n)
    in_values, in_infos = [], []
    for name, t in zip(in_names, inputs):
        dt = t.dtype.np_dtype
        in_values.append(Value(name, t.shape, dt))
        in_infos.append(helper.make_tensor_value_info(name, onnx_dtype(dt), _dim_protos(t.shape, "batch", name)))
    out_values = _Converter(g).model(model, in_values, keep_masks=True)
    out_infos = []
    renamed = {}
    for name, v, t in zip(out_names, out_values, outputs):
        src = g.keras(v)
        producer = next((n for n in g.nodes if src in n.output), None)
        if producer is not None and src not in renamed and src not in in_names:
            # name the producing node's output after the model output (no Identity needed)
            renamed[src] = name
        else:
            g.op("Identity", [renamed.get(src, src)], name, outputs=[name])
        out_infos.append(helper.make_tensor_value_info(name, onnx_dtype(v.dtype), _dim_protos(t.shape, "batch", None)))
    if renamed:
        for node in g.nodes:
            for i, n in enumerate(node.output):
                if n in renamed:
                    node.output[i] = renamed[n]
            for i, n in enumerate(node.input):
                if n in renamed:
                    node.input[i] = renamed[n]
    nodes, initializers = _prune(g.nodes, g.initializers, out_names)
    graph = helper.make_graph(nodes, model.name, in_infos, out_infos, initializer=initializers,
                              doc_string=f"Exported from tensorweave {tw.__version__} ({type(model).__name__} "
                                         f"'{model.name}')")
    opsets = [helper.make_opsetid("", int(opset))]
    proto = helper.make_model(graph, opset_imports=opsets, producer_name="tensorweave",
                              producer_version=tw.__version__)
    # the oldest IR version that carries this opset, so that older runtimes can load the file
    proto.ir_version = helper.find_min_ir_version_for(opsets)
    return proto


# ops all of whose outputs are optional: an unused one is dropped by naming it ""
_OPTIONAL_OUTPUTS = {"LSTM", "GRU", "RNN"}


def _subgraph_inputs(node):
    """Every name the node's subgraphs (a Scan body) read, including outer-scope ones."""
    names = set()
    for attr in node.attribute:
        for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
            for n in sub.node:
                names.update(n.input)
                names.update(_subgraph_inputs(n))
    return names


def _prune(nodes, initializers, outputs):
    """Drops nodes whose results nothing reads (a converter emits what a layer can produce, such as
    an LSTM's final cell state, whether or not the model uses it), then unread initializers."""
    live = set(outputs)
    kept = []
    for node in reversed(nodes):
        if not any(o in live for o in node.output if o):
            continue
        if node.op_type in _OPTIONAL_OUTPUTS:
            for i, o in enumerate(node.output):
                if o not in live:
                    node.output[i] = ""
            while node.output and node.output[-1] == "":
                node.output.pop()
        live.update(node.input)
        live.update(_subgraph_inputs(node))
        kept.append(node)
    kept.reverse()
    return kept, [t for t in initializers if t.name in live]


def write_atomic(data, path):
    """Writes ``data`` to ``path`` through a temporary file in the same folder, fsync and a
    rename (then the folder is fsynced), so that ``path`` is always either the old file or the
    complete new one (one implementation for every writer: ``saving.tensor_file``)."""
    from tensorweave.saving.tensor_file import write_bytes_atomic
    write_bytes_atomic(path, data)


def export(model, path=None, opset=17, input_names=None, output_names=None, check=True):
    import onnx
    proto = build_model_proto(model, opset, input_names, output_names)
    size = proto.ByteSize()
    if size > _PROTOBUF_LIMIT:
        raise ValueError(f"Model '{model.name}' is {size / 2 ** 30:.1f} GiB as ONNX, over protobuf's 2 GiB limit for "
                         "one file; tw.onnx.export does not write external-data files")
    if check:
        try:
            onnx.checker.check_model(proto, full_check=True)
        except Exception as e:  # a converter bug: say so rather than leave a broken file
            raise RuntimeError(f"tw.onnx.export built an invalid ONNX model for '{model.name}': {e}. This is a bug in "
                               "tensorweave's exporter; pass check=False to write the file anyway") from e
    if path is not None:
        write_atomic(proto.SerializeToString(), path)
    return proto


__all__ = ["export", "build_model_proto", "write_atomic", "UnsupportedLayerError"]
