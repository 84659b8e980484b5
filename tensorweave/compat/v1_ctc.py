"""``tf.nn.ctc_greedy_decoder`` and ``tf.nn.collapse_repeated``: best-path CTC decoding, built
from tensorweave ops (so it runs eagerly, in graphs and in ``tw.function`` alike).

At each step the most likely class wins; runs of one class merge (``merge_repeated``) and the
blank (``blank_index``, default the last class) is dropped. Decoded labels are the input's class
ids; ``neg_sum_logits`` is minus the sum over the steps of the winning logit, as TF.

>>> import numpy as np
>>> import tensorweave.compat.v1 as tf
>>> logits = np.eye(3, dtype=np.float32)[[0, 0, 2, 0, 1]][:, None, :]     # [time, batch, classes]
>>> (decoded,), _ = tf.nn.ctc_greedy_decoder(logits, [5])
>>> decoded.values.numpy().tolist()
[0, 0, 1]
"""
import tensorweave as tw
from tensorweave.core import dtypes as _dt

__all__ = ["ctc_greedy_decoder", "collapse_repeated"]


def _positions(keep):
    """For ``keep`` [batch, time] (bool): the sparse indices of the kept entries, packed to the left
    of each row, and the row lengths."""
    counts = tw.reduce_sum(tw.cast(keep, _dt.int64), axis=1)
    slot = tw.math.cumsum(tw.cast(keep, _dt.int64), axis=1) - 1
    where = tw.where(keep)
    indices = tw.stack([where[:, 0], tw.gather_nd(slot, where)], axis=1)
    return indices, counts


def ctc_greedy_decoder(inputs, sequence_length, merge_repeated=True, blank_index=None):
    """Best-path decoding of ``inputs`` (logits ``[max_time, batch, num_classes]``) within each
    ``sequence_length``; returns ``([SparseTensor of labels [batch, longest]], neg_sum_logits [batch, 1])``."""
    logits = tw.convert_to_tensor(inputs)
    if logits.shape.rank is not None and logits.shape.rank != 3:
        raise ValueError(f"ctc_greedy_decoder: inputs must be [max_time, batch, num_classes] logits, got shape "
                         f"{logits.shape}")
    num_classes = tw.shape(logits, out_type=_dt.int64)[2]
    blank = num_classes - 1 if blank_index is None else (
        tw.constant(blank_index, _dt.int64) % num_classes)
    best = tw.transpose(tw.argmax(logits, axis=2, output_type=_dt.int64), [1, 0])        # [batch, time]
    steps = tw.shape(best)[1]
    valid = tw.sequence_mask(tw.convert_to_tensor(sequence_length), steps)
    keep = tw.logical_and(valid, tw.not_equal(best, blank))
    if merge_repeated:
        previous = tw.concat([tw.fill(tw.stack([tw.shape(best)[0], 1]), tw.constant(-1, _dt.int64)), best[:, :-1]],
                             axis=1)
        keep = tw.logical_and(keep, tw.not_equal(best, previous))
    indices, counts = _positions(keep)
    decoded = tw.SparseTensor(indices, tw.boolean_mask(best, keep),
                              tw.stack([tw.shape(best, out_type=_dt.int64)[0], tw.reduce_max(counts)]))
    top = tw.transpose(tw.reduce_max(logits, axis=2), [1, 0])
    neg_sum_logits = -tw.reduce_sum(tw.where(valid, top, tw.zeros_like(top)), axis=1, keepdims=True)
    return [decoded], neg_sum_logits


def collapse_repeated(labels, seq_length, name=None):
    """``labels`` [batch, max_len] with runs of one label merged within ``seq_length``, padded with
    zeros to the longest result; returns ``(collapsed labels, new lengths)``."""
    labels = tw.convert_to_tensor(labels)
    steps = tw.shape(labels)[1]
    valid = tw.sequence_mask(tw.convert_to_tensor(seq_length), steps)
    first = tw.concat([tw.ones_like(labels[:, :1], dtype=_dt.bool_), tw.not_equal(labels[:, 1:], labels[:, :-1])],
                      axis=1)
    keep = tw.logical_and(valid, first)
    indices, counts = _positions(keep)
    width = tw.reduce_max(counts)
    out = tw.scatter_nd(indices, tw.boolean_mask(labels, keep),
                        tw.stack([tw.shape(labels, out_type=_dt.int64)[0], width]))
    return out, tw.cast(counts, tw.convert_to_tensor(seq_length).dtype)
