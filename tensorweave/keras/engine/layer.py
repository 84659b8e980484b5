"""The Keras ``Layer``: ``__init__`` (config) / ``build(input_shape)`` (weights) / ``call`` /
``get_config``.

Weights are tensorweave Variables created once (under ``init_scope``), so a layer can be
built while tracing a ``tw.function``. Calling a layer on KerasTensors records a node of
a functional model instead of computing.

>>> import tensorweave as tw
>>> from tensorweave import keras
>>> class Scale(keras.layers.Layer):
...     def build(self, input_shape):
...         self.w = self.add_weight(shape=(input_shape[-1],), initializer="ones", name="w")
...     def call(self, x):
...         return x * self.w
>>> layer = Scale()
>>> layer(tw.ones([2, 3])).shape, [w.shape.as_list() for w in layer.weights]
(TensorShape([2, 3]), [[3]])
"""
import contextvars
import inspect
import threading

import numpy as np

import tensorweave as tw
from tensorweave.core import nest
from tensorweave.core.context import init_scope
from tensorweave.core.graph import FuncGraph
from tensorweave.keras import backend
from tensorweave.keras.engine.keras_tensor import KerasTensor, Node, any_symbolic


class _CallContext(threading.local):
    def __init__(self):
        self.training = None
        self.layers = []   # the layers being called or built, outermost first (variable paths)


_call_ctx = _CallContext()

# Set by a loader (``keras.saving``) while it rebuilds a model from a file: a callable
# ``guard(layer, shape, dtype)`` that checks a weight before it is allocated and returns the
# initializer to use. A context variable, not a patched method: only the loading thread's
# layers see it, so other threads building layers meanwhile are unaffected.
weight_guard = contextvars.ContextVar("tensorweave_keras_weight_guard", default=None)

# Set by ``ParameterServerStrategy.scope()``: a callable ``creator(layer, name=, shape=, dtype=,
# initializer=, trainable=, constraint=)`` returning the weight (a variable held elsewhere), so
# that a weight is never allocated whole in this process (TF's variable creator scope).
weight_creator = contextvars.ContextVar("tensorweave_keras_weight_creator", default=None)


def positive_int(value, name):
    """``value`` if it is a positive integer (not a float, string or bool), else Keras' error."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ValueError(f"Received an invalid value for `{name}`, expected a positive integer. "
                         f"Received: {name}={value!r}")
    return int(value)


def layer_dtype(dtype):
    """A layer's dtype: a float, integer, bool or string dtype (Keras' dtype policies)."""
    name = getattr(dtype, "name", dtype)
    try:
        resolved = tw.as_dtype(dtype)
    except (TypeError, ValueError):
        resolved = None
    if resolved is None or name == "object" or resolved.name in ("resource", "variant"):
        raise ValueError(f"Cannot convert {name!r} to a mixed precision DTypePolicy. Valid policies include "
                         "'mixed_float16', 'mixed_bfloat16', and the name of any float dtype such as 'float32'.")
    return resolved


class InputSpec:
    """Constraints a layer puts on its input: ``ndim``, ``min_ndim``, ``max_ndim``, ``axes``
    (``{axis: size}``), ``shape``, ``dtype``."""

    def __init__(self, dtype=None, shape=None, ndim=None, max_ndim=None, min_ndim=None, axes=None,
                 allow_last_axis_squeeze=False, name=None):
        self.dtype = dtype
        self.shape = None if shape is None else tuple(shape)
        self.ndim = len(self.shape) if self.shape is not None else ndim
        self.max_ndim, self.min_ndim = max_ndim, min_ndim
        self.axes = dict(axes or {})
        self.name = name


def _shape_tuple(t):
    s = t.shape
    if isinstance(s, tuple):
        return s
    return tuple(s.as_list()) if s.rank is not None else None


class Layer:
    """Base class of all layers (see the module docstring)."""

    _SAVED_KWARGS = ("input_shape", "input_dim", "batch_input_shape", "batch_size")
    # Layers that multiply their input with floating weights (Dense, convolutions, normalization)
    # take integer and bool inputs too, cast to their dtype (tf.keras' Dense, Keras 3's type promotion).
    _cast_numeric_inputs = False

    def __init__(self, trainable=True, name=None, dtype=None, autocast=True, **kwargs):
        bad = set(kwargs) - set(self._SAVED_KWARGS) - {"input_length", "weights"}
        if bad:
            raise TypeError(f"Keyword argument(s) not understood by {type(self).__name__}: {sorted(bad)}")
        object.__setattr__(self, "_tracking", False)
        self._name = name or backend.unique_name(backend.snake_case(type(self).__name__))
        self._trainable = bool(trainable)
        self._dtype = layer_dtype(dtype) if dtype is not None and not isinstance(dtype, dict) else tw.float32
        self.autocast = autocast
        self.built = False
        self._own_trainable = []
        self._own_non_trainable = []
        self._layers = []
        self._losses = []
        self._loss_fns = []
        self.input_spec = None
        self.supports_masking = False
        self._inbound_nodes = []
        batch_shape = kwargs.get("batch_input_shape")
        if batch_shape is None and kwargs.get("input_shape") is not None:
            batch_shape = (kwargs.get("batch_size"),) + tuple(kwargs["input_shape"])
        elif batch_shape is None and kwargs.get("input_dim") is not None:
            batch_shape = (kwargs.get("batch_size"), kwargs["input_dim"])
        self._batch_input_shape = None if batch_shape is None else tuple(batch_shape)
        sig = inspect.signature(self.call).parameters
        self._call_has_training = "training" in sig
        names = [n for n, p in sig.items() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        self._training_position = names.index("training") if "training" in names else None
        self._call_has_mask = "mask" in sig
        self._tracking = True

    # ---- attribute tracking (sublayers and variables set as attributes) --------------------
    def __setattr__(self, name, value):
        if getattr(self, "_tracking", False) and not name.startswith("_"):
            self._track(value)
        object.__setattr__(self, name, value)

    def _track(self, value):
        if isinstance(value, Layer):
            if all(value is not l for l in self._layers):
                self._layers.append(value)
        elif getattr(value, "_is_variable", False):
            own = self._own_trainable if value.trainable else self._own_non_trainable
            if all(value is not v for v in own):
                own.append(value)
        elif isinstance(value, (list, tuple)) and not isinstance(value, str):
            for v in value:
                if isinstance(v, (Layer,)) or getattr(v, "_is_variable", False):
                    self._track(v)
        elif isinstance(value, dict):
            for v in value.values():
                if isinstance(v, Layer) or getattr(v, "_is_variable", False):
                    self._track(v)

    # ---- properties ---------------------------------------------------------------------------
    @property
    def trainable(self):
        return self._trainable

    @trainable.setter
    def trainable(self, value):
        """Freezing a layer freezes the layers inside it (as in Keras)."""
        self._trainable = bool(value)
        for layer in self.__dict__.get("_layers", []):
            layer.trainable = value

    @property
    def name(self):
        return self._name

    @property
    def path(self):
        """The names of the layers this one is being called or built in, and its own (Keras'
        ``path``: ``sequential/dense``); its variables are named ``path/kernel``."""
        outer = [layer.name for layer in _call_ctx.layers if layer is not self]
        return "/".join(outer + [self.name])

    @property
    def dtype(self):
        return self._dtype.name

    @property
    def compute_dtype(self):
        return self._dtype.name

    @property
    def variable_dtype(self):
        return self._dtype.name

    def _flat_layers(self):
        out, seen = [], set()
        stack = list(self._layers)
        while stack:
            layer = stack.pop(0)
            if id(layer) in seen:
                continue
            seen.add(id(layer))
            out.append(layer)
            stack[0:0] = layer._layers
        return out

    @property
    def layers(self):
        return list(self._layers)

    def _collect(self, trainable_only):
        out, seen = [], set()

        def add(vs):
            for v in vs:
                if id(v) not in seen:
                    seen.add(id(v))
                    out.append(v)
        if trainable_only:
            if not self.trainable:
                return []
            add(self._own_trainable)
            for layer in self._layers:
                add(layer.trainable_weights)
            return out
        add(self._own_trainable)
        add(self._own_non_trainable)
        for layer in self._layers:
            add(layer.weights)
        return out

    @property
    def weights(self):
        """All weights: own trainable, own non-trainable, then those of sublayers."""
        return self._collect(False)

    @property
    def trainable_weights(self):
        return self._collect(True)

    @property
    def non_trainable_weights(self):
        trainable = {id(v) for v in self.trainable_weights}
        return [v for v in self.weights if id(v) not in trainable]

    variables = weights
    trainable_variables = trainable_weights
    non_trainable_variables = non_trainable_weights

    def count_params(self):
        if not self.built:
            raise ValueError(f"You tried to call `count_params` on layer '{self.name}', but the layer isn't "
                             "built. Hint: build it by calling it on data or with layer.build(input_shape).")
        return int(sum(np.prod(v.shape.as_list()) for v in self.weights))

    # ---- weights ------------------------------------------------------------------------------
    def add_weight(self, shape=None, initializer=None, dtype=None, trainable=True, regularizer=None,
                   constraint=None, name=None, autocast=True, aggregation="mean"):
        """Creates a variable of this layer (once, eagerly, even while a function is being traced)."""
        from tensorweave.keras import initializers, regularizers
        dtype = tw.as_dtype(dtype) if dtype is not None else self._dtype
        shape = tuple(() if shape is None else shape)
        guard = weight_guard.get()
        if guard is not None:
            initializer = guard(self, shape, dtype)
        if initializer is None:
            initializer = "glorot_uniform" if dtype.is_floating else "zeros"
        init = initializers.get(initializer)
        from tensorweave.distribute.distribution import weight_layout
        creator = weight_creator.get()
        layout = None if creator is not None else weight_layout(f"{self.path}/{name or 'variable'}", shape)
        with init_scope(), _outside_name_scopes():
            if creator is not None:
                var = creator(self, name=f"{self.path}/{name or 'variable'}", shape=shape, dtype=dtype,
                              initializer=init, trainable=trainable, constraint=constraint)
            elif layout is None:
                value = init(shape, dtype=dtype)
                var = tw.Variable(value, trainable=trainable, name=f"{self.path}/{name or 'variable'}", dtype=dtype,
                                  constraint=constraint)
            else:
                # under a distribution (strategy.scope(), keras.distribution): a global variable
                # laid out as the distribution says, made per shard
                var = tw.Variable(init, trainable=trainable, name=f"{self.path}/{name or 'variable'}", dtype=dtype,
                                  shape=shape, constraint=constraint, placement=layout[0], sbp=layout[1])
        var.path = f"{self.path}/{name or 'variable'}"
        var._keras_name = name or "variable"
        (self._own_trainable if trainable else self._own_non_trainable).append(var)
        if regularizer is not None:
            reg = regularizers.get(regularizer)
            self._loss_fns.append(lambda: reg(var.value()))
        return var

    add_variable = add_weight

    def to_global(self, placement, sbp=None, optimizer=None, batch_sbp=None):
        """Makes every weight global on ``placement`` in place, values kept (OneFlow's
        ``module.to_global``); ``sbp``: one SBP, a dict path -> SBP or a callable(variable); the
        optimizer's slots follow; a model's ``fit`` then feeds batches laid out as ``batch_sbp``.
        See ``tensorweave/distribute/model_global.py``."""
        from tensorweave.distribute.model_global import module_to_global
        return module_to_global(self, placement, sbp, optimizer=optimizer, batch_sbp=batch_sbp)

    def get_weights(self):
        return [v.numpy() for v in self.weights]

    def set_weights(self, weights):
        params = self.weights
        if len(weights) != len(params):
            raise ValueError(f"Layer '{self.name}' expects {len(params)} weights, but the given list has "
                             f"{len(weights)} items.")
        for v, w in zip(params, weights):
            w = np.asarray(w)
            if tuple(v.shape.as_list()) != w.shape:
                raise ValueError(f"Layer '{self.name}' weight '{v.name}' has shape {tuple(v.shape.as_list())}, "
                                 f"but the given value has shape {w.shape}.")
            v.assign(w.astype(v.dtype.np_dtype))

    # ---- losses ---------------------------------------------------------------------------------
    def add_loss(self, loss):
        """Adds a loss tensor computed in ``call`` (collected in ``model.losses`` for this step)."""
        self._losses.append(loss)

    @property
    def losses(self):
        out = list(self._losses) + [fn() for fn in self._loss_fns]
        for layer in self._layers:
            out.extend(layer.losses)
        return out

    def _clear_losses(self):
        self._losses = []
        for layer in self._layers:
            layer._clear_losses()

    # ---- build and call -----------------------------------------------------------------------
    def build(self, input_shape):
        self.built = True

    def call(self, inputs, *args, **kwargs):
        return inputs

    def _maybe_build(self, inputs):
        if self.built:
            return
        shapes = nest.map_structure(_shape_tuple, inputs) if nest.is_nested(inputs) else _shape_tuple(inputs)
        if isinstance(shapes, tuple) and shapes and all(isinstance(s, tuple) for s in shapes):
            shapes = list(shapes)
        self._build_input_shape = shapes
        with _in_layer(self):
            self.build(shapes)
        self.built = True

    def _convert_input(self, x):
        if isinstance(x, (tw.Tensor, KerasTensor)) or x is None:
            t = x
        elif getattr(x, "_is_variable", False):
            t = x.value()
        elif isinstance(x, (np.ndarray, np.generic, float, int, list)):
            t = tw.convert_to_tensor(x)
        else:
            return x
        if (self.autocast and isinstance(t, tw.Tensor) and t.dtype is not self._dtype and self._dtype.is_floating
                and (t.dtype.is_floating or (self._cast_numeric_inputs and (t.dtype.is_integer or t.dtype.is_bool)))):
            t = tw.cast(t, self._dtype)
        return t

    def _check_input_spec(self, inputs):
        spec = self.input_spec
        if spec is None:
            return
        specs = spec if isinstance(spec, (list, tuple)) else [spec]
        flat = nest.flatten(inputs)
        for i, (s, x) in enumerate(zip(specs, flat)):
            if s is None or not hasattr(x, "shape"):
                continue
            shape = _shape_tuple(x)
            if shape is None:
                continue
            where = f"Input {i} of layer \"{self.name}\" is incompatible with the layer"
            if s.ndim is not None and len(shape) != s.ndim:
                raise ValueError(f"{where}: expected ndim={s.ndim}, found ndim={len(shape)}. Full shape received: "
                                 f"{shape}. Hint: check the input shape of layer '{self.name}' "
                                 f"({type(self).__name__})")
            if s.min_ndim is not None and len(shape) < s.min_ndim:
                raise ValueError(f"{where}: expected min_ndim={s.min_ndim}, found ndim={len(shape)}. "
                                 f"Full shape received: {shape}")
            if s.max_ndim is not None and len(shape) > s.max_ndim:
                raise ValueError(f"{where}: expected max_ndim={s.max_ndim}, found ndim={len(shape)}. "
                                 f"Full shape received: {shape}")
            for axis, size in s.axes.items():
                got = shape[axis] if -len(shape) <= axis < len(shape) else None
                if size is not None and got is not None and got != size:
                    raise ValueError(f"{where}: expected axis {axis} of input shape to have value {size}, "
                                     f"but received input with shape {shape}. Hint: layer '{self.name}' "
                                     f"({type(self).__name__}) was built for inputs with {size} features")
            if s.shape is not None:
                for a, b in zip(s.shape, shape):
                    if a is not None and b is not None and a != b:
                        raise ValueError(f"{where}: expected shape={s.shape}, found shape={shape}")
            if s.dtype is not None and hasattr(x, "dtype") and tw.as_dtype(x.dtype) is not tw.as_dtype(s.dtype):
                raise ValueError(f"{where}: expected dtype {tw.as_dtype(s.dtype).name}, found "
                                 f"{tw.as_dtype(x.dtype).name}")

    def __call__(self, *args, **kwargs):
        if not args:
            raise TypeError(f"Layer '{self.name}' must be called with at least one positional argument (its inputs)")
        pos = self.__dict__.get("_training_position")
        if pos is not None and len(args) > pos:
            args, kwargs = self._positional_training(args, kwargs, pos)
        inputs = nest.map_structure(self._convert_input, args[0]) if nest.is_nested(args[0]) \
            else self._convert_input(args[0])
        args = (inputs,) + args[1:]
        if any_symbolic((args, kwargs)):
            return self._symbolic_call(args, kwargs)
        self._check_input_spec(inputs)
        if not self.built:
            self._maybe_build(inputs)
            self._check_input_spec(inputs)  # build may have narrowed the spec (e.g. Dense's input size)
        if self._call_has_mask and kwargs.get("mask") is None:
            mask = _mask_of(inputs)
            if mask is not None:
                kwargs = dict(kwargs, mask=mask)
        if not _call_ctx.layers:
            self._clear_losses()   # an outermost call starts afresh: `losses` are those of the last call (Keras)
        outputs = self._call_with_context(args, kwargs)
        if self.supports_masking or type(self).compute_mask is not Layer.compute_mask:
            _attach_mask(outputs, self.compute_mask(inputs, kwargs.get("mask", _mask_of(inputs))))
        return outputs

    def _positional_training(self, args, kwargs, pos):
        """``layer(x, True)``: the positional ``training`` flag becomes the keyword (as tf.keras);
        anything else there is a mistake worth a clear message."""
        value = args[pos]
        if "training" not in kwargs and (value is None or isinstance(value, (bool, np.bool_)) or (
                isinstance(value, tw.Tensor) and value.dtype.is_bool and value.shape.rank == 0)):
            return args[:pos] + args[pos + 1:], dict(kwargs, training=value)
        what = "model" if hasattr(self, "compile") else "layer"
        raise TypeError(f"{type(self).__name__} {what} '{self.name}' was called with {len(args)} positional "
                        f"arguments; argument {pos + 1} is its `training` flag (a bool), got {_describe(value)}. "
                        f"Hint: pass several inputs as one list or dict, e.g. {what}([x1, x2]), and "
                        "training=/mask= as keywords")

    def _call_with_context(self, args, kwargs):
        training = kwargs.get("training")
        outer = _call_ctx.training
        if self._call_has_training:
            if training is None:
                training = outer
            kwargs = dict(kwargs, training=training)
        elif "training" in kwargs:
            kwargs = {k: v for k, v in kwargs.items() if k != "training"}
        if not self._call_has_mask and "mask" in kwargs:
            kwargs = {k: v for k, v in kwargs.items() if k != "mask"}
        _call_ctx.training = training if training is not None else outer
        _call_ctx.layers.append(self)
        try:
            with tw.name_scope(self.name):
                return self.call(*args, **kwargs)
        finally:
            _call_ctx.training = outer
            _call_ctx.layers.pop()

    # ---- symbolic (functional API) ---------------------------------------------------------
    def _symbolic_call(self, args, kwargs):
        kts = [t for t in nest.flatten((args, kwargs)) if isinstance(t, KerasTensor)]
        spec_inputs = nest.map_structure(
            lambda t: _SpecShape(t.shape, t.dtype) if isinstance(t, KerasTensor) else t, args[0])
        self._check_input_spec(spec_inputs)
        self._maybe_build(spec_inputs)
        self._check_input_spec(spec_inputs)
        graph = FuncGraph(f"{self.name}_spec")
        graph.shape_only = True        # never run: global variables stand in as placeholders
        with graph.as_default():
            phs = {}
            for t in kts:
                phs[id(t)] = tw.placeholder(t.dtype, t.shape)
                if t.mask_shape is not None:   # masks travel symbolically too (Keras' KerasTensor masks)
                    phs[id(t)]._keras_mask = tw.placeholder(tw.bool, t.mask_shape)
            sub = nest.map_structure(lambda t: phs[id(t)] if isinstance(t, KerasTensor) else t, (args, kwargs))
            s_args, s_kwargs = sub
            first = s_args[0]
            in_mask = _mask_of(first)
            s_args = (nest.map_structure(self._convert_input, first) if nest.is_nested(first)
                      else self._convert_input(first),) + tuple(s_args[1:])
            if self._call_has_training and s_kwargs.get("training") is None:
                s_kwargs = dict(s_kwargs, training=False)
            if self._call_has_mask and s_kwargs.get("mask") is None and in_mask is not None:
                s_kwargs = dict(s_kwargs, mask=in_mask)
            outs = self._call_with_context(s_args, s_kwargs)
            out_mask = None
            if self.supports_masking or type(self).compute_mask is not Layer.compute_mask:
                out_mask = self.compute_mask(s_args[0], s_kwargs.get("mask", in_mask))
        self._clear_losses()  # losses of the shape-only trace are not real
        out_kts = nest.map_structure(lambda o: _keras_tensor_like(o, self.name), outs)
        for i, kt in enumerate(nest.flatten(out_kts)):
            m = out_mask[i] if isinstance(out_mask, (list, tuple)) else out_mask
            if isinstance(m, tw.Tensor) and m.shape.rank is not None:
                kt.mask_shape = tuple(m.shape.as_list())
        node = Node(self, args, kwargs, out_kts)
        self._inbound_nodes.append(node)
        return out_kts

    # ---- the tensors of its (only) call in a functional model (Keras' layer.input / output) -----
    def _only_node(self, what):
        """The first call's node (Keras 3; a shared layer's other calls: ``get_{what}_at(i)``)."""
        nodes = self._inbound_nodes
        if not nodes:
            raise AttributeError(f"Layer '{self.name}' has never been called and thus has no defined {what}. "
                                 "Hint: call it on a keras.Input (or another layer's output) first")
        return nodes[0]

    @property
    def input(self):
        return self._only_node("input").args[0]

    @property
    def output(self):
        return self._only_node("output").outputs

    def get_input_at(self, node_index):
        return self._inbound_nodes[node_index].args[0]

    def get_output_at(self, node_index):
        return self._inbound_nodes[node_index].outputs

    @property
    def input_shape(self):
        return nest.map_structure(lambda t: t.shape, self.input)

    @property
    def output_shape(self):
        return nest.map_structure(lambda t: t.shape, self.output)

    def compute_output_spec(self, *args, **kwargs):
        return self._symbolic_call(args, kwargs)

    def compute_output_shape(self, input_shape):
        """Output shape for ``input_shape`` (found by tracing ``call`` symbolically)."""
        def kt(s):
            return KerasTensor(s, self._dtype)
        if isinstance(input_shape, list) and input_shape and isinstance(input_shape[0], (tuple, list)):
            x = [kt(s) for s in input_shape]
        else:
            x = kt(input_shape)
        out = self._symbolic_call((x,), {})
        self._inbound_nodes.pop()
        return nest.map_structure(lambda o: o.shape, out)

    def compute_mask(self, inputs, mask=None):
        """The mask of the outputs: passed through by layers that support masking, else dropped."""
        return mask if self.supports_masking else None

    # ---- config ----------------------------------------------------------------------------------
    def get_config(self):
        config = {"name": self.name, "trainable": self.trainable, "dtype": self.dtype}
        if self._batch_input_shape is not None:
            config["batch_input_shape"] = self._batch_input_shape
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def __repr__(self):
        return f"<{type(self).__name__} name={self.name}, built={self.built}>"


def _describe(value):
    shape = getattr(value, "shape", None)
    return f"{type(value).__name__} of shape {tuple(shape)}" if shape is not None else repr(value)[:60]


def _mask_of(inputs):
    """The Keras mask carried by ``inputs`` (a tensor, or a list of them), if any."""
    if isinstance(inputs, (list, tuple)):
        masks = [getattr(t, "_keras_mask", None) for t in inputs]
        return masks if any(m is not None for m in masks) else None
    return getattr(inputs, "_keras_mask", None)


def _attach_mask(outputs, mask):
    for i, t in enumerate(nest.flatten(outputs)):
        m = mask[i] if isinstance(mask, (list, tuple)) else mask
        if isinstance(t, tw.Tensor):
            t._keras_mask = m


class _in_layer:
    """Variables created meanwhile have ``layer``'s path (a layer built inside another's call)."""

    def __init__(self, layer):
        self.layer = layer

    def __enter__(self):
        _call_ctx.layers.append(self.layer)

    def __exit__(self, *exc):
        _call_ctx.layers.pop()


class _outside_name_scopes:
    """Variables get their layer's path as name, whatever eager name scope is active."""

    def __enter__(self):
        from tensorweave.core.context import ctx
        self._saved, ctx.name_stack = ctx.name_stack, ""

    def __exit__(self, *exc):
        from tensorweave.core.context import ctx
        ctx.name_stack = self._saved


class _SpecShape:
    """Stands for a KerasTensor when building a layer (it has ``shape`` and ``dtype``)."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, dtype


def _keras_tensor_like(t, layer_name):
    if not isinstance(t, tw.Tensor):
        raise TypeError(f"Layer '{layer_name}' returned {t!r}; layers in a functional model must return tensors")
    if t.shape.rank is None:
        raise ValueError(f"Layer '{layer_name}' gives an output of unknown rank; it cannot be used in a "
                         "functional model. Hint: implement compute_output_shape")
    return KerasTensor(t.shape.as_list(), t.dtype)
