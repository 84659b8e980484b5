"""``tf.compat.v1.data``: ``tw.data`` plus TF1's graph iterators (``make_one_shot_iterator``...).

>>> import tensorweave.compat.v1 as tf
>>> g = tf.Graph()
>>> with g.as_default():
...     nxt = tf.data.make_one_shot_iterator(tf.data.Dataset.from_tensor_slices([1, 2]).batch(2)).get_next()
>>> with tf.Session(graph=g) as sess:
...     sess.run(nxt).tolist()
[1, 2]
"""
from tensorweave.data import (AUTOTUNE, INFINITE_CARDINALITY, UNKNOWN_CARDINALITY, Dataset,  # noqa: F401
                              TextLineDataset, experimental)
from tensorweave.data.graph_iterators import (GraphIterator as Iterator, make_initializable_iterator,  # noqa: F401
                                              make_one_shot_iterator)


def get_output_types(dataset_or_iterator):
    return dataset_or_iterator.output_types


def get_output_shapes(dataset_or_iterator):
    return dataset_or_iterator.output_shapes
