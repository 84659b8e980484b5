"""The functional ``Model(inputs, outputs)``: a graph of layer calls replayed on real tensors.

>>> import numpy as np
>>> from tensorweave import keras
>>> x = keras.Input(shape=(3,))
>>> h = keras.layers.Dense(4, activation="relu")(x)
>>> model = keras.Model(x, keras.layers.Dense(1)(h))
>>> model(np.ones((2, 3), np.float32)).shape
TensorShape([2, 1])
"""
import tensorweave as tw
from tensorweave.core import nest
from tensorweave.keras.engine.input_layer import InputLayer, standardize_input
from tensorweave.keras.engine.keras_tensor import KerasTensor
from tensorweave.keras.engine.model import Model


def _topological_nodes(outputs):
    order, seen = [], set()

    def visit(node):
        if id(node) in seen:
            return
        seen.add(id(node))
        for p in node.parents:
            visit(p)
        order.append(node)
    for t in outputs:
        if t.node is None:
            raise ValueError(f"Output {t} was not produced by a layer call on keras.Input tensors")
        visit(t.node)
    return order


class Functional(Model):
    def __init__(self, inputs, outputs, name=None, trainable=True, **kwargs):
        super().__init__(name=name, trainable=trainable)
        self._tracking = False
        self._inputs_struct = inputs
        self._outputs_struct = outputs
        self.inputs = nest.flatten(inputs)
        self.outputs = nest.flatten(outputs)
        for t in self.inputs:
            if not isinstance(t, KerasTensor) or not isinstance(getattr(t.node, "layer", None), InputLayer):
                raise ValueError(f"Model inputs must be keras.Input tensors, got {t!r}")
        self._nodes = _topological_nodes(self.outputs)
        missing = [t for n in self._nodes if isinstance(n.layer, InputLayer) for t in [n.outputs]
                   if all(t is not i for i in self.inputs)]
        if missing:
            raise ValueError(f"Graph disconnected: the output depends on input {missing[0].name!r}, which was not "
                             "passed to Model(inputs=...)")
        layers = []
        for n in self._nodes:
            if all(n.layer is not l for l in layers):
                layers.append(n.layer)
        names = [l.name for l in layers]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f'The name "{name}" is used {names.count(name)} times in the model. All layer '
                                 "names should be unique. Hint: pass distinct name= arguments")
        self._layers = layers
        self._tracking = True
        self.built = True
        # dict outputs are named by their keys (in nest.flatten's sorted order, as self.outputs)
        self.output_names = sorted(outputs) if isinstance(outputs, dict) else \
            [t.node.layer.name for t in self.outputs]
        self.input_names = sorted(inputs) if isinstance(inputs, dict) else [t.node.layer.name for t in self.inputs]

    @property
    def layers(self):
        return list(self._layers)

    @property
    def input(self):
        return self._inputs_struct

    @property
    def output(self):
        return self._outputs_struct

    @property
    def input_shape(self):
        shapes = [t.shape for t in self.inputs]
        return shapes[0] if len(shapes) == 1 else shapes

    @property
    def output_shape(self):
        shapes = [t.shape for t in self.outputs]
        return shapes[0] if len(shapes) == 1 else shapes

    def _flatten_inputs(self, inputs):
        if isinstance(inputs, dict) and not isinstance(self._inputs_struct, dict):
            try:
                return [inputs[name] for name in self.input_names]
            except KeyError as e:
                raise ValueError(f"Missing input {e} for model '{self.name}'; expected keys {self.input_names}") from None
        if isinstance(self._inputs_struct, dict):
            return [inputs[k] for k in sorted(self._inputs_struct)]
        flat = nest.flatten(inputs)
        if len(flat) != len(self.inputs):
            raise ValueError(f"Model '{self.name}' expects {len(self.inputs)} input(s), but it received "
                             f"{len(flat)} input tensors.")
        return flat

    def call(self, inputs, training=None, mask=None):
        flat = self._flatten_inputs(inputs)
        values = {}
        masks = {}
        for t, x in zip(self.inputs, flat):
            values[id(t)] = standardize_input(self, len(values), x, t)
        for node in self._nodes:
            layer = node.layer
            if isinstance(layer, InputLayer):
                continue

            def sub(v):
                return values[id(v)] if isinstance(v, KerasTensor) else v
            args, kwargs = nest.map_structure(sub, (node.args, node.kwargs))
            if layer._call_has_training and "training" not in kwargs:
                kwargs = dict(kwargs, training=training)
            in_masks = [masks.get(id(t)) for t in nest.flatten(node.args[0]) if isinstance(t, KerasTensor)]
            if layer._call_has_mask and "mask" not in kwargs and any(m is not None for m in in_masks):
                kwargs = dict(kwargs, mask=in_masks[0] if len(in_masks) == 1 else in_masks)
            out = layer(*args, **kwargs)
            out_mask = layer.compute_mask(args[0], in_masks[0] if len(in_masks) == 1 else in_masks) \
                if any(m is not None for m in in_masks) or getattr(layer, "mask_zero", False) else None
            for i, (kt, o) in enumerate(zip(nest.flatten(node.outputs), nest.flatten(out))):
                values[id(kt)] = o
                m = out_mask[i] if isinstance(out_mask, (list, tuple)) else out_mask
                if m is not None:
                    masks[id(kt)] = m
        return nest.pack_sequence_as(self._outputs_struct, [values[id(t)] for t in self.outputs])

    def get_config(self):
        layer_configs = []
        index = {}
        for layer in self._layers:
            inbound = []
            for node in self._nodes:
                if node.layer is layer and not isinstance(layer, InputLayer):
                    inbound.append([[t.node.layer.name, 0, t.index] for t in node.input_tensors])
            layer_configs.append({"class_name": type(layer).__name__, "name": layer.name,
                                  "config": layer.get_config(), "inbound_nodes": inbound})
            index[layer.name] = layer
        return {"name": self.name, "trainable": self.trainable, "layers": layer_configs,
                "input_layers": [[t.node.layer.name, 0, 0] for t in self.inputs],
                "output_layers": [[t.node.layer.name, 0, t.index] for t in self.outputs]}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        from tensorweave.keras.layers import deserialize
        created = {}
        tensors = {}
        for lc in config["layers"]:
            if lc["class_name"] == "InputLayer":
                c = dict(lc["config"])
                t = InputLayer(**c).output
                created[lc["name"]] = t.node.layer
                tensors[(lc["name"], 0)] = [t]
            else:
                created[lc["name"]] = deserialize({"class_name": lc["class_name"], "config": lc["config"]},
                                                  custom_objects=custom_objects)
        pending = [lc for lc in config["layers"] if lc["class_name"] != "InputLayer"]
        while pending:
            progressed = False
            for lc in list(pending):
                nodes = lc["inbound_nodes"]
                ready = all((n, 0) in tensors for node in nodes for n, _, _ in node)
                if not ready:
                    continue
                outs = []
                for node in nodes:
                    args = [tensors[(n, 0)][i] for n, _, i in node]
                    out = created[lc["name"]](args[0] if len(args) == 1 else args)
                    outs.extend(nest.flatten(out))
                tensors[(lc["name"], 0)] = outs
                pending.remove(lc)
                progressed = True
            if not progressed:
                raise ValueError("Functional config has a cycle or a missing layer")
        inputs = [tensors[(n, 0)][i] for n, _, i in config["input_layers"]]
        outputs = [tensors[(n, 0)][i] for n, _, i in config["output_layers"]]
        return cls(inputs if len(inputs) > 1 else inputs[0], outputs if len(outputs) > 1 else outputs[0],
                   name=config.get("name"))
