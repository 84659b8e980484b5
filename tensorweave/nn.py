"""``tw.nn``: neural-network ops (activations, softmax and losses, convolution, pooling,
normalization, embeddings, dropout)."""
from tensorweave.ops.math_ops import (elu, gelu, leaky_relu, relu, relu6, selu, sigmoid, silu,  # noqa: F401
                                      softplus, softsign, swish, tanh)
from tensorweave.ops.nn_ops import *  # noqa: F401,F403
from tensorweave.ops.random_ops import dropout  # noqa: F401
from tensorweave.ops.reduce_ops import moments  # noqa: F401
from tensorweave.ops.sort_ops import top_k  # noqa: F401
from tensorweave.ops.rnn_ops import gru_sequence, lstm_sequence, simple_rnn_sequence  # noqa: F401

from tensorweave.core.signatures import check_namespace as _check_namespace  # noqa: E402
_check_namespace(globals())
