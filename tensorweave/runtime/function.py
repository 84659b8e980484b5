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

    def __init__(self, graph, input_placeholders, structured_outputs, python_function, arg_structure):
        self.graph = graph
        self.inputs = input_placeholders
        self.structured_outputs = structured_outputs
        self._python_function = python_function
        self._arg_structure = arg_structure
        flat = nest.flatten(structured_outputs)
        self._out_index = [i for i, o in enumerate(flat) if isinstance(o, SymbolicTensor)]
        self.outputs = [flat[i] for i in self._out_index]
        targets = [graph._last_stateful] if graph._last_stateful is not None else []
        self._plan = executor.build_plan(self.outputs, targets, self.inputs + [p for _, p in graph.captures])
        self._grad_fn = None

    @property
    def variables(self):
        return list(self.graph.variables)

    @property
    def trainable_variables(self):
        return [v for v in self.graph.variables if v.trainable]

    @property
    def structured_input_signature(self):
        return [TensorSpec(p.shape, p.dtype, p.op.name) for p in self.inputs]

    def _run(self, flat_inputs):
        values = []
        for p, x in zip(self.inputs, flat_inputs):
            v = x._value if isinstance(x, EagerTensor) else to_numpy(x, p.dtype)
            values.append(v)
        values += [c._value if isinstance(c, EagerTensor) else c for c, _ in self.graph.captures]
        return executor.run_plan(self._plan, values)

    def __call__(self, *args, **kwargs):
        flat = [x for x in nest.flatten((args, kwargs)) if _is_tensorlike(x)]
        return self._call_flat(flat)

    def _call_flat(self, flat_inputs):
        flat_inputs = [x if isinstance(x, EagerTensor) else EagerTensor(to_numpy(x, p.dtype), p.dtype)
                       for x, p in zip(flat_inputs, self.inputs)]
        for p, x in zip(self.inputs, flat_inputs):
            if not p.shape.is_compatible_with(x.shape) or p.dtype is not x.dtype:
                raise ValueError(f"Function input '{p.op.name}' expects {fmt(p.shape)} {p.dtype.name}, "
                                 f"got {fmt(x.shape)} {x.dtype.name}")
        values = self._run(flat_inputs)
        outs = [EagerTensor(v, t.dtype) for v, t in zip(values, self.outputs)]
        if ctx.tapes:
            self._record(flat_inputs, outs)
        flat = list(nest.flatten(self.structured_outputs))
        for i, o in zip(self._out_index, outs):
            flat[i] = o
        return nest.pack_sequence_as(self.structured_outputs, flat)

    # ---- gradients through a call (the tape sees one op) -----------------------------------------
    def _record(self, inputs, outputs):
        handles = []
        for v in self.trainable_variables:
            h = v.handle
            for tape in ctx.tapes:
                if tape._watch_accessed:
                    tape._watch_handle(h)
            handles.append(h)
        record_custom(_CallRecord(self, list(inputs) + handles, outputs))

    def _gradient_function(self):
        """A ConcreteFunction: (inputs..., output grads...) -> grads of inputs and variables."""
        if self._grad_fn is None:
            from tensorweave.autodiff.gradients import gradients
            g = FuncGraph(self.graph.name + "_grad")
            with g.as_default():
                phs = [_placeholder_like(p) for p in self.inputs]
                it = iter(phs)
                args, kwargs = nest.pack_sequence_as(
                    self._arg_structure, [next(it) if isinstance(x, _TensorSlot) else x
                                          for x in nest.flatten(self._arg_structure)])
                outs = [convert_to_tensor(o) for o in nest.flatten(self._python_function(*args, **kwargs))
                        if isinstance(o, (Tensor,))]
                gphs = [_placeholder_like(o, "grad") for o in outs]
                xs = phs + [v.handle_in(g) for v in self.trainable_variables]
                grads = gradients(outs, xs, grad_ys=gphs)
                from tensorweave.autodiff.backprop import densify
                from tensorweave.ops.array_ops import zeros_like
                res = []
                for gr, x in zip(grads, xs):
                    if gr is None:
                        res.append(None)
                    else:
                        res.append(densify(gr))
            self._grad_fn = (ConcreteFunction(g, phs + gphs, res, None, None), len(phs))
        return self._grad_fn


class _CallRecord:
    """A tape record for a whole function call."""

    __slots__ = ("fn", "inputs", "outputs", "type", "name", "attrs", "opdef")

    def __init__(self, fn, inputs, outputs):
        self.fn, self.inputs, self.outputs = fn, inputs, outputs
        self.type = self.name = "PartitionedCall"
        self.attrs = {}
        self.opdef = None

    def grad_fn(self, op, *grads):
        gfn, n = self.fn._gradient_function()
        n_in = len(gfn.inputs) - len(grads)
        fwd = [x for x in self.inputs[:n]]
        out = gfn._call_flat(fwd + [convert_to_tensor(g) for g in grads])
        return list(out)


class _TensorSlot:
    """Marks where a tensor argument sat in the traced call's structure."""
    __slots__ = ()


def _placeholder_like(t, name=None):
    from tensorweave.ops.array_ops import placeholder
    return placeholder(t.dtype, shape=t.shape, name=name or (t.op.name if isinstance(t, SymbolicTensor) else None))


class Function:
    """A Python function compiled to graphs (one per input signature)."""

    def __init__(self, python_function, input_signature=None, reduce_retracing=False, name=None,
                 jit_compile=None):
        self._python_function = python_function
        self._input_signature = None if input_signature is None else list(input_signature)
        self._reduce_retracing = reduce_retracing
        self._cache = {}
        self._lock = threading.RLock()
        self._tracing_count = 0
        self._name = name or getattr(python_function, "__name__", "function")
        self._bound = weakref.WeakKeyDictionary()
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
    def _key_and_specs(self, args, kwargs):
        if self._input_signature is not None:
            flat = nest.flatten(args)
            if kwargs or len(flat) != len(self._input_signature):
                raise TypeError(f"{self._name}: expected {len(self._input_signature)} positional tensor "
                                f"arguments matching input_signature, got {len(flat)}")
            specs = []
            for x, spec in zip(flat, self._input_signature):
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
        for x in nest.flatten((args, kwargs)):
            if isinstance(x, TensorSpec):
                specs.append(x)
                key.append(("T", x.shape.as_tuple(), x.dtype.name))
            elif isinstance(x, (Tensor, np.ndarray)):
                d = x.dtype if isinstance(x, Tensor) else _dt.as_dtype(x.dtype)
                shape = TensorShape(np.shape(x)) if not isinstance(x, SymbolicTensor) else x.shape
                if self._reduce_retracing:
                    shape = TensorShape([None] * shape.rank) if shape.rank is not None else shape
                spec = TensorSpec(shape, d)
                specs.append(spec)
                key.append(("T", shape.as_tuple(), d.name))
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

    def get_concrete_function(self, *args, **kwargs):
        if not args and not kwargs and self._input_signature is not None:
            args = tuple(self._input_signature)
        key, specs = self._key_and_specs(args, kwargs)
        with self._lock:
            cf = self._cache.get(key)
            if cf is None:
                cf = self._trace(args, kwargs, specs)
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
        structure = []
        with graph.as_default():
            for x in flat:
                if isinstance(x, (Tensor, np.ndarray)) or isinstance(x, TensorSpec):
                    spec = next(it)
                    ph = placeholder(spec.dtype, spec.shape, name=spec.name or "input")
                    phs.append(ph)
                    new_flat.append(ph)
                    structure.append(_TensorSlot())
                else:
                    new_flat.append(x)
                    structure.append(x)
            a, k = nest.pack_sequence_as((args, kwargs), new_flat)
            outputs = self._python_function(*a, **k)
            outputs = nest.map_structure(
                lambda o: convert_to_tensor(o) if isinstance(o, Tensor) or getattr(o, "_is_variable", False)
                or hasattr(o, "_tw_tensor_") else o, outputs) if outputs is not None else None
        graph.inputs = phs
        graph.outputs = [o for o in nest.flatten(outputs) if isinstance(o, Tensor)]
        arg_structure = nest.pack_sequence_as((args, kwargs), structure)
        return ConcreteFunction(graph, phs, outputs, self._python_function, arg_structure)

    def __call__(self, *args, **kwargs):
        if building_graph() is not None:
            # Inside another graph (a Session graph or an outer function): inline the Python.
            return self._python_function(*args, **kwargs)
        cf = self.get_concrete_function(*args, **kwargs)
        flat = [x for x in nest.flatten((args, kwargs)) if isinstance(x, (Tensor, np.ndarray))]
        return cf._call_flat(flat)


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


def function(func=None, input_signature=None, autograph=True, jit_compile=None, reduce_retracing=False,
             experimental_relax_shapes=None, name=None, **unused):
    """Decorator: compile ``func`` into graphs (see module docstring)."""
    relax = reduce_retracing or bool(experimental_relax_shapes)

    def wrap(f):
        return Function(f, input_signature, relax, name, jit_compile)
    if func is None:
        return wrap
    return wrap(func)
