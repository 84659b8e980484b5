"""``tw.Module``: a named container that finds the variables and submodules it holds.

As ``tf.Module``: attributes (and lists, tuples and dicts of them) holding variables or other
modules are tracked, in attribute-name order; ``variables``/``trainable_variables`` walk the
whole tree (each object once); ``with self.name_scope:`` prefixes op and variable names; and a
module is checkpointable with ``tw.train.Checkpoint`` (its attributes are the object paths).

>>> import tensorweave as tw
>>> class Dense(tw.Module):
...     def __init__(self, n_in, n_out, name=None):
...         super().__init__(name=name)
...         with self.name_scope:
...             self.w = tw.Variable(tw.ones([n_in, n_out]), name="w")
...             self.b = tw.Variable(tw.zeros([n_out]), name="b", trainable=False)
...     def __call__(self, x):
...         return tw.matmul(x, self.w) + self.b
>>> class MLP(tw.Module):
...     def __init__(self):
...         super().__init__()
...         self.layers = [Dense(2, 3), Dense(3, 1)]
>>> m = MLP()
>>> m.name, len(m.variables), len(m.trainable_variables), len(m.submodules)
('mlp', 4, 2, 2)
"""
import re

from tensorweave.core.graph import name_scope as _name_scope

__all__ = ["Module"]


def _snake(name):
    s = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s).lower()


def _is_variable(x):
    return getattr(x, "_is_variable", False)


class Module:
    """Base class of objects that own variables and submodules (see the module docstring)."""

    _tw_checkpoint_root = True           # checkpoints walk a module's attributes
    _TF_MODULE_IGNORED_PROPERTIES = frozenset()

    def __init__(self, name=None):
        if name is None:
            name = _snake(type(self).__name__)
        elif not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.\-]*", name):
            raise ValueError(f"Module name {name!r} is not a valid Python identifier-like name (letters, digits, "
                             "'_', '.', '-'; not starting with a digit)")
        self._name = name
        with _name_scope(name) as scope:
            self._scope_name = scope.rstrip("/")

    @property
    def name(self):
        return self._name

    @property
    def name_scope(self):
        """A context manager opening this module's name scope (the same scope on every entry)."""
        return _name_scope(self._scope_name or self._name)

    # ---- tracking ---------------------------------------------------------------------------
    def _flatten(self, recursive=True, predicate=None, attribute_traversal_key=None, with_path=False,
                 expand_composites=False):
        """Objects in this module's attribute tree matching ``predicate`` (each once, depth first)."""
        seen = set()
        out = []

        def visit(obj, path, depth):
            if isinstance(obj, Module):
                items = sorted((k, v) for k, v in vars(obj).items()
                               if k not in obj._TF_MODULE_IGNORED_PROPERTIES and not k.startswith("_scope"))
                for k, v in items:
                    walk(v, path + (k,), depth)
            else:
                walk(obj, path, depth)

        def walk(v, path, depth):
            if isinstance(v, (list, tuple)):
                for i, e in enumerate(v):
                    walk(e, path + (i,), depth)
                return
            if isinstance(v, dict):
                for k in sorted(v, key=str):
                    walk(v[k], path + (k,), depth)
                return
            layer_vars = None if isinstance(v, Module) or _is_variable(v) else _keras_variables(v)
            if not (isinstance(v, Module) or _is_variable(v) or layer_vars is not None):
                return
            if id(v) in seen:
                return
            seen.add(id(v))
            if predicate is None or predicate(v):
                out.append((path, v) if with_path else v)
            if isinstance(v, Module) and (recursive or depth == 0) and recursive:
                visit(v, path, depth + 1)
            elif layer_vars is not None:
                for i, var in enumerate(layer_vars):
                    walk(var, path + (i,), depth + 1)

        visit(self, (), 0)
        return tuple(out)

    @property
    def variables(self):
        """Every variable in the tree of this module (trainable or not)."""
        return self._flatten(predicate=_is_variable)

    @property
    def trainable_variables(self):
        return self._flatten(predicate=lambda v: _is_variable(v) and v.trainable)

    @property
    def non_trainable_variables(self):
        return self._flatten(predicate=lambda v: _is_variable(v) and not v.trainable)

    @property
    def submodules(self):
        """Every module in the tree of this module, itself excluded."""
        return self._flatten(predicate=lambda m: isinstance(m, Module))

    @classmethod
    def with_name_scope(cls, method):
        """Decorator: runs ``method`` inside the module's name scope."""
        import functools

        @functools.wraps(method)
        def wrapper(self, *args, **kwargs):
            with self.name_scope:
                return method(self, *args, **kwargs)
        return wrapper

    def to_global(self, placement, sbp=None, optimizer=None):
        """Makes every variable global on ``placement`` in place, values kept (OneFlow's
        ``module.to_global``); ``sbp``: one SBP, a dict path -> SBP or a callable(variable);
        ``optimizer``'s slots follow. See ``tensorweave/distribute/model_global.py``."""
        from tensorweave.distribute.model_global import module_to_global
        return module_to_global(self, placement, sbp, optimizer=optimizer)

    def _checkpoint_children(self):
        # tw.train.Checkpoint's edges: the public attributes holding trackable values.
        from tensorweave.train.object_graph import kind_of
        return [(k, v) for k, v in vars(self).items() if not k.startswith("_") and kind_of(v) is not None]

    def __repr__(self):
        return f"<{type(self).__name__} name={self._name!r}>"


def _keras_variables(obj):
    """The variables of a Keras layer held by a module (tf.keras layers are modules in TF)."""
    weights = getattr(type(obj), "weights", None)
    if weights is None or not hasattr(obj, "trainable_weights"):
        return None
    try:
        return list(obj.weights)
    except Exception:  # noqa: BLE001 - an unbuilt or unusual layer has nothing to offer
        return None
