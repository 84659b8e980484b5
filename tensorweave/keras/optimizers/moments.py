"""The shared part of Keras 3's two-moment optimizers (Adamax, Nadam, Lamb): the arguments
``beta_1``, ``beta_2``, ``epsilon`` and one slot list per name in ``SLOT_NAMES``, made in Keras'
order (per variable, each of its slots: ``add_optimizer_variables``).

>>> import tensorweave as tw
>>> opt = tw.keras.optimizers.Lamb()
>>> opt.build([tw.Variable([1.0, 2.0], name="w")])
>>> [v.name.split(":")[0] for v in opt.variables]
['iteration', 'learning_rate', 'w_momentum', 'w_velocity']
"""
from tensorweave.keras.optimizers.optimizer import Optimizer


class MomentOptimizer(Optimizer):
    """Base of the optimizers with moments: subclasses set ``SLOT_NAMES`` and write
    ``update_step`` with :meth:`moments` (the variable's slots, in ``SLOT_NAMES`` order)."""

    SLOT_NAMES = ("momentum", "velocity")

    def __init__(self, learning_rate, beta_1, beta_2, epsilon, name, **kwargs):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self._moments = tuple([] for _ in self.SLOT_NAMES)

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        for mine, made in zip(self._moments, self.add_optimizer_variables(variables, list(self.SLOT_NAMES))):
            mine += made

    def moments(self, variable):
        """``variable``'s slots, one per name in ``SLOT_NAMES``."""
        i = self._get_variable_index(variable)
        return [slots[i] for slots in self._moments]

    def get_config(self):
        config = super().get_config()
        config.update({"beta_1": self.beta_1, "beta_2": self.beta_2, "epsilon": self.epsilon})
        return config
