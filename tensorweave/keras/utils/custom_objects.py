"""Custom objects by name, for loading configs and model files: the global registry
(``get_custom_objects``, ``register_keras_serializable``) and ``custom_object_scope``.

Only what is registered or passed is looked up; nothing is imported by name from a file.

>>> from tensorweave import keras
>>> class Scale(keras.layers.Layer):
...     def call(self, x):
...         return 2 * x
>>> with keras.utils.custom_object_scope({"Scale": Scale}):
...     model = keras.models.model_from_json(keras.Sequential([keras.Input((2,)), Scale()]).to_json())
>>> type(model.layers[0]).__name__
'Scale'
"""
import threading

_GLOBAL = {}


class _Scopes(threading.local):
    def __init__(self):
        self.stack = []


_scopes = _Scopes()


def get_custom_objects():
    """The global ``{name: object}`` registry (a dict you may edit, as in Keras)."""
    return _GLOBAL


_NAMES = {}          # id(object) -> its registered "package>name"


def register_keras_serializable(package="Custom", name=None):
    """Class decorator registering ``cls`` as ``"package>name"`` (and under its plain name)."""
    def decorate(obj):
        key = name or obj.__name__
        _GLOBAL[f"{package}>{key}"] = obj
        _GLOBAL[key] = obj
        _NAMES[id(obj)] = f"{package}>{key}"
        return obj
    return decorate


def get_registered_name(obj):
    """The name ``obj`` was registered under (``"package>name"``), else its ``__name__``.

    >>> get_registered_name(CustomObjectScope)
    'CustomObjectScope'
    """
    name = _NAMES.get(id(obj))
    if name is not None and _GLOBAL.get(name) is obj:
        return name
    return obj.__name__


def get_registered_object(name, custom_objects=None, module_objects=None):
    """The object registered (or in scope, or in ``custom_objects``/``module_objects``) as ``name``,
    or None."""
    found = merged(custom_objects).get(name)
    if found is None and module_objects:
        found = module_objects.get(name)
    return found


class CustomObjectScope:
    """``with CustomObjectScope({"MyLayer": MyLayer}):`` makes the names known to loaders
    (``load_model``, ``model_from_json``, ``model_from_config``, ``clone_model``) inside the block."""

    def __init__(self, *custom_objects):
        self.custom_objects = {}
        for objects in custom_objects:
            self.custom_objects.update(objects or {})

    def __enter__(self):
        _scopes.stack.append(self.custom_objects)
        return self

    def __exit__(self, *exc):
        _scopes.stack.pop()


custom_object_scope = CustomObjectScope


def merged(custom_objects=None):
    """The registry, the active scopes (innermost last) and ``custom_objects``, in that order."""
    out = dict(_GLOBAL)
    for scope in _scopes.stack:
        out.update(scope)
    out.update(custom_objects or {})
    return out
