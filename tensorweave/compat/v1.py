"""TF1 names, so that TF1 tutorial code runs with ``import tensorweave.compat.v1 as tf``.

>>> import tensorweave.compat.v1 as tf
>>> g = tf.Graph()
>>> with g.as_default():
...     counter = tf.Variable(0, name="counter")
...     increment = tf.assign(counter, counter + 1)
...     init = tf.global_variables_initializer()
>>> with tf.Session(graph=g) as sess:
...     sess.run(init)
...     [int(sess.run(increment)) for _ in range(3)]
[1, 2, 3]
"""
from tensorweave import *  # noqa: F401,F403 - TF1 code uses the top-level names too
from tensorweave import bool, config, linalg, print, random, tuple  # noqa: F401,A004
from tensorweave.compat import v1_nn as nn  # noqa: F401
from tensorweave.compat import v1_math as math  # noqa: F401
from tensorweave.compat import v1_initializers as initializers  # noqa: F401
from tensorweave.compat.v1_rnn import reverse_sequence  # noqa: F401
from tensorweave.compat.v1_tensor_array import TensorArray, while_loop  # noqa: F401
from tensorweave.compat.v1_device import GPUOptions, GraphOptions, OptimizerOptions  # noqa: F401
from tensorweave.compat.v1_misc import *  # noqa: F401,F403 - TF1-only spellings and helpers
from tensorweave.compat.v1_asserts import *  # noqa: F401,F403 - tf.Assert, tf.assert_*, check_numerics
from tensorweave.compat.v1_state_ops import *  # noqa: F401,F403 - tf.scatter_update & co., count_up_to
from tensorweave.ops.functional_ops import foldl, foldr, map_fn, scan, vectorized_map  # noqa: F401 - TF2 kept them
from tensorweave.compat.v1_array_ops import *  # noqa: F401,F403 - space_to_depth, dynamic_partition...
from tensorweave.compat.v1_framework import *  # noqa: F401,F403 - disable_v2_behavior, make_template...
from tensorweave.compat.v1_nn_extra import conv2d_backprop_filter_v2, conv2d_backprop_input_v2  # noqa: F401
from tensorweave.compat.v1_dimension import Dimension, dimension_at_index  # noqa: F401
from tensorweave.compat.v1_graph_def import GraphDef, NodeDef, import_graph_def  # noqa: F401
from tensorweave.compat import v1_graph_util as graph_util  # noqa: F401
from tensorweave.compat.v1_string_hash import string_to_hash_bucket  # noqa: F401
from tensorweave.compat import v1_logging as logging  # noqa: F401
from tensorweave.compat import v1_gfile as gfile  # noqa: F401
from tensorweave.compat.v1_initializers import (constant_initializer, glorot_normal_initializer,  # noqa: F401
                                                glorot_uniform_initializer, ones_initializer,
                                                orthogonal_initializer, random_normal_initializer,
                                                random_uniform_initializer, truncated_normal_initializer,
                                                uniform_unit_scaling_initializer, variance_scaling_initializer,
                                                zeros_initializer)
from tensorweave.compat.v1_variable_scope import (AUTO_REUSE, PartitionedVariable, VariableScope,  # noqa: F401
                                                  fixed_size_partitioner, get_local_variable, get_variable,
                                                  get_variable_scope, min_max_variable_partitioner,
                                                  variable_op_scope, variable_scope)
from tensorweave.compat.v1_aliases import (to_bfloat16, to_complex64, to_complex128, to_double,  # noqa: F401
                                           to_float, to_int32, to_int64, install as _install_tf1_signatures)
from tensorweave.compat.v1_aliases import IO_NAMES as _v1_aliases_io_names
from tensorweave.compat import v1_moved as _v1_moved
from tensorweave import estimator  # noqa: F401
from tensorweave.estimator import feature_column  # noqa: F401
from tensorweave.compat import v1_losses as losses  # noqa: F401
from tensorweave.compat import v1_metrics as metrics  # noqa: F401
from tensorweave.compat import v1_summary as summary  # noqa: F401
from tensorweave.compat import v1_train as train  # noqa: F401
from tensorweave.ops.random_ops import (multinomial, random_normal, random_shuffle,  # noqa: F401
                                        random_uniform, set_random_seed, truncated_normal)
from tensorweave.core.context import disable_eager_execution, enable_eager_execution  # noqa: F401
from tensorweave.core.graph import get_default_graph, reset_default_graph  # noqa: F401
from tensorweave.ops.variables import (global_variables, global_variables_initializer,  # noqa: F401
                                       local_variables, local_variables_initializer, trainable_variables,
                                       variable_creator_scope, variables_initializer)
from tensorweave.runtime.session import ConfigProto, InteractiveSession, Session, get_default_session  # noqa: F401
from tensorweave.compat.v1_queues import (FIFOQueue, PaddingFIFOQueue, PriorityQueue, QueueBase,  # noqa: F401
                                          RandomShuffleQueue)
from tensorweave.compat.v1_readers import (FixedLengthRecordReader, IdentityReader, ReaderBase,  # noqa: F401
                                           TextLineReader, TFRecordReader, WholeFileReader)


class GraphKeys:
    GLOBAL_VARIABLES = "variables"
    TRAINABLE_VARIABLES = "trainable_variables"
    LOCAL_VARIABLES = "local_variables"
    UPDATE_OPS = "update_ops"
    LOSSES = "losses"
    SUMMARIES = "summaries"
    GLOBAL_STEP = "global_step"
    MODEL_VARIABLES = "model_variables"
    REGULARIZATION_LOSSES = "regularization_losses"
    ACTIVATIONS = "activations"
    INIT_OP = "init_op"
    LOCAL_INIT_OP = "local_init_op"
    READY_OP = "ready_op"
    SAVERS = "savers"
    TRAIN_OP = "train_op"
    QUEUE_RUNNERS = "queue_runners"
    TABLE_INITIALIZERS = "table_initializer"
    ASSET_FILEPATHS = "asset_filepaths"
    MOVING_AVERAGE_VARIABLES = "moving_average_variables"
    CONCATENATED_VARIABLES = "concatenated_variables"
    COND_CONTEXT = "cond_context"
    WHILE_CONTEXT = "while_context"
    EVAL_STEP = "eval_step"


def assign(ref, value, validate_shape=None, use_locking=None, name=None):
    return ref.assign(value, name=name)


def assign_add(ref, value, use_locking=None, name=None):
    return ref.assign_add(value, name=name)


def assign_sub(ref, value, use_locking=None, name=None):
    return ref.assign_sub(value, name=name)


def add_to_collection(name, value):
    get_default_graph().add_to_collection(name, value)


def get_collection(key, scope=None):
    return get_default_graph().get_collection(key, scope)


def div(x, y, name=None):
    from tensorweave.ops.math_ops import divide, floordiv
    from tensorweave.core.convert import convert_to_tensor
    x = convert_to_tensor(x)
    return floordiv(x, y, name=name) if x.dtype.is_integer else divide(x, y, name=name)


_v1_moved.install(globals(), _v1_moved.MOVED)
get_seed = random.get_seed
_install_tf1_signatures({"": globals()})


# Namespaces that import Keras or the data pipeline load on first use, as ``tw.keras`` does.
_LAZY = {"keras": "tensorweave.keras", "data": "tensorweave.compat.v1_data", "layers": "tensorweave.compat.v1_layers",
         "image": "tensorweave.compat.v1_image", "sets": "tensorweave.compat.v1_sets",
         "saved_model": "tensorweave.compat.v1_saved_model"}
# top-level names defined in a lazily loaded module: name -> module
_LAZY_NAMES = {"extract_image_patches": "tensorweave.compat.v1_image"}
globals().pop("image", None)   # tw.image, if the star import brought it: TF1's is v1_image


_SUMMARY_PROTOS = {"Summary": "summary_pb2", "SummaryMetadata": "summary_pb2", "HistogramProto": "summary_pb2",
                   "Event": "event_pb2", "SessionLog": "event_pb2", "LogMessage": "event_pb2"}


def __getattr__(name):
    if name in _LAZY:
        import importlib
        return importlib.import_module(_LAZY[name])
    if name in _LAZY_NAMES:
        import importlib
        globals()[name] = getattr(importlib.import_module(_LAZY_NAMES[name]), name)
        return globals()[name]
    if name in _SUMMARY_PROTOS:       # TensorBoard's protocol buffers, for FileWriter (tensorboard loads on use)
        from tensorweave.compat import v1_summary
        return getattr(v1_summary._proto(_SUMMARY_PROTOS[name]), name)
    from tensorweave.compat import v1_namespaces
    if name in v1_namespaces.NAMES:
        globals()[name] = v1_namespaces.build(name)
        return globals()[name]
    moved = _v1_moved.lazy(_v1_moved.MOVED, name)
    if moved is None and name in _v1_aliases_io_names:
        from tensorweave.compat.v1_aliases import io_table
        moved = io_table()[name]
    if moved is not None:
        globals()[name] = moved
        return moved
    raise AttributeError(f"module 'tensorweave.compat.v1' has no attribute '{name}'")
