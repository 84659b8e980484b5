"""``keras.layers``: the layer catalogue, and (de)serialization of layers by class name."""
from tensorweave.keras.engine.input_layer import Input, InputLayer  # noqa: F401
from tensorweave.keras.engine.layer import InputSpec, Layer  # noqa: F401
from tensorweave.keras.layers.core import (Activation, Dense, Dropout, Flatten, Identity, Lambda,  # noqa: F401
                                           Permute, Reshape)

_CUSTOM = {}


def register_layer(cls, name=None):
    """Makes ``cls`` loadable by class name (``get_config``/``from_config``)."""
    _CUSTOM[name or cls.__name__] = cls
    return cls


def _registry():
    from tensorweave.keras.engine.functional import Functional
    from tensorweave.keras.engine.sequential import Sequential
    table = {k: v for k, v in globals().items() if isinstance(v, type) and issubclass(v, Layer)}
    table.update({"Sequential": Sequential, "Functional": Functional, "Model": Functional})
    table.update(_CUSTOM)
    return table


def serialize(layer):
    return {"class_name": type(layer).__name__, "config": layer.get_config()}


def deserialize(config, custom_objects=None):
    table = _registry()
    table.update(custom_objects or {})
    cls = table.get(config["class_name"])
    if cls is None:
        raise ValueError(f"Unknown layer class {config['class_name']!r}. Hint: pass it in custom_objects or "
                         "register it with keras.layers.register_layer")
    if hasattr(cls, "from_config"):
        try:
            return cls.from_config(config["config"], custom_objects=custom_objects)
        except TypeError:
            return cls.from_config(config["config"])
    return cls(**config["config"])
