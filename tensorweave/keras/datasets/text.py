"""A small word vocabulary and ``pad_sequences``, with the conventions of
``keras.datasets.imdb``: words are ranked by frequency (1 = most frequent) and a word of rank
``r`` gets the id ``r + index_from``; id 0 pads, ``start_char`` (1) starts each sequence and
``oov_char`` (2) stands for words outside the vocabulary.

>>> from tensorweave.keras.datasets import text
>>> vocab = text.Vocabulary.fit(["a b b", "b c"])
>>> vocab.word_index
{'b': 1, 'a': 2, 'c': 3}
>>> seqs = vocab.to_sequences(["b a d"])
>>> seqs
[[1, 4, 5, 2]]
>>> text.pad_sequences(seqs, maxlen=6).tolist()
[[0, 0, 1, 4, 5, 2]]
"""
import collections

import numpy as np


def tokenize(text):
    """Lower-cases and splits on whitespace (rt-polarity is already tokenised that way)."""
    return text.lower().split()


class Vocabulary:
    """Word ranks by frequency (ties: alphabetical, so the ranking does not depend on order)."""

    def __init__(self, word_index, num_words=None, start_char=1, oov_char=2, index_from=3, skip_top=0):
        self.word_index = dict(word_index)
        self.num_words, self.start_char, self.oov_char = num_words, start_char, oov_char
        self.index_from, self.skip_top = index_from, skip_top

    @classmethod
    def fit(cls, texts, **options):
        counts = collections.Counter(w for t in texts for w in tokenize(t))
        ranked = sorted(counts, key=lambda w: (-counts[w], w))
        return cls({w: r for r, w in enumerate(ranked, 1)}, **options)

    def to_sequences(self, texts):
        """Lists of ids: ``start_char``, then each word's id; ``oov_char`` replaces unknown words,
        ids at or above ``num_words`` (which counts the reserved ids, as in Keras) and the
        ``skip_top`` most frequent words."""
        wi, off, oov, limit = self.word_index, self.index_from, self.oov_char, self.num_words
        out = []
        for t in texts:
            seq = [] if self.start_char is None else [self.start_char]
            for w in tokenize(t):
                r = wi.get(w)
                if r is None or r <= self.skip_top or (limit is not None and r + off >= limit):
                    seq.append(oov)
                else:
                    seq.append(r + off)
            out.append(seq)
        return out

    def __len__(self):
        return len(self.word_index)


def pad_sequences(sequences, maxlen=None, dtype="int32", padding="pre", truncating="pre", value=0):
    """Pads (or truncates) lists of ids to one length, like ``keras.utils.pad_sequences``:
    ``maxlen=None`` uses the longest; "pre" pads or cuts at the start, "post" at the end."""
    if padding not in ("pre", "post") or truncating not in ("pre", "post"):
        raise ValueError(f"padding and truncating must be 'pre' or 'post', got {padding!r}, {truncating!r}")
    lengths = [len(s) for s in sequences]
    n = max(lengths, default=0) if maxlen is None else int(maxlen)
    out = np.full((len(sequences), n), value, dtype=dtype)
    for i, s in enumerate(sequences):
        if not len(s) or n == 0:
            continue
        s = np.asarray(s[-n:] if truncating == "pre" else s[:n], dtype=dtype)
        if padding == "pre":
            out[i, n - len(s):] = s
        else:
            out[i, :len(s)] = s
    return out
