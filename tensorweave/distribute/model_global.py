"""``model.to_global(placement, sbp)``: a module's or Keras model's variables become global
(OneFlow's ``nn.Module.to_global``).

Every variable of the model is turned *in place* into a global variable on ``placement``
with its value kept, so everything that holds it (layers, the tape's sources, the
optimizer's slot table) keeps working. Its SBP comes from
``sbp``: one SBP (or one N-D tuple) for all, a dict from variable path to SBP (the key equal
to the path, else the one key found by ``re.search`` in it, as ``keras.distribution.LayoutMap``;
unmatched variables are ``B``), or a callable ``sbp(variable) -> SBP``; a lone ``B`` means ``B``
on every mesh axis. The optimizer's slots
(``optimizer=``, by default a Keras model's own) follow their variable's layout, so training
continues with the same numbers (ZeRO-style state when the weights are split).

A Keras model also gets the batch layout its ``fit``/``evaluate``/``predict`` use:
``batch_sbp`` (default: split along axis 0 over the first mesh axis, ``B`` over the others,
as ``keras.distribution``'s batch axis); its metric state becomes replicated.

>>> import numpy as np, tensorweave as tw
>>> class Linear(tw.Module):
...     def __init__(self):
...         super().__init__()
...         self.w = tw.Variable(np.ones((4, 2), np.float32), name="w")
...         self.b = tw.Variable(np.zeros(2, np.float32), name="b")
>>> m = Linear()
>>> p = tw.placement("cpu", ranks=[0, 1])
>>> _ = m.to_global(p, {"w": tw.sbp.split(0)})
>>> m.w.sbp, m.b.sbp, float(m.w.numpy().sum())
((S(0),), (B,), 8.0)
"""
import re

from tensorweave.core import errors
from tensorweave.core.sbp import SBP, B, Broadcast
from tensorweave.distribute.distribution import DeviceMesh, Distribution
from tensorweave.distribute.layout import Placement, normalize_sbp


def _path(v):
    return getattr(v, "path", None) or v.name.split(":")[0]


def _sbp_rule(sbp):
    """``sbp`` (an SBP, a tuple, a dict or a callable) as a function of the variable."""
    if sbp is None:
        return lambda v: B
    if isinstance(sbp, (SBP, tuple, list)):
        return lambda v: sbp
    if isinstance(sbp, dict):
        def lookup(v):
            path = _path(v)
            if path in sbp:
                return sbp[path]
            hits = [k for k in sbp if re.search(k, path)]
            if len(hits) > 1:
                raise ValueError(f"to_global: variable path {path!r} matches more than one sbp key: {hits}")
            return sbp[hits[0]] if hits else B
        return lookup
    if callable(sbp):
        return sbp
    raise TypeError(f"to_global: sbp must be an SBP, a tuple of SBPs (one per mesh axis), a dict from variable "
                    f"path to SBP or a callable(variable) -> SBP; got {type(sbp).__name__}")


def variable_to_global(var, placement, sbp):
    """Turns ``var`` into a global variable on ``placement`` laid out as ``sbp``, in place
    (the same Python object; its value kept; a global variable is re-laid out by boxing)."""
    from tensorweave.distribute.variables import GlobalVariable
    from tensorweave.ops.variables import Variable
    if getattr(var, "_graph", None) is not None:
        raise errors.UnimplementedError(f"to_global: '{var.name}' is a TF1 graph variable; convert eager "
                                        "variables (global variables in graphs are not supported yet)")
    shape = tuple(var.shape.as_list())
    if isinstance(sbp, Broadcast):
        sbp = (B,) * placement.ndim                # B is B on every mesh axis
    nd = normalize_sbp(sbp, placement, shape, f"to_global of variable '{_path(var)}'")
    if getattr(var, "is_global", False) and var.placement == placement and var.sbp == nd:
        return var
    value = var.read_value() if getattr(var, "is_global", False) else var.numpy()
    base = var.name.split(":")[0]
    new = Variable(value, trainable=var.trainable, name=base, dtype=var.dtype, constraint=var.constraint,
                   placement=placement, sbp=nd)
    state = dict(vars(new))
    state["_name"] = var.name                      # the name it had, not one under a new name scope
    for key in ("_graph_read", "_initializer_op", "_init_value_tensor"):
        state.setdefault(key, None)
    vars(var).update(state)
    var.__class__ = GlobalVariable
    var._eager_handle._variable = var              # the handle's variable is this object
    return var


class _PlacementDistribution(Distribution):
    """The batch layout of a Keras model made global with ``to_global``: weights keep the
    layouts they were given (new weights are ``B``), batches are ``batch_sbp``."""

    def __init__(self, placement, batch_sbp):
        axis_names = [f"mesh{i}" for i in range(placement.ndim)]
        devices = [f"cpu:{r}" for r in placement.ranks]
        super().__init__(DeviceMesh(placement.mesh_shape, axis_names, devices), axis_names[0])
        self._placement = placement
        self._batch_sbp = batch_sbp

    @property
    def placement(self):
        return self._placement

    def batch_sbp(self, rank):
        if self._batch_sbp is None or rank == 0:
            return super().batch_sbp(rank)
        return normalize_sbp(self._batch_sbp, self._placement, None, "to_global batch_sbp")


def module_to_global(module, placement, sbp=None, optimizer=None, batch_sbp=None):
    """``module.to_global(placement, sbp)`` for a ``tw.Module`` or a Keras layer/model (see the
    module docstring). Returns the module."""
    if not isinstance(placement, Placement):
        raise TypeError(f"to_global: placement must be tw.placement(type, ranks), got {placement!r}")
    keras_model = hasattr(module, "weights") and hasattr(module, "built")
    if keras_model and not module.built:
        raise ValueError(f"to_global: '{module.name}' is not built, so it has no weights yet. Hint: build it "
                         "first (call it on data or model.build(input_shape)), or create it inside a "
                         "distribution scope")
    rule = _sbp_rule(sbp)
    variables = list(module.weights if keras_model else module.variables)
    if optimizer is None and keras_model:
        optimizer = getattr(module, "optimizer", None)
    slots = getattr(optimizer, "_slots", {}) if optimizer is not None else {}
    for v in variables:
        key = id(v)
        variable_to_global(v, placement, rule(v))
        for (ref, _), slot in slots.items():
            if ref == key:
                variable_to_global(slot, placement, v.sbp)
    if keras_model and hasattr(module, "metrics"):
        for m in module.metrics:
            for v in m.variables:
                variable_to_global(v, placement, (B,) * placement.ndim)
        module._global_layout = _PlacementDistribution(placement, batch_sbp)
        if getattr(module, "compiled", False):
            module._distribution = module._global_layout
        module._train_fn = module._test_fn = module._predict_fn = None
    return module


__all__ = ["module_to_global", "variable_to_global"]
