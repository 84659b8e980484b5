"""TF1's ``tf.train.ExponentialMovingAverage``: shadow copies of variables that ``apply()`` moves
toward the variables' current values, ``shadow -= (1 - decay) * (shadow - value)``.

Shadow variables are named ``<variable>/ExponentialMovingAverage`` (TF1's names, so a
``Saver(ema.variables_to_restore())`` loads the averages into the model's variables), start at
the variable's initial value, are not trainable, and are listed in ``MOVING_AVERAGE_VARIABLES``.
With ``num_updates`` the decay is ``min(decay, (1 + num_updates) / (10 + num_updates))``.

>>> import tensorweave.compat.v1 as tf
>>> g = tf.Graph()
>>> with g.as_default():
...     w = tf.Variable(0.0, name="w")
...     ema = tf.train.ExponentialMovingAverage(0.5)
...     update = ema.apply([w])
...     bump = tf.assign(w, 4.0)
...     init = tf.global_variables_initializer()
>>> with tf.Session(graph=g) as sess:
...     sess.run(init)
...     _ = sess.run(bump)
...     for _ in range(2):
...         sess.run(update)
...     float(sess.run(ema.average(w))), ema.average_name(w)
(3.0, 'w/ExponentialMovingAverage')
"""
from tensorweave.core.context import building_graph
from tensorweave.train.averaging import ExponentialMovingAverage as _ExponentialMovingAverage


class ExponentialMovingAverage(_ExponentialMovingAverage):
    """``tw.train.ExponentialMovingAverage`` with TF1's habits: ``apply()`` averages the trainable
    variables by default and returns None eagerly; shadows start at the variable's initial value, get
    TF1's absolute names and join ``MOVING_AVERAGE_VARIABLES``; ``variables_to_restore`` maps every
    global variable."""

    def apply(self, var_list=None):
        from tensorweave.ops.control_flow_ops import group
        from tensorweave.ops.variables import trainable_variables
        items = trainable_variables() if var_list is None else list(var_list)
        variables = [v for v in items if getattr(v, "_is_variable", False)]
        ops = [super().apply(variables)] if variables else []
        ops += [self._apply_tensor(t) for t in items if not getattr(t, "_is_variable", False)]
        op = group(*ops)
        return op if building_graph() is not None else None

    def _apply_tensor(self, tensor):
        """A tensor's average (TF1: e.g. of the loss): a shadow starting at zero (TF's default
        ``zero_debias=False``), moved like a variable's, ``shadow -= (1 - decay) * (shadow - value)``."""
        if not tensor.dtype.is_floating:
            raise TypeError(f"ExponentialMovingAverage: {tensor.name} is {tensor.dtype.name}; only float tensors "
                            "can be averaged")
        averages = self.__dict__.setdefault("_tensor_averages", {})
        if id(tensor) not in averages:
            averages[id(tensor)] = (tensor, self._make_shadow(tensor, zeros=True))
        shadow = averages[id(tensor)][1]
        decay = self._current_decay(tensor.dtype)
        return shadow.assign_sub((1.0 - decay) * (shadow.read_value() - tensor))

    def average(self, var):
        if not getattr(var, "_is_variable", False):
            entry = getattr(self, "_tensor_averages", {}).get(id(var))
            return entry[1] if entry is not None else None
        return super().average(var)

    def _make_shadow(self, var, zeros=False):
        from tensorweave.compat.v1_variable_scope import _absolute_name_scope
        from tensorweave.core.graph import get_default_graph
        from tensorweave.ops import array_ops
        from tensorweave.ops.variables import Variable
        scope, _, short = self.average_name(var).rpartition("/")
        if zeros:
            init = array_ops.zeros(var.shape.as_list(), var.dtype)
        else:
            init = var.initial_value if getattr(var, "initial_value", None) is not None else var.read_value()
        with _absolute_name_scope(scope + "/"):
            graph = building_graph()
            if graph is not None:
                with graph.control_dependencies(None):
                    return Variable(init, trainable=False, name=short, dtype=var.dtype,
                                    collections=["variables", "moving_average_variables"])
            shadow = Variable(init, trainable=False, name=short, dtype=var.dtype)
            get_default_graph().add_to_collection("moving_average_variables", shadow)
            return shadow

    def variables_to_restore(self, moving_avg_variables=None):
        """{checkpoint name: variable}: each averaged variable restored from its shadow's name,
        the other global variables from their own."""
        from tensorweave.ops.variables import global_variables
        averaged = {k.deref().ref() for k in self._averages} if moving_avg_variables is None else \
            {v.ref() for v in moving_avg_variables}
        shadows = {s.ref() for s in self._averages.values()}
        out = {}
        for v in global_variables():
            if v.ref() in shadows:
                continue
            name = v.name[:-2] if v.name.endswith(":0") else v.name
            out[self.average_name(v) if v.ref() in averaged else name] = v
        return out
