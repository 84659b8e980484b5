"""Weight regularizers: ``L1``, ``L2``, ``L1L2`` (a penalty added to the model's loss).

>>> import tensorweave as tw
>>> from tensorweave.keras import regularizers
>>> float(regularizers.L2(0.5)(tw.constant([1.0, 2.0])))
2.5
"""
import tensorweave as tw


class Regularizer:
    def __call__(self, x):
        return tw.constant(0.0)

    def get_config(self):
        return {}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


class L1L2(Regularizer):
    def __init__(self, l1=0.0, l2=0.0):
        self.l1, self.l2 = float(l1), float(l2)

    def __call__(self, x):
        out = tw.zeros([], x.dtype)
        if self.l1:
            out = out + self.l1 * tw.reduce_sum(tw.abs(x))
        if self.l2:
            out = out + self.l2 * tw.reduce_sum(tw.square(x))
        return out

    def get_config(self):
        return {"l1": self.l1, "l2": self.l2}


class L1(L1L2):
    def __init__(self, l1=0.01):
        super().__init__(l1=l1)

    def get_config(self):
        return {"l1": self.l1}


class L2(L1L2):
    def __init__(self, l2=0.01):
        super().__init__(l2=l2)

    def get_config(self):
        return {"l2": self.l2}


_BY_NAME = {"l1": L1, "l2": L2, "l1_l2": L1L2, "L1": L1, "L2": L2, "L1L2": L1L2}
l1, l2 = L1, L2   # Keras' lower-case names: regularizers.l2(0.01)


def l1_l2(l1=0.01, l2=0.01):
    """``L1L2`` with both factors defaulting to 0.01 (Keras' ``regularizers.l1_l2``)."""
    return L1L2(l1=l1, l2=l2)


def get(identifier):
    if identifier is None or isinstance(identifier, Regularizer) or callable(identifier):
        return identifier
    if isinstance(identifier, str):
        return _BY_NAME[identifier]()
    if isinstance(identifier, dict):
        return _BY_NAME[identifier["class_name"]].from_config(identifier.get("config", {}))
    raise TypeError(f"Could not interpret regularizer {identifier!r}")


def serialize(reg):
    return None if reg is None else {"class_name": type(reg).__name__, "config": reg.get_config()}
