"""TF1's ``tf.compat.v1.train`` optimizers, global step and learning-rate decay functions.

The optimizers are thin wrappers: each builds the matching Keras optimizer
(``tw.keras.optimizers``) and delegates the update math to it, so the two APIs share one
implementation. What the wrappers add is TF1's calling convention:
``compute_gradients(loss, var_list)`` (default: the graph's trainable variables; in eager
mode ``loss`` must be a callable), ``apply_gradients(grads_and_vars, global_step)``
(returning an op that also increments ``global_step``), and ``minimize``. In a graph,
slot variables are created when ``minimize``/``apply_gradients`` is called, as graph
variables, so a ``global_variables_initializer()`` made afterwards initializes them.

Known differences from TF1, all from sharing Keras' update rules: ``AdamOptimizer`` on an
IndexedSlices gradient updates only the touched rows' moments (TF1 decays every row); its step
count lives in an ``iteration`` variable rather than ``beta1_power``/``beta2_power``.
``MomentumOptimizer`` keeps TF1's own accumulator (``accum = momentum * accum + g``,
``w -= learning_rate * accum``), which differs from Keras' velocity when the rate decays.

>>> import numpy as np
>>> import tensorweave.compat.v1 as tf
>>> from tensorweave.compat import v1_train
>>> g = tf.Graph()
>>> with g.as_default():
...     w = tf.Variable(0.0)
...     loss = tf.square(w - 3.0)
...     step = v1_train.get_or_create_global_step()
...     train = v1_train.GradientDescentOptimizer(0.25).minimize(loss, global_step=step)
...     init = tf.global_variables_initializer()
>>> with tf.Session(graph=g) as sess:
...     sess.run(init)
...     for _ in range(3):
...         _ = sess.run(train)
...     round(float(sess.run(w)), 4), int(sess.run(step))
(2.625, 3)
"""
import functools

from tensorweave.autodiff.gradients import gradients as _gradients
from tensorweave.autodiff.tape import GradientTape
from tensorweave.core import dtypes as _dt
from tensorweave.core.context import building_graph, executing_eagerly
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.graph import get_default_graph
from tensorweave.core.nest import flatten as _flatten
from tensorweave.keras import optimizers as _keras
from tensorweave.keras.optimizers import schedules as _schedules
from tensorweave.ops.control_flow_ops import control_dependencies
from tensorweave.ops.variables import GLOBAL_VARIABLES, Variable, trainable_variables
# TF1's queue input pipeline, session-run hooks and monitored sessions (compat/v1_input.py, v1_monitored.py).
from tensorweave.compat.v1_input import (Coordinator, QueueRunner, add_queue_runner, batch, batch_join,  # noqa: F401
                                         input_producer, limit_epochs, match_filenames_once, maybe_batch,
                                         maybe_batch_join, maybe_shuffle_batch, maybe_shuffle_batch_join,
                                         range_input_producer, shuffle_batch, shuffle_batch_join,
                                         slice_input_producer, start_queue_runners, string_input_producer)
from tensorweave.estimator.hooks import (CheckpointSaverListener, FeedFnHook, FinalOpsHook,  # noqa: F401
                                         LoggingTensorHook, NanLossDuringTrainingError, NanTensorHook,
                                         SecondOrStepTimer, SessionRunArgs, SessionRunContext, SessionRunHook,
                                         SessionRunValues, StepCounterHook, StopAtStepHook, ProfilerHook)
from tensorweave.compat.v1_monitored import (CheckpointSaverHook, ChiefSessionCreator, MonitoredSession,  # noqa: F401
                                             MonitoredTrainingSession, Scaffold, SingularMonitoredSession,
                                             SummarySaverHook)
from tensorweave.compat.v1_summary import summary_iterator  # noqa: F401

__all__ = ["Optimizer", "GradientDescentOptimizer", "MomentumOptimizer", "AdamOptimizer", "AdagradOptimizer",
           "RMSPropOptimizer", "AdadeltaOptimizer", "FtrlOptimizer", "get_global_step", "create_global_step",
           "get_or_create_global_step", "global_step", "exponential_decay", "inverse_time_decay",
           "piecewise_constant", "polynomial_decay", "cosine_decay"]

GLOBAL_STEP = "global_step"   # TF1's GraphKeys.GLOBAL_STEP
_VALID_LOSS_DTYPES = (_dt.float16, _dt.bfloat16, _dt.float32, _dt.float64)


class Optimizer:
    """Base class of the TF1 optimizers (``tf.compat.v1.train.Optimizer``)."""

    GATE_NONE = 0
    GATE_OP = 1
    GATE_GRAPH = 2
    # TF1 slot name -> the Keras optimizer's slot name (for get_slot).
    _slot_names = {}

    def __init__(self, use_locking, name):
        if not name:
            raise ValueError("Must specify the optimizer name")
        self._use_locking = use_locking
        self._name = name
        self._impl = None

    def _make_keras(self, learning_rate):
        raise NotImplementedError

    @property
    def _keras(self):
        # Built on first use, where the slots will live (a TF1 graph or eagerly).
        if self._impl is None:
            lr = self._learning_rate
            # A callable rate keeps TF1's semantics: a Python number is used as a constant
            # (exact in float64; Keras would store it in a float32 variable), a tensor as given.
            self._impl = self._make_keras(lambda: lr() if callable(lr) else lr)
        return self._impl

    def get_name(self):
        return self._name

    # ---- the TF1 protocol ------------------------------------------------------------------------
    def compute_gradients(self, loss, var_list=None, gate_gradients=GATE_OP, aggregation_method=None,
                          colocate_gradients_with_ops=False, grad_loss=None):
        """[(gradient, variable)] for ``loss``; gradients may be None or IndexedSlices."""
        if callable(loss) and executing_eagerly():
            with GradientTape() as tape:
                if var_list is not None:
                    tape.watch(list(var_list))
                loss_value = loss()
            if var_list is None:
                var_list = list(tape.watched_variables())
            var_list = list(var_list)
            if not var_list:
                raise ValueError("No variables to optimize.")
            grads = tape.gradient(loss_value, var_list, output_gradients=grad_loss)
            return list(zip(grads, var_list))
        if callable(loss):
            loss = loss()
        if executing_eagerly():
            raise RuntimeError("`loss` passed to Optimizer.compute_gradients should be a function when eager "
                               "execution is enabled.")
        loss = convert_to_tensor(loss)
        if loss.dtype not in _VALID_LOSS_DTYPES:
            raise ValueError(f"Invalid type {loss.dtype.name} for {loss.name}, expected: "
                             f"{[d.name for d in _VALID_LOSS_DTYPES]}.")
        var_list = trainable_variables() if var_list is None else _flatten(list(var_list))
        if not var_list:
            raise ValueError("No variables to optimize.")
        grads = _gradients(loss, var_list, grad_ys=None if grad_loss is None else [grad_loss])
        return list(zip(grads, var_list))

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """Applies the gradients; in a graph returns the op that does it (and then increments
        ``global_step``); eagerly applies them at once and returns None."""
        pairs = list(grads_and_vars)
        if not pairs:
            raise ValueError("No variables provided.")
        for g, v in pairs:
            if not getattr(v, "_is_variable", False):
                raise TypeError(f"apply_gradients: {v!r} is not a tw.Variable")
        kept = [(g, v) for g, v in pairs if g is not None]
        if not kept:
            raise ValueError(f"No gradients provided for any variable: {[v.name for _, v in pairs]}.")
        train = self._keras.apply([g for g, _ in kept], [v for _, v in kept])
        if global_step is None:
            return self._add_train_op(train)
        if building_graph() is None:
            global_step.assign_add(1)
            return None
        with control_dependencies([train]):
            return self._add_train_op(global_step.assign_add(1, name=name or self._name, read_value=False))

    @staticmethod
    def _add_train_op(op):
        # TF1 lists every training op in the TRAIN_OP collection (a meta graph carries it).
        graph = building_graph()
        if graph is not None and op is not None:
            ref = graph.get_collection_ref("train_op")
            if all(o is not op for o in ref):
                ref.append(op)
        return op

    def minimize(self, loss, global_step=None, var_list=None, gate_gradients=GATE_OP, aggregation_method=None,
                 colocate_gradients_with_ops=False, name=None, grad_loss=None):
        """``compute_gradients`` then ``apply_gradients``."""
        grads_and_vars = self.compute_gradients(loss, var_list=var_list, gate_gradients=gate_gradients,
                                                aggregation_method=aggregation_method,
                                                colocate_gradients_with_ops=colocate_gradients_with_ops,
                                                grad_loss=grad_loss)
        if not [v for g, v in grads_and_vars if g is not None]:
            raise ValueError("No gradients provided for any variable, check your graph for ops that do not "
                             f"support gradients, between variables {[v.name for _, v in grads_and_vars]} "
                             f"and loss {loss!r}.")
        return self.apply_gradients(grads_and_vars, global_step=global_step, name=name)

    # ---- slots ------------------------------------------------------------------------------------
    def get_slot_names(self):
        """The names of the slots this optimizer has created (TF1 names)."""
        if self._impl is None:
            return []
        keras_names = {name for (_, name) in self._impl._slots}
        return sorted(t for t, k in self._slot_names.items() if k in keras_names)

    def get_slot(self, var, name):
        """The slot variable ``name`` (a TF1 slot name, e.g. "m" for Adam) of ``var``, or None."""
        if self._impl is None or name not in self._slot_names:
            return None
        return self._impl._slot(var, self._slot_names[name])

    def variables(self):
        """The optimizer's own variables (slots, step count)."""
        return [] if self._impl is None else self._impl.variables


class GradientDescentOptimizer(Optimizer):
    """``w -= learning_rate * g`` (Keras SGD)."""

    def __init__(self, learning_rate, use_locking=False, name="GradientDescent"):
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate

    def _make_keras(self, lr):
        return _keras.SGD(learning_rate=lr, name=self._name)


class _TF1MomentumSGD(_keras.SGD):
    """Keras SGD's slots and plumbing with TF1's momentum rule: ``accum = momentum * accum + g``,
    ``w -= lr * accum`` (Nesterov: ``w -= lr * (g + momentum * accum)``). With a decaying rate this
    differs from Keras' velocity (``v = momentum * v - lr * g``), which scales each gradient by the
    rate of its own step; the slot holds TF1's ``accum``. Sparse gradients touch only their rows."""

    def update_step(self, gradient, variable, learning_rate):
        from tensorweave.keras.optimizers.optimizer import _cast
        lr = _cast(learning_rate, variable.dtype)
        momentum, nesterov = self.momentum, self.nesterov

        def rule(g, w, accum):
            accum = accum * momentum + g
            return w - ((g + accum * momentum) if nesterov else accum) * lr, accum
        self._apply_update(rule, gradient, variable, [self._momentums[self._get_variable_index(variable)]])


class MomentumOptimizer(Optimizer):
    """Momentum (Nesterov with ``use_nesterov``) with TF1's accumulator; see the module notes."""

    _slot_names = {"momentum": "momentum"}

    def __init__(self, learning_rate, momentum, use_locking=False, name="Momentum", use_nesterov=False):
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate
        self._momentum = momentum
        self._use_nesterov = use_nesterov

    def _make_keras(self, lr):
        return _TF1MomentumSGD(learning_rate=lr, momentum=self._momentum, nesterov=self._use_nesterov,
                               name=self._name)


class AdamOptimizer(Optimizer):
    """Adam with TF1's defaults (``epsilon=1e-8``); slots "m" and "v"."""

    _slot_names = {"m": "momentum", "v": "velocity"}

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, use_locking=False, name="Adam"):
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate
        self._beta1, self._beta2, self._epsilon = beta1, beta2, epsilon

    def _make_keras(self, lr):
        return _keras.Adam(learning_rate=lr, beta_1=self._beta1, beta_2=self._beta2, epsilon=self._epsilon,
                           name=self._name)


class AdagradOptimizer(Optimizer):
    """Adagrad as TF1: ``w -= lr * g / sqrt(accumulator)`` (no epsilon); slot "accumulator"."""

    _slot_names = {"accumulator": "accumulator"}

    def __init__(self, learning_rate, initial_accumulator_value=0.1, use_locking=False, name="Adagrad"):
        if initial_accumulator_value <= 0.0:
            raise ValueError(f"initial_accumulator_value must be positive: {initial_accumulator_value}")
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate
        self._initial_accumulator_value = initial_accumulator_value

    def _make_keras(self, lr):
        return _keras.Adagrad(learning_rate=lr, initial_accumulator_value=self._initial_accumulator_value,
                              epsilon=0.0, name=self._name)


class RMSPropOptimizer(Optimizer):
    """RMSProp as TF1 (mean square starts at one, ``epsilon=1e-10``); slots "rms", "momentum", "mg"."""

    _slot_names = {"rms": "velocity", "momentum": "momentum", "mg": "average_gradient"}

    def __init__(self, learning_rate, decay=0.9, momentum=0.0, epsilon=1e-10, use_locking=False, centered=False,
                 name="RMSProp"):
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate
        self._decay, self._momentum, self._epsilon, self._centered = decay, momentum, epsilon, centered

    def _make_keras(self, lr):
        opt = _keras.RMSprop(learning_rate=lr, rho=self._decay, momentum=self._momentum, epsilon=self._epsilon,
                             centered=self._centered, name=self._name)
        opt._velocity_initializer = "ones"
        return opt


class AdadeltaOptimizer(Optimizer):
    """Adadelta with TF1's defaults; slots "accum" and "accum_update"."""

    _slot_names = {"accum": "accumulated_grad", "accum_update": "accumulated_delta_var"}

    def __init__(self, learning_rate=0.001, rho=0.95, epsilon=1e-8, use_locking=False, name="Adadelta"):
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate
        self._rho, self._epsilon = rho, epsilon

    def _make_keras(self, lr):
        return _keras.Adadelta(learning_rate=lr, rho=self._rho, epsilon=self._epsilon, name=self._name)


class FtrlOptimizer(Optimizer):
    """FTRL-Proximal; slots "accum" and "linear" (renamed by ``accum_name``/``linear_name``)."""

    def __init__(self, learning_rate, learning_rate_power=-0.5, initial_accumulator_value=0.1,
                 l1_regularization_strength=0.0, l2_regularization_strength=0.0, use_locking=False, name="Ftrl",
                 accum_name=None, linear_name=None, l2_shrinkage_regularization_strength=0.0, beta=None):
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate
        self._kw = dict(learning_rate_power=learning_rate_power, initial_accumulator_value=initial_accumulator_value,
                        l1_regularization_strength=l1_regularization_strength,
                        l2_regularization_strength=l2_regularization_strength,
                        l2_shrinkage_regularization_strength=l2_shrinkage_regularization_strength,
                        beta=0.0 if beta is None else beta)
        self._slot_names = {accum_name or "accum": "accumulator", linear_name or "linear": "linear"}
        _keras.Ftrl(**self._kw)   # validates the arguments now, as TF1 does

    def _make_keras(self, lr):
        return _keras.Ftrl(learning_rate=lr, name=self._name, **self._kw)


# ---- global step ---------------------------------------------------------------------------------
def get_global_step(graph=None):
    """The graph's global step variable, or None."""
    graph = graph if graph is not None else get_default_graph()
    steps = graph.get_collection(GLOBAL_STEP)
    if len(steps) > 1:
        raise TypeError("Multiple tensors in global_step collection.")
    return steps[0] if steps else None


def create_global_step(graph=None):
    """Creates the global step (an int64 variable "global_step", not trainable)."""
    graph = graph if graph is not None else get_default_graph()
    if get_global_step(graph) is not None:
        raise ValueError('"global_step" already exists.')
    if executing_eagerly() and graph is get_default_graph():
        v = Variable(0, dtype=_dt.int64, trainable=False, name="global_step")
        graph.add_to_collection(GLOBAL_STEP, v)
        return v
    with graph.as_default(), graph.control_dependencies(None):
        return Variable(0, dtype=_dt.int64, trainable=False, name="global_step",
                        collections=[GLOBAL_VARIABLES, GLOBAL_STEP])


def get_or_create_global_step(graph=None):
    """The global step variable, created on first use.

    >>> import tensorweave as tw
    >>> g = tw.Graph()
    >>> get_or_create_global_step(g) is get_or_create_global_step(g)
    True
    """
    step = get_global_step(graph)
    return step if step is not None else create_global_step(graph)


def global_step(sess, global_step_tensor):
    """The global step's current value as a Python int."""
    return int(sess.run(global_step_tensor))


# ---- learning-rate decay (TF1 functions over the Keras schedules) ----------------------------------
def _decayed(schedule, step, what):
    if step is None:
        raise ValueError(f"global_step is required for {what}.")
    if executing_eagerly():
        # TF1 in eager mode returns a callable, re-evaluated at each use (the step changes).
        return functools.partial(schedule, step)
    return schedule(step)


def exponential_decay(learning_rate, global_step, decay_steps, decay_rate, staircase=False, name=None):
    """``learning_rate * decay_rate ** (global_step / decay_steps)`` (floored exponent with ``staircase``).

    >>> import tensorweave as tw
    >>> step = tw.Variable(20, dtype=tw.int64)
    >>> lr = exponential_decay(0.1, step, 10, 0.5, staircase=True)
    >>> round(float(lr()), 6)     # eager mode: a callable
    0.025
    """
    return _decayed(_schedules.ExponentialDecay(learning_rate, decay_steps, decay_rate, staircase=staircase,
                                                name=name or "ExponentialDecay"), global_step, "exponential_decay")


def inverse_time_decay(learning_rate, global_step, decay_steps, decay_rate, staircase=False, name=None):
    """``learning_rate / (1 + decay_rate * global_step / decay_steps)``."""
    return _decayed(_schedules.InverseTimeDecay(learning_rate, decay_steps, decay_rate, staircase=staircase,
                                                name=name or "InverseTimeDecay"), global_step, "inverse_time_decay")


def polynomial_decay(learning_rate, global_step, decay_steps, end_learning_rate=0.0001, power=1.0, cycle=False,
                     name=None):
    """Polynomial decay from ``learning_rate`` to ``end_learning_rate`` over ``decay_steps``."""
    return _decayed(_schedules.PolynomialDecay(learning_rate, decay_steps, end_learning_rate, power, cycle,
                                               name=name or "PolynomialDecay"), global_step, "polynomial_decay")


def cosine_decay(learning_rate, global_step, decay_steps, alpha=0.0, name=None):
    """Cosine decay to ``alpha * learning_rate`` over ``decay_steps``."""
    return _decayed(_schedules.CosineDecay(learning_rate, decay_steps, alpha=alpha, name=name or "CosineDecay"),
                    global_step, "cosine_decay")


def piecewise_constant(x, boundaries, values, name=None):
    """``values[i]`` for ``boundaries[i-1] < x <= boundaries[i]`` (``values[0]`` up to the first
    boundary, ``values[-1]`` after the last)."""
    return _decayed(_schedules.PiecewiseConstantDecay(boundaries, values, name=name or "PiecewiseConstant"),
                    x, "piecewise_constant")


def natural_exp_decay(learning_rate, global_step, decay_steps, decay_rate, staircase=False, name=None):
    """``learning_rate * exp(-decay_rate * global_step / decay_steps)`` (floored ratio with ``staircase``)."""
    from tensorweave.ops.math_ops import cast, exp, floor
    if global_step is None:
        raise ValueError("global_step is required for natural_exp_decay.")

    def rate(step=global_step):
        p = cast(step, _dt.float32) / float(decay_steps)
        if staircase:
            p = floor(p)
        return learning_rate * exp(-float(decay_rate) * p)
    return rate if executing_eagerly() else rate()


piecewise_constant_decay = piecewise_constant


# ---- checkpoints: TF1's name-based Saver and the tw.train functions -----------------------------
from tensorweave.compat.v1_device import replica_device_setter  # noqa: E402
from tensorweave.compat.v1_moving_average import ExponentialMovingAverage  # noqa: E402
from tensorweave.compat.v1_saver import (Saver, checkpoint_exists, list_variables, load_variable,  # noqa: E402
                                         remove_checkpoint)
from tensorweave.compat.v1_meta_graph import export_meta_graph, import_meta_graph  # noqa: E402
from tensorweave.compat.v1_graph_def import write_graph  # noqa: E402
from tensorweave.compat.v1_checkpoint_utils import (NewCheckpointReader, checkpoints_iterator,  # noqa: E402
                                                    generate_checkpoint_state_proto, get_checkpoint_mtimes,
                                                    init_from_checkpoint, load_checkpoint, update_checkpoint_state,
                                                    warm_start)
from tensorweave.train.checkpoint import Checkpoint  # noqa: E402
from tensorweave.train.manager import CheckpointManager, get_checkpoint_state, latest_checkpoint  # noqa: E402

__all__ += ["natural_exp_decay", "piecewise_constant_decay", "Saver", "checkpoint_exists", "remove_checkpoint",
            "Checkpoint", "CheckpointManager", "get_checkpoint_state", "latest_checkpoint", "replica_device_setter",
            "ExponentialMovingAverage", "list_variables", "load_variable", "export_meta_graph", "import_meta_graph",
            "NewCheckpointReader", "checkpoints_iterator", "generate_checkpoint_state_proto", "get_checkpoint_mtimes",
            "init_from_checkpoint", "load_checkpoint", "update_checkpoint_state", "warm_start", "write_graph",
            "Supervisor", "basic_train_loop"]
from tensorweave.compat.v1_train_extra import *  # noqa: E402,F401,F403 - Example protos, cosine decays...
from tensorweave.compat.v1_supervisor import Supervisor, basic_train_loop  # noqa: E402
