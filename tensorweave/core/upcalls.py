"""The few calls the lower layers make up the stack, through functions the upper layer installs
when it is imported (core <- ops <- kernels <- autodiff <- runtime; ``tests/test_layering.py``).

The core layer makes constants, placeholders and stacks (``convert_to_tensor`` of a list of
tensors, ``Graph.capture``, iterating a tensor); those are ops, installed by
``ops/array_ops.py``. ``Variable`` computes an initial value traced inside a function by running
it once; running is the runtime's, installed by ``runtime/executor.py``. The op registry asks
the top-level package to load the modules that register ops but load on first use only
(``load_ops``, installed by ``tensorweave/__init__.py``). ``import tensorweave`` imports all of
them, so every caller finds them installed; a call before that names what is missing.

>>> import tensorweave as tw
>>> from tensorweave.core import upcalls
>>> upcalls.constant.__module__, upcalls.run_fragment.__module__
('tensorweave.ops.array_ops', 'tensorweave.runtime.executor')
"""


def _missing(name, owner):
    def call(*args, **kwargs):
        raise RuntimeError(f"{name} is installed by {owner} when it is imported, and it has not been. "
                           "Hint: import tensorweave (it imports every layer) before calling it")
    call.__name__ = name
    return call


# ops/array_ops.py
constant = _missing("constant", "tensorweave.ops.array_ops")          # (value, dtype=None, name=None)
placeholder = _missing("placeholder", "tensorweave.ops.array_ops")    # (dtype, shape=None, name=None)
stack = _missing("stack", "tensorweave.ops.array_ops")                # (values, axis=0, name=None)
unstack = _missing("unstack", "tensorweave.ops.array_ops")            # (value, num=None, axis=0)
# runtime/executor.py: values of ``fetches`` (graph tensors) computed with no feeds, as arrays
run_fragment = _missing("run_fragment", "tensorweave.runtime.executor")

# tensorweave/__init__.py: imports the module that registers op ``name`` (None: every such module)
# when that module is loaded on first use only (compat, keras); see registry.get_op


def load_ops(name=None):
    return None


_NAMES = ("constant", "placeholder", "stack", "unstack", "run_fragment", "load_ops")


def install(**fns):
    """Installs upward calls by name (the upper layer does this once, at import)."""
    for name, fn in fns.items():
        if name not in _NAMES:
            raise ValueError(f"upcalls.install: unknown call {name!r}; known: {', '.join(_NAMES)}")
        globals()[name] = fn
