"""More of TF1's ``tf.train``: the ``Example`` protocol-buffer classes and checkpoint readers that
TF2 kept under the same names (the very objects of ``tw.train``), the cosine learning-rate decays,
and the proximal optimizers.

>>> import tensorweave.compat.v1 as tf
>>> ex = tf.train.Example(features=tf.train.Features(feature={
...     "x": tf.train.Feature(float_list=tf.train.FloatList(value=[1.5]))}))
>>> tf.parse_single_example(ex.SerializeToString(), {"x": tf.FixedLenFeature([1], tf.float32)})["x"].numpy().tolist()
[1.5]
"""
from tensorweave.train import (BytesList, CheckpointOptions, ClusterSpec, Example, Feature,  # noqa: F401
                               FeatureList, FeatureLists, Features, FloatList, Int64List, SequenceExample,
                               checkpoints_iterator, load_checkpoint)

__all__ = ["BytesList", "CheckpointOptions", "ClusterSpec", "Example", "Feature", "FeatureList", "FeatureLists",
           "Features", "FloatList", "Int64List", "SequenceExample", "checkpoints_iterator", "load_checkpoint"]
