"""``Sequential``: a plain stack of layers, one input and one output.

>>> from tensorweave import keras
>>> model = keras.Sequential([keras.Input(shape=(8,)), keras.layers.Dense(4), keras.layers.Dense(1)])
>>> [l.name for l in model.layers] == [model.layers[0].name, model.layers[1].name], model.output_shape
(True, (None, 1))
"""
from tensorweave.keras.engine.input_layer import InputLayer, standardize_input
from tensorweave.keras.engine.keras_tensor import KerasTensor
from tensorweave.keras.engine.layer import Layer, _in_layer
from tensorweave.keras.engine.model import Model


class Sequential(Model):
    def __init__(self, layers=None, trainable=True, name=None):
        super().__init__(trainable=trainable, name=name)
        self._input_layer = None
        self._graph = None  # (input KerasTensor, output KerasTensor) once the input shape is known
        for layer in layers or []:
            self.add(layer)

    @property
    def layers(self):
        return [l for l in self._layers if not isinstance(l, InputLayer)]

    def add(self, layer):
        """Appends a layer (or a ``keras.Input``, which fixes the input shape)."""
        if isinstance(layer, KerasTensor):
            layer = layer.node.layer
        if not isinstance(layer, Layer):
            raise TypeError(f"Sequential.add expects a Layer, got {layer!r}")
        if isinstance(layer, InputLayer):
            if self._layers:
                raise ValueError("An Input must be the first layer of a Sequential model")
            self._input_layer = layer
        elif not self._layers and layer._batch_input_shape is not None:
            self._input_layer = InputLayer(batch_shape=layer._batch_input_shape)
            self._layers.append(self._input_layer)
        if any(layer is l for l in self._layers):
            raise ValueError(f"Layer '{layer.name}' is already in the model")
        self._layers.append(layer)
        self._graph = None
        self.built = False
        self._forget_steps()      # the compiled train/test/predict steps were traced for the old layers
        if self._input_layer is not None:
            self._build_graph(self._input_layer.batch_shape)

    def pop(self):
        layers = self.layers
        if not layers:
            raise TypeError("There are no layers in the model.")
        self._layers.remove(layers[-1])
        self._graph = None
        self.built = False
        self._forget_steps()      # the compiled train/test/predict steps were traced for the old layers
        if self._input_layer is not None and len(self._layers) > 1:
            self._build_graph(self._input_layer.batch_shape)
        return layers[-1]

    def _build_graph(self, batch_shape):
        if self._input_layer is None:
            self._input_layer = InputLayer(batch_shape=batch_shape)
            self._layers.insert(0, self._input_layer)
        x = self._input_layer.output
        inp = x
        for layer, node in getattr(self, "_graph_nodes", []):   # the calls of the graph this one replaces
            layer._inbound_nodes = [n for n in layer._inbound_nodes if n is not node]
        self._graph_nodes = []
        with _in_layer(self):   # the layers are built in the model's scope: sequential/dense/kernel
            for layer in self.layers:
                x = layer(x)
                self._graph_nodes.append((layer, layer._inbound_nodes[-1]))
        self._graph = (inp, x)
        self.built = True

    def build(self, input_shape=None):
        if input_shape is None:
            if self._input_layer is None:
                raise ValueError("Sequential.build needs an input shape (or an Input as first layer)")
            input_shape = self._input_layer.batch_shape
        self._build_graph((None,) + tuple(input_shape)[1:])

    @property
    def inputs(self):
        return [self._graph[0]] if self._graph else None

    @property
    def outputs(self):
        return [self._graph[1]] if self._graph else None

    @property
    def input(self):
        if self._graph is None:
            raise AttributeError(f"Sequential model '{self.name}' has no defined input yet (no Input layer, never "
                                 "called)")
        return self._graph[0]

    @property
    def output(self):
        if self._graph is None:
            raise AttributeError(f"Sequential model '{self.name}' has no defined output yet (no Input layer, never "
                                 "called)")
        return self._graph[1]

    @property
    def input_shape(self):
        if self._graph is None:
            raise AttributeError(f"Sequential model '{self.name}' has no defined input shape yet")
        return self._graph[0].shape

    @property
    def output_shape(self):
        if self._graph is None:
            raise AttributeError(f"Sequential model '{self.name}' has no defined output shape yet")
        return self._graph[1].shape

    def call(self, inputs, training=None, mask=None):
        x = inputs
        if self._input_layer is not None and not isinstance(inputs, (KerasTensor, list, tuple, dict)):
            x = standardize_input(self, 0, inputs, self._input_layer.output)
        for layer in self.layers:
            kwargs = {}
            if layer._call_has_training:
                kwargs["training"] = training
            if layer._call_has_mask and mask is not None:
                kwargs["mask"] = mask
            y = layer(x, **kwargs)
            mask = layer.compute_mask(x, mask)
            x = y
        return x

    def compute_mask(self, inputs, mask=None):
        return None

    def get_config(self):
        from tensorweave.keras.layers import serialize
        config = {"name": self.name, "trainable": self.trainable,
                  "layers": [serialize(l) for l in self.layers]}
        if self._input_layer is not None:
            config["build_input_shape"] = self._input_layer.batch_shape
        return config

    @classmethod
    def from_config(cls, config, custom_objects=None):
        from tensorweave.keras.layers import deserialize
        model = cls(name=config.get("name"), trainable=config.get("trainable", True))
        if config.get("build_input_shape") is not None:
            model.add(InputLayer(batch_shape=tuple(config["build_input_shape"])))
        for lc in config["layers"]:
            model.add(deserialize(lc, custom_objects=custom_objects))
        return model
