"""Fused optimizer updates (Adam, Keras' SGD with momentum, Adagrad, RMSprop): one op
writes a variable's weights and slots in place.

Written in tensorweave ops, an Adam step is ~12 elementwise ops per variable, each
allocating a full-size temporary; the fused op reads every element once and writes it
back once (TensorFlow's ``ResourceApplyAdam``, PyTorch's fused Adam). Inputs are the
variable handles (weights, then slots), the scalars, and the gradient; the update goes
through ``Variable._storage_for_update`` (copy-on-write), so values read before the
update keep their contents.

Decoupled weight decay (Keras' ``weight_decay=``, AdamW) is the attr ``weight_decay`` of the
dense forms (absent: none): the kernel first shrinks the whole weight, ``w = w - (w *
weight_decay) * lr``, then updates it — the optimizer's order and operations, in one op, so a
ZeRO-1 plan shards the decay with the update (``distribute/zero_update.py``).

Sparse forms take the gradient as rows (``values``, unique ``indices``) and touch only
those rows of the weights and slots — lazy Adam.

Inside :func:`grouped` (the Keras optimizers' ``apply`` uses it) the dense updates of one
kind — same op, attributes, dtype and scalar inputs — become a single
``ResourceGroupApply*`` op over all those variables when the block ends: one node and one
kernel call per step for a whole model instead of one per variable (PyTorch's
foreach/fused optimizers). Same arithmetic, variable by variable.

>>> import numpy as np, tensorweave as tw
>>> from tensorweave.ops import training_ops
>>> w = tw.Variable(np.array([1.0, 2.0], np.float32))
>>> m, v = tw.Variable(np.zeros(2, np.float32)), tw.Variable(np.zeros(2, np.float32))
>>> training_ops.apply_adam(w, m, v, 0.1, 1, tw.constant([1.0, -1.0]), 0.9, 0.999, 1e-7)
>>> [round(float(x), 4) for x in w.numpy()]   # the first step moves each weight by ~lr
[0.9, 2.1]
"""
import contextlib
import threading

from tensorweave.core import dtypes as _dt
from tensorweave.core import errors
from tensorweave.core.context import building_graph
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.dispatch import execute
from tensorweave.core.registry import get_op, register_op
from tensorweave.core.sbp import B, S, Signature, Split
from tensorweave.core.sbp_rules import signatures
from tensorweave.core.shape import fmt
from tensorweave.ops.state_ops import rows_only_hook

FUSED_DTYPES = (_dt.float32, _dt.float64)


def _update_infer(op_name, num_handles, num_scalars, sparse):
    """Shape rule of an update: ``num_handles(attrs)`` variable handles, scalars of the
    variable's float dtype, the gradient (rows and indices when ``sparse``); no outputs."""
    def infer(inputs, attrs):
        n = num_handles(attrs)
        handles, scalars, rest = inputs[:n], inputs[n:n + num_scalars], inputs[n + num_scalars:]
        if len(rest) != 1 + sparse or any(h.dtype is not _dt.resource for h in handles):
            raise TypeError(f"{op_name}: expected {n} variable handles, {num_scalars} scalars and the gradient"
                            + (" rows and indices" if sparse else "") + f", got {len(inputs)} inputs")
        grad = rest[0]
        if grad.dtype not in FUSED_DTYPES:
            raise TypeError(f"{op_name}: the gradient must be float32 or float64, got {grad.dtype.name}")
        for s in scalars:
            if s.dtype not in (grad.dtype, _dt.int64) or s.shape.rank not in (None, 0):
                raise TypeError(f"{op_name}: scalar inputs must be {grad.dtype.name} scalars, got "
                                f"{s.dtype.name} of shape {fmt(s.shape)}")
        if sparse and rest[1].dtype not in (_dt.int32, _dt.int64):
            raise TypeError(f"{op_name}: indices must be int32 or int64, got {rest[1].dtype.name}")
        return []
    return infer


def _group_infer(op_name, num_handles, num_scalars):
    """Shape rule of a grouped update: ``num_variables`` times the variable's handles, the
    shared scalars once, then the gradients in the variables' order; each variable is
    checked by the one-variable rule."""
    one = _update_infer(op_name, num_handles, num_scalars, False)

    def infer(inputs, attrs):
        inputs = list(inputs)
        n, k = attrs["num_variables"], num_handles(attrs)
        if n < 1 or len(inputs) != n * (k + 1) + num_scalars:
            raise TypeError(f"{op_name}: expected {n} x {k} variable handles, {num_scalars} scalars and {n} "
                            f"gradients, got {len(inputs)} inputs")
        scalars = inputs[n * k:n * k + num_scalars]
        for i in range(n):
            one(inputs[i * k:(i + 1) * k] + scalars + [inputs[n * k + num_scalars + i]], attrs)
        return []
    return infer


# ---- SBP rules (core/sbp.py): an update is elementwise over the variable, its slots and the
# gradient, with B scalars: all split along one axis (a variable handle's SBP is its variable's),
# so a sharded variable keeps sharded slots (ZeRO-style). Sparse updates split the rows' trailing
# axes, or a row-split variable (an embedding table) whose ranks update only their rows.
def _update_sbp(num_handles, num_scalars, sparse):
    def fn(inputs, attrs):
        n = num_handles(attrs)
        grad = inputs[n + num_scalars]
        for i in range(1 if sparse else 0, grad.rank):
            yield [S(i)] * n + [B] * num_scalars + [S(i)] + [B] * sparse, []
        if sparse:
            last = n + num_scalars + 1
            yield Signature([S(0)] * n + [B] * (num_scalars + 2), [], rows_only_hook(last, last - 1))
    return signatures(fn, 0)


def _group_sbp(num_handles, num_scalars):
    """A grouped update is the one-variable update per variable: every variable may have its own
    layout (data parallel with a ZeRO-sharded table beside replicated weights, or one weight
    split by rows and the next by columns). A handle's ``sbp`` (its variable's, where the
    planner knows it) is used for that variable's slots and gradient; without it, every
    variable split along one shared axis."""
    def fn(inputs, attrs):
        v, k = attrs["num_variables"], num_handles(attrs)
        grads = inputs[v * k + num_scalars:]
        own = [inputs[j * k].sbp for j in range(v)]
        if all(isinstance(s, Split) and s.axis < g.rank or s == B for s, g in zip(own, grads)) \
                and any(s != B for s in own):
            yield [s for s in own for _ in range(k)] + [B] * num_scalars + own, []
        for a in range(min((g.rank for g in grads), default=0)):
            yield [S(a)] * (v * k) + [B] * num_scalars + [S(a)] * v, []
    return signatures(fn, 0)


def _register(name, num_handles, num_scalars):
    for sparse, op_name in ((False, f"ResourceApply{name}"), (True, f"ResourceSparseApply{name}")):
        register_op(op_name, infer=_update_infer(op_name, num_handles, num_scalars, sparse), num_outputs=0,
                    stateful=True, sbp=_update_sbp(num_handles, num_scalars, sparse))
    register_op(f"ResourceGroupApply{name}", infer=_group_infer(f"ResourceGroupApply{name}", num_handles,
                                                                num_scalars), num_outputs=0, stateful=True,
                sbp=_group_sbp(num_handles, num_scalars))


# Inputs: var, m, v[, v_hat], lr, step (1-based, int64), grad[, indices].
_register("Adam", lambda a: 4 if a["amsgrad"] else 3, 2)
# Inputs: var[, momentum], lr, grad[, indices] (Keras' SGD: m = m*momentum - g*lr; w += m).
_register("KerasMomentum", lambda a: 2 if a["momentum"] else 1, 1)
# Inputs: var, accumulator, lr, grad[, indices].
_register("AdagradV2", lambda a: 2, 1)
# Inputs: var, velocity[, momentum][, average gradient], lr, grad[, indices].
_register("KerasRMSprop", lambda a: 2 + (a["momentum"] > 0) + a["centered"], 1)
# Inputs: var, momentum, lr, grad[, indices] (Keras 3's Lion: w -= lr * sign(m*b1 + g*(1-b1)); m = m*b2 + g*(1-b2)).
_register("Lion", lambda a: 2, 1)
# Inputs: var, momentum, norm, lr, step (1-based, int64), grad[, indices] (Keras 3's Adamax).
_register("Adamax", lambda a: 3, 2)
# Inputs: var, momentum, velocity, lr, step (1-based, int64), u_product (the optimizer's, advanced), grad[, indices]
# (Keras 3's Nadam).
_register("Nadam", lambda a: 3, 3)


def _handles(variables):
    return [v.handle for v in variables]


_grouping = threading.local()   # .calls: the dense updates waiting for the end of a grouped() block


@contextlib.contextmanager
def grouped():
    """Dense updates issued inside run, when the block ends, as one op per kind of update
    (see the module docstring); in a nested block, when the outermost one ends. Sparse and
    named updates run at once. An exception inside drops the waiting updates.

    >>> import numpy as np, tensorweave as tw
    >>> ws = [tw.Variable(np.ones(2, np.float32)) for _ in range(3)]
    >>> with grouped():
    ...     for w in ws:
    ...         apply_momentum(w, None, 0.5, tw.ones(2), momentum=0.0)
    ...     print(ws[0].numpy())      # not applied yet
    [1. 1.]
    >>> print(ws[2].numpy())          # all three by one ResourceGroupApplyKerasMomentum
    [0.5 0.5]
    """
    if getattr(_grouping, "calls", None) is not None:
        yield
        return
    _grouping.calls = calls = []
    try:
        yield
    finally:
        _grouping.calls = None
    kinds = {}
    for call in calls:
        op_name, handles, scalars, _, attrs = call
        # scalars by identity: the optimizer hands every variable of a step the same lr/step objects
        # and by placement: one fused op runs on one placement (pipeline stages' variables live on several)
        key = (op_name, handles[0].dtype, getattr(handles[0], "placement", None), tuple(sorted(attrs.items())),
               tuple(id(x) for _, x in scalars))
        kinds.setdefault(key, []).append(call)
    for members in kinds.values():
        if len(members) == 1:
            _run_update(*members[0], None, None)
            continue
        op_name, _, scalars, _, attrs = members[0]
        dtype = members[0][1][0].dtype
        inputs = [h.handle for _, handles, _, _, _ in members for h in handles] + _scalar_inputs(scalars, dtype)
        inputs += [convert_to_tensor(grad, dtype=dtype) for _, _, _, grad, _ in members]
        execute(get_op(op_name.replace("ResourceApply", "ResourceGroupApply")), inputs,
                dict(attrs, num_variables=len(members)), None)


def _scalar_inputs(scalars, dtype):
    return [convert_to_tensor(x, dtype=_dt.int64 if k == "step" else dtype) for k, x in scalars]


def _update(op_name, handles, scalars, grad, indices, attrs, name):
    calls = getattr(_grouping, "calls", None)
    if calls is not None and indices is None and name is None:
        calls.append((op_name, handles, scalars, grad, attrs))
        return None
    return _run_update(op_name, handles, scalars, grad, attrs, indices, name)


def _decayed(attrs, weight_decay):
    """``attrs`` with the ``weight_decay`` attr where there is a decay (absent otherwise: the op as before)."""
    return dict(attrs, weight_decay=float(weight_decay)) if weight_decay else attrs


def _run_update(op_name, handles, scalars, grad, attrs, indices, name):
    dtype = handles[0].dtype
    inputs = [v.handle for v in handles] + _scalar_inputs(scalars, dtype)
    inputs.append(convert_to_tensor(grad, dtype=dtype))
    if indices is not None:
        if handles[0].shape.rank == 0:
            raise errors.InvalidArgumentError(f"{op_name}: sparse update of the scalar variable "
                                              f"'{handles[0].name}'")
        if attrs.get("weight_decay"):
            raise errors.InvalidArgumentError(
                f"{op_name} of '{handles[0].name}': weight decay shrinks every row, a sparse update only the "
                "given ones; decay the variable apart (Optimizer._apply_weight_decay does)")
        inputs.append(convert_to_tensor(indices, dtype_hint=_dt.int32))
        op_name = op_name.replace("ResourceApply", "ResourceSparseApply")
    op = execute(get_op(op_name), inputs, attrs, name)
    return op if building_graph() is not None else None   # the update op in a graph


def apply_adam(var, m, v, lr, step, grad, beta_1, beta_2, epsilon, v_hat=None, indices=None, name=None,
               weight_decay=None):
    """One Adam step on ``var`` with slots ``m``, ``v`` (and ``v_hat`` for AMSGrad), in place;
    with ``indices`` (unique), ``grad`` holds those rows and only they change (lazy Adam).
    ``weight_decay``: AdamW's decoupled decay before the step (dense only)."""
    attrs = _decayed({"beta_1": float(beta_1), "beta_2": float(beta_2), "epsilon": float(epsilon),
                      "amsgrad": v_hat is not None}, weight_decay)
    return _update("ResourceApplyAdam", [var, m, v] + ([v_hat] if v_hat is not None else []),
                   [("lr", lr), ("step", step)], grad, indices, attrs, name)


def apply_momentum(var, momentum_slot, lr, grad, momentum, nesterov=False, indices=None, name=None,
                   weight_decay=None):
    """Keras' SGD step (``momentum_slot`` None when ``momentum`` is 0), in place."""
    attrs = _decayed({"momentum": float(momentum), "nesterov": bool(nesterov)}, weight_decay)
    return _update("ResourceApplyKerasMomentum", [var] + ([momentum_slot] if momentum else []),
                   [("lr", lr)], grad, indices, attrs, name)


def apply_adagrad(var, accumulator, lr, grad, epsilon, indices=None, name=None, weight_decay=None):
    """One Adagrad step (``w -= lr*g / sqrt(acc + g*g + epsilon)``), in place."""
    return _update("ResourceApplyAdagradV2", [var, accumulator], [("lr", lr)], grad, indices,
                   _decayed({"epsilon": float(epsilon)}, weight_decay), name)


def apply_rmsprop(var, velocity, momentum_slot, average_gradient, lr, grad, rho, momentum, epsilon, centered,
                  indices=None, name=None, weight_decay=None):
    """One Keras RMSprop step (slots None where unused), in place."""
    handles = [var, velocity] + ([momentum_slot] if momentum > 0 else []) + ([average_gradient] if centered else [])
    attrs = _decayed({"rho": float(rho), "momentum": float(momentum), "epsilon": float(epsilon),
                      "centered": bool(centered)}, weight_decay)
    return _update("ResourceApplyKerasRMSprop", handles, [("lr", lr)], grad, indices, attrs, name)



def apply_lion(var, momentum_slot, lr, grad, beta_1, beta_2, indices=None, name=None, weight_decay=None):
    """One Lion step (Keras 3's ``keras.optimizers.Lion``), in place; with ``indices`` (unique)
    only those rows change."""
    attrs = _decayed({"beta_1": float(beta_1), "beta_2": float(beta_2)}, weight_decay)
    return _update("ResourceApplyLion", [var, momentum_slot], [("lr", lr)], grad, indices, attrs, name)


def apply_adamax(var, m, u, lr, step, grad, beta_1, beta_2, epsilon, indices=None, name=None, weight_decay=None):
    """One Adamax step (Keras 3's ``keras.optimizers.Adamax``) on ``var`` with slots ``m``
    (momentum) and ``u`` (norm), in place; with ``indices`` (unique) only those rows change."""
    attrs = _decayed({"beta_1": float(beta_1), "beta_2": float(beta_2), "epsilon": float(epsilon)}, weight_decay)
    return _update("ResourceApplyAdamax", [var, m, u], [("lr", lr), ("step", step)], grad, indices, attrs, name)


def apply_nadam(var, m, v, lr, step, u_product, grad, beta_1, beta_2, epsilon, indices=None, name=None,
                weight_decay=None):
    """One Nadam step (Keras 3's ``keras.optimizers.Nadam``) on ``var`` with slots ``m`` and ``v``,
    ``u_product`` the product of the momentum schedule through this step; in place, with
    ``indices`` (unique) only those rows."""
    attrs = _decayed({"beta_1": float(beta_1), "beta_2": float(beta_2), "epsilon": float(epsilon)}, weight_decay)
    return _update("ResourceApplyNadam", [var, m, v], [("lr", lr), ("step", step), ("u_product", u_product)],
                   grad, indices, attrs, name)
