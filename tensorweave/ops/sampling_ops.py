"""Candidate samplers and the sampled losses of ``tf.nn`` (and ``tf.random``): ``nce_loss`` and ``sampled_softmax_loss``.

A sampler draws ``num_sampled`` class ids from a fixed distribution over ``[0, range_max)`` and
returns ``(sampled_candidates, true_expected_count, sampled_expected_count)``: how many times each
true class and each sampled id is expected to appear among the draws. With ``unique=True`` draws
repeat until ``num_sampled`` distinct ids are found, and the expected count of an id of
probability ``p`` after ``n`` draws is ``1 - (1 - p)**n``; otherwise it is ``p * num_sampled``.
The draws follow the seed rules of ``tw.random`` (a graph seed and an op seed replay them).

The losses score each example's true classes and the shared sampled classes with
``inputs @ weights[ids].T + biases[ids]``, subtract the log of the expected counts, and take a
sigmoid (NCE) or softmax cross-entropy; ``weights`` may be a list of shards (``partition_strategy``
``"mod"``, TF1's default, or ``"div"``).

>>> import numpy as np
>>> import tensorweave.compat.v1 as tf
>>> g = tf.Graph()
>>> with g.as_default():
...     tf.set_random_seed(0)
...     w = tf.constant(np.ones((10, 4), np.float32) * 0.1)
...     loss = tf.nn.nce_loss(w, tf.zeros([10]), labels=[[1], [2]], inputs=tf.ones([2, 4]), num_sampled=3,
...                           num_classes=10)
>>> with tf.Session(graph=g) as sess:
...     sess.run(loss).shape
(2,)
"""
import math

import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.graph import name_scope
from tensorweave.ops import array_ops as _a
from tensorweave.ops import math_ops as _m
from tensorweave.ops import nn_ops as _nn
from tensorweave.ops import random_ops as _rand
from tensorweave.ops import reduce_ops as _r
from tensorweave.ops.script_ops import numpy_function

__all__ = ["log_uniform_candidate_sampler", "uniform_candidate_sampler", "fixed_unigram_candidate_sampler",
           "all_candidate_sampler",
           "compute_accidental_hits", "nce_loss", "sampled_softmax_loss"]


def _draw(probabilities, num_sampled, unique, seed_value):
    """``(candidates, draws)``: ``num_sampled`` ids (distinct when ``unique``) and how many draws it took."""
    rng = np.random.default_rng(int(seed_value))
    n = len(probabilities)
    if not unique:
        return rng.choice(n, size=num_sampled, p=probabilities).astype(np.int64), np.int64(num_sampled)
    seen, out, tries = set(), [], 0
    while len(out) < num_sampled:
        batch = rng.choice(n, size=max(num_sampled, 16), p=probabilities)
        for c in batch:
            tries += 1
            if c not in seen:
                seen.add(c)
                out.append(c)
                if len(out) == num_sampled:
                    break
    return np.array(out, np.int64), np.int64(tries)


def _sampler(name, probabilities, true_classes, num_true, num_sampled, unique, range_max, seed):
    if unique and num_sampled > range_max:
        raise ValueError(f"{name}: num_sampled ({num_sampled}) must not exceed range_max ({range_max}) when unique")
    if num_sampled < 1:
        raise ValueError(f"{name}: num_sampled must be at least 1, got {num_sampled}")
    probabilities = np.asarray(probabilities, np.float64)
    with name_scope(name):
        true_classes = _m.cast(convert_to_tensor(true_classes), _dt.int64)
        if true_classes.shape.rank is not None and true_classes.shape.rank != 2:
            raise ValueError(f"{name}: true_classes must be [batch, num_true], got shape {true_classes.shape}")
        # The seed of the NumPy draws is itself a random op, so TF's graph/op seed rules apply.
        seed_value = _rand.uniform([], 0, 2 ** 31 - 1, dtype=_dt.int64, seed=seed)
        sampled, tries = numpy_function(lambda s: _draw(probabilities, num_sampled, unique, s), [seed_value],
                                        [_dt.int64, _dt.int64], name="draw")
        sampled, tries = _a.reshape(sampled, [num_sampled]), _a.reshape(tries, [])
        table = convert_to_tensor(probabilities.astype(np.float32))

        def expected(ids):
            p = _a.gather(table, ids)
            if not unique:
                return _m.multiply(p, float(num_sampled))
            # 1 - (1 - p)**tries, as -expm1(tries * log1p(-p)) for accuracy at small p.
            return _m.negative(_m.expm1(_m.multiply(_m.cast(tries, _dt.float32), _m.log1p(_m.negative(p)))))
        return sampled, expected(true_classes), expected(sampled)


def log_uniform_candidate_sampler(true_classes, num_true, num_sampled, unique, range_max, seed=None, name=None):
    """Samples ids with ``P(k) = log((k + 2) / (k + 1)) / log(range_max + 1)`` (Zipf-like, for ids
    sorted by decreasing frequency)."""
    k = np.arange(range_max, dtype=np.float64)
    p = (np.log(k + 2) - np.log(k + 1)) / math.log(range_max + 1)
    return _sampler(name or "LogUniformCandidateSampler", p / p.sum(), true_classes, num_true, num_sampled, unique,
                    range_max, seed)


def uniform_candidate_sampler(true_classes, num_true, num_sampled, unique, range_max, seed=None, name=None):
    """Samples ids uniformly from ``[0, range_max)``."""
    return _sampler(name or "UniformCandidateSampler", np.full(range_max, 1.0 / range_max), true_classes, num_true,
                    num_sampled, unique, range_max, seed)


def fixed_unigram_candidate_sampler(true_classes, num_true, num_sampled, unique, range_max, vocab_file="",
                                    distortion=1.0, num_reserved_ids=0, num_shards=1, shard=0, unigrams=(),
                                    seed=None, name=None):
    """Samples ids with probability proportional to ``unigrams[k] ** distortion`` (``vocab_file``: one
    ``word,count`` per line, counts in the last field). Reserved ids (the first ``num_reserved_ids``) get
    probability 0."""
    if vocab_file:
        with open(vocab_file, encoding="utf-8") as f:
            counts = [float(line.rstrip("\n").split(",")[-1]) for line in f if line.strip()]
    else:
        counts = [float(c) for c in unigrams]
    if num_shards != 1:
        raise NotImplementedError("fixed_unigram_candidate_sampler: num_shards > 1 is not supported")
    weights = np.concatenate([np.zeros(num_reserved_ids), np.asarray(counts, np.float64) ** distortion])
    if len(weights) != range_max:
        raise ValueError(f"fixed_unigram_candidate_sampler: {len(weights)} unigrams (with {num_reserved_ids} reserved "
                         f"ids) for range_max={range_max}")
    if (weights < 0).any() or weights.sum() <= 0:
        raise ValueError("fixed_unigram_candidate_sampler: unigrams must be non-negative with a positive sum")
    return _sampler(name or "FixedUnigramCandidateSampler", weights / weights.sum(), true_classes, num_true,
                    num_sampled, unique, range_max, seed)


def all_candidate_sampler(true_classes, num_true, num_sampled, unique, seed=None, name=None):
    """Every class ``0 .. num_sampled - 1``, each with expected count 1 (for testing sampled losses)."""
    with name_scope(name or "AllCandidateSampler"):
        true_classes = _m.cast(convert_to_tensor(true_classes), _dt.int64)
        sampled = convert_to_tensor(np.arange(num_sampled, dtype=np.int64))
        return (sampled, _a.ones_like(_m.cast(true_classes, _dt.float32)),
                convert_to_tensor(np.ones(num_sampled, np.float32)))


def compute_accidental_hits(true_classes, sampled_candidates, num_true, seed=None, name=None):
    """``(indices, ids, weights)``: the example row and the position among the sampled candidates of each
    sampled id equal to one of the example's true classes, and ``-FLT_MAX`` weights (added to those
    logits, they remove the hits from a softmax)."""
    def hits(t, s):
        # TF's order: per row, per true class in order, the (last) position of that id among the samples
        last = {int(v): i for i, v in enumerate(s)}
        pairs = [(r, last[int(c)]) for r in range(t.shape[0]) for c in t[r] if int(c) in last]
        rows = np.array([p[0] for p in pairs], np.int32)
        cols = np.array([p[1] for p in pairs], np.int64)
        return rows, cols, np.full(len(pairs), -np.finfo(np.float32).max, np.float32)
    true_classes = _m.cast(convert_to_tensor(true_classes), _dt.int64)
    return numpy_function(hits, [true_classes, _m.cast(convert_to_tensor(sampled_candidates), _dt.int64)],
                          [_dt.int32, _dt.int64, _dt.float32], name=name or "ComputeAccidentalHits")


def _sampled_logits(weights, biases, labels, inputs, num_sampled, num_classes, num_true, sampled_values,
                    remove_accidental_hits, partition_strategy, seed):
    inputs = convert_to_tensor(inputs)
    labels = _m.cast(convert_to_tensor(labels), _dt.int64)
    if labels.shape.rank == 1:
        labels = _a.expand_dims(labels, 1)
    if sampled_values is None:
        sampled_values = log_uniform_candidate_sampler(labels, num_true, num_sampled, True, num_classes, seed=seed)
    sampled, true_expected, sampled_expected = (_a.stop_gradient(convert_to_tensor(v)) for v in sampled_values)
    sampled = _m.cast(sampled, _dt.int64)
    labels_flat = _a.reshape(labels, [-1])
    shards = list(weights) if isinstance(weights, (list, tuple)) else weights
    bias_shards = list(biases) if isinstance(biases, (list, tuple)) else biases
    true_w = _nn.embedding_lookup(shards, labels_flat, partition_strategy=partition_strategy)
    sampled_w = _nn.embedding_lookup(shards, sampled, partition_strategy=partition_strategy)
    true_b = _nn.embedding_lookup(bias_shards, labels_flat, partition_strategy=partition_strategy)
    sampled_b = _nn.embedding_lookup(bias_shards, sampled, partition_strategy=partition_strategy)
    dim = inputs.shape[-1]
    true_w = _a.reshape(true_w, [-1, num_true, dim])
    true_logits = _r.reduce_sum(_m.multiply(_a.expand_dims(inputs, 1), true_w), axis=2)
    true_logits = _m.add(true_logits, _a.reshape(true_b, [-1, num_true]))
    sampled_logits = _m.add(_m.matmul(inputs, sampled_w, transpose_b=True), sampled_b)
    if remove_accidental_hits:
        hit = _r.reduce_any(_m.equal(_a.expand_dims(labels, 2), _a.reshape(sampled, [1, 1, -1])), axis=1)
        sampled_logits = _m.add(sampled_logits, _m.multiply(_m.cast(hit, sampled_logits.dtype),
                                                            -float(np.finfo(np.float32).max)))
    true_logits = _m.subtract(true_logits, _m.log(_m.cast(true_expected, true_logits.dtype)))
    sampled_logits = _m.subtract(sampled_logits, _m.log(_m.cast(sampled_expected, sampled_logits.dtype)))
    logits = _a.concat([true_logits, sampled_logits], axis=1)
    targets = _a.concat([_m.divide(_a.ones_like(true_logits), float(num_true)), _a.zeros_like(sampled_logits)], 1)
    return logits, targets


def nce_loss(weights, biases, labels, inputs, num_sampled, num_classes, num_true=1, sampled_values=None,
             remove_accidental_hits=False, partition_strategy="mod", name="nce_loss"):
    """Noise-contrastive estimation: per example, the sigmoid cross-entropy of its true classes (target
    ``1 / num_true``) and the sampled classes (target 0), summed: a ``[batch]`` loss."""
    with name_scope(name):
        logits, targets = _sampled_logits(weights, biases, labels, inputs, num_sampled, num_classes, num_true,
                                          sampled_values, remove_accidental_hits, partition_strategy, None)
        losses = _nn.sigmoid_cross_entropy_with_logits(labels=targets, logits=logits)
        return _r.reduce_sum(losses, axis=1)


def sampled_softmax_loss(weights, biases, labels, inputs, num_sampled, num_classes, num_true=1, sampled_values=None,
                         remove_accidental_hits=True, partition_strategy="mod", name="sampled_softmax_loss",
                         seed=None):
    """The softmax cross-entropy over each example's true classes and the sampled ones: ``[batch]``."""
    with name_scope(name):
        logits, targets = _sampled_logits(weights, biases, labels, inputs, num_sampled, num_classes, num_true,
                                          sampled_values, remove_accidental_hits, partition_strategy, seed)
        return _nn.softmax_cross_entropy_with_logits(_a.stop_gradient(targets), logits)
