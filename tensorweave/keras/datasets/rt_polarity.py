"""Sentence polarity dataset v1.0 (Pang & Lee, movie-review snippets) from its two plain-text
files, ``rt-polarity.pos`` and ``rt-polarity.neg`` (one sentence per line).

``path`` is the directory holding them (or one with an ``rt-polarity/`` folder); without it,
``$TENSORWEAVE_DATASETS`` is searched. Files in UTF-8 and Cornell's original Windows-1252 both
read.

>>> import os, tempfile
>>> from tensorweave.keras.datasets import rt_polarity
>>> d = tempfile.mkdtemp()
>>> _ = open(os.path.join(d, "rt-polarity.pos"), "w").write("a fine film\\ngood fun\\n")
>>> _ = open(os.path.join(d, "rt-polarity.neg"), "w").write("a dull film\\nbad\\n")
>>> texts, labels = rt_polarity.load_texts(d)
>>> texts[0], labels.tolist()
('a fine film', [1, 1, 0, 0])
>>> (x_train, y_train), (x_test, y_test) = rt_polarity.load_data(d, maxlen=5, test_split=0.5)
>>> x_train.shape, x_train.dtype
((2, 5), dtype('int32'))
"""
import numpy as np

from tensorweave.keras.datasets import _paths, text

FILES = {"pos": "rt-polarity.pos", "neg": "rt-polarity.neg"}


def _has_files(d):
    return all(_paths.first_existing(d, [f]) for f in FILES.values())


def _read_lines(path):
    with open(path, "rb") as f:
        raw = f.read()
    try:
        s = raw.decode("utf-8")
    except UnicodeDecodeError:
        s = raw.decode("cp1252", errors="replace")   # Cornell's original encoding
    return [line.strip() for line in s.splitlines() if line.strip()]


def load_texts(path=None):
    """``(texts, labels)``: a list of sentences (positive ones first) and int64 labels (1 positive)."""
    d = _paths.find_dir("rt-polarity", path, _has_files)
    pos = _read_lines(_paths.first_existing(d, [FILES["pos"]]))
    neg = _read_lines(_paths.first_existing(d, [FILES["neg"]]))
    labels = np.concatenate([np.ones(len(pos), np.int64), np.zeros(len(neg), np.int64)])
    return pos + neg, labels


def load_data(path=None, num_words=None, maxlen=None, test_split=0.2, seed=113, start_char=1, oov_char=2,
              index_from=3, skip_top=0, padding="pre", truncating="pre", return_vocabulary=False):
    """``(x_train, y_train), (x_test, y_test)`` with sentences as int32 id sequences padded to
    ``maxlen`` (the longest sentence when None), in ``keras.datasets.imdb``'s id conventions
    (see ``text``): 0 pads, 1 starts, 2 is out of vocabulary, ids beyond ``num_words`` become 2.
    The split is stratified and fixed by ``seed``; the vocabulary is counted on the training
    sentences only, so test words unseen in training are out of vocabulary. Labels are int64
    (1 positive). ``return_vocabulary=True`` adds the ``text.Vocabulary`` as a third item."""
    texts, labels = load_texts(path)
    train, test = _paths.split_indices(labels, test_split, seed)
    vocab = text.Vocabulary.fit([texts[i] for i in train], num_words=num_words, start_char=start_char,
                                oov_char=oov_char, index_from=index_from, skip_top=skip_top)

    if maxlen is None:   # one length for both splits: the longest sentence of either
        maxlen = max((len(s) for s in vocab.to_sequences(texts)), default=0)

    def encode(idx):
        seqs = vocab.to_sequences([texts[i] for i in idx])
        return text.pad_sequences(seqs, maxlen=maxlen, padding=padding, truncating=truncating)
    out = (encode(train), labels[train]), (encode(test), labels[test])
    return out + (vocab,) if return_vocabulary else out
