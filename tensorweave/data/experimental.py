"""``tw.data.experimental``: TF's experimental names that tf.data code still uses.

>>> import tensorweave as tw
>>> import tensorweave.data
>>> tw.data.experimental.AUTOTUNE == tw.data.AUTOTUNE
True
>>> int(tw.data.experimental.cardinality(tw.data.Dataset.range(4)))
4
"""
from tensorweave.data.dataset import AUTOTUNE, INFINITE_CARDINALITY, UNKNOWN_CARDINALITY  # noqa: F401


def cardinality(dataset):
    """``dataset.cardinality()``: an int64 tensor, or ``INFINITE_CARDINALITY``/``UNKNOWN_CARDINALITY``."""
    return dataset.cardinality()


def get_single_element(dataset):
    """The only element of a one-element dataset."""
    return dataset.get_single_element()
