"""``tf.compat.v1.nn``: ``tw.nn`` with the two TF1 defaults that differ from TF2.

- ``softmax_cross_entropy_with_logits`` does not back-propagate into ``labels``;
- ``embedding_lookup`` shards by the ``"mod"`` partition strategy.
"""
from tensorweave.nn import *  # noqa: F401,F403
from tensorweave.ops import nn_ops as _nn
from tensorweave.ops.array_ops import stop_gradient as _stop_gradient
from tensorweave.compat.v1_sampled_losses import (all_candidate_sampler, compute_accidental_hits,  # noqa: F401
                                                  fixed_unigram_candidate_sampler, log_uniform_candidate_sampler,
                                                  nce_loss, sampled_softmax_loss, uniform_candidate_sampler)


def softmax_cross_entropy_with_logits(_sentinel=None, labels=None, logits=None, dim=-1, name=None, axis=None):
    return _nn.softmax_cross_entropy_with_logits(_stop_gradient(labels), logits,
                                                 axis=dim if axis is None else axis, name=name)


def softmax_cross_entropy_with_logits_v2(labels, logits, axis=-1, name=None, dim=None):
    return _nn.softmax_cross_entropy_with_logits(labels, logits, axis=axis if dim is None else dim, name=name)


def embedding_lookup(params, ids, partition_strategy="mod", name=None, validate_indices=True, max_norm=None):
    return _nn.embedding_lookup(params, ids, max_norm=max_norm, name=name, partition_strategy=partition_strategy)
