"""Optimizers (``tw.keras.optimizers``), shared by Keras-style training and
``tw.compat.v1.train``: SGD, Adam, AdamW, RMSprop, Adagrad, Adadelta, Ftrl, and Keras 3's
Adamax, Nadam, Lion, Lamb, Adafactor; learning-rate ``schedules``.

Each optimizer's update rule is written once in tensorweave ops (``update_step``), so it
runs eagerly, inside ``tw.function``, and in a TF1 graph/Session; sparse gradients
(``tw.IndexedSlices``) update only the rows they touch.

>>> import tensorweave as tw
>>> opt = tw.keras.optimizers.get("adam")
>>> type(opt).__name__, opt.get_config()["learning_rate"]
('Adam', 0.001)
>>> config = serialize(tw.keras.optimizers.SGD(0.1, momentum=0.9))
>>> config["class_name"], config["config"]["momentum"]
('SGD', 0.9)
>>> deserialize(config).momentum
0.9
"""
from tensorweave.keras.optimizers import schedules  # noqa: F401
from tensorweave.keras.optimizers.adadelta import Adadelta
from tensorweave.keras.optimizers.adafactor import Adafactor
from tensorweave.keras.optimizers.adagrad import Adagrad
from tensorweave.keras.optimizers.adam import Adam, AdamW
from tensorweave.keras.optimizers.adamax import Adamax
from tensorweave.keras.optimizers.ftrl import Ftrl
from tensorweave.keras.optimizers.lamb import Lamb
from tensorweave.keras.optimizers.lion import Lion
from tensorweave.keras.optimizers.nadam import Nadam
from tensorweave.keras.optimizers.optimizer import Optimizer, clip_by_global_norm  # noqa: F401
from tensorweave.keras.optimizers.rmsprop import RMSprop
from tensorweave.keras.optimizers.sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Ftrl", "Adamax", "Nadam",
           "Lion", "Lamb", "Adafactor", "schedules", "get", "serialize", "deserialize"]

_MODULE = "keras.optimizers"
_CLASSES = {c.__name__: c for c in (SGD, Adam, AdamW, RMSprop, Adagrad, Adadelta, Ftrl, Adamax, Nadam, Lion, Lamb,
                                     Adafactor)}
# Keras accepts the lower-case names too ("adam", "rmsprop", "sgd").
_BY_NAME = dict(_CLASSES, **{k.lower(): c for k, c in _CLASSES.items()})


def serialize(optimizer):
    """A JSON-compatible dict describing ``optimizer`` (Keras' format)."""
    if not isinstance(optimizer, Optimizer):
        raise ValueError(f"serialize: expected an Optimizer, got {optimizer!r}")
    cls = type(optimizer)
    registered = None if _CLASSES.get(cls.__name__) is cls else cls.__name__
    return {"module": _MODULE, "class_name": cls.__name__, "config": optimizer.get_config(),
            "registered_name": registered}


def deserialize(config, custom_objects=None):
    """The optimizer described by :func:`serialize`'s dict (``custom_objects`` maps names of
    your own Optimizer or schedule classes to the classes)."""
    if not isinstance(config, dict) or "class_name" not in config:
        raise ValueError(f"deserialize: expected a dict with 'class_name' and 'config', got {config!r}")
    table = dict(_BY_NAME)
    table.update(custom_objects or {})
    name = config["class_name"]
    cls = table.get(name) or table.get(config.get("registered_name") or "")
    if cls is None:
        raise ValueError(f"Could not interpret optimizer identifier: '{name}'. Known optimizers: "
                         f"{sorted(_CLASSES)}.")
    return cls.from_config(dict(config.get("config") or {}), custom_objects=custom_objects)


def get(identifier):
    """An optimizer from a name ("adam"), a config dict, or an Optimizer (returned as is).

    >>> get("RMSprop").rho
    0.9
    >>> get(None) is None
    True
    """
    if identifier is None:
        return None
    if isinstance(identifier, Optimizer):
        return identifier
    if isinstance(identifier, dict):
        return deserialize(identifier)
    if isinstance(identifier, str):
        return deserialize({"class_name": identifier, "config": {}})
    raise ValueError(f"Could not interpret optimizer identifier: {identifier!r}")
