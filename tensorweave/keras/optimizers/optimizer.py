"""The optimizer base class (Keras 3's ``keras.optimizers.Optimizer``).

An optimizer owns its state as variables: ``iterations`` (the step counter), the learning
rate (a variable when given as a number, so it can change after a step was traced) and
*slot* variables per trained variable (momentum, second moments...), made in
:meth:`Optimizer.build`. Each subclass writes its update rule once, in tensorweave ops, in
``update_step``; the same code therefore runs eagerly, inside ``tw.function`` and in a TF1
graph (where ``apply`` returns the train op to run in a ``Session``).

Sparse gradients (:class:`tw.IndexedSlices`, from ``gather``/``embedding_lookup``) update
only the rows they touch: duplicate indices are summed, the rows of the variable and of
its slots are read, the rule runs on those rows, and the results are scattered back.
Slots of untouched rows are left alone, as in TensorFlow's ``ResourceSparseApply*``
kernels ("lazy" Adam, row-wise momentum); for plain SGD this equals the dense update.

>>> import tensorweave as tw
>>> w = tw.Variable([1.0, 2.0])
>>> opt = tw.keras.optimizers.SGD(learning_rate=0.1)
>>> with tw.GradientTape() as tape:
...     loss = tw.reduce_sum(w * w)
>>> _ = opt.apply_gradients(zip(tape.gradient(loss, [w]), [w]))
>>> w.numpy().tolist(), int(opt.iterations.numpy())
([0.800000011920929, 1.600000023841858], 1)
"""
import contextlib
import numbers
import re
import warnings

import numpy as np

from tensorweave.ops.indexed_slices import IndexedSlices
from tensorweave.core import dtypes as _dt
from tensorweave.core.context import building_graph, init_scope
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.graph import SymbolicTensor
from tensorweave.core.tensor import Tensor
from tensorweave.keras.optimizers import schedules as _schedules
from tensorweave.keras.optimizers.sparse_ops import unique_segment_sum
from tensorweave.ops import array_ops as A
from tensorweave.ops import math_ops as M
from tensorweave.ops import reduce_ops as R
from tensorweave.ops import training_ops
from tensorweave.ops.control_flow_ops import group
from tensorweave.ops.variables import Variable

# Stateful ops that only read; a TF1 train op need not name them (its writes pull them in).
_READ_ONLY = frozenset({"ReadVariableOp", "VarHandleOp", "ResourceGather"})


class _UniqueSlices(IndexedSlices):
    """An IndexedSlices whose indices are unique (duplicates were summed)."""
    __slots__ = ()


def dedupe(gradient):
    """``gradient`` with repeated indices summed (a no-op for dense gradients)."""
    if not isinstance(gradient, IndexedSlices) or isinstance(gradient, _UniqueSlices):
        return gradient
    idx = gradient.indices
    if isinstance(idx, Tensor) and idx.shape.rank not in (None, 1):
        idx = A.reshape(idx, [-1])
    uniq, summed = unique_segment_sum(idx, gradient.values)
    return _UniqueSlices(summed, uniq, gradient.dense_shape)


def densify(gradient, variable):
    """``gradient`` as a dense tensor shaped like ``variable`` (rows of an IndexedSlices summed
    into zeros): for rules that are not row-wise (a norm or a mean over the whole weight)."""
    if not isinstance(gradient, IndexedSlices):
        return gradient
    rows = variable.shape[0] if variable.shape[0] is not None else A.shape(variable.read_value())[0]
    return A.unsorted_segment_sum(gradient.values, gradient.indices, rows)


def _map_values(gradient, fn):
    if isinstance(gradient, IndexedSlices):
        return _UniqueSlices(fn(gradient.values), gradient.indices, gradient.dense_shape)
    return fn(gradient)


def _values(gradient):
    return gradient.values if isinstance(gradient, IndexedSlices) else gradient


def _cast(value, dtype):
    """``value`` (Python number, tensor or variable) as a tensor of ``dtype``; Python numbers
    are converted directly, so 0.1 is exact in float64."""
    if isinstance(value, numbers.Number) and not isinstance(value, bool):
        return A.constant(value, dtype=dtype)
    return M.cast(value, dtype)


def _tf1_graph():
    """The TF1 graph being built, where stateful ops need explicit ordering; None when eager
    or while tracing a ``tw.function`` (which orders stateful ops in program order itself)."""
    g = building_graph()
    if g is None or g.is_function_graph:
        return None
    return g


def _symbolic(items):
    out = []
    for x in items:
        if isinstance(x, IndexedSlices):
            out.extend(_symbolic([x.values, x.indices]))
        elif isinstance(x, SymbolicTensor):
            out.append(x)
        elif x is not None and not isinstance(x, Tensor) and hasattr(x, "graph"):
            out.append(x)  # an Operation
    return out


def _local_gradient(gradient, variable):
    """The gradient of a local variable as a local tensor. An optimizer over local and global
    variables together can make a local variable's gradient global (``global_clipnorm``'s
    scale is the norm of every gradient, global ones included); that value is the same on
    every rank (replicated, ``B``), so the local variable takes it."""
    if gradient is None or getattr(variable, "is_global", False) or \
            not getattr(_values(gradient), "is_global", False):
        return gradient

    def replicated(t):
        from tensorweave.core.sbp import B
        return t.to_global(sbp=(B,) * t.placement.ndim).to_local()[0]
    return _map_values(gradient, replicated)


def _snake(name):
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def clip_by_global_norm(gradients, clip_norm):
    """Scales all ``gradients`` by ``clip_norm / max(global_norm, clip_norm)``, where
    ``global_norm`` is the norm of all of them concatenated (a non-finite norm makes the
    result NaN, so a diverged step is visible rather than silently scaled to zero).

    >>> import tensorweave as tw
    >>> gs = clip_by_global_norm([tw.constant([3.0]), tw.constant([4.0])], 1.0)
    >>> [round(float(g[0]), 3) for g in gs]
    [0.6, 0.8]
    """
    present = [_values(g) for g in gradients if g is not None]
    if not present:
        return list(gradients)
    dtypes = {g.dtype for g in present}
    dtype = present[0].dtype if len(dtypes) == 1 else _dt.float64
    sq = [R.reduce_sum(M.square(M.cast(g, dtype))) for g in present]
    norm = M.sqrt(M.add_n(sq) if len(sq) > 1 else sq[0])
    scale = clip_norm * M.minimum(1.0 / norm, 1.0 / clip_norm)
    scale = scale + (norm - norm)  # NaN when the norm is inf or NaN
    return [None if g is None else _map_values(g, lambda v: v * M.cast(scale, v.dtype)) for g in gradients]


class Optimizer:
    """Base class of the Keras optimizers.

    Args (Keras 3): ``learning_rate`` (a number, a ``tw.Variable``, a
    :class:`~tensorweave.keras.optimizers.schedules.LearningRateSchedule` or a zero-argument
    callable), ``weight_decay`` (decoupled: ``w -= w * weight_decay * lr`` before each step),
    ``clipnorm`` (per-gradient norm), ``clipvalue`` (elementwise), ``global_clipnorm`` (norm of
    all gradients together), ``use_ema``/``ema_momentum``/``ema_overwrite_frequency``
    (exponential moving average of the weights), ``loss_scale_factor``, ``name``.

    Subclasses implement ``build(var_list)`` (create slots with
    :meth:`add_variable_from_reference`) and ``update_step(gradient, variable, learning_rate)``.
    Writing the rule as ``self._apply_update(rule, gradient, variable, slots)`` (as the
    built-in optimizers do) gives row-wise sparse updates for free; plain ``self.assign*``
    calls work too (a sparse gradient is then used densely).

    >>> import tensorweave as tw
    >>> class SignSGD(Optimizer):
    ...     def update_step(self, gradient, variable, learning_rate):
    ...         lr = tw.cast(learning_rate, variable.dtype)
    ...         self.assign_sub(variable, lr * tw.sign(tw.convert_to_tensor(gradient)))
    >>> v = tw.Variable([1.0, -1.0])
    >>> _ = SignSGD(learning_rate=0.5).apply([tw.constant([3.0, -0.1])], [v])
    >>> v.numpy().tolist()
    [0.5, -0.5]
    """

    def __init__(self, learning_rate, weight_decay=None, clipnorm=None, clipvalue=None, global_clipnorm=None,
                 use_ema=False, ema_momentum=0.99, ema_overwrite_frequency=None, loss_scale_factor=None,
                 gradient_accumulation_steps=None, name=None, **kwargs):
        if kwargs:
            hints = {"lr": "learning_rate", "decay": "a learning-rate schedule (keras.optimizers.schedules)"}
            hint = "; ".join(f"`{k}` -> use {hints[k]}" for k in kwargs if k in hints)
            raise ValueError(f"Argument(s) not recognized: {kwargs}" + (f". Hint: {hint}" if hint else ""))
        if gradient_accumulation_steps:
            raise NotImplementedError("gradient_accumulation_steps is not supported yet. Hint: sum the gradients "
                                      "of several batches yourself and call apply_gradients once.")
        if clipnorm is not None and global_clipnorm is not None:
            raise ValueError("Only one of `clipnorm` and `global_clipnorm` can be set. Received: "
                             f"clipnorm={clipnorm}, global_clipnorm={global_clipnorm}")
        if use_ema and not 0 <= ema_momentum <= 1:
            raise ValueError(f"`ema_momentum` must be in the range [0, 1]. Received: ema_momentum={ema_momentum}")
        if ema_overwrite_frequency is not None and (not isinstance(ema_overwrite_frequency, int)
                                                    or ema_overwrite_frequency < 1):
            raise ValueError("`ema_overwrite_frequency` must be an integer >= 1 or None. Received: "
                             f"ema_overwrite_frequency={ema_overwrite_frequency}")
        self.name = name or _snake(type(self).__name__)
        self.weight_decay = weight_decay
        self.clipnorm = clipnorm
        self.clipvalue = clipvalue
        self.global_clipnorm = global_clipnorm
        self.use_ema = bool(use_ema)
        self.ema_momentum = ema_momentum
        self.ema_overwrite_frequency = ema_overwrite_frequency
        self.loss_scale_factor = loss_scale_factor
        self.gradient_accumulation_steps = gradient_accumulation_steps
        self.built = False
        self._learning_rate = self._check_learning_rate(learning_rate)
        self._initial_learning_rate = self._learning_rate   # reported by get_config before a TF1 init
        self._iterations = None
        self._variables = []            # iterations, learning rate (when ours), then slots in creation order
        self._trainable_variables = []  # the variables this optimizer was built for
        self._index = {}                # id(variable) -> position in _trainable_variables
        self._slots = {}                # (id(variable), slot name) -> slot variable
        self._model_variables_moving_average = []
        self._exclude_ids = set()
        self._exclude_pattern = None

    # ---- state ----------------------------------------------------------------------------------
    @staticmethod
    def _check_learning_rate(lr):
        if isinstance(lr, (_schedules.LearningRateSchedule, Variable, Tensor)) or callable(lr):
            return lr
        if isinstance(lr, (numbers.Real, np.ndarray)) and not isinstance(lr, bool) and np.ndim(lr) == 0:
            return float(lr)  # becomes a variable on first use (see _ensure_state)
        raise ValueError("Argument `learning_rate` should be float, or an instance of LearningRateSchedule, "
                         f"or a callable that returns the learning rate. Received instead: learning_rate={lr!r}")

    def _make_variable(self, initial_value, dtype, name, shape=None, **layout):
        """Creates an optimizer variable outside any function being traced; in a TF1 graph it
        is a graph variable (initialized by ``global_variables_initializer``) created outside
        any control-dependency scope, so its initializer has no extra inputs."""
        with init_scope():
            g = building_graph()
            with g.control_dependencies(None) if g is not None else contextlib.nullcontext():
                v = Variable(initial_value, trainable=False, name=name, dtype=dtype, shape=shape, **layout)
        self._variables.append(v)
        return v

    def _ensure_state(self):
        # Made lazily (not in __init__) so that an optimizer constructed before a TF1 graph's
        # init op, or before eager mode is switched off, creates its state where it is used.
        if self._iterations is None:
            self._iterations = self._make_variable(lambda: np.zeros((), np.int64), _dt.int64, "iteration")
        if isinstance(self._learning_rate, float):
            lr = self._learning_rate
            self._learning_rate = self._make_variable(lambda: np.asarray(lr, np.float32), _dt.float32,
                                                      "learning_rate")

    @property
    def iterations(self):
        """The number of steps applied so far (an int64 variable)."""
        self._ensure_state()
        return self._iterations

    @property
    def variables(self):
        """All the optimizer's variables: iterations, learning rate (when a number), slots."""
        self._ensure_state()
        return list(self._variables)

    @property
    def learning_rate(self):
        """The current rate: the rate variable, or the schedule's value at ``iterations``."""
        return self._get_current_learning_rate()

    @learning_rate.setter
    def learning_rate(self, value):
        if isinstance(value, (Variable, _schedules.LearningRateSchedule, Tensor)) or callable(value):
            self._learning_rate = value
            return
        if isinstance(self._learning_rate, float) or self._learning_rate is None:
            self._learning_rate = self._check_learning_rate(value)
            return
        if isinstance(self._learning_rate, _schedules.LearningRateSchedule):
            raise TypeError("This optimizer was created with a `LearningRateSchedule` object as its "
                            "`learning_rate` constructor argument, hence its learning rate is not settable. "
                            "Hint: pass a new schedule, or build the optimizer with a number.")
        if not isinstance(self._learning_rate, Variable):
            self._learning_rate = self._check_learning_rate(value)
            return
        with init_scope():
            if building_graph() is not None:
                raise RuntimeError("In a TF1 graph the learning-rate variable is set by running an op: "
                                   "sess.run(optimizer.learning_rate.assign(value)).")
            self._learning_rate.assign(np.asarray(value, self._learning_rate.dtype.np_dtype))


    # tf.keras 2's name for the learning rate
    lr = property(lambda self: self.learning_rate, lambda self, value: setattr(self, "learning_rate", value))
    def _get_current_learning_rate(self):
        self._ensure_state()
        lr = self._learning_rate
        if isinstance(lr, _schedules.LearningRateSchedule):
            return lr(self._iterations)
        if isinstance(lr, (Variable, Tensor)):
            return lr
        if callable(lr):
            return lr()
        return lr

    # ---- building ----------------------------------------------------------------------------------
    def build(self, variables):
        """Registers ``variables`` (subclasses then create their slot variables)."""
        self._ensure_state()
        variables = _unique(variables)
        for v in variables:
            if id(v) not in self._index:
                self._index[id(v)] = len(self._trainable_variables)
                self._trainable_variables.append(v)
        if self.use_ema:
            self._model_variables_moving_average += [self.add_variable_from_reference(v, "average")
                                                     for v in variables]
        self.built = True

    def _extend(self, new_variables):
        # A later apply may bring variables not seen before (TF1: two minimize calls on one
        # optimizer); subclass builds append their slots, so build once more for just those.
        self.built = False
        try:
            self.build(new_variables)
        finally:
            self.built = True

    def add_variable(self, shape, initializer="zeros", dtype=None, aggregation="none", name=None):
        """A new optimizer variable of ``shape`` (``initializer``: "zeros", "ones", a number,
        or a callable ``(shape, dtype)``)."""
        dtype = _dt.as_dtype(dtype or "float32")
        return self._make_variable(_initial(initializer, list(shape), dtype), dtype, name or "variable",
                                   shape=list(shape))

    def add_variable_from_reference(self, reference_variable, name=None, initializer="zeros"):
        """A slot: a variable shaped and typed like ``reference_variable``, named
        ``<reference>_<name>``."""
        ref = reference_variable
        base = ref.name.split(":")[0].replace("/", "_")
        shape = ref.shape
        if shape.is_fully_defined():
            init = _initial(initializer, shape.as_list(), ref.dtype)
        else:
            # Shape known only at run time: follow the variable's value (TF1 does the same).
            init = lambda: _initial(initializer, A.shape(ref.read_value()), ref.dtype)()  # noqa: E731
            shape = None
        layout = {}
        if getattr(ref, "is_global", False):
            # a global variable's slots have its layout, made per shard (ZeRO: sbp=S(0) shards them)
            init = lambda shape, dtype: _initial(initializer, shape, dtype)()  # noqa: E731
            layout = {"placement": ref.placement, "sbp": ref.sbp}
        slot = self._make_variable(init, ref.dtype, f"{base}_{name}" if name else base,
                                   shape=None if shape is None else shape.as_list(), **layout)
        self._slots[(id(ref), name)] = slot
        return slot

    def add_optimizer_variables(self, trainable_variables, name, initializer="zeros"):
        """Keras 3's helper: a slot per variable for ``name`` (a list of slots), or for each of
        several names (a tuple of lists), created variable by variable (``v0_momentum,
        v0_velocity, v1_momentum, ...``) — Keras' order, so ``variables`` and saved stores line up."""
        names = [name] if isinstance(name, str) else list(name)
        inits = initializer if isinstance(initializer, (list, tuple)) else [initializer] * len(names)
        if len(inits) != len(names):
            raise ValueError(f"The number of provided names must match the number of provided initializers. "
                             f"Received name='{name}', initializer='{initializer}'")
        out = tuple([] for _ in names)
        for v in trainable_variables:
            for slots, n, init in zip(out, names, inits):
                slots.append(self.add_variable_from_reference(v, n, initializer=init))
        return out[0] if isinstance(name, str) else out

    def _get_variable_index(self, variable):
        try:
            return self._index[id(variable)]
        except KeyError:
            raise KeyError(f"The optimizer '{self.name}' was not built for variable '{variable.name}'. "
                           "Hint: call optimizer.build(var_list) with every variable it will update.") from None

    def _slot(self, variable, name):
        return self._slots.get((id(variable), name))

    # ---- applying gradients --------------------------------------------------------------------
    def apply_gradients(self, grads_and_vars):
        """Applies one step: ``grads_and_vars`` is an iterable of (gradient, variable).

        Returns ``iterations`` (as Keras does), or in a TF1 graph the op that runs the step.
        """
        pairs = list(grads_and_vars)
        grads = [g for g, _ in pairs]
        variables = [v for _, v in pairs]
        op = self.apply(grads, variables)
        return op if op is not None else self._iterations

    def apply(self, grads, trainable_variables=None):
        """Applies ``grads`` to ``trainable_variables`` (default: the variables it was built
        for); returns the train op in a TF1 graph, else None."""
        grads = list(grads)
        if trainable_variables is None:
            if not self.built:
                raise ValueError("When passing `grads` without `variables`, the optimizer must already be built "
                                 "on a list of variables. Call `optimizer.build(trainable_variables)` first.")
            trainable_variables = list(self._trainable_variables)
        trainable_variables = list(trainable_variables)
        if len(grads) != len(trainable_variables):
            raise ValueError(f"apply: got {len(grads)} gradients for {len(trainable_variables)} variables")
        remote = getattr(trainable_variables[0], "_apply_remotely", None) if trainable_variables else None
        if remote is not None:
            # variables held by parameter servers are updated there, with this optimizer's rule
            return remote(self, grads, trainable_variables)
        for v in trainable_variables:
            if not getattr(v, "_is_variable", False):
                raise TypeError(f"Optimizer '{self.name}' can only update tw.Variable objects; got {v!r}")
        self._ensure_state()
        if not self.built:
            self.build(trainable_variables)
        else:
            new = [v for v in _unique(trainable_variables) if id(v) not in self._index]
            if new:
                self._extend(new)
        grads, variables = self._filter_empty_gradients(grads, trainable_variables)
        return self._apply_filtered(grads, variables)

    def _filter_empty_gradients(self, grads, variables):
        kept = [(g, v) for g, v in zip(grads, variables) if g is not None]
        if not kept:
            raise ValueError(f"No gradients provided for any variable: {[v.name for v in variables]}. "
                             "Hint: check that the loss depends on these variables (an integer cast, "
                             "stop_gradient or a non-differentiable op cuts the path).")
        if len(kept) < len(grads):
            missing = [v.name for g, v in zip(grads, variables) if g is None]
            warnings.warn(f"Gradients do not exist for variables {missing} when minimizing the loss.",
                          stacklevel=3)
        return [g for g, _ in kept], [v for _, v in kept]

    def _prepare(self, gradient, variable):
        if isinstance(gradient, IndexedSlices):
            values = gradient.values
            values = values if isinstance(values, Tensor) else convert_to_tensor(values)
            if values.dtype is not variable.dtype:
                values = M.cast(values, variable.dtype)
            indices = gradient.indices if isinstance(gradient.indices, Tensor) else convert_to_tensor(gradient.indices)
            # Summing duplicates first makes clipping norms equal the dense gradient's.
            gradient = dedupe(IndexedSlices(values, indices, gradient.dense_shape))
        else:
            gradient = convert_to_tensor(gradient)
            if gradient.dtype is not variable.dtype:
                gradient = M.cast(gradient, variable.dtype)
        if self.loss_scale_factor is not None:
            gradient = _map_values(gradient, lambda v: v / self.loss_scale_factor)
        return gradient

    @contextlib.contextmanager
    def _phase(self, graph, after):
        """In a TF1 graph, ops created inside run after ``after``; yields a list that receives
        the stateful ops created inside (the writes the train op must run)."""
        created = []
        if graph is None:
            yield created
            return
        start = len(graph._ops)
        deps = _symbolic(after)
        with graph.control_dependencies(deps) if deps else contextlib.nullcontext():
            yield created
        created.extend(op for op in graph._ops[start:] if op.opdef.stateful and op.type not in _READ_ONLY)

    def _apply_filtered(self, grads, variables):
        graph = _tf1_graph()
        self._per_apply = {}
        lr = self._get_current_learning_rate()
        grads = [self._prepare(g, v) for g, v in zip(grads, variables)]
        grads = [_local_gradient(g, v) for g, v in zip(self._clip_gradients(grads), variables)]
        # Phases: weight decay after the gradients exist, updates after weight decay, then
        # moving averages and constraints, and the step counter last (its old value is read
        # by the updates). Eagerly and in tw.function these follow program order by themselves.
        # A fused update decays its own variable first (_folds_decay): the same order and bits.
        self._per_apply["folded"] = folded = {id(v) for g, v in zip(grads, variables) if self._folds_decay(g, v)}
        with self._phase(graph, grads) as decay_ops:
            self._apply_weight_decay([v for v in variables if id(v) not in folded], lr)
        with self._phase(graph, decay_ops) as update_ops, training_ops.grouped():
            for g, v in zip(grads, variables):
                self.update_step(g, v, lr)
        with self._phase(graph, update_ops) as after_ops:
            if self.use_ema:
                self._update_model_variables_moving_averages(self._trainable_variables)
        with self._phase(graph, after_ops or update_ops) as final_ops:
            if self.use_ema and self.ema_overwrite_frequency:
                self._maybe_overwrite_with_average()
            for v in variables:
                if v.constraint is not None:
                    v.assign(v.constraint(v.value()))
        with self._phase(graph, update_ops + after_ops + final_ops) as count_ops:
            self._iterations.assign_add(np.int64(1), read_value=False)
        if graph is None:
            return None
        return group(*(decay_ops + update_ops + after_ops + final_ops + count_ops), name=self.name)

    def _once(self, key, make):
        """``make()``, computed once per ``apply`` call and shared by every variable's update
        (the step count, the learning rate in each dtype)."""
        cache = self._per_apply
        if key not in cache:
            cache[key] = make()
        return cache[key]

    def _lr_in(self, dtype, learning_rate):
        return self._once(("lr", dtype), lambda: _cast(learning_rate, dtype))

    @staticmethod
    def _fused_gradient(gradient):
        """(values, unique indices or None): the gradient as the fused update ops take it."""
        if isinstance(gradient, IndexedSlices):
            gradient = dedupe(gradient)
            return gradient.values, gradient.indices
        return gradient, None

    def update_step(self, gradient, variable, learning_rate):
        """Updates ``variable`` from ``gradient`` (overridden by each optimizer)."""
        raise NotImplementedError(f"{type(self).__name__} must implement update_step(gradient, variable, "
                                  "learning_rate)")

    def _apply_update(self, rule, gradient, variable, slots=()):
        """Runs ``rule(g, w, *slot_values) -> (new_w, *new_slot_values)`` and stores the results.

        Dense gradients: on whole tensors. IndexedSlices: only on the touched rows (gathered
        with ``sparse_read``, written back with ``scatter_update``), so untouched rows keep
        their values and slots. A returned slot value that ``is`` its input is not written.
        """
        slots = list(slots)
        if isinstance(gradient, IndexedSlices):
            gradient = dedupe(gradient)
            idx = gradient.indices
            w = variable.sparse_read(idx)
            old = [s.sparse_read(idx) for s in slots]
            new = rule(gradient.values, w, *old)
            for s, o, n in zip(slots, old, new[1:]):
                if n is not o:
                    s.scatter_update(IndexedSlices(n, idx))
            variable.scatter_update(IndexedSlices(new[0], idx))
            return
        old = [s.value() for s in slots]
        new = rule(gradient, variable.value(), *old)
        for s, o, n in zip(slots, old, new[1:]):
            if n is not o:
                s.assign(n, read_value=False)
        variable.assign(new[0], read_value=False)

    # Keras' helpers, so update_step code written for Keras reads the same here.
    def assign(self, variable, value):
        variable.assign(value, read_value=False)

    def assign_add(self, variable, value):
        variable.assign_add(value, read_value=False)

    def assign_sub(self, variable, value):
        variable.assign_sub(value, read_value=False)

    # ---- clipping, weight decay, moving averages -------------------------------------------------
    def _clip_by_norm(self, values):
        # The two-sided where keeps an all-zero gradient's norm (and its derivative) finite.
        l2sum = R.reduce_sum(M.square(values), keepdims=True)
        pred = M.greater(l2sum, 0)
        l2norm = M.where(pred, M.sqrt(M.where(pred, l2sum, A.ones_like(l2sum))), l2sum)
        return values * self.clipnorm / M.maximum(l2norm, self.clipnorm)

    def _clip_gradients(self, grads):
        if self.clipnorm and self.clipnorm > 0:
            return [_map_values(g, self._clip_by_norm) for g in grads]
        if self.global_clipnorm and self.global_clipnorm > 0:
            return clip_by_global_norm(grads, self.global_clipnorm)
        if self.clipvalue and self.clipvalue > 0:
            c = self.clipvalue
            return [_map_values(g, lambda v: M.clip_by_value(v, -c, c)) for g in grads]
        return grads

    def exclude_from_weight_decay(self, var_list=None, var_names=None):
        """Exempts variables (by object, or by a substring/regex of their names) from weight decay."""
        if self.built:
            raise ValueError("`exclude_from_weight_decay()` can only be configured before the optimizer is built.")
        self._exclude_ids = {id(v) for v in (var_list or [])}
        self._exclude_pattern = re.compile("|".join(set(var_names))) if var_names else None

    def _use_weight_decay(self, variable):
        if id(variable) in self._exclude_ids:
            return False
        return not (self._exclude_pattern is not None and self._exclude_pattern.search(variable.name))

    #: the ``update_step`` (a subclass's own) that gives its fused update op the variable's weight decay
    #: (:meth:`_decay_of`); None: the decay is always applied apart, by :meth:`_apply_weight_decay`
    _DECAY_FOLDING_STEP = None

    def _folds_decay(self, gradient, variable):
        """True where ``update_step`` decays ``variable`` inside its fused update op (training_ops'
        ``weight_decay`` attr: before the update, ``w - (w * wd) * lr``, as :meth:`_apply_weight_decay`
        computes it) instead of by ops of their own: a dense gradient, a float32/float64 variable, a
        number for ``weight_decay``, and this class's ``update_step`` the one that folds it. One op
        then writes the weight, so a ZeRO-1 plan can shard the decay with the update."""
        wd = self.weight_decay
        return (wd is not None and type(self).update_step is type(self)._DECAY_FOLDING_STEP
                and isinstance(wd, numbers.Real) and not isinstance(wd, bool)
                and variable.dtype in training_ops.FUSED_DTYPES and not isinstance(gradient, IndexedSlices)
                and self._use_weight_decay(variable))

    def _decay_of(self, variable):
        """The weight decay a fused update of ``variable`` applies in this ``apply`` (None: none, or apart)."""
        return float(self.weight_decay) if id(variable) in self._per_apply.get("folded", ()) else None

    def _apply_weight_decay(self, variables, learning_rate):
        if self.weight_decay is None:
            return
        for v in variables:
            if self._use_weight_decay(v):
                lr = _cast(learning_rate, v.dtype)
                wd = _cast(self.weight_decay, v.dtype)
                w = v.value()
                v.assign(w - w * wd * lr, read_value=False)

    def _update_model_variables_moving_averages(self, variables):
        not_first = M.not_equal(self._iterations, np.int64(0))
        for v in variables:
            avg = self._model_variables_moving_average[self._get_variable_index(v)]
            momentum = M.cast(not_first, v.dtype) * self.ema_momentum
            avg.assign(momentum * avg.value() + (1 - momentum) * v.value(), read_value=False)

    def _maybe_overwrite_with_average(self):
        due = M.equal(M.floormod(self._iterations + np.int64(1), np.int64(self.ema_overwrite_frequency)),
                      np.int64(0))
        for v in self._trainable_variables:
            avg = self._model_variables_moving_average[self._get_variable_index(v)]
            v.assign(M.where(due, avg.value(), v.value()), read_value=False)

    def finalize_variable_values(self, var_list):
        """With ``use_ema``, replaces each variable by its moving average (end of training)."""
        if self.use_ema:
            for v in var_list:
                v.assign(self._model_variables_moving_average[self._get_variable_index(v)].value())

    def scale_loss(self, loss):
        """The loss multiplied by ``loss_scale_factor`` (gradients are divided by it again)."""
        return loss * self.loss_scale_factor if self.loss_scale_factor is not None else loss

    # ---- saving and config --------------------------------------------------------------------
    def save_own_variables(self, store):
        """Writes the variables' values to ``store`` (a dict) under "0", "1", ..."""
        for i, v in enumerate(self.variables):
            store[str(i)] = v.numpy()

    def load_own_variables(self, store):
        """Restores the values written by :meth:`save_own_variables` (build the optimizer first)."""
        variables = self.variables
        if len(store.keys()) != len(variables):
            msg = (f"Skipping variable loading for optimizer '{self.name}', because it has {len(variables)} "
                   f"variables whereas the saved optimizer has {len(store.keys())} variables. ")
            if not self.built:
                msg += "This is likely because the optimizer has not been called/built yet."
            warnings.warn(msg, stacklevel=2)
            return
        for i, v in enumerate(variables):
            v.assign(np.asarray(store[str(i)], v.dtype.np_dtype))

    def _serialize_hyperparameter(self, value):
        if isinstance(value, _schedules.LearningRateSchedule):
            return _schedules.serialize(value)
        if isinstance(value, Variable):
            if value._value is None:      # a TF1 graph variable not yet initialized
                return self._initial_learning_rate if value is self._learning_rate else value
            value = value.numpy()
        elif isinstance(value, Tensor) and not isinstance(value, SymbolicTensor):
            value = value.numpy()
        if isinstance(value, np.ndarray) and value.ndim == 0:
            # Shortest text of the stored float32 value: 0.001, not 0.0010000000474974513.
            return float(str(value)) if value.dtype == np.float32 else float(value)
        return value

    def get_config(self):
        """The constructor arguments, JSON-compatible (a schedule is serialized as a dict)."""
        lr = self._learning_rate
        return {
            "name": self.name,
            "learning_rate": self._serialize_hyperparameter(lr),
            "weight_decay": self.weight_decay,
            "clipnorm": self.clipnorm,
            "global_clipnorm": self.global_clipnorm,
            "clipvalue": self.clipvalue,
            "use_ema": self.use_ema,
            "ema_momentum": self.ema_momentum,
            "ema_overwrite_frequency": self.ema_overwrite_frequency,
            "loss_scale_factor": self.loss_scale_factor,
            "gradient_accumulation_steps": self.gradient_accumulation_steps,
        }

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        if isinstance(config.get("learning_rate"), dict):
            config["learning_rate"] = _schedules.deserialize(config["learning_rate"], custom_objects=custom_objects)
        return cls(**config)

    def __repr__(self):
        lr = self._learning_rate
        shown = self._serialize_hyperparameter(lr) if not isinstance(lr, _schedules.LearningRateSchedule) else lr
        return f"<{type(self).__name__} name={self.name!r} learning_rate={shown!r}>"


def _unique(variables):
    seen, out = set(), []
    for v in variables:
        if id(v) not in seen:
            seen.add(id(v))
            out.append(v)
    return out


def _initial(initializer, shape, dtype):
    """A zero-argument callable making the initial value (run where the variable is created)."""
    if callable(initializer):
        return lambda: initializer(shape, dtype=dtype)
    if initializer == "zeros":
        return lambda: A.zeros(shape, dtype)
    if initializer == "ones":
        return lambda: A.ones(shape, dtype)
    if isinstance(initializer, numbers.Number):
        return lambda: A.fill(shape, A.constant(initializer, dtype=dtype))
    raise ValueError(f"Unknown initializer {initializer!r}: use 'zeros', 'ones', a number or a callable")
