"""``Model``: a layer with ``compile``/``fit``/``evaluate``/``predict`` (the training loop).

``Model(inputs, outputs)`` builds a functional model; subclass ``Model`` and define
``call`` for a subclassed one. A training step runs as a compiled ``tw.function`` graph
(unless ``compile(run_eagerly=True)``).

>>> import numpy as np
>>> from tensorweave import keras
>>> keras.utils.set_random_seed(0)
>>> model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(3)])
>>> model.compile(optimizer="sgd", loss="mse")
>>> history = model.fit(np.ones((8, 4)), np.zeros((8, 3)), epochs=2, verbose=0)
>>> len(history.history["loss"])
2
"""
import functools

import numpy as np

import tensorweave as tw
from tensorweave.core import nest
from tensorweave.core.tensor import EagerTensor
from tensorweave.keras.engine import data_adapter, predict_request
from tensorweave.keras.engine.layer import Layer


def _to_tensors(batch):
    return nest.map_structure(lambda a: a if a is None or isinstance(a, tw.Tensor) else tw.convert_to_tensor(
        a if not isinstance(a, np.ndarray) or a.dtype != np.float64 else a.astype(np.float32)), batch)


def _predict_batch(fn, x):
    """The predict function ``fn``'s outputs for one batch ``x``, as NumPy arrays: one array of the
    signature of the call before goes through its bound request (``predict_request.py``)."""
    if type(x) is np.ndarray and x.dtype != np.float64:
        got = predict_request.run(fn, x)
        if got is not None:
            return np.asarray(got)
        out = fn((tw.convert_to_tensor(x),))      # one array: no structure to walk (see _to_tensors)
        if type(out) is EagerTensor:
            predict_request.bind(fn, x)
            return np.asarray(out._value)
        return nest.map_structure(np.asarray, out)
    return nest.map_structure(np.asarray, fn(_to_tensors((x,))))


def _step_data(batch):
    """What train_step/test_step receive: ``(x, y)`` without sample weights, as in Keras."""
    return _to_tensors(data_adapter.pack_x_y_sample_weight(*batch))


def _one_quiet_batch(x, batch_size, verbose, steps, callbacks):
    """Whether ``predict`` gets one NumPy array of 1 to ``batch_size`` (32) rows and nothing to
    report on: no progress bar (``verbose=0``), no callbacks, no ``steps``."""
    return (type(x) is np.ndarray and x.ndim > 0 and 0 < x.shape[0] <= (batch_size or 32)
            and not callbacks and steps is None and verbose == 0 and type(verbose) is int)


def _first_dim(structure):
    for a in nest.flatten(structure):
        if a is not None:
            return int(np.shape(a)[0])
    return 0


class Model(Layer):
    """A trainable stack or graph of layers."""

    def __new__(cls, *args, **kwargs):
        if cls is Model and _functional_arguments(args, kwargs):
            from tensorweave.keras.engine.functional import Functional
            return object.__new__(Functional)  # Python then calls Functional.__init__ with the same args
        return object.__new__(cls)

    def __init__(self, *args, **kwargs):
        if _functional_arguments(args, kwargs):
            # ``CustomModel(inputs, outputs)``, or ``super().__init__(inputs, outputs)`` in a subclass's
            # __init__: a functional model that keeps the subclass's methods (train_step, ...), as Keras
            from tensorweave.keras.engine.functional import Functional
            if not isinstance(self, Functional):
                self.__class__ = _functional_subclass(type(self))
            Functional.__init__(self, *args, **kwargs)
            return
        if args:
            raise TypeError(f"{type(self).__name__}.__init__ got unexpected positional arguments {args!r}. "
                            "Hint: a functional model is built with Model(inputs, outputs)")
        trainable = kwargs.pop("trainable", True)
        name = kwargs.pop("name", None)
        dtype = kwargs.pop("dtype", None)
        super().__init__(trainable=trainable, name=name, dtype=dtype, **kwargs)
        self._tracking = False
        self.optimizer = None
        self.compiled = False
        self.stop_training = False
        self.history = None
        self._initial_epoch = None    # set by BackupAndRestore in on_train_begin to resume a run
        self._compile_loss = None
        self._compile_metrics = None
        self._loss_tracker = None
        self._output_loss_trackers = []
        self._train_fn = self._test_fn = self._predict_fn = None
        self._run_eagerly = False
        self._compile_config = None
        self._tracking = True

    def __call__(self, *args, **kwargs):
        outputs = super().__call__(*args, **kwargs)
        if "_deferred_weights" in self.__dict__:
            # load_weights came before the weights existed: this call created them; restore the
            # file's values and compute again with them
            from tensorweave.keras.engine.weights_io import restore_deferred
            restore_deferred(self)
            outputs = super().__call__(*args, **kwargs)
        return outputs

    # ---- compile ---------------------------------------------------------------------------
    def compile(self, optimizer="rmsprop", loss=None, loss_weights=None, metrics=None, weighted_metrics=None,
                run_eagerly=False, steps_per_execution=1, jit_compile="auto", auto_scale_loss=True):
        """Configures training: optimizer, loss(es), metrics (names, objects; per output for several)."""
        from tensorweave.keras import metrics as M
        from tensorweave.keras import optimizers
        from tensorweave.keras.engine.compile_utils import CompileLoss, CompileMetrics
        self.optimizer = optimizers.get(optimizer)
        from tensorweave.distribute.distribution import distribution
        self._distribution = distribution()
        from tensorweave.distribute.ray.multi_worker import multi_worker_strategy
        self._multi_worker = multi_worker_strategy()      # fit runs on Ray workers (MultiWorkerMirroredStrategy)
        from tensorweave.distribute.ps.strategy import ps_strategy
        self._ps_strategy = ps_strategy()      # fit/evaluate scheduled on its workers (ParameterServerStrategy)
        names = list(getattr(self, "output_names", None) or ["output"])
        if isinstance(loss, (list, tuple)) and len(names) == 1 and len(loss) > 1:
            names = [f"output_{i + 1}" for i in range(len(loss))]
        self._output_names_for_compile = names
        self._compile_loss = CompileLoss(loss, loss_weights, names) if loss is not None else None
        self._compile_metrics = CompileMetrics(metrics, names, self._compile_loss.fns if loss is not None
                                               else [None] * len(names))
        self._loss_tracker = M.Mean(name="loss")
        self._output_loss_trackers = [M.Mean(name=f"{n}_loss") for n in names] if len(names) > 1 else []
        self._run_eagerly = bool(run_eagerly)
        self._steps_per_execution = steps_per_execution     # (used by fit under ParameterServerStrategy)
        self._train_fn = self._test_fn = self._predict_fn = None
        self.compiled = True
        self._compile_config = {"optimizer": optimizer if isinstance(optimizer, str) else None, "loss": loss
                                if isinstance(loss, (str, type(None))) else None, "metrics": metrics
                                if isinstance(metrics, (list, type(None))) and all(isinstance(m, str) for m in metrics or [])
                                else None, "loss_weights": loss_weights}

    @property
    def run_eagerly(self):
        return self._run_eagerly

    @run_eagerly.setter
    def run_eagerly(self, value):
        self._run_eagerly = bool(value)
        self._train_fn = self._test_fn = self._predict_fn = None

    @property
    def metrics(self):
        out = []
        if self._loss_tracker is not None:
            out.append(self._loss_tracker)
        out.extend(self._output_loss_trackers)
        if self._compile_metrics is not None and self._compile_metrics.metrics is not None:
            out.extend(m for _, m in self._compile_metrics.metrics)
        return out

    @property
    def metrics_names(self):
        return [m.name for m in self.metrics]

    def reset_metrics(self):
        for m in self.metrics:
            m.reset_state()

    def _assert_compiled(self):
        if not self.compiled:
            raise RuntimeError(f"You must call `compile()` before using model '{self.name}' for training or "
                               "evaluation.")

    # ---- steps --------------------------------------------------------------------------------
    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        total = None
        if self._compile_loss is not None and y is not None:
            total, parts = self._compile_loss(y, y_pred, sample_weight)
            for tracker, part in zip(self._output_loss_trackers, parts):
                if part is not None:
                    tracker.update_state(part)
        extra = self.losses
        if extra:
            reg = tw.add_n([tw.cast(l, tw.float32) if l.dtype != tw.float32 else l for l in
                            [tw.convert_to_tensor(e) for e in extra]])
            total = reg if total is None else total + tw.cast(reg, total.dtype)
        if total is None:
            raise ValueError(f"Model '{self.name}' has no loss: compile() it with a loss or add_loss() in call()")
        return total

    def _build_compiled_metrics(self, batch):
        """Creates the compiled metrics before the first step, as Keras does, so that a custom
        train_step iterating ``self.metrics`` sees them ("accuracy" resolves from the shapes)."""
        cm = self._compile_metrics
        if cm is None or cm.metrics is not None or batch[1] is None:
            return
        outputs = getattr(self, "_outputs_struct", None)
        if outputs is None and getattr(self, "_graph", None) is not None:
            outputs = self._graph[1]
        if outputs is None:   # a subclassed model: its output shapes come from one forward pass
            outputs = self(_to_tensors(batch[0]), training=False)
            self._clear_losses()
        cm.build(batch[1], outputs)

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        if self._compile_metrics is not None and y is not None:
            self._compile_metrics.update_state(y, y_pred, sample_weight)
        return self.get_metrics_result()

    def get_metrics_result(self):
        return {m.name: m.result() for m in self.metrics}

    def train_step(self, data):
        x, y, sample_weight = data_adapter.unpack_x_y_sample_weight(data)
        self._clear_losses()
        with tw.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x, y, y_pred, sample_weight, training=True)
        variables = self.trainable_variables
        if variables:
            grads = tape.gradient(loss, variables)
            self.optimizer.apply_gradients([(g, v) for g, v in zip(grads, variables) if g is not None])
        elif not getattr(self, "_warned_no_weights", False):
            # Keras trains such a model (its losses are only reported) and warns once
            import warnings
            warnings.warn(f"Model '{self.name}' does not have any trainable weights.", stacklevel=2)
            self._warned_no_weights = True
        self._loss_tracker.update_state(loss, sample_weight=tw.cast(tw.shape(nest.flatten(x)[0])[0], tw.float32))
        return self.compute_metrics(x, y, y_pred, sample_weight)

    def test_step(self, data):
        x, y, sample_weight = data_adapter.unpack_x_y_sample_weight(data)
        self._clear_losses()
        y_pred = self(x, training=False)
        loss = self.compute_loss(x, y, y_pred, sample_weight, training=False)
        self._loss_tracker.update_state(loss, sample_weight=tw.cast(tw.shape(nest.flatten(x)[0])[0], tw.float32))
        return self.compute_metrics(x, y, y_pred, sample_weight)

    def predict_step(self, data):
        x, _, _ = data_adapter.unpack_x_y_sample_weight(data)
        return self(x, training=False)

    def _compiled(self, step):
        dist = getattr(self, "_distribution", None)
        if dist is not None:
            # Under a distribution each batch becomes a global tensor (split over the batch mesh
            # axis); the step runs op by op on global tensors until the graph planner exists.
            def distributed(data):
                with dist.scope():
                    return step(nest.map_structure(lambda t: None if t is None else dist.distribute_batch(t), data))
            return distributed
        if self._run_eagerly:
            return step
        return tw.function(step, reduce_retracing=False)

    @property
    def distribute_strategy(self):
        """The distribution this model was compiled under (``tf.keras``' name), or None."""
        return (getattr(self, "_distribution", None) or getattr(self, "_multi_worker", None)
                or getattr(self, "_ps_strategy", None))

    def _check_distribution(self):
        if getattr(self, "_distribution", None) is not None:
            local = [v.name for v in self.weights if not getattr(v, "is_global", False)]
            if local:
                raise ValueError(
                    f"Model '{self.name}' was compiled under a distribution but its weights {local[:3]} are not "
                    "distributed. Hint: create (and build) the model inside `strategy.scope()` / "
                    "`distribution.scope()`, or set the distribution before making the model.")

    def make_train_function(self, force=False):
        if self._train_fn is None or force:
            self._train_fn = self._compiled(self.train_step)
        return self._train_fn

    def make_test_function(self, force=False):
        if self._test_fn is None or force:
            self._test_fn = self._compiled(self.test_step)
        return self._test_fn

    def _forget_steps(self):
        """Drops the compiled train/test/predict steps (made again on next use, for the model as it is now).
        Keras 3.15 keeps them: its ``predict_on_batch`` after ``Sequential.add`` still answers for the old
        layers while ``model(x)`` uses the new ones; we answer for the model as it is."""
        if "_predict_fn" in self.__dict__:
            self._train_fn = self._test_fn = self._predict_fn = None

    def make_predict_function(self, force=False):
        if self._predict_fn is None or force:
            self._predict_fn = self._compiled(self.predict_step)
        return self._predict_fn

    # ---- loops --------------------------------------------------------------------------------
    def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None, validation_split=0.0,
            validation_data=None, shuffle=True, class_weight=None, sample_weight=None, initial_epoch=0,
            steps_per_epoch=None, validation_steps=None, validation_batch_size=None, validation_freq=1):
        """Trains for ``epochs`` epochs; returns the ``History``."""
        from tensorweave.keras.callbacks import CallbackList
        self._assert_compiled()
        if getattr(self, "_multi_worker", None) is not None:
            return self._multi_worker.fit(self, x, y, batch_size, epochs, verbose, callbacks, validation_split,
                                          validation_data, shuffle, class_weight, sample_weight, initial_epoch,
                                          steps_per_epoch, validation_steps, validation_batch_size, validation_freq)
        if getattr(self, "_ps_strategy", None) is not None:
            from tensorweave.distribute.ps.keras_fit import fit
            return fit(self._ps_strategy, self, x, y, epochs, verbose, callbacks, validation_data, initial_epoch,
                       steps_per_epoch, validation_steps, validation_freq)
        x, validation_data = _local_creators(x, steps_per_epoch, validation_data, validation_steps)
        epochs = data_adapter.check_count(epochs, "epochs", minimum=0, allow_none=False)
        initial_epoch = data_adapter.check_count(initial_epoch, "initial_epoch", minimum=0, allow_none=False)
        validation_split = data_adapter.check_validation_split(validation_split)
        data_adapter.check_class_weight(class_weight, self._num_classes())
        validation_freq = data_adapter.check_count(validation_freq, "validation_freq", allow_none=False)
        if validation_split and validation_data is None:
            if not isinstance(x, (np.ndarray, tw.Tensor, list, tuple, dict)):
                raise ValueError("validation_split is only supported for array inputs; pass validation_data")
            arrays = (data_adapter._as_arrays(x), data_adapter._as_arrays(y), data_adapter._as_arrays(sample_weight))
            (x, y, sample_weight), validation_data = data_adapter.train_validation_split(arrays, validation_split)
        handler = data_adapter.DataHandler(x, y, sample_weight, batch_size, shuffle, class_weight, steps_per_epoch)
        verbose = 1 if verbose == "auto" else int(verbose)
        cbs = callbacks if isinstance(callbacks, CallbackList) else CallbackList(
            callbacks, add_history=True, add_progbar=verbose != 0, model=self, verbose=verbose, epochs=epochs,
            steps=handler.steps_per_epoch)
        val = None
        if validation_data is not None:
            vx, vy, vsw = data_adapter.unpack_x_y_sample_weight(validation_data)
            val = data_adapter.DataHandler(vx, vy, vsw, validation_batch_size or batch_size, False, None,
                                           validation_steps)
        train_fn = self.make_train_function()
        self.stop_training = False
        cbs.on_train_begin()
        # A callback (BackupAndRestore) may ask to resume after the epochs it backed up; the
        # request holds for this fit() only.
        if getattr(self, "_initial_epoch", None) is not None:
            initial_epoch, self._initial_epoch = self._initial_epoch, None
        logs = {}
        for epoch in range(initial_epoch, epochs):
            self.reset_metrics()
            cbs.on_epoch_begin(epoch)
            for step, batch in enumerate(handler.epoch()):
                cbs.on_train_batch_begin(step)
                self._build_compiled_metrics(batch)
                logs = _to_floats(train_fn(_step_data(batch)))
                cbs.on_train_batch_end(step, logs)
                if self.stop_training:
                    break
            epoch_logs = dict(logs)
            if val is not None and (epoch + 1) % validation_freq == 0:
                val_logs = self._evaluate_loop(val, cbs)
                epoch_logs.update({"val_" + k: v for k, v in val_logs.items()})
            cbs.on_epoch_end(epoch, epoch_logs)
            logs = epoch_logs
            if self.stop_training:
                break
        cbs.on_train_end(logs)
        return self.history

    def _num_classes(self):
        """The last dimension of a single-output model's output, when known (for class_weight)."""
        outputs = getattr(self, "outputs", None) or []
        if len(outputs) == 1 and outputs[0].shape and outputs[0].shape[-1] is not None:
            return int(outputs[0].shape[-1])
        return None

    def _evaluate_loop(self, handler, cbs):
        test_fn = self.make_test_function()
        self.reset_metrics()
        cbs.on_test_begin()
        logs = {}
        for step, batch in enumerate(handler.epoch()):
            cbs.on_test_batch_begin(step)
            self._build_compiled_metrics(batch)
            logs = _to_floats(test_fn(_step_data(batch)))
            cbs.on_test_batch_end(step, logs)
        cbs.on_test_end(logs)
        return logs

    def evaluate(self, x=None, y=None, batch_size=None, verbose="auto", sample_weight=None, steps=None,
                 callbacks=None, return_dict=False):
        """Loss and metrics on the given data (a list in ``metrics_names`` order, or a dict)."""
        from tensorweave.keras.callbacks import CallbackList
        self._assert_compiled()
        if getattr(self, "_ps_strategy", None) is not None:
            from tensorweave.distribute.ps.keras_fit import evaluate
            return evaluate(self._ps_strategy, self, x, y, verbose, steps, callbacks, return_dict)
        x, _ = _local_creators(x, steps, None, None, "evaluate")
        steps = data_adapter.check_count(steps, "steps")
        handler = data_adapter.DataHandler(x, y, sample_weight, batch_size, False, None, steps)
        verbose = 1 if verbose == "auto" else int(verbose)
        cbs = CallbackList(callbacks, add_progbar=verbose != 0, model=self, verbose=verbose, epochs=1,
                           steps=handler.steps_per_epoch)
        logs = self._evaluate_loop(handler, cbs)
        if return_dict:
            return logs
        values = [logs[name] for name in self.metrics_names if name in logs]
        return values[0] if len(values) == 1 else values

    def predict(self, x, batch_size=None, verbose="auto", steps=None, callbacks=None):
        """Model outputs for ``x`` as NumPy arrays (batched).

        One array of at most one batch, with nothing to report (``verbose=0``, no callbacks, no
        ``steps``), goes to the predict function as it is (as ``predict_on_batch``), without the
        data handler and the callback list: they were 0.23 of a batch-1 mlp request's 0.55 ms
        (thread CPU, load 12, issue 18 session 18). The same batch, the same function: the same
        bits."""
        from tensorweave.keras.callbacks import CallbackList
        steps = data_adapter.check_count(steps, "steps")
        batch_size = data_adapter.check_count(batch_size, "batch_size")
        fn = self.make_predict_function()
        if _one_quiet_batch(x, batch_size, verbose, steps, callbacks):
            outs = [_predict_batch(fn, x)]
        else:
            handler = data_adapter.DataHandler(x, None, None, batch_size, False, None, steps)
            verbose = 1 if verbose == "auto" else int(verbose)
            cbs = CallbackList(callbacks, add_progbar=verbose != 0, model=self, verbose=verbose, epochs=1,
                               steps=handler.steps_per_epoch)
            cbs.on_predict_begin()
            outs = []
            for step, batch in enumerate(handler.epoch()):
                cbs.on_predict_batch_begin(step)
                out = fn(_to_tensors(batch[:1]))
                outs.append(nest.map_structure(np.asarray, out))
                cbs.on_predict_batch_end(step, {"outputs": out})
            cbs.on_predict_end()
        if not outs:
            raise ValueError("predict() received no data")
        return nest.pack_sequence_as(outs[0], [np.concatenate(parts) for parts in
                                               zip(*[nest.flatten(o) for o in outs])])

    def train_on_batch(self, x, y=None, sample_weight=None, class_weight=None, return_dict=False):
        self._assert_compiled()
        if class_weight is not None and y is not None:
            cw = data_adapter.class_weights_to_sample_weights(np.asarray(y), class_weight)
            sample_weight = cw if sample_weight is None else np.asarray(sample_weight) * cw
        self.reset_metrics()        # as Keras 3: the logs are this batch's, not a running mean
        logs = _to_floats(self.make_train_function()(_step_data((x, y, sample_weight))))
        return self._logs_out(logs, return_dict)

    def test_on_batch(self, x, y=None, sample_weight=None, return_dict=False):
        self._assert_compiled()
        self.reset_metrics()
        logs = _to_floats(self.make_test_function()(_step_data((x, y, sample_weight))))
        return self._logs_out(logs, return_dict)

    def predict_on_batch(self, x):
        return _predict_batch(self.make_predict_function(), x)

    def _logs_out(self, logs, return_dict):
        if return_dict:
            return logs
        values = [logs[name] for name in self.metrics_names if name in logs]
        return values[0] if len(values) == 1 else values

    # ---- inspection ----------------------------------------------------------------------------
    def summary(self, line_length=None, positions=None, print_fn=None, expand_nested=False, show_trainable=False):
        """Prints Keras' table: layer (type), output shape, param #, and the totals."""
        from tensorweave.keras.engine.summary import print_summary
        print_summary(self, line_length=line_length, print_fn=print_fn)

    def get_layer(self, name=None, index=None):
        layers = self.layers
        if index is not None:
            return layers[index]
        for layer in layers:
            if layer.name == name:
                return layer
        raise ValueError(f"No such layer: {name}. Existing layers are: {[l.name for l in layers]}")

    def save(self, filepath, overwrite=True, **kwargs):
        """Saves the whole model (architecture, weights, compile config, optimizer state): a
        ``.keras`` file, or a SavedModel directory for other paths (see ``keras.saving``)."""
        from tensorweave.keras.saving import save_model
        save_model(self, filepath, overwrite=overwrite, **kwargs)

    def save_weights(self, filepath, overwrite=True):
        from tensorweave.keras.engine.weights_io import save_weights
        save_weights(self, filepath, overwrite)

    def load_weights(self, filepath, skip_mismatch=False):
        """Loads ``save_weights``' file; returns a status (``assert_consumed()``,
        ``expect_partial()``, as TF's checkpoint status)."""
        from tensorweave.keras.engine.weights_io import load_weights
        return load_weights(self, filepath, skip_mismatch)

    @classmethod
    def from_config(cls, config, custom_objects=None):
        if "input_layers" in config and "output_layers" in config:
            from tensorweave.keras.engine.functional import Functional
            return Functional.from_config(config, custom_objects=custom_objects)
        return cls(**config)

    def get_compile_config(self):
        return self._compile_config

    def to_json(self, **kwargs):
        """The architecture as JSON (``keras.models.model_from_json`` rebuilds it, fresh weights)."""
        import json
        from tensorweave.keras.layers import serialize
        return json.dumps({**serialize(self), "keras_version": "3", "backend": "tensorweave"}, **kwargs)

    @property
    def compiled_loss(self):
        """tf.keras 2's ``compiled_loss(y, y_pred, sample_weight, regularization_losses)`` (the
        total loss of ``compile``; it also updates the "loss" metric)."""
        from tensorweave.keras.engine.compile_utils import CompiledLossAPI
        self._assert_compiled()
        return CompiledLossAPI(self)

    @property
    def compiled_metrics(self):
        """tf.keras 2's ``compiled_metrics.update_state(y, y_pred, sample_weight)``."""
        from tensorweave.keras.engine.compile_utils import CompiledMetricsAPI
        self._assert_compiled()
        return CompiledMetricsAPI(self)


def _local_creators(x, steps, validation_data, validation_steps, method="fit"):
    """A ``DatasetCreator`` (``x``, or ``validation_data``) read in this process: one iterator of
    its dataset for the whole call (epochs continue it, as TF); validation reads its dataset afresh
    each time."""
    from tensorweave.keras.utils.dataset_creator import DatasetCreator, local_dataset
    if isinstance(x, DatasetCreator):
        x = iter(local_dataset(x, steps, "steps_per_epoch" if method == "fit" else "steps", method))
    if isinstance(validation_data, DatasetCreator):
        validation_data = local_dataset(validation_data, validation_steps, "validation_steps", method)
    return x, validation_data


def _functional_arguments(args, kwargs):
    """Keras' rule: ``(inputs, outputs)`` given positionally or by keyword."""
    return len(args) == 2 or ("inputs" in kwargs and "outputs" in kwargs) or (len(args) == 1 and "outputs" in kwargs)


_FUNCTIONAL_SUBCLASSES = {}


def _functional_subclass(cls):
    """``cls`` with ``Functional`` behind it in the MRO (its own overrides still win)."""
    from tensorweave.keras.engine.functional import Functional
    sub = _FUNCTIONAL_SUBCLASSES.get(cls)
    if sub is None:
        sub = type(cls.__name__, (cls, Functional), {"__module__": cls.__module__, "__qualname__": cls.__qualname__})
        _FUNCTIONAL_SUBCLASSES[cls] = sub
    return sub


def _to_floats(logs):
    """Scalars as Python floats; a per-class metric (F1Score(average=None)) stays an array, as in Keras."""
    out = {}
    for k, v in logs.items():
        a = np.asarray(v)
        out[k] = float(a) if a.ndim == 0 else a
    return out


def _under_distribution(method):
    """Runs a loop method inside the model's distribution (so the metrics' weights it builds
    are distributed too), after checking the model's weights are."""
    @functools.wraps(method)
    def run(self, *args, **kwargs):
        dist = getattr(self, "_distribution", None)
        if dist is None:
            return method(self, *args, **kwargs)
        self._check_distribution()
        with dist.scope():
            return method(self, *args, **kwargs)
    return run


for _name in ("fit", "evaluate", "predict", "train_on_batch", "test_on_batch", "predict_on_batch"):
    setattr(Model, _name, _under_distribution(getattr(Model, _name)))


def _in_own_layout(method):
    """Compiles a model made global with ``to_global`` (and outside any distribution scope) under
    its own layout, so its metrics are global and ``fit`` feeds global batches."""
    @functools.wraps(method)
    def run(self, *args, **kwargs):
        from tensorweave.distribute.distribution import distribution
        layout = getattr(self, "_global_layout", None)
        if layout is None or distribution() is not None:
            return method(self, *args, **kwargs)
        with layout.scope():
            return method(self, *args, **kwargs)
    return run


Model.compile = _in_own_layout(Model.compile)
