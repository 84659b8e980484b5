"""The op registry and the kernel registry.

An :class:`OpDef` describes an abstract computation: its name, how output shapes and
dtypes follow from the inputs (``infer``), its gradient rule (written with ops, so one
rule serves graphs and the eager tape), and a slot for its SBP (distribution) rule.
A kernel implements an op for one device type; kernels are found by
``(op name, device type)``.

>>> import numpy as np, tensorweave as tw
>>> @tw.register_op("MyCube", infer=lambda inputs, attrs: (inputs[0].shape, inputs[0].dtype))
... def _():
...     pass
>>> @tw.register_kernel("MyCube", "CPU")
... def _(x):
...     return x * x * x
>>> tw.raw_op("MyCube", [tw.constant([2.0])]).numpy()
array([8.], dtype=float32)
"""
from tensorweave.core import errors, upcalls

NOT_DIFFERENTIABLE = "not-differentiable"


class OpDef:
    __slots__ = ("name", "infer", "grad", "sbp", "num_outputs", "stateful", "kernels", "bind",
                 "heavy", "traits", "__weakref__")

    def __init__(self, name, infer, num_outputs=1, stateful=False, grad=None, sbp=None, bind=None,
                 heavy=False, traits=None):
        self.name = name
        self.infer = infer            # (inputs, attrs) -> [(shape, dtype), ...] or (shape, dtype)
        self.grad = grad              # (op, *output_grads) -> [input_grad or None, ...]
        self.sbp = sbp                # distribution rule (filled in by the distribute package)
        self.num_outputs = num_outputs  # an int, or a function of attrs
        self.stateful = stateful      # never pruned/folded/CSE'd; ordered in tw.function
        self.kernels = {}             # device type -> kernel function
        self.bind = bind              # (operation) -> extra kernel kwargs fixed when a plan is built
        self.heavy = heavy            # worth a thread of its own in the executor
        self.traits = dict(traits or {})   # what passes and rule generators may know (see TRAITS)

    def n_outputs(self, attrs):
        n = self.num_outputs
        return n(attrs) if callable(n) else n

    def kernel(self, device_type):
        k = self.kernels.get(device_type)
        if k is None:
            raise errors.NotFoundError(
                f"No kernel registered for op '{self.name}' on device type {device_type}; "
                f"registered: {sorted(self.kernels) or 'none'}. "
                "Hint: register one with tw.register_kernel, or place the op on CPU.")
        return k

    def __repr__(self):
        return f"OpDef({self.name})"


# Op traits, recorded once on the OpDef and read by the graph passes (fusion, in-place memory
# reuse) and by the SBP rule generators instead of tables of their own:
#   elementwise  arity n: output[i] depends on input[j][i] only (inputs broadcast); SBP rules follow
#   inplace      fn(*inputs, out=array) computing the op into ``out`` (a NumPy ufunc or alike)
#   expr         the fused-loop expression over "{0}", "{1}" ("T" is the dtype's constructor)
#   linear       "all" (f(x+y) adds: add, sub, neg), "each" (linear in each input alone: mul),
#                "first" (linear in input 0: div): which partial-sum inputs give a partial-sum output
#   reduction    "sum" | "max" | "min" | "prod": the reduction an op computes over attr "axis"
TRAITS = ("elementwise", "inplace", "expr", "linear", "reduction")

_OPS = {}
_PENDING_KERNELS = {}   # kernels registered before their op (import order does not matter)


def register_op(name, *, infer, num_outputs=1, stateful=False, grad=None, bind=None, heavy=False, traits=None,
                sbp=None):
    """Registers an op; usable as a decorator whose body is ignored (so a docstring can sit there).

    ``sbp``: the op's SBP rule (``core/sbp_rules.py``), ``(input specs, attrs) -> candidate
    signatures``; ``traits``: see :data:`TRAITS`."""
    if name in _OPS:
        raise ValueError(f"Op '{name}' is already registered")
    _check_traits(name, traits or {})
    opdef = OpDef(name, infer, num_outputs, stateful, grad, sbp=sbp, bind=bind, heavy=heavy, traits=traits)
    opdef.kernels.update(_PENDING_KERNELS.pop(name, {}))
    _OPS[name] = opdef

    def decorate(fn):
        return opdef
    decorate.opdef = opdef
    return decorate


def _check_traits(name, traits):
    unknown = sorted(set(traits) - set(TRAITS))
    if unknown:
        raise ValueError(f"Op '{name}': unknown traits {unknown}; known: {list(TRAITS)}")


def set_traits(name, **traits):
    """Records traits of a registered op (see :data:`TRAITS`).

    >>> set_traits("AddV2", elementwise=2)
    >>> get_op("AddV2").traits["elementwise"]
    2
    """
    _check_traits(name, traits)
    get_op(name).traits.update(traits)


def get_op(name):
    opdef = _OPS.get(name)
    if opdef is None:
        upcalls.load_ops(name)      # an op of a module loaded on first use (compat, keras)
        opdef = _OPS.get(name)
        if opdef is None:
            raise errors.NotFoundError(f"Op type not registered: '{name}'")
    return opdef


def registered_ops():
    """Every registered op by name (the modules loaded on first use that register ops load first)."""
    upcalls.load_ops()
    return dict(_OPS)


# Gradient functions registered under a name that is no op type (``tf.RegisterGradient("MyGrad")``),
# for ops made inside ``Graph.gradient_override_map({"OpType": "MyGrad"})``.
_NAMED_GRADIENTS = {}


def register_named_gradient(name, fn):
    _NAMED_GRADIENTS[name] = fn


def named_gradient(name):
    fn = _NAMED_GRADIENTS.get(name)
    if fn is None and name in _OPS and _OPS[name].grad is not None:
        fn = _OPS[name].grad       # an op type's own gradient ({"Round": "Identity"}: straight through)
    if fn is None:
        raise LookupError(f"No gradient registered under the name '{name}' (named by gradient_override_map). "
                          f"Hint: decorate its function with @tf.RegisterGradient({name!r}) before computing "
                          "gradients")
    return fn


def register_gradient(name):
    """Decorator: sets the gradient rule of op ``name``: ``fn(op, *grads) -> [input grads]``."""
    def decorate(fn):
        get_op(name).grad = fn
        return fn
    return decorate


def register_kernel(name, device_type="CPU"):
    """Decorator: ``fn(*input_arrays, **attrs)`` implements op ``name`` on ``device_type``.

    A kernel returns one array, or a tuple for ops with several outputs. It must not
    modify its inputs.
    """
    def decorate(fn):
        opdef = _OPS.get(name)
        table = opdef.kernels if opdef is not None else _PENDING_KERNELS.setdefault(name, {})
        table[device_type.upper()] = fn
        return fn
    return decorate


def register_sbp_rule(name):
    def decorate(fn):
        get_op(name).sbp = fn
        return fn
    return decorate
