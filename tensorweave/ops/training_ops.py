"""Fused optimizer updates: one op per variable writes the weights and slots in place.

Written in tensorweave ops, an Adam step is ~12 elementwise ops per variable, each
allocating a full-size temporary; the fused op reads every element once and writes it
back once (TensorFlow's ``ResourceApplyAdam``, PyTorch's fused Adam). Inputs are the
variable handles (weights, then slots), the scalars, and the gradient; the update goes
through ``Variable._storage_for_update`` (copy-on-write), so values read before the
update keep their contents.

Sparse forms take the gradient as rows (``values``, unique ``indices``) and touch only
those rows of the weights and slots — lazy Adam.

>>> import numpy as np, tensorweave as tw
>>> from tensorweave.ops import training_ops
>>> w, m, v = (tw.Variable(np.array([1.0, 2.0], np.float32)) for _ in range(3))
>>> training_ops.apply_adam(w, m, v, 0.1, 1, tw.constant([1.0, -1.0]), 0.9, 0.999, 1e-7)
>>> np.round(w.numpy(), 4).tolist()          # the first step moves each weight by ~lr
[0.9, 2.1]
"""
from tensorweave.core import dtypes as _dt
from tensorweave.core import errors
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.dispatch import execute
from tensorweave.core.registry import get_op, register_op
from tensorweave.core.shape import fmt

FUSED_DTYPES = (_dt.float32, _dt.float64)


def _adam_infer(sparse):
    def infer(inputs, attrs):
        n_handles = 4 if attrs["amsgrad"] else 3
        handles, (lr, step), rest = inputs[:n_handles], inputs[n_handles:n_handles + 2], inputs[n_handles + 2:]
        if any(h.dtype is not _dt.resource for h in handles):
            raise TypeError(f"Adam update: the first {n_handles} inputs must be variable handles")
        grad = rest[0]
        if grad.dtype not in FUSED_DTYPES or lr.dtype is not grad.dtype:
            raise TypeError(f"Adam update: gradient and learning rate must share a float32/float64 dtype, got "
                            f"{grad.dtype.name} and {lr.dtype.name}")
        if lr.shape.rank not in (None, 0) or step.shape.rank not in (None, 0):
            raise ValueError(f"Adam update: learning rate and step must be scalars, got shapes "
                             f"{fmt(lr.shape)} and {fmt(step.shape)}")
        if sparse and rest[1].dtype not in (_dt.int32, _dt.int64):
            raise TypeError(f"Sparse Adam update: indices must be int32 or int64, got {rest[1].dtype.name}")
        return []
    return infer


# Inputs: var, m, v[, v_hat], lr, step (1-based, int64), grad[, indices].
register_op("ResourceApplyAdam", infer=_adam_infer(False), num_outputs=0, stateful=True)
register_op("ResourceSparseApplyAdam", infer=_adam_infer(True), num_outputs=0, stateful=True)


def _handles(variables):
    return [v.handle for v in variables]


def apply_adam(var, m, v, lr, step, grad, beta_1, beta_2, epsilon, v_hat=None, name=None):
    """One Adam step on ``var`` with slots ``m``, ``v`` (and ``v_hat`` for AMSGrad), in place."""
    dtype = var.dtype
    inputs = _handles([var, m, v] + ([v_hat] if v_hat is not None else []))
    inputs += [convert_to_tensor(lr, dtype=dtype), convert_to_tensor(step, dtype=_dt.int64),
               convert_to_tensor(grad, dtype=dtype)]
    return execute(get_op("ResourceApplyAdam"), inputs, _attrs(beta_1, beta_2, epsilon, v_hat), name)


def sparse_apply_adam(var, m, v, lr, step, values, indices, beta_1, beta_2, epsilon, v_hat=None, name=None):
    """Lazy Adam: updates only rows ``indices`` (unique) of ``var`` and its slots."""
    dtype = var.dtype
    if var.shape.rank == 0:
        raise errors.InvalidArgumentError(f"Sparse Adam update of a scalar variable '{var.name}'")
    inputs = _handles([var, m, v] + ([v_hat] if v_hat is not None else []))
    inputs += [convert_to_tensor(lr, dtype=dtype), convert_to_tensor(step, dtype=_dt.int64),
               convert_to_tensor(values, dtype=dtype), convert_to_tensor(indices, dtype_hint=_dt.int32)]
    return execute(get_op("ResourceSparseApplyAdam"), inputs, _attrs(beta_1, beta_2, epsilon, v_hat), name)


def _attrs(beta_1, beta_2, epsilon, v_hat):
    return {"beta_1": float(beta_1), "beta_2": float(beta_2), "epsilon": float(epsilon),
            "amsgrad": v_hat is not None}
