"""The optimizer updates a gradient bucket's reduction can apply (``fused_sgd.py``): per update op,
how its scalars become the kernel's factors and the one pass over a chunk that sums the members'
gradients and updates the weight and its slots there.

Each rule reproduces its update kernel (``kernels/cpu/training_kernels.py``; Lion's and Adamax's
``lion_kernels.py``, ``adamax_kernels.py``, whose element functions the two-member loops call) operation for
operation, in the weight's dtype: the gradient is the members' values summed in rank order (the
all-reduce's bits), then the kernel's loop body on it. With two members the sum and the update
are one compiled loop (``_sum2_*``: the sum never stored); with more, the sum goes to a scratch
chunk (in cache) and the kernel's own loop runs on it — as AMSGrad's, RMSprop's and Adagrad's
always do (their loops' branch, division and square root, not the sum, are their cost). The same
bits as the unfused step either way (elementwise IEEE operations, no ``fastmath``, so vectorising
does not change them).

Decoupled weight decay (the update op's ``weight_decay`` attr: AdamW, Keras' ``weight_decay=`` on
SGD) is the kernel's too: the chunk of the weight decayed first, ``w - (w * wd) * lr``
(``training_kernels._decay_flat``), then the update reads it, as the kernel decays the whole
weight before its loop. Elementwise, so decaying chunk by chunk gives the same bits.

>>> import numpy as np
>>> w, m, a, b = (np.ones(4, np.float32) for _ in range(4))
>>> rule = rule_for("ResourceApplyKerasMomentum", {"momentum": 0.5, "nesterov": False})
>>> rule.apply([a, b], w, [m], rule.factors([np.float32(0.1)], np.dtype(np.float32)), np.empty(4, np.float32))
>>> round(float(w[0]), 6), round(float(m[0]), 6)          # m = 1 * 0.5 - 2 * 0.1, w = 1 + m
(1.3, 0.3)
"""
import numpy as np

from tensorweave.kernels.cpu import adamax_kernels as _adamax
from tensorweave.kernels.cpu import lion_kernels as _lion
from tensorweave.kernels.cpu import training_kernels as _tk
from tensorweave.kernels.cpu.jit import njit_twin


def _summed(parts, scratch):
    """The members' chunks summed in rank order into ``scratch`` (``collective._reduce_chunk``'s order)."""
    tmp = scratch[:parts[0].shape[0]]
    np.add(parts[0], parts[1], out=tmp)
    for p in parts[2:]:
        np.add(tmp, p, out=tmp)
    return tmp


class _Rule:
    """One update kind: ``slots`` slot arrays per weight, ``scalars`` scalar inputs (after the
    handles, the learning rate first), ``params`` its attrs that matter and ``decay`` its weight
    decay (0: none) — a bucket fuses updates of one ``params`` and ``decay`` only."""

    __slots__ = ("name", "slots", "scalars", "params", "decay")

    def __init__(self, name, slots, scalars, params, decay=0.0):
        self.name, self.slots, self.scalars, self.params = name, slots, scalars, tuple(params)
        self.decay = float(decay or 0.0)

    def _key(self):
        return self.name, self.slots, self.params, self.decay

    def __eq__(self, other):
        return isinstance(other, _Rule) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        return f"{self.name}{self.params}" + (f" decay {self.decay}" if self.decay else "")

    def factors(self, scalars, dtype):
        """The kernel's factors in ``dtype`` from the update's scalar inputs (as the kernel makes
        them), then the decay's (``training_kernels.decay_factors``) where there is one."""
        t = dtype.type
        decay = _tk.decay_factors(dtype, scalars[0], self.decay) or ()
        if self.name in ("adam", "amsgrad"):
            beta_1, beta_2, epsilon = self.params
            return _tk._coefficients(dtype, scalars[0], scalars[1], beta_1, beta_2) + (t(epsilon),) + decay
        if self.name == "momentum":
            momentum, nesterov = self.params
            return (t(scalars[0]), t(momentum), nesterov) + decay
        if self.name == "rmsprop":
            rho, momentum, epsilon, centered = self.params
            return (t(scalars[0]), t(rho), t(1 - rho), t(momentum), t(epsilon), momentum > 0, centered) + decay
        if self.name == "adagrad":
            return (t(scalars[0]), t(self.params[0])) + decay
        if self.name == "lion":
            return _lion._lion_scalars(dtype, scalars[0], *self.params) + decay
        if self.name == "adamax":
            return _adamax._adamax_scalars(dtype, scalars[0], scalars[1], *self.params) + decay
        return (t(scalars[0]),) + decay

    def apply(self, parts, w, slots, factors, scratch):
        """``w`` (and ``slots``) updated with the sum of ``parts`` (the members' gradient chunks):
        the decay of ``w`` first, where there is one (the kernel's order)."""
        if self.decay:
            _tk._decay_flat(w, *factors[-2:])
            factors = factors[:-2]
        if self.name == "adam":
            if len(parts) == 2:
                _sum2_adam(w, *slots, *parts, *factors)
            else:
                _tk._adam_flat(w, *slots, _summed(parts, scratch), *factors)
        elif self.name == "amsgrad":
            _tk._adam_flat_amsgrad(w, *slots, _summed(parts, scratch), *factors)
        elif self.name == "rmsprop":       # the kernel's stand-ins for unused slots (_rmsprop_args)
            v, rest = slots[0], list(slots[1:])
            mom = rest.pop(0) if factors[5] else v
            avg = rest.pop(0) if factors[6] else v
            _tk._rmsprop_flat(w, v, mom, avg, _summed(parts, scratch), *factors)
        elif self.name == "adagrad":
            _tk._adagrad_flat(w, *slots, _summed(parts, scratch), *factors)
        elif self.name in _OWN_LOOPS:
            sum2, kernel = _OWN_LOOPS[self.name]
            if len(parts) == 2:
                sum2(w, *slots, *parts, *factors)
            else:
                kernel(w, *slots, _summed(parts, scratch), *factors)
        elif self.name == "momentum":
            if len(parts) == 2:
                _sum2_momentum(w, *slots, *parts, *factors)
            else:
                _tk._momentum_flat(w, *slots, _summed(parts, scratch), *factors)
        elif len(parts) == 2:
            _sum2_sgd(w, *parts, *factors)
        else:
            tmp = _summed(parts, scratch)
            np.multiply(tmp, factors[0], out=tmp)
            np.subtract(w, tmp, out=w)


def rule_for(op, attrs):
    """The :class:`_Rule` of an update op with ``attrs``, or None (not fusable: an op without a fused kernel)."""
    decay = attrs.get("weight_decay")
    if op in ("ResourceApplyKerasMomentum", "ResourceGroupApplyKerasMomentum"):
        if not attrs.get("momentum"):
            return _Rule("sgd", 0, 1, (), decay)
        return _Rule("momentum", 1, 1, (float(attrs["momentum"]), bool(attrs.get("nesterov"))), decay)
    if op in ("ResourceApplyAdam", "ResourceGroupApplyAdam"):
        amsgrad = bool(attrs.get("amsgrad"))
        return _Rule("amsgrad" if amsgrad else "adam", 2 + amsgrad, 2,
                     (attrs["beta_1"], attrs["beta_2"], attrs["epsilon"]), decay)
    if op in ("ResourceApplyKerasRMSprop", "ResourceGroupApplyKerasRMSprop"):
        momentum, centered = float(attrs["momentum"]), bool(attrs["centered"])
        return _Rule("rmsprop", 1 + (momentum > 0) + centered, 1,
                     (float(attrs["rho"]), momentum, float(attrs["epsilon"]), centered), decay)
    if op in ("ResourceApplyAdagradV2", "ResourceGroupApplyAdagradV2"):
        return _Rule("adagrad", 1, 1, (float(attrs["epsilon"]),), decay)
    if op in ("ResourceApplyLion", "ResourceGroupApplyLion"):
        return _Rule("lion", 1, 1, (attrs["beta_1"], attrs["beta_2"]), decay)
    if op in ("ResourceApplyAdamax", "ResourceGroupApplyAdamax"):
        return _Rule("adamax", 2, 2, (attrs["beta_1"], attrs["beta_2"], attrs["epsilon"]), decay)
    return None


# ---- two members: the sum and the update in one loop; NumPy twins while they compile -------------
def _sum2_sgd_numpy(w, a, b, lr):
    t = np.add(a, b)
    np.multiply(t, lr, out=t)
    np.subtract(w, t, out=w)


@njit_twin(_sum2_sgd_numpy)
def _sum2_sgd(w, a, b, lr):
    for i in range(w.shape[0]):
        w[i] = w[i] - (a[i] + b[i]) * lr


def _sum2_momentum_numpy(w, m, a, b, lr, momentum, nesterov):
    g = np.add(a, b)
    mi = m * momentum - g * lr
    m[:] = mi
    w[:] = w + ((mi * momentum - g * lr) if nesterov else mi)


@njit_twin(_sum2_momentum_numpy)
def _sum2_momentum(w, m, a, b, lr, momentum, nesterov):
    for i in range(w.shape[0]):           # training_kernels._momentum_flat with g[i] = a[i] + b[i]
        gi = a[i] + b[i]
        mi = m[i] * momentum - gi * lr
        m[i] = mi
        w[i] = w[i] + ((mi * momentum - gi * lr) if nesterov else mi)


def _sum2_adam_numpy(w, m, v, a, b, alpha, c1, c2, eps):
    _tk._adam_numpy(w, m, v, np.add(a, b), alpha, c1, c2, eps)


@njit_twin(_sum2_adam_numpy)
def _sum2_adam(w, m, v, a, b, alpha, c1, c2, eps):
    for i in range(w.shape[0]):           # training_kernels._adam_flat with g[i] = a[i] + b[i]
        gi = a[i] + b[i]
        mi = m[i] + (gi - m[i]) * c1
        vi = v[i] + (gi * gi - v[i]) * c2
        m[i] = mi
        v[i] = vi
        w[i] = w[i] - (mi * alpha) / (np.sqrt(vi) + eps)


def _sum2_lion_numpy(w, m, a, b, lr, b1, c1, b2, c2):
    _lion._lion_numpy(w, m, np.add(a, b), lr, b1, c1, b2, c2)


@njit_twin(_sum2_lion_numpy)
def _sum2_lion(w, m, a, b, lr, b1, c1, b2, c2):
    for i in range(w.shape[0]):           # lion_kernels._lion_flat with g[i] = a[i] + b[i]
        w[i], m[i] = _lion._lion_one(w[i], m[i], a[i] + b[i], lr, b1, c1, b2, c2)


def _sum2_adamax_numpy(w, m, u, a, b, lr, c1, b2, denominator, eps):
    _adamax._adamax_numpy(w, m, u, np.add(a, b), lr, c1, b2, denominator, eps)


@njit_twin(_sum2_adamax_numpy)
def _sum2_adamax(w, m, u, a, b, lr, c1, b2, denominator, eps):
    for i in range(w.shape[0]):           # adamax_kernels._adamax_flat with g[i] = a[i] + b[i]
        w[i], m[i], u[i] = _adamax._adamax_one(w[i], m[i], u[i], a[i] + b[i], lr, c1, b2, denominator, eps)


#: the rules whose kernels live in modules of their own: (two-member loop, the kernel's flat loop)
_OWN_LOOPS = {"lion": (_sum2_lion, _lion._lion_flat), "adamax": (_sum2_adamax, _adamax._adamax_flat)}

__all__ = ["rule_for"]
