"""``tw.data.experimental``: TF's experimental names that tf.data code still uses.

>>> import tensorweave as tw
>>> import tensorweave.data
>>> tw.data.experimental.AUTOTUNE == tw.data.AUTOTUNE
True
>>> int(tw.data.experimental.cardinality(tw.data.Dataset.range(4)))
4
>>> int(tw.data.experimental.AutoShardPolicy.FILE), tw.data.experimental.SHARD_HINT
(1, -1)
"""
from tensorweave.data.dataset import AUTOTUNE, INFINITE_CARDINALITY, SHARD_HINT, UNKNOWN_CARDINALITY  # noqa: F401
from tensorweave.data.options import (AutoShardPolicy, AutotuneAlgorithm, AutotuneOptions,  # noqa: F401
                                      DistributeOptions, ExternalStatePolicy, OptimizationOptions,
                                      ThreadingOptions)


def cardinality(dataset):
    """``dataset.cardinality()``: an int64 tensor, or ``INFINITE_CARDINALITY``/``UNKNOWN_CARDINALITY``."""
    return dataset.cardinality()


def get_single_element(dataset):
    """The only element of a one-element dataset."""
    return dataset.get_single_element()
