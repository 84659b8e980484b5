"""``tw.train``: object-based checkpoints (TensorFlow 2's ``tf.train`` checkpoint API).

* :class:`Checkpoint` — save/restore variables, Keras models and optimizers (with slots),
  step counters, ``tw.data`` iterator positions, random generators and the global random
  state (:class:`RNGState`), matched by object path; deferred restoration of objects made later.
* :class:`CheckpointManager`, :func:`latest_checkpoint`, :func:`get_checkpoint_state` —
  numbered checkpoints in a directory, pruning, and the ``checkpoint`` state file.
* :func:`list_variables`, :func:`load_variable` — read a checkpoint without a program.

Files are written atomically (temporary name, fsync, rename, state file last) and validated
when read; see :mod:`tensorweave.train.checkpoint`.
"""
from tensorweave.train.checkpoint import (Checkpoint, CheckpointLoadStatus, CheckpointOptions,
                                          InitializationOnlyStatus, RNGState, list_variables, load_variable)
from tensorweave.train.manager import CheckpointManager, get_checkpoint_state, latest_checkpoint
from tensorweave.train.reader import CheckpointReader, load_checkpoint  # noqa: F401
from tensorweave.train.averaging import ExponentialMovingAverage  # noqa: F401
from tensorweave.train.coordination import ClusterSpec, Coordinator, checkpoints_iterator  # noqa: F401
from tensorweave.io.example_pb import (BytesList, Example, Feature, FeatureList, FeatureLists, Features,  # noqa: F401
                                       FloatList, Int64List, SequenceExample)

__all__ = ["Checkpoint", "CheckpointLoadStatus", "CheckpointOptions", "CheckpointManager", "InitializationOnlyStatus",
           "RNGState", "get_checkpoint_state", "latest_checkpoint", "list_variables", "load_variable",
           "BytesList", "Example", "Feature", "FeatureList", "FeatureLists", "Features", "FloatList", "Int64List",
           "SequenceExample", "CheckpointReader", "load_checkpoint", "ExponentialMovingAverage", "ClusterSpec",
           "Coordinator", "checkpoints_iterator"]
