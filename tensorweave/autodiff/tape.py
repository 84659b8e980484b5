"""``tw.GradientTape``: records operations to differentiate them later.

>>> import tensorweave as tw
>>> x = tw.constant(3.0)
>>> with tw.GradientTape() as t2:
...     t2.watch(x)
...     with tw.GradientTape() as t1:
...         t1.watch(x)
...         y = x * x * x
...     dy = t1.gradient(y, x)
>>> float(dy), float(t2.gradient(dy, x))
(27.0, 18.0)
"""
from tensorweave.autodiff.backprop import backprop, densify
from tensorweave.core import dtypes as _dt
from tensorweave.core.context import ctx
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.nest import flatten as _nest_flatten
from tensorweave.core.nest import pack_sequence_as as _nest_pack
from tensorweave.core.tensor import Tensor

_TRACKED_DTYPES = frozenset(_dt.FLOATING) | {_dt.complex64, _dt.complex128, _dt.resource, _dt.variant}


class GradientTape:
    """Records ops on watched tensors (and, by default, trainable variables read inside)."""

    def __init__(self, persistent=False, watch_accessed_variables=True):
        self._persistent = persistent
        self._watch_accessed = watch_accessed_variables
        self._tracked = {}      # id(tensor) -> tensor (kept alive so ids stay unique)
        self._ops = []
        self._recording = False
        self._used = False
        self._watched_variables = []

    def __enter__(self):
        ctx.tapes.append(self)
        self._recording = True
        return self

    def __exit__(self, *exc):
        if self._recording:
            self._stop()

    def _stop(self):
        ctx.tapes.remove(self)
        self._recording = False

    # ---- recording ----------------------------------------------------------------------
    def _should_record(self, inputs):
        tracked = self._tracked
        for t in inputs:
            if id(t) in tracked:
                return True
        return False

    def _record(self, op):
        self._ops.append(op)
        tracked = self._tracked
        for o in op.outputs:
            if o.dtype in _TRACKED_DTYPES:
                tracked[id(o)] = o

    def _watch_handle(self, handle):
        if id(handle) not in self._tracked:
            self._tracked[id(handle)] = handle
            var = handle._value if hasattr(handle, "_value") else handle.op.attrs.get("variable")
            if var is not None and all(v is not var for v in self._watched_variables):
                self._watched_variables.append(var)

    def watch(self, tensor):
        """Ensures ``tensor`` (or variable, or a nested structure of them) is traced."""
        for t in _nest_flatten(tensor):
            if getattr(t, "_is_variable", False):
                self._watch_handle(t.handle)
            elif isinstance(t, Tensor):
                if not (t.dtype.is_floating or t.dtype.is_complex or t.dtype is _dt.resource):
                    continue  # as TF: integer tensors are not differentiable
                self._tracked[id(t)] = t
            else:
                raise ValueError(f"GradientTape.watch: cannot watch {t!r}; pass tensors or variables")

    def watched_variables(self):
        return tuple(self._watched_variables)

    def stop_recording(self):
        """Context manager: ops inside are not recorded."""
        tape = self

        class _Pause:
            def __enter__(self):
                if tape._recording:
                    tape._stop()
                    self.resume = True
                else:
                    self.resume = False

            def __exit__(self, *exc):
                if self.resume:
                    ctx.tapes.append(tape)
                    tape._recording = True
        return _Pause()

    def reset(self):
        self._tracked.clear()
        self._ops.clear()

    # ---- differentiation ----------------------------------------------------------------
    def gradient(self, target, sources, output_gradients=None, unconnected_gradients="none"):
        """d(target)/d(sources); ``sources`` may be a nested structure of tensors and variables."""
        if self._used and not self._persistent:
            raise RuntimeError("A non-persistent GradientTape can only be used to compute one set of "
                               "gradients. Hint: GradientTape(persistent=True).")
        self._used = True
        flat_src = _nest_flatten(sources)
        keys = [s.handle if getattr(s, "_is_variable", False) else s for s in flat_src]
        targets = [convert_to_tensor(t) for t in _nest_flatten(target)]
        tgrads = None if output_gradients is None else [convert_to_tensor(g) for g in _nest_flatten(output_gradients)]
        was_recording = self._recording
        if was_recording:
            self._stop()   # differentiate without recording on this tape (outer tapes still record)
        try:
            if output_gradients is None:
                from tensorweave.ops.array_ops import ones_like
                tgrads = [ones_like(t) for t in targets]
            grads = backprop(list(self._ops), targets, tgrads, keys)
        finally:
            if was_recording:
                ctx.tapes.append(self)
                self._recording = True
        out = []
        for g, s in zip(grads, flat_src):
            if g is None and unconnected_gradients == "zero":
                from tensorweave.ops.array_ops import zeros
                g = zeros(s.shape, dtype=s.dtype)
            out.append(g)
        if not self._persistent:
            self._ops = []
        if isinstance(sources, (list, tuple, dict)):
            return _nest_pack(sources, out)
        return out[0]

    def jacobian(self, target, sources, unconnected_gradients="none", parallel_iterations=None,
                 experimental_use_pfor=False):
        """Full Jacobian: shape target.shape + source.shape (one gradient per target element)."""
        from tensorweave.ops import array_ops as A
        target = convert_to_tensor(target)
        flat_src = _nest_flatten(sources)
        n = target.shape.num_elements()
        if n is None:
            raise ValueError("jacobian needs a target of static shape")
        persistent, self._persistent = self._persistent, True
        rows = [[] for _ in flat_src]
        try:
            for i in range(n):
                onehot = A.reshape(A.constant(_onehot(n, i, target.dtype)), A.shape(target))
                gs = self.gradient(target, flat_src, output_gradients=onehot,
                                   unconnected_gradients=unconnected_gradients)
                for r, g, s in zip(rows, gs, flat_src):
                    r.append(densify(g) if g is not None else A.zeros(s.shape, dtype=s.dtype))
        finally:
            self._persistent = persistent
        out = []
        for r, s in zip(rows, flat_src):
            j = A.stack(r) if r else A.zeros([0] + list(s.shape), s.dtype)
            out.append(A.reshape(j, list(target.shape) + list(s.shape)))
        if isinstance(sources, (list, tuple, dict)):
            return _nest_pack(sources, out)
        return out[0]

    def batch_jacobian(self, target, source, unconnected_gradients="none", **kw):
        """Per-example Jacobian: target (B, *T), source (B, *S) -> (B, *T, *S)."""
        from tensorweave.ops import array_ops as A
        j = self.jacobian(target, source, unconnected_gradients)
        rest = (slice(None),) * (target.shape.rank - 1)
        return A.stack([j[(b,) + rest + (b,)] for b in range(target.shape[0])])


def _onehot(n, i, dtype):
    import numpy as np
    a = np.zeros(n, dtype=dtype.np_dtype)
    a[i] = 1
    return a
