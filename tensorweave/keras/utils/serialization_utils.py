"""``keras.utils``' serialisation helpers: ``serialize_keras_object`` / ``deserialize_keras_object``
(Keras 3's ``{"module", "class_name", "config", "registered_name"}`` dicts, dispatched to the
layers, losses, metrics, optimizers, initializers and regularizers modules by ``module``),
``standardize_dtype``, ``get_source_inputs`` and ``Config``.

>>> from tensorweave import keras
>>> d = serialize_keras_object(keras.layers.Dense(2, name="d"))
>>> d["module"], d["class_name"], type(deserialize_keras_object(d)).__name__
('keras.layers', 'Dense', 'Dense')
>>> standardize_dtype("float"), standardize_dtype(int)
('float32', 'int64')
"""
import numpy as np

from tensorweave.keras.utils.custom_objects import get_registered_name, merged

_PYTHON = {float: "float32", int: "int64", bool: "bool", str: "string", "float": "float32", "int": "int64",
           "double": "float64", "half": "float16"}


def standardize_dtype(dtype):
    """A dtype's Keras name (``"float32"``, ``"int64"``, ...): None gives ``floatx()``."""
    from tensorweave.keras import backend
    import tensorweave as tw
    if dtype is None:
        return backend.floatx()
    if dtype in _PYTHON:
        return _PYTHON[dtype]
    if hasattr(dtype, "name") and not isinstance(dtype, (str, np.dtype)):
        dtype = dtype.name
    try:
        return tw.as_dtype(np.dtype(dtype) if isinstance(dtype, type) else dtype).name
    except (TypeError, ValueError):
        raise ValueError(f"Invalid dtype: {dtype!r}") from None


def _modules():
    from tensorweave.keras import initializers, layers, losses, metrics, optimizers, regularizers
    return {"keras.layers": layers, "keras.losses": losses, "keras.metrics": metrics, "keras.optimizers": optimizers,
            "keras.initializers": initializers, "keras.regularizers": regularizers}


def serialize_keras_object(obj):
    """A JSON-ready description of a Keras object (plain values pass through; functions by name)."""
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, (list, tuple)):
        return [serialize_keras_object(o) for o in obj]
    if isinstance(obj, dict):
        return {k: serialize_keras_object(v) for k, v in obj.items()}
    from tensorweave.keras.engine.layer import Layer
    from tensorweave.keras.losses import Loss
    from tensorweave.keras.metrics import Metric
    from tensorweave.keras.optimizers.optimizer import Optimizer
    for cls, module in ((Layer, "keras.layers"), (Loss, "keras.losses"), (Metric, "keras.metrics"),
                        (Optimizer, "keras.optimizers")):
        if isinstance(obj, cls):
            registered = get_registered_name(type(obj))
            return {"module": module, "class_name": type(obj).__name__, "config": obj.get_config(),
                    "registered_name": registered if registered != type(obj).__name__ else None}
    if hasattr(obj, "get_config"):
        module = "keras.initializers" if "initializers" in type(obj).__module__ else \
            "keras.regularizers" if "regularizers" in type(obj).__module__ else type(obj).__module__
        return {"module": module, "class_name": type(obj).__name__, "config": obj.get_config(),
                "registered_name": None}
    if callable(obj):
        return get_registered_name(obj)
    raise ValueError(f"Cannot serialize {obj!r}: it is not a Keras object, a function or a plain value")


def deserialize_keras_object(config, custom_objects=None, safe_mode=True, **kwargs):
    """The object :func:`serialize_keras_object` described. Classes are found by name in the
    module named by ``module``, the registry and ``custom_objects``; nothing is imported."""
    if config is None or isinstance(config, (bool, int, float)):
        return config
    if isinstance(config, list):
        return [deserialize_keras_object(c, custom_objects, safe_mode) for c in config]
    objects = merged(custom_objects)
    if isinstance(config, str):
        return objects.get(config, config)        # a registered function's name; any other string stays
    if not isinstance(config, dict) or "class_name" not in config:
        return config
    name = config.get("registered_name") or config["class_name"]
    if name in objects:
        cls = objects[name]
        cfg = config.get("config", {})
        return cls.from_config(cfg) if hasattr(cls, "from_config") else cls(**cfg)
    module = _modules().get(config.get("module"))
    if module is None:
        raise ValueError(f"Cannot deserialize {config['class_name']!r} from module {config.get('module')!r}. "
                         "Hint: pass the class in custom_objects or register it with "
                         "keras.saving.register_keras_serializable")
    return module.deserialize({"class_name": config["class_name"], "config": config.get("config", {})},
                              custom_objects=custom_objects)


def get_source_inputs(tensor):
    """The ``keras.Input`` tensors that ``tensor`` is computed from (itself if it is one)."""
    from tensorweave.keras.engine.input_layer import InputLayer
    out, seen, stack = [], set(), [tensor]
    while stack:
        t = stack.pop()
        node = getattr(t, "node", None)
        if node is None or id(t) in seen:
            continue
        seen.add(id(t))
        if isinstance(node.layer, InputLayer):
            if all(t is not o for o in out):
                out.append(t)
            continue
        stack.extend(reversed(list(node.input_tensors)))
    return out


class Config:
    """A dict with attribute access that can be frozen (``keras.utils.Config``).

    >>> c = Config(lr=0.1)
    >>> c.epochs = 3
    >>> c.freeze()
    >>> c["lr"], c.epochs, c.frozen
    (0.1, 3, True)
    """

    def __init__(self, **kwargs):
        object.__setattr__(self, "_config", dict(kwargs))
        object.__setattr__(self, "_frozen", False)

    @property
    def frozen(self):
        return self._frozen

    def freeze(self):
        object.__setattr__(self, "_frozen", True)

    def unfreeze(self):
        object.__setattr__(self, "_frozen", False)

    def _check(self):
        if self._frozen:
            raise ValueError("Cannot change a frozen Config; call unfreeze() first")

    def __getattr__(self, name):
        try:
            return self.__dict__["_config"][name]
        except KeyError:
            raise AttributeError(f"Unknown attribute: '{name}'") from None

    def __setattr__(self, name, value):
        self._check()
        self._config[name] = value

    def __delattr__(self, name):
        self._check()
        del self._config[name]

    def __getitem__(self, key):
        return self._config[key]

    def __setitem__(self, key, value):
        self._check()
        self._config[key] = value

    def __contains__(self, key):
        return key in self._config

    def __len__(self):
        return len(self._config)

    def __iter__(self):
        return iter(self._config)

    def keys(self):
        return self._config.keys()

    def values(self):
        return self._config.values()

    def items(self):
        return self._config.items()

    def update(self, *args, **kwargs):
        self._check()
        self._config.update(*args, **kwargs)

    def pop(self, *args):
        self._check()
        return self._config.pop(*args)

    def as_dict(self):
        return dict(self._config)

    def to_json(self):
        import json
        return json.dumps(self._config)

    def __repr__(self):
        return f"<Config {self._config}>"
