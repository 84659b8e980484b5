"""``tw.nn``: neural-network ops (activations, softmax and losses, convolution, pooling,
normalization, embeddings, dropout)."""
from tensorweave.ops.math_ops import (elu, gelu, leaky_relu, relu, relu6, selu, sigmoid, silu,  # noqa: F401
                                      softplus, softsign, swish, tanh)
from tensorweave.ops.nn_ops import *  # noqa: F401,F403
from tensorweave.ops.random_ops import dropout  # noqa: F401
from tensorweave.ops.reduce_ops import moments  # noqa: F401
from tensorweave.ops.sort_ops import top_k  # noqa: F401
from tensorweave.ops.rnn_ops import gru_sequence, lstm_sequence, simple_rnn_sequence  # noqa: F401
from tensorweave.ops.nn_extra_ops import *  # noqa: F401,F403
from tensorweave.ops.math_extra_ops import in_top_k, zero_fraction  # noqa: F401
from tensorweave.ops.sampling_ops import (  # noqa: F401
    all_candidate_sampler, compute_accidental_hits, fixed_unigram_candidate_sampler)
from tensorweave.ops import sampling_ops as _sampled


def nce_loss(weights, biases, labels, inputs, num_sampled, num_classes, num_true=1, sampled_values=None,
             remove_accidental_hits=False, name="nce_loss"):
    """TF2's noise-contrastive estimation loss per example (``weights`` shards split ``"div"``-wise)."""
    return _sampled.nce_loss(weights, biases, labels, inputs, num_sampled, num_classes, num_true, sampled_values,
                             remove_accidental_hits, partition_strategy="div", name=name)


def sampled_softmax_loss(weights, biases, labels, inputs, num_sampled, num_classes, num_true=1,
                         sampled_values=None, remove_accidental_hits=True, seed=None, name="sampled_softmax_loss"):
    """TF2's sampled softmax loss per example (``weights`` shards split ``"div"``-wise)."""
    return _sampled.sampled_softmax_loss(weights, biases, labels, inputs, num_sampled, num_classes, num_true,
                                         sampled_values, remove_accidental_hits, partition_strategy="div",
                                         name=name, seed=seed)

from tensorweave.core.signatures import check_namespace as _check_namespace  # noqa: E402
_check_namespace(globals())
