"""``keras.ops.math``: segment reductions, top-k, logsumexp, erf and friends, framing of sequences.

>>> from tensorweave import keras
>>> keras.ops.segment_max([1.0, 5.0, 2.0], [0, 0, 1], num_segments=2).numpy().tolist()
[5.0, 2.0]
"""
import numpy as np

import tensorweave as tw
from tensorweave.core.tensor import EagerTensor
from tensorweave.keras.ops._dtypes import cast_to, result_type, to_tensor
from tensorweave.keras.ops._spectral import fft, fft2, ifft2, irfft, istft, rfft, stft  # noqa: F401
from tensorweave.keras.ops._symbolic import export


def _f(x):
    x = to_tensor(x)
    return cast_to(x, result_type(x.dtype, float))


def _num_segments(ids, num_segments):
    if num_segments is not None:
        return int(num_segments)
    if isinstance(ids, EagerTensor):
        return int(ids.numpy().max()) + 1 if ids.shape.num_elements() else 0
    raise ValueError("segment ops inside tw.function need num_segments")


def segment_sum(data, segment_ids, num_segments=None, sorted=False):
    x = to_tensor(data)
    ids = cast_to(segment_ids, "int32")
    return tw.unsorted_segment_sum(x, ids, _num_segments(ids, num_segments))


def _segment_reduce(reduce, fill, data, segment_ids, num_segments):
    x = to_tensor(data)
    ids = cast_to(segment_ids, "int32")
    n = _num_segments(ids, num_segments)
    member = tw.equal(tw.expand_dims(ids, 0), tw.reshape(tw.range(n), [n, 1]))  # [n, rows]
    member = tw.reshape(member, [n, -1] + [1] * (x.shape.rank - 1))
    filled = tw.where(member, tw.expand_dims(x, 0) + tw.zeros_like(tw.cast(member, x.dtype)),
                      tw.fill(tw.concat([[n], tw.shape(x)], 0), tw.cast(fill(x.dtype), x.dtype)))
    return reduce(filled, axis=1)


# empty segments hold the dtype's lowest (highest) finite value, as TensorFlow's segment ops
def _lowest(dtype):
    return (np.finfo if dtype.is_floating else np.iinfo)(dtype.np_dtype).min


def _highest(dtype):
    return (np.finfo if dtype.is_floating else np.iinfo)(dtype.np_dtype).max


def segment_max(data, segment_ids, num_segments=None, sorted=False):
    return _segment_reduce(tw.reduce_max, _lowest, data, segment_ids, num_segments)


def segment_min(data, segment_ids, num_segments=None, sorted=False):
    return _segment_reduce(tw.reduce_min, _highest, data, segment_ids, num_segments)


def segment_prod(data, segment_ids, num_segments=None, sorted=False):
    return _segment_reduce(tw.reduce_prod, lambda d: 1, data, segment_ids, num_segments)


def top_k(x, k, sorted=True):
    return tw.math.top_k(to_tensor(x), k=int(k), sorted=sorted)


def in_top_k(targets, predictions, k):
    p = _f(predictions)
    t = cast_to(targets, "int32")
    target_score = tw.reduce_sum(p * tw.one_hot(t, p.shape.as_list()[-1], dtype=p.dtype), axis=-1, keepdims=True)
    better = tw.reduce_sum(tw.cast(tw.greater(p, target_score), tw.int32), axis=-1)
    return tw.less(better, int(k))


def logsumexp(x, axis=None, keepdims=False):
    return tw.reduce_logsumexp(_f(x), axis=axis, keepdims=keepdims)


def erf(x):
    return tw.erf(_f(x))


def erfc(x):
    return 1.0 - tw.erf(_f(x))


def erfinv(x):
    """Inverse error function: Giles' single-precision approximation refined by two Newton steps."""
    x = _f(x)
    w = -tw.log((1.0 - x) * (1.0 + x))
    small = w - 2.5
    big = tw.sqrt(tw.maximum(w, 5.0)) - 3.0
    ps = [2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
          -0.00417768164, 0.246640727, 1.50140941]
    pb = [-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
          0.00943887047, 1.00167406, 2.83297682]
    a, b = tw.zeros_like(x) + ps[0], tw.zeros_like(x) + pb[0]
    for cs, cb in zip(ps[1:], pb[1:]):
        a = cs + a * small
        b = cb + b * big
    y = tw.where(tw.less(w, 5.0), a, b) * x
    for _ in range(2):
        err = tw.erf(y) - x
        y = y - err / (2 / np.sqrt(np.pi) * tw.exp(-y * y))
    return y


def rsqrt(x):
    return tw.rsqrt(_f(x))


def extract_sequences(x, sequence_length, sequence_stride):
    """Frames of ``sequence_length`` samples every ``sequence_stride`` along the last axis."""
    x = to_tensor(x)
    n = x.shape.as_list()[-1]
    count = 1 + (n - sequence_length) // sequence_stride
    rows = np.arange(count)[:, None] * sequence_stride + np.arange(sequence_length)[None, :]
    return tw.gather(x, tw.constant(rows.astype(np.int32)), axis=x.shape.rank - 1)


def cdist(x, y, p=2.0):
    """Pairwise ``p``-norm distances between the rows of ``x`` ``[..., m, d]`` and ``y`` ``[..., n, d]``."""
    a, b = _f(x), cast_to(y, _f(x).dtype)
    diff = tw.abs(tw.expand_dims(a, -2) - tw.expand_dims(b, -3))
    if p == 2 or p == 2.0:
        sq = tw.reduce_sum(tw.square(diff), axis=-1)
        safe = tw.where(tw.greater(sq, 0.0), sq, tw.ones_like(sq))   # a finite gradient at zero distance
        return tw.where(tw.greater(sq, 0.0), tw.sqrt(safe), tw.zeros_like(sq))
    if p == 1:
        return tw.reduce_sum(diff, axis=-1)
    if p == np.inf:
        return tw.reduce_max(diff, axis=-1)
    return tw.pow(tw.reduce_sum(tw.pow(diff, float(p)), axis=-1), 1.0 / float(p))


def logdet(x):
    from tensorweave.keras.ops.linalg import slogdet
    return slogdet(x)[1]


export(globals(), skip={"result_type", "cast_to", "to_tensor", "export", "EagerTensor"},
       extra=("fft", "fft2", "ifft2", "irfft", "istft", "rfft", "stft"))
