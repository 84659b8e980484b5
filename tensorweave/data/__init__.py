"""``tw.data``: input pipelines (``tf.data``'s API) over NumPy arrays.

>>> import numpy as np
>>> import tensorweave as tw
>>> import tensorweave.data
>>> x, y = np.zeros((100, 3), np.float32), np.arange(100)
>>> tw.random.set_seed(1)
>>> ds = (tw.data.Dataset.from_tensor_slices((x, y)).shuffle(100).batch(32)
...       .prefetch(tw.data.AUTOTUNE))
>>> [tuple(xb.shape) for xb, yb in ds]
[(32, 3), (32, 3), (32, 3), (4, 3)]
>>> tw.random.set_seed(None)

How it runs: elements travel between transformations as flat tuples of NumPy arrays and
become ``tw.Tensor``s only where user code sees them (``structure``). Slices, ranges, zips,
takes, skips and shards of them, and finished caches are random access, so ``batch`` reads
them with one slice or gather per batch, and ``shuffle`` over them walks an index order that
is computed with array operations (identical to what the element buffer would give; see
``transforms.reservoir_order``). ``map(num_parallel_calls=...)`` runs calls on a thread pool
and ``prefetch`` fills a queue from a background thread; both stop when their iterator is
dropped. Iterator state (for checkpoints) is described in ``iterators``.
"""
from tensorweave.data.dataset import (AUTOTUNE, INFINITE_CARDINALITY, UNKNOWN_CARDINALITY,  # noqa: F401
                                      Dataset)
from tensorweave.data.iterators import Iterator  # noqa: F401
from tensorweave.data.options import Options, ThreadingOptions  # noqa: F401
from tensorweave.data.sources import TextLineDataset  # noqa: F401
from tensorweave.data import experimental  # noqa: F401
from tensorweave.io.tfrecord import FixedLengthRecordDataset, TFRecordDataset  # noqa: F401,E402 - file formats: tw.io

__all__ = ["Dataset", "Iterator", "Options", "ThreadingOptions", "TextLineDataset", "TFRecordDataset", "FixedLengthRecordDataset", "AUTOTUNE", "INFINITE_CARDINALITY", "UNKNOWN_CARDINALITY", "experimental"]
