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
from tensorweave.core.graph import get_default_graph


class ExponentialMovingAverage:
    def __init__(self, decay, num_updates=None, zero_debias=False, name="ExponentialMovingAverage"):
        if zero_debias:
            raise NotImplementedError("ExponentialMovingAverage(zero_debias=True) is not supported")
        self._decay, self._num_updates, self._name = decay, num_updates, name
        self._averages = {}

    @property
    def name(self):
        return self._name

    def average_name(self, var):
        return f"{var.name[:-2] if var.name.endswith(':0') else var.name}/{self._name}"

    def average(self, var):
        """The shadow variable of ``var`` (None before ``apply`` saw it)."""
        return self._averages.get(id(var), (None, None))[1]

    def _shadow(self, var):
        from tensorweave.compat.v1_variable_scope import _absolute_name_scope
        from tensorweave.ops.variables import Variable
        scope, _, short = self.average_name(var).rpartition("/")
        init = var.initial_value if getattr(var, "initial_value", None) is not None else var.read_value()
        with _absolute_name_scope(scope + "/"):
            graph = building_graph()
            if graph is not None:
                with graph.control_dependencies(None):
                    shadow = Variable(init, trainable=False, name=short, dtype=var.dtype,
                                      collections=["variables", "moving_average_variables"])
            else:
                shadow = Variable(init, trainable=False, name=short, dtype=var.dtype)
                get_default_graph().add_to_collection("moving_average_variables", shadow)
        return shadow

    def apply(self, var_list=None):
        """Creates the shadows of ``var_list`` (default: the trainable variables) and returns the op
        that updates them all."""
        from tensorweave.core.convert import convert_to_tensor
        from tensorweave.ops import control_flow_ops, math_ops
        from tensorweave.ops.variables import trainable_variables
        var_list = trainable_variables() if var_list is None else list(var_list)
        for v in var_list:
            if not v.dtype.is_floating:
                raise TypeError(f"The variables must be half, float, or double: {v.name}")
            if id(v) not in self._averages:
                self._averages[id(v)] = (v, self._shadow(v))
        decay = convert_to_tensor(float(self._decay))
        if self._num_updates is not None:
            n = math_ops.cast(convert_to_tensor(self._num_updates), "float32")
            decay = math_ops.minimum(decay, (1.0 + n) / (10.0 + n))
        updates = []
        for v in var_list:
            shadow = self._averages[id(v)][1]
            rate = math_ops.cast(1.0 - decay, v.dtype)
            updates.append(shadow.assign_sub((shadow.read_value() - v.read_value()) * rate, read_value=False))
        if building_graph() is None:
            return None
        return control_flow_ops.group(*updates, name=self._name)

    def variables_to_restore(self, moving_avg_variables=None):
        """{checkpoint name: variable}: each averaged variable restored from its shadow's name,
        the other global variables from their own."""
        from tensorweave.ops.variables import global_variables
        averaged = {id(v) for v, _ in self._averages.values()} if moving_avg_variables is None else \
            {id(v) for v in moving_avg_variables}
        shadows = {id(s) for _, s in self._averages.values()}
        out = {}
        for v in global_variables():
            if id(v) in shadows:
                continue
            name = v.name[:-2] if v.name.endswith(":0") else v.name
            out[self.average_name(v) if id(v) in averaged else name] = v
        return out
