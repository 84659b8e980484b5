"""``tw.function``: trace Python into a graph once per input signature, run it on the executor.

>>> import tensorweave as tw
>>> v = tw.Variable(1.0)
>>> @tw.function
... def step(x):
...     v.assign_add(x)
...     return v.read_value() * 2
>>> float(step(tw.constant(2.0))), float(step(tw.constant(1.0)))
(6.0, 8.0)
>>> step.experimental_get_tracing_count()
1
"""
import functools
import threading
import weakref

import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core import nest
from tensorweave.core.context import building_graph, ctx
from tensorweave.core.convert import convert_to_tensor, to_numpy
from tensorweave.core.dispatch import record_custom
from tensorweave.core.graph import FuncGraph, SymbolicTensor
from tensorweave.core.shape import TensorShape, fmt
from tensorweave.core.tensor import EagerTensor, Tensor
from tensorweave.core.tensor_spec import TensorSpec
from tensorweave.runtime import executor


def _is_tensorlike(x):
    return isinstance(x, (Tensor, np.ndarray))


class ConcreteFunction:
    """One traced graph: placeholders in, tensors out, variables captured by handle."""

    def __init__(self, graph, input_placeholders, structured_outputs):
        self.graph = graph
        self.inputs = input_placeholders
        self.structured_outputs = structured_outputs
        flat = nest.flatten(structured_outputs)
        self._flat_outputs = flat
        self._out_index = [i for i, o in enumerate(flat) if isinstance(o, SymbolicTensor)]
        self.outputs = [flat[i] for i in self._out_index]
        self._single_out = structured_outputs is not None and len(self.outputs) == 1 and \
            structured_outputs is self.outputs[0]
        # Per input, the exact dims a call must have (None: some are unknown, check compatibility):
        # comparing shape tuples costs ~0.1 µs, building TensorShapes to compare ~3 µs.
        self._input_dims = [p.shape.as_tuple() if p.shape.is_fully_defined() else None for p in input_placeholders]
        targets = [graph._last_stateful] if graph._last_stateful is not None else []
        self._grad_fn = None
        self._grad_graph = None
        self._global = None
        globals_ = getattr(graph, "_tw_globals", None)
        if globals_ is not None:
            # global tensors inside: planned over the ranks, one plan per rank (distribute/plan_function.py)
            self._global, self._plan = globals_.plan_function(self), None
        else:
            self._plan = executor.build_plan(self.outputs, targets, self.inputs + [p for _, p in graph.captures])

    @property
    def variables(self):
        return list(self.graph.variables)

    @property
    def trainable_variables(self):
        return [v for v in self.graph.variables if v.trainable]

    @property
    def structured_input_signature(self):
        return [TensorSpec(p.shape, p.dtype, p.op.name) for p in self.inputs]

    def _feed_values(self, flat_inputs):
        values = [x._value if isinstance(x, EagerTensor) else to_numpy(x, p.dtype)
                  for p, x in zip(self.inputs, flat_inputs)]
        return values + [c._value if isinstance(c, EagerTensor) else c for c, _ in self.graph.captures]

    def _run(self, flat_inputs):
        return executor.run_plan(self._plan, self._feed_values(flat_inputs))

    def _watched_by_tape(self, flat_inputs):
        """Whether an active tape would record this call (a watched input, or a trainable variable)."""
        for tape in ctx.tapes:
            if tape._should_record(flat_inputs):
                return True
            if tape._watch_accessed and self.trainable_variables:
                return True
        return False

    def __call__(self, *args, **kwargs):
        flat = [x for x in nest.flatten((args, kwargs)) if _is_tensorlike(x)]
        return self._call_flat(flat)

    def _call_flat(self, flat_inputs):
        if self._global is not None:
            return self._pack(self._global(flat_inputs))
        flat_inputs = [x if isinstance(x, EagerTensor) else _as_eager(x, p.dtype)
                       for x, p in zip(flat_inputs, self.inputs)]
        for p, x, dims in zip(self.inputs, flat_inputs, self._input_dims):
            if p.dtype is not x.dtype or (np.shape(x._value) != dims if dims is not None
                                          else not p.shape.is_compatible_with(x.shape)):
                raise ValueError(f"Function input '{p.op.name}' expects {fmt(p.shape)} {p.dtype.name}, "
                                 f"got {fmt(x.shape)} {x.dtype.name}")
        if ctx.tapes and self._watched_by_tape(flat_inputs):
            fwd_plan, _, _, n_saved = self._backward()
            values = executor.run_plan(fwd_plan, self._feed_values(flat_inputs))
            n_out = len(self.outputs)
            outs = [EagerTensor(v, t.dtype) for v, t in zip(values[:n_out], self.outputs)]
            self._record(flat_inputs, outs, values[n_out:])
        else:
            values = self._run(flat_inputs)
            outs = [EagerTensor(v, t.dtype) for v, t in zip(values, self.outputs)]
        return self._pack(outs)

    def _call_checked(self, flat_inputs):
        """:meth:`_call_flat` for inputs of exactly the dims and dtypes of an earlier call that
        passed its checks (``Function``'s repeated-call key): the feeds bound without checking
        them again."""
        if self._global is not None or ctx.tapes:
            return self._call_flat(flat_inputs)
        values = [x._value if type(x) is EagerTensor else to_numpy(x, p.dtype)
                  for x, p in zip(flat_inputs, self.inputs)]
        for c, _ in self.graph.captures:
            values.append(c._value if isinstance(c, EagerTensor) else c)
        values = executor.run_plan(self._plan, values)
        if self._single_out:
            return EagerTensor(values[0], self.outputs[0].dtype)
        return self._pack([EagerTensor(v, t.dtype) for v, t in zip(values, self.outputs)])

    def _pack(self, outs):
        flat = list(self._flat_outputs)
        for i, o in zip(self._out_index, outs):
            flat[i] = o
        return nest.pack_sequence_as(self.structured_outputs, flat)

    # ---- gradients through a call (the tape sees one op) -----------------------------------------
    def _watched_handles(self):
        """The handles of the trainable variables, watched by the tapes that watch what they read
        (the variables are the call's inputs on the tape, as its captures are)."""
        handles = []
        for v in self.trainable_variables:
            h = v.handle
            for tape in ctx.tapes:
                if tape._watch_accessed:
                    tape._watch_handle(h)
            handles.append(h)
        return handles

    def _record(self, inputs, outputs, saved):
        record_custom(_CallRecord(self, list(inputs) + self._watched_handles(), outputs, saved))

    def _backward_graph(self):
        """``(upstream placeholders, gradient per input and trainable variable, saved)``: gradient
        ops added once to this function's graph; ``saved`` are the forward tensors they read.

        The forward pass run under a tape also fetches the saved values, and the backward is fed
        those instead of recomputing them, so it sees exactly the forward pass that happened (same
        dropout masks). A planned function (global tensors) plans both halves from these too.
        """
        if self._grad_graph is None:
            from tensorweave.autodiff.backprop import densify
            from tensorweave.autodiff.gradients import gradients
            from tensorweave.ops.array_ops import placeholder
            g = self.graph
            boundary = len(g._ops)
            # Gradient ops must not be chained after (or become) the forward pass's last stateful op:
            # the forward plan targets that op, and the backward plan must not re-run forward effects.
            forward_last, g._last_stateful = g._last_stateful, None
            with g.as_default(), g.name_scope("gradients_of_call/"):
                gphs = [placeholder(o.dtype, o.shape, name="upstream") for o in self.outputs]
                xs = list(self.inputs) + [v.handle_in(g) for v in self.trainable_variables]
                floats = [(o, gp) for o, gp in zip(self.outputs, gphs) if o.dtype.is_floating]
                grads = gradients([o for o, _ in floats], xs, grad_ys=[gp for _, gp in floats]) if floats \
                    else [None] * len(xs)
                grads = [None if gr is None else densify(gr) for gr in grads]
            g._last_stateful = forward_last
            fetched = [gr for gr in grads if gr is not None]
            backward_ops = executor.needed_ops([t.op for t in fetched], {id(p) for p in gphs})
            saved, seen = [], set()
            for op in backward_ops:
                if op._id < boundary:
                    continue
                for t in op.inputs:
                    if t.op._id < boundary and id(t) not in seen:
                        seen.add(id(t))
                        saved.append(t)
            self._grad_graph = (gphs, grads, saved)
        return self._grad_graph

    def _backward(self):
        """The forward plan (outputs and saved values) and the backward plan of a call under a tape."""
        if self._grad_fn is None:
            gphs, grads, saved = self._backward_graph()
            g = self.graph
            fetched = [gr for gr in grads if gr is not None]
            caps = [p for _, p in g.captures]
            fwd_plan = executor.build_plan(self.outputs + saved, [g._last_stateful] if g._last_stateful else [],
                                           self.inputs + caps)
            bwd_plan = executor.build_plan(fetched, [], gphs + saved)
            self._grad_fn = (fwd_plan, bwd_plan, grads, len(saved))
        return self._grad_fn


class _CallRecord:
    """A tape record for a whole function call."""

    __slots__ = ("fn", "inputs", "outputs", "saved", "type", "name", "attrs", "opdef")

    def __init__(self, fn, inputs, outputs, saved):
        self.fn, self.inputs, self.outputs, self.saved = fn, inputs, outputs, saved
        self.type = self.name = "PartitionedCall"
        self.attrs = {}
        self.opdef = None

    def grad_fn(self, op, *grads):
        _, bwd_plan, grad_tensors, _ = self.fn._backward()
        upstream = [(g._value if g is not None else np.zeros(o.shape, o.dtype.np_dtype))
                    if not isinstance(g, Tensor) or isinstance(g, EagerTensor) else None
                    for g, o in zip(grads, self.fn.outputs)]
        if any(u is None for u in upstream):
            raise NotImplementedError("Differentiating a tw.function call twice (higher order through a "
                                      "function call) is not supported; call the Python function eagerly")
        values = iter(executor.run_plan(bwd_plan, upstream + list(self.saved)))
        return [None if gt is None else EagerTensor(next(values), gt.dtype) for gt in grad_tensors]


class Function:
    """A Python function compiled to graphs (one per input signature)."""

    def __init__(self, python_function, input_signature=None, reduce_retracing=False, name=None,
                 jit_compile=None):
        self._python_function = python_function
        self._input_signature = None if input_signature is None else list(input_signature)
        # composite specs (SparseTensorSpec, RaggedTensorSpec) stand for their component tensors
        self._flat_signature = None if input_signature is None else _expand_flat(nest.flatten(self._input_signature))
        self._reduce_retracing = reduce_retracing
        self._cache = {}
        self._lock = threading.RLock()
        self._tracing_count = 0
        self._name = name or getattr(python_function, "__name__", "function")
        self._bound = weakref.WeakKeyDictionary()
        # Repeated calls: a cheap key of the arguments (containers, exact dims, dtypes) -> the
        # concrete function an earlier call with that key checked and ran (see _fast_key)
        self._fast = {}
        functools.update_wrapper(self, python_function)

    @property
    def python_function(self):
        return self._python_function

    def experimental_get_tracing_count(self):
        return self._tracing_count

    def __get__(self, instance, owner):
        if instance is None:
            return self
        try:
            f = self._bound.get(instance)
        except TypeError:
            f = None
        if f is None:
            f = Function(functools.partial(self._python_function, instance), self._input_signature,
                         self._reduce_retracing, self._name)
            try:
                self._bound[instance] = f
            except TypeError:
                pass
        return f

    # ---- signatures -------------------------------------------------------------------------
    def _key_and_specs(self, args, kwargs, flat=None):
        """``(cache key, per tensor argument its TensorSpec or the value to make one from)``;
        ``flat``: ``nest.flatten((args, kwargs))`` when the caller has it."""
        if self._input_signature is not None:
            flat = _expand_flat(nest.flatten(args))
            if kwargs or len(flat) != len(self._flat_signature):
                raise TypeError(f"{self._name}: expected {len(self._input_signature)} positional tensor "
                                f"arguments matching input_signature, got {len(nest.flatten(args))}")
            specs = []
            for x, spec in zip(flat, self._flat_signature):
                if isinstance(x, TensorSpec):
                    x = _SpecTensor(x)
                t = x if isinstance(x, (Tensor, _SpecTensor)) else convert_to_tensor(x, dtype=spec.dtype)
                if not spec.is_compatible_with(t):
                    raise ValueError(f"{self._name}: Python inputs incompatible with input_signature: "
                                     f"got {fmt(t.shape)} {t.dtype.name}, expected {spec}")
                specs.append(spec)
            return ("sig",), specs
        key = []
        specs = []
        for x in _expand_flat(nest.flatten((args, kwargs)) if flat is None else flat):
            if type(x) is EagerTensor or type(x) is np.ndarray:
                # the common call, kept cheap: the key from the value's shape tuple, the
                # TensorSpec only when the key is new (built lazily by _trace's caller)
                dims = x._value.shape if type(x) is EagerTensor else x.shape
                if self._reduce_retracing:
                    dims = (None,) * len(dims)
                specs.append(x)
                key.append(("T", dims, x.dtype.name if type(x) is EagerTensor else _dt.as_dtype(x.dtype).name))
            elif isinstance(x, TensorSpec):
                specs.append(x)
                key.append(("T", x.shape.as_tuple(), x.dtype.name))
            elif getattr(x, "is_global", False):    # planned per layout: its exact shape, placement and SBP
                specs.append(TensorSpec(x.shape, x.dtype))
                key.append(("G", x._shape, x.dtype.name, x.placement, x.sbp))
            elif isinstance(x, (Tensor, np.ndarray)):
                spec = self._spec_of(x)
                specs.append(spec)
                key.append(("T", spec.shape.as_tuple(), spec.dtype.name))
            elif getattr(x, "_is_variable", False):
                key.append(("V", id(x)))
            else:
                try:
                    hash(x)
                    key.append(("P", type(x).__name__, x))
                except TypeError:
                    key.append(("O", id(x)))
        struct = _structure_key((args, kwargs))
        return (struct, tuple(key)), specs

    def _spec_of(self, x):
        """The TensorSpec a traced graph's placeholder gets for argument ``x``."""
        if isinstance(x, TensorSpec):
            return x
        d = x.dtype if isinstance(x, Tensor) else _dt.as_dtype(x.dtype)
        shape = TensorShape(np.shape(x)) if not isinstance(x, SymbolicTensor) else x.shape
        if self._reduce_retracing:
            shape = TensorShape([None] * shape.rank) if shape.rank is not None else shape
        return TensorSpec(shape, d)

    def get_concrete_function(self, *args, **kwargs):
        return self._concrete_function(args, kwargs)

    def _concrete_function(self, args, kwargs, flat=None):
        if not args and not kwargs and self._input_signature is not None:
            args, flat = tuple(self._input_signature), None
        key, specs = self._key_and_specs(args, kwargs, flat)
        with self._lock:
            cf = self._cache.get(key)
            if cf is None:
                cf = self._trace(args, kwargs, [self._spec_of(x) for x in specs])
                self._cache[key] = cf
        return cf

    def _trace(self, args, kwargs, specs):
        self._tracing_count += 1
        graph = FuncGraph(self._name)
        flat = nest.flatten((args, kwargs))
        phs = []
        from tensorweave.ops.array_ops import placeholder
        it = iter(specs)
        new_flat = []
        with graph.as_default():
            for x in _expand_flat(flat):
                if isinstance(x, (Tensor, np.ndarray, TensorSpec)):
                    spec = next(it)
                    ph = placeholder(spec.dtype, spec.shape, name=spec.name or "input")
                    if getattr(x, "is_global", False):
                        x._traced_as(ph)         # the placeholder carries its placement and SBP
                    phs.append(ph)
                    new_flat.append(ph)
                else:
                    new_flat.append(x)
            if len(new_flat) != len(flat):
                new_flat = _rebuild_flat(flat, new_flat)
            a, k = nest.pack_sequence_as((args, kwargs), new_flat)
            outputs = self._python_function(*a, **k)
            outputs = nest.map_structure(
                lambda o: convert_to_tensor(o) if isinstance(o, Tensor) or getattr(o, "_is_variable", False)
                or hasattr(o, "_tw_tensor_") else o, outputs) if outputs is not None else None
        graph.inputs = phs
        graph.outputs = [o for o in nest.flatten(outputs) if isinstance(o, Tensor)]
        return ConcreteFunction(graph, phs, outputs)

    def _repeated(self, args):
        """The concrete function a call with positional ``args`` finds by its repeated-call key (one
        an earlier call with that key checked and ran: :func:`_fast_key`), or None."""
        key = _fast_key(args, [])
        return None if key is None else self._fast.get(key)

    def __call__(self, *args, **kwargs):
        if building_graph() is not None:
            # Inside another graph (a Session graph or an outer function): inline the Python.
            return self._python_function(*args, **kwargs)
        key = None
        if not kwargs and self._input_signature is None:
            leaves = []
            key = _fast_key(args, leaves)
            if key is not None:
                cf = self._fast.get(key)
                if cf is not None:
                    return cf._call_checked(leaves)
        flat = nest.flatten((args, kwargs))
        cf = self._concrete_function(args, kwargs, flat)
        out = cf._call_flat([x for x in _expand_flat(flat) if isinstance(x, (Tensor, np.ndarray))])
        if key is not None and len(self._fast) < _FAST_KEYS:
            self._fast[key] = cf      # only once a call with this key has passed the checks
        return out


#: repeated-call keys a Function keeps (a function called with ever new shapes keeps the first ones)
_FAST_KEYS = 64


def _fast_key(x, leaves):
    """A key of the arguments ``x`` for a repeated call, or None where the full signature is needed:
    plain tuples and lists of local eager tensors and NumPy arrays only, keyed by container type and
    length, each leaf's exact dims and dtype (a key fixes the ``_key_and_specs`` key, so it finds the
    same concrete function); the leaves, in ``nest.flatten`` order, are appended to ``leaves``."""
    t = type(x)
    if t is EagerTensor:
        leaves.append(x)
        return x._value.shape, x.dtype
    if t is np.ndarray:
        leaves.append(x)
        return x.shape, x.dtype, None
    if t is tuple or t is list:
        parts = []
        for v in x:
            k = _fast_key(v, leaves)
            if k is None:
                return None
            parts.append(k)
        return t, tuple(parts)
    return None


def _as_eager(x, dtype):
    if getattr(x, "is_global", False):   # its logical value would be gathered silently
        from tensorweave.core import errors
        raise errors.InvalidArgumentError(
            "tw.function: a global tensor passed where the function was traced for a local one. Hint: pass "
            "the same kinds of arguments (a global argument traces a planned function)")
    return EagerTensor(to_numpy(x, dtype), dtype)


class _SpecTensor:
    """Lets a TensorSpec stand for an argument when checking it against an input_signature."""

    def __init__(self, spec):
        self.shape, self.dtype = spec.shape, spec.dtype


def _structure_key(x):
    if isinstance(x, dict):
        return ("d", tuple((k, _structure_key(x[k])) for k in sorted(x, key=str)))
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, tuple(_structure_key(v) for v in x))
    return "."


# ---- SparseTensor / RaggedTensor arguments: traced as their component tensors ----------------------
def _composite_kind(x):
    k = getattr(type(x), "_tw_composite_", None)
    if k is None:
        vt = getattr(x, "value_type", None) if type(x).__name__ in ("SparseTensorSpec", "RaggedTensorSpec") else None
        k = getattr(vt, "_tw_composite_", None)
    return k


def _components(x):
    """A composite argument (value or spec) as its component tensors (or TensorSpecs)."""
    kind = _composite_kind(x)
    if isinstance(x, (Tensor,)) or kind is None:
        return None
    if type(x).__name__ == "SparseTensorSpec":
        r = x.shape.rank
        return [TensorSpec([None, r], _dt.int64), TensorSpec([None], x.dtype), TensorSpec([r], _dt.int64)]
    if type(x).__name__ == "RaggedTensorSpec":
        inner = x.shape[x.ragged_rank + 1:].as_list() if x.shape.rank is not None else []
        return [TensorSpec([None] + inner, x.dtype)] + [TensorSpec([None], x.row_splits_dtype)] * x.ragged_rank
    if kind == "sparse":
        return [x.indices, x.values, x.dense_shape]
    return [x.flat_values] + list(x.nested_row_splits)


def _expand_flat(flat):
    """``flat`` with each composite replaced by its components (what is traced and passed)."""
    if not any(_composite_kind(x) is not None and not isinstance(x, Tensor) for x in flat):
        return flat
    out = []
    for x in flat:
        parts = _components(x)
        out.extend([x] if parts is None else parts)
    return out


def _rebuild_flat(original_flat, expanded):
    """The inverse of :func:`_expand_flat` over traced values: composites rebuilt from their parts."""
    it = iter(expanded)
    out = []
    for x in original_flat:
        parts = _components(x)
        if parts is None:
            out.append(next(it))
            continue
        got = [next(it) for _ in parts]
        cls = x.value_type if hasattr(x, "value_type") else type(x)   # a spec names its value class
        if _composite_kind(x) == "sparse":
            out.append(cls(*got))
        else:
            out.append(cls.from_nested_row_splits(got[0], got[1:], validate=False))
    return out


def function(func=None, input_signature=None, autograph=True, jit_compile=None, reduce_retracing=False,
             experimental_relax_shapes=None, name=None, **unused):
    """Decorator: compile ``func`` into graphs (see module docstring)."""
    relax = reduce_retracing or bool(experimental_relax_shapes)

    def wrap(f):
        return Function(f, input_signature, relax, name, jit_compile)
    if func is None:
        return wrap
    return wrap(func)
