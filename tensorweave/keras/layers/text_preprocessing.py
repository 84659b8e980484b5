"""Vocabulary layers: StringLookup, IntegerLookup and TextVectorization (Keras 3's index layout:
the mask token (int mode only), then the OOV token, then the vocabulary by decreasing frequency,
ties in decreasing token order).

>>> import numpy as np
>>> from tensorweave import keras
>>> tv = keras.layers.TextVectorization()
>>> tv.adapt(np.array(["The cat sat.", "the dog"]))
>>> tv.get_vocabulary()
['', '[UNK]', 'the', 'sat', 'dog', 'cat']
>>> tv(np.array(["the bird sat"])).numpy().tolist()
[[2, 1, 3]]
"""
import collections

import numpy as np

import tensorweave as tw
from tensorweave.keras.engine.layer import Layer
from tensorweave.keras.layers.preprocessing import _adapt_array, _encode
from tensorweave.ops import text_ops

_MODES = ("int", "one_hot", "multi_hot", "count", "tf_idf")


def _ranked(counts, limit):
    items = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    return [k for k, _ in (items if limit is None else items[:max(limit, 0)])]


def _plain(v):
    return v.item() if isinstance(v, np.generic) else v


class _IndexLookup(Layer):
    _string = True

    def __init__(self, max_tokens=None, num_oov_indices=1, mask_token=None, oov_token="[UNK]", vocabulary=None,
                 idf_weights=None, invert=False, output_mode="int", sparse=False, pad_to_max_tokens=False, **kwargs):
        kwargs.pop("vocabulary_size", None)
        for k in ("encoding", "oov_method", "salt", "vocabulary_dtype"):
            kwargs.pop(k, None)
        # Keras: int64 indices and counts, float32 tf-idf weights; tokens when inverting
        out = ("string" if self._string else "int64") if invert else "float32" if output_mode == "tf_idf" else "int64"
        kwargs.setdefault("dtype", out)
        super().__init__(**kwargs)
        name = type(self).__name__
        if output_mode not in _MODES:
            raise ValueError(f"{name}: output_mode must be one of {_MODES}, got {output_mode!r}")
        if num_oov_indices not in (0, 1):
            raise ValueError(f"{name}: num_oov_indices={num_oov_indices} needs FarmHash bucketing of OOV tokens, "
                             "which tensorweave does not have; use 0 or 1")
        if invert and output_mode != "int":
            raise ValueError(f"{name}: invert=True needs output_mode='int', got {output_mode!r}")
        if sparse:
            raise ValueError(f"{name}: sparse=True needs sparse tensors, which tensorweave does not have")
        self.max_tokens = max_tokens
        self.num_oov_indices = int(num_oov_indices)
        self.mask_token = mask_token
        self.oov_token = oov_token
        self.invert = bool(invert)
        self.output_mode = output_mode
        self.sparse = False
        self.pad_to_max_tokens = bool(pad_to_max_tokens)
        self._vocab = []
        self._idf = None
        if vocabulary is not None:
            self.set_vocabulary(vocabulary, idf_weights)

    # ---- vocabulary --------------------------------------------------------------------------------
    def _uses_mask(self):
        return self.mask_token is not None and self.output_mode == "int"

    def _prefix(self):
        return ([self.mask_token] if self._uses_mask() else []) + [self.oov_token] * self.num_oov_indices

    def get_vocabulary(self, include_special_tokens=True):
        return (self._prefix() if include_special_tokens else []) + list(self._vocab)

    def vocabulary_size(self):
        return len(self._prefix()) + len(self._vocab)

    def set_vocabulary(self, vocabulary, idf_weights=None):
        vocab = [_plain(v) for v in (vocabulary.tolist() if hasattr(vocabulary, "tolist") else vocabulary)]
        special = {self.mask_token, self.oov_token}
        vocab = [v for v in vocab if v not in special or v is None]
        if len(set(vocab)) != len(vocab):
            raise ValueError(f"{type(self).__name__}: the vocabulary has repeated tokens")
        if self.output_mode == "tf_idf":
            if idf_weights is None:
                raise ValueError(f"{type(self).__name__}: output_mode='tf_idf' needs idf_weights with the vocabulary")
            self._idf = [float(w) for w in idf_weights]
        self._vocab = vocab

    def _adapt_counts(self, values):
        counts = collections.Counter(_plain(v) for v in values)
        for special in (self.mask_token, self.oov_token):
            counts.pop(special, None)
        if self._string:
            counts.pop("", None) if self.mask_token == "" else None
        limit = None if self.max_tokens is None else self.max_tokens - len(self._prefix())
        return _ranked(counts, limit)

    def _tokens_of(self, data):
        return _adapt_array(data).ravel()

    def adapt(self, data, batch_size=None, steps=None):
        arr = _adapt_array(data)
        if self._string:
            arr = arr.astype(object)
            arr = np.vectorize(lambda v: v.decode("utf-8") if isinstance(v, bytes) else str(v), otypes=[object])(arr)
        self._vocab = self._adapt_counts(arr.ravel())
        if self.output_mode == "tf_idf":
            docs = arr.reshape(arr.shape[0], -1) if arr.ndim > 1 else arr.reshape(-1, 1)
            self._set_idf([set(_plain(v) for v in row) for row in docs])

    def _set_idf(self, doc_sets):
        n = len(doc_sets)
        df = np.array([sum(tok in d for d in doc_sets) for tok in self._vocab], dtype=np.float64)
        idf = np.log(1.0 + n / (1.0 + df))
        self._idf = idf.tolist()

    # ---- call ------------------------------------------------------------------------------------------
    def _depth(self):
        if self.pad_to_max_tokens and self.max_tokens is not None:
            return int(self.max_tokens)
        return self.vocabulary_size()

    def _ids(self, tokens):
        offset = len(self._prefix())
        oov = (1 if self._uses_mask() else 0) if self.num_oov_indices else -1
        ids = text_ops.vocabulary_lookup(tokens, self._vocab, range(offset, offset + len(self._vocab)), oov)
        if self.mask_token is not None:
            is_mask = tw.equal(tokens, tw.constant(self.mask_token, tokens.dtype))
            ids = tw.where(is_mask, tw.fill(tw.shape(ids), tw.constant(0 if self._uses_mask() else -1, tw.int64)),
                           ids)
        if not self.num_oov_indices and isinstance(ids, tw.EagerTensor) and ids.shape.num_elements() and \
                bool(tw.reduce_any(tw.less(ids, 0))) and self.mask_token is None:
            raise ValueError(f"{type(self).__name__} layer '{self.name}': an input is not in the vocabulary and "
                             "num_oov_indices=0")
        return ids

    def _encode(self, ids):
        if self.output_mode == "int":
            return ids
        depth = self._depth()
        out = _encode(tw.cast(ids, tw.int32), depth, "count" if self.output_mode == "tf_idf" else self.output_mode,
                      self.compute_dtype)
        if self.output_mode == "tf_idf":
            idf = self._idf or []
            prefix = [float(np.mean(idf)) if idf else 0.0] * self.num_oov_indices
            weights = np.zeros(depth, np.float64)
            full = prefix + list(idf)
            weights[:len(full)] = full[:depth]
            out = out * tw.constant(weights.astype(out.dtype.np_dtype))
        return out

    def _invert(self, ids):
        vocab = self.get_vocabulary()
        table = tw.constant(np.asarray(vocab, dtype=object if self._string else np.int64))
        idx = tw.cast(ids, tw.int32)
        idx = tw.where(tw.logical_or(tw.less(idx, 0), tw.greater_equal(idx, len(vocab))),
                       tw.fill(tw.shape(idx), len(self._prefix()) - 1 if self.num_oov_indices else 0), idx)
        return tw.gather(table, idx)

    def call(self, inputs):
        x = inputs if isinstance(inputs, tw.Tensor) else tw.convert_to_tensor(np.asarray(inputs))
        if self.invert:
            return self._invert(x)
        if not self._string and x.dtype != tw.int64:
            x = tw.cast(x, tw.int64)
        return self._encode(self._ids(x))

    def compute_output_shape(self, input_shape):
        shape = tuple(input_shape)
        if self.output_mode == "int":
            return shape
        if self.output_mode == "one_hot":
            return (shape[:-1] if len(shape) >= 2 and shape[-1] == 1 else shape) + (self._depth(),)
        return (shape[:-1] if len(shape) > 1 else ()) + (self._depth(),)

    def get_config(self):
        return {**super().get_config(), "invert": self.invert, "max_tokens": self.max_tokens,
                "num_oov_indices": self.num_oov_indices, "oov_token": self.oov_token, "mask_token": self.mask_token,
                "output_mode": self.output_mode, "sparse": self.sparse, "pad_to_max_tokens": self.pad_to_max_tokens,
                "vocabulary": list(self._vocab), "idf_weights": self._idf}


class StringLookup(_IndexLookup):
    """Strings -> integer indices (or one-hot / multi-hot / count / tf-idf vectors)."""

    def __init__(self, max_tokens=None, num_oov_indices=1, mask_token=None, oov_token="[UNK]", vocabulary=None,
                 idf_weights=None, invert=False, output_mode="int", pad_to_max_tokens=False, sparse=False,
                 encoding="utf-8", **kwargs):
        super().__init__(max_tokens, num_oov_indices, mask_token, oov_token, vocabulary, idf_weights, invert,
                         output_mode, sparse, pad_to_max_tokens, **kwargs)


class IntegerLookup(_IndexLookup):
    """Integers -> contiguous indices; the OOV token is -1 by default."""
    _string = False

    def __init__(self, max_tokens=None, num_oov_indices=1, mask_token=None, oov_token=-1, output_mode="int",
                 sparse=False, pad_to_max_tokens=False, vocabulary=None, vocabulary_dtype="int64", idf_weights=None,
                 invert=False, **kwargs):
        super().__init__(max_tokens, num_oov_indices, mask_token, oov_token, vocabulary, idf_weights, invert,
                         output_mode, sparse, pad_to_max_tokens, **kwargs)


class TextVectorization(Layer):
    """Strings -> standardised, split tokens -> vocabulary indices (or multi-hot / count / tf-idf)."""

    def __init__(self, max_tokens=None, standardize="lower_and_strip_punctuation", split="whitespace", ngrams=None,
                 output_mode="int", output_sequence_length=None, pad_to_max_tokens=False, vocabulary=None,
                 idf_weights=None, sparse=False, ragged=False, encoding="utf-8", **kwargs):
        kwargs.pop("vocabulary_size", None)
        kwargs.setdefault("dtype", "float32" if output_mode == "tf_idf" else "int64")
        super().__init__(**kwargs)
        if standardize is not None and not callable(standardize) and standardize not in text_ops.STANDARDIZE_MODES:
            raise ValueError(f"TextVectorization: standardize must be None, a callable or one of "
                             f"{text_ops.STANDARDIZE_MODES}; got {standardize!r}")
        if split is not None and not callable(split) and split not in text_ops.SPLIT_MODES:
            raise ValueError(f"TextVectorization: split must be None, a callable or one of {text_ops.SPLIT_MODES}; "
                             f"got {split!r}")
        if ragged:
            raise ValueError("TextVectorization: ragged=True needs ragged tensors; use output_sequence_length")
        if output_sequence_length is not None and output_mode != "int":
            raise ValueError("TextVectorization: output_sequence_length is only valid with output_mode='int'")
        self.standardize = standardize
        self.split = split
        if ngrams is None:
            self.ngrams = None
        else:
            self.ngrams = tuple(range(1, ngrams + 1)) if isinstance(ngrams, int) else tuple(int(n) for n in ngrams)
        self.output_mode = output_mode
        self.output_sequence_length = output_sequence_length
        self.pad_to_max_tokens = bool(pad_to_max_tokens)
        self.max_tokens = max_tokens
        self._lookup = StringLookup(max_tokens=max_tokens, mask_token="", output_mode=output_mode,
                                    pad_to_max_tokens=pad_to_max_tokens, vocabulary=vocabulary,
                                    idf_weights=idf_weights, name=f"{self.name}_lookup")

    def _tokens(self, inputs, pad=True):
        x = inputs if isinstance(inputs, tw.Tensor) else tw.convert_to_tensor(np.asarray(inputs, dtype=object))
        if x.shape.rank == 2 and x.shape.as_list()[-1] == 1:
            x = tw.squeeze(x, -1)
        elif x.shape.rank == 0:
            x = tw.reshape(x, [1])
        if callable(self.standardize):
            x = self.standardize(x)
        elif self.standardize is not None:
            x = text_ops.text_standardize(x, self.standardize)
        if callable(self.split):
            return self.split(x)
        if self.split is None:
            return tw.expand_dims(x, -1)
        length = self.output_sequence_length if pad and self.output_sequence_length is not None else -1
        return text_ops.text_split(x, self.split, length, self.ngrams or (1,))

    def adapt(self, data, batch_size=None, steps=None):
        texts = _adapt_array(data).astype(object).reshape(-1)
        toks = self._tokens(tw.constant(texts), pad=False).numpy()
        self._lookup.adapt(toks.reshape(len(texts), -1))

    def get_vocabulary(self, include_special_tokens=True):
        return self._lookup.get_vocabulary(include_special_tokens)

    def vocabulary_size(self):
        return self._lookup.vocabulary_size()

    def set_vocabulary(self, vocabulary, idf_weights=None):
        self._lookup.set_vocabulary(vocabulary, idf_weights)

    def call(self, inputs):
        return self._lookup(self._tokens(inputs))

    def compute_output_shape(self, input_shape):
        batch = tuple(input_shape)[:1]
        if self.output_mode == "int":
            return batch + (self.output_sequence_length,)
        return batch + (self._lookup._depth(),)

    def get_config(self):
        ngrams = None if self.ngrams is None else list(self.ngrams)
        return {**super().get_config(), "max_tokens": self.max_tokens,
                "standardize": self.standardize if not callable(self.standardize) else None,
                "split": self.split if not callable(self.split) else None, "ngrams": ngrams,
                "output_mode": self.output_mode, "output_sequence_length": self.output_sequence_length,
                "pad_to_max_tokens": self.pad_to_max_tokens, "vocabulary": list(self._lookup._vocab),
                "idf_weights": self._lookup._idf}


class Hashing(Layer):
    """Strings or integers -> ``num_bins`` buckets by FarmHash (SipHash with ``salt``), the same
    bucket numbers as Keras on TensorFlow; ``mask_value`` maps to 0 and the rest to ``1..num_bins-1``."""

    def __init__(self, num_bins, mask_value=None, salt=None, output_mode="int", sparse=False, **kwargs):
        kwargs.setdefault("dtype", "int64" if output_mode == "int" else "float32")
        super().__init__(**kwargs)
        if num_bins is None or num_bins <= 0:
            raise ValueError(f"Hashing: num_bins must be a positive int, got {num_bins}")
        if output_mode not in ("int", "one_hot", "multi_hot", "count"):
            raise ValueError(f"Hashing: output_mode must be 'int', 'one_hot', 'multi_hot' or 'count', got "
                             f"{output_mode!r}")
        if sparse:
            raise ValueError("Hashing: sparse=True needs sparse tensors, which tensorweave does not have")
        self.num_bins = int(num_bins)
        self.mask_value = mask_value
        if salt is None:
            self.salt = None
        elif isinstance(salt, int):
            self.salt = [salt, salt]
        else:
            self.salt = [int(s) for s in salt]
            if len(self.salt) != 2:
                raise ValueError(f"Hashing: salt must be an int or a pair of ints, got {salt}")
        self.output_mode = output_mode
        self.sparse = False

    def call(self, inputs):
        x = inputs if isinstance(inputs, tw.Tensor) else tw.convert_to_tensor(np.asarray(inputs))
        if x.dtype != tw.string and not x.dtype.is_integer:
            raise TypeError(f"Hashing layer '{self.name}' hashes strings or integers, got {x.dtype.name}")
        key = None if self.salt is None else tuple(self.salt)
        if self.mask_value is None:
            ids = text_ops.hash_bucket(x, self.num_bins, key)
        else:
            masked = tw.equal(x, tw.constant(self.mask_value, x.dtype))
            ids = tw.where(masked, tw.zeros(tw.shape(x), tw.int64), text_ops.hash_bucket(x, self.num_bins - 1, key) + 1)
        if self.output_mode == "int":
            return ids
        return _encode(tw.cast(ids, tw.int32), self.num_bins, self.output_mode, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        shape = tuple(input_shape)
        if self.output_mode == "int":
            return shape
        if self.output_mode == "one_hot":
            return (shape[:-1] if len(shape) >= 2 and shape[-1] == 1 else shape) + (self.num_bins,)
        return (shape[:-1] if len(shape) > 1 else ()) + (self.num_bins,)

    def get_config(self):
        return {**super().get_config(), "num_bins": self.num_bins, "salt": self.salt, "mask_value": self.mask_value,
                "output_mode": self.output_mode, "sparse": self.sparse}
