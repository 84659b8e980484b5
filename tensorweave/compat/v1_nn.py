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


def dropout(x, keep_prob=None, noise_shape=None, seed=None, name=None, rate=None):
    """TF1's dropout: keeps each element with probability ``keep_prob`` (or drops it with
    ``rate``, TF1's later spelling; give exactly one) and scales the kept ones by ``1 / keep_prob``.

    >>> import tensorweave as tw
    >>> import tensorweave.compat.v1 as tf
    >>> y = tf.nn.dropout(tw.ones([1000]), keep_prob=0.8, seed=1).numpy()
    >>> sorted(set(y.tolist())), bool(0.75 < (y > 0).mean() < 0.85)
    ([0.0, 1.25], True)
    """
    import numbers

    from tensorweave.core.tensor import Tensor
    from tensorweave.ops import random_ops
    if (keep_prob is None) == (rate is None):
        raise ValueError("tf.compat.v1.nn.dropout: give exactly one of keep_prob and rate "
                         f"(got keep_prob={keep_prob!r}, rate={rate!r})")
    if keep_prob is not None:
        if isinstance(keep_prob, numbers.Real) and not isinstance(keep_prob, bool):
            if not 0 < keep_prob <= 1:
                raise ValueError(f"keep_prob must be a scalar tensor or a float in the range (0, 1], got {keep_prob}")
            rate = 1.0 - float(keep_prob)
        elif isinstance(keep_prob, Tensor) or hasattr(keep_prob, "dtype"):
            from tensorweave.ops.math_ops import subtract
            rate = subtract(1.0, keep_prob)
        else:
            raise ValueError(f"keep_prob must be a scalar tensor or a float in the range (0, 1], got {keep_prob!r}")
    return random_ops.dropout(x, rate, noise_shape=noise_shape, seed=seed, name=name)


def in_top_k(predictions, targets, k, name=None):
    """Whether each target's score is among the ``k`` largest of its row (ties at the boundary
    count as in; rows with non-finite scores give False), as TF1's ``in_top_k``.

    >>> import tensorweave.compat.v1 as tf
    >>> tf.nn.in_top_k([[0.1, 0.9, 0.5], [0.3, 0.3, 0.2]], [2, 1], 1).numpy().tolist()
    [False, True]
    """
    from tensorweave.core.convert import convert_to_tensor
    from tensorweave.ops import array_ops, math_ops, reduce_ops
    p = convert_to_tensor(predictions)
    t = math_ops.cast(convert_to_tensor(targets), "int32")
    target_score = array_ops.gather(p, array_ops.expand_dims(t, 1), axis=1, batch_dims=1)
    better = reduce_ops.reduce_sum(math_ops.cast(math_ops.greater(p, target_score), "int32"), axis=1)
    finite = reduce_ops.reduce_all(math_ops.is_finite(p), axis=1)
    return math_ops.logical_and(math_ops.less(better, k), finite, name=name)


from tensorweave.compat import v1_rnn_cell as rnn_cell  # noqa: E402,F401
from tensorweave.compat.v1_nn_extra import *  # noqa: E402,F401,F403 - crelu, lrn, moments helpers, conv backprops...
from tensorweave.compat.v1_ctc import collapse_repeated, ctc_greedy_decoder  # noqa: E402,F401
from tensorweave.compat.v1_rnn import (bidirectional_dynamic_rnn, dynamic_rnn, raw_rnn,  # noqa: E402,F401
                                       static_bidirectional_rnn, static_rnn)
from tensorweave.compat.v1_aliases import install as _install  # noqa: E402
from tensorweave.compat import v1_moved as _v1_moved  # noqa: E402
_v1_moved.install(globals(), _v1_moved.MOVED_NN)
_install({"nn": globals()})
