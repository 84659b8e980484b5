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
from tensorweave import bool, config, linalg, math, print, random, tuple  # noqa: F401,A004
from tensorweave import estimator  # noqa: F401
from tensorweave.estimator import feature_column  # noqa: F401
from tensorweave.compat import v1_losses as losses  # noqa: F401
from tensorweave.compat import v1_metrics as metrics  # noqa: F401
from tensorweave.compat import v1_nn as nn  # noqa: F401
from tensorweave.compat import v1_summary as summary  # noqa: F401
from tensorweave.compat import v1_train as train  # noqa: F401
from tensorweave.ops.random_ops import (multinomial, random_normal, random_shuffle,  # noqa: F401
                                        random_uniform, set_random_seed, truncated_normal)
from tensorweave.core.context import disable_eager_execution, enable_eager_execution  # noqa: F401
from tensorweave.core.graph import get_default_graph, reset_default_graph  # noqa: F401
from tensorweave.ops.variables import (global_variables, global_variables_initializer,  # noqa: F401
                                       local_variables, local_variables_initializer, trainable_variables,
                                       variables_initializer)
from tensorweave.runtime.session import ConfigProto, InteractiveSession, Session, get_default_session  # noqa: F401
from tensorweave.compat.v1_queues import FIFOQueue, PaddingFIFOQueue, QueueBase, RandomShuffleQueue  # noqa: F401


class GraphKeys:
    GLOBAL_VARIABLES = "variables"
    TRAINABLE_VARIABLES = "trainable_variables"
    LOCAL_VARIABLES = "local_variables"
    UPDATE_OPS = "update_ops"
    LOSSES = "losses"
    SUMMARIES = "summaries"
    GLOBAL_STEP = "global_step"


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


def get_variable(name, shape=None, dtype=None, initializer=None, trainable=True, **kw):
    """Creates a variable (no variable-scope reuse; see the issue notes)."""
    from tensorweave.core import dtypes as _dt
    from tensorweave.ops.array_ops import zeros
    dtype = _dt.as_dtype(dtype or "float32")
    if initializer is None:
        init = lambda: zeros(shape, dtype)  # noqa: E731
    elif callable(initializer):
        init = lambda: initializer(shape, dtype=dtype)  # noqa: E731
    else:
        init = initializer
    from tensorweave.ops.variables import Variable
    return Variable(init, trainable=trainable, name=name, dtype=dtype)


def log(x, name=None):
    from tensorweave.ops.math_ops import log as _log
    return _log(x, name=name)


def to_float(x, name="ToFloat"):
    from tensorweave.ops.math_ops import cast
    return cast(x, "float32", name=name)


def to_int32(x, name="ToInt32"):
    from tensorweave.ops.math_ops import cast
    return cast(x, "int32", name=name)


def div(x, y, name=None):
    from tensorweave.ops.math_ops import divide, floordiv
    from tensorweave.core.convert import convert_to_tensor
    x = convert_to_tensor(x)
    return floordiv(x, y, name=name) if x.dtype.is_integer else divide(x, y, name=name)
