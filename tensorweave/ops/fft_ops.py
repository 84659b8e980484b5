"""Fast Fourier transforms over the innermost 1, 2 or 3 dimensions (``tw.signal.fft`` ...).

Three primitives carry kernels and gradients: ``FFT`` (complex to complex, forward or inverse),
``RFFT`` (real to the non-negative half spectrum) and ``IRFFT`` (back). ``fft_length`` padding and
cropping are done with ``pad``/``slice`` around them, so the primitives see exact sizes.

Gradients use TF's convention for a real loss of complex values (``dL/dRe + i dL/dIm``):
``fft``'s is ``N * ifft(g)``; ``rfft``'s is ``Re(N * ifftn(g zero-extended to the full
spectrum))``; ``irfft``'s is ``rfftn(g) / N`` with interior frequencies doubled (each stands
for itself and its conjugate).

>>> import tensorweave as tw
>>> x = tw.constant([1.0, 2.0, 3.0, 4.0])
>>> tw.signal.rfft(x).numpy().tolist()
[(10+0j), (-2+2j), (-2+0j)]
>>> tw.signal.irfft(tw.signal.rfft(x)).numpy().tolist()
[1.0, 2.0, 3.0, 4.0]
"""
import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core import sbp_rules
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.dispatch import execute
from tensorweave.core.registry import get_op, register_op
from tensorweave.core.shape import TensorShape, fmt
from tensorweave.ops import complex_ops as C

__all__ = ["fft", "ifft", "fft2d", "ifft2d", "fft3d", "ifft3d", "fftnd", "ifftnd", "rfft", "irfft",
           "rfft2d", "irfft2d", "rfft3d", "irfft3d", "rfftnd", "irfftnd", "fftshift", "ifftshift"]

_REAL_TO_COMPLEX = {_dt.float32: _dt.complex64, _dt.float64: _dt.complex128}
_COMPLEX = (_dt.complex64, _dt.complex128)


def _check_rank(x, rank, what):
    if x.shape.rank is not None and x.shape.rank < rank:
        raise ValueError(f"{what} transforms the innermost {rank} dimension(s) and needs a tensor of rank "
                         f">= {rank}, got shape {fmt(x.shape)}")


def _infer_fft(inputs, attrs):
    x = inputs[0]
    if x.dtype not in _COMPLEX:
        raise TypeError(f"FFT needs a complex64 or complex128 tensor, got {x.dtype.name}. "
                        "Hint: use tw.signal.rfft for real input, or tw.cast(x, tw.complex64)")
    _check_rank(x, attrs["rank"], "FFT")
    return x.shape, x.dtype


def _infer_rfft(inputs, attrs):
    x = inputs[0]
    if x.dtype not in _REAL_TO_COMPLEX:
        raise TypeError(f"RFFT needs a float32 or float64 tensor, got {x.dtype.name}")
    _check_rank(x, attrs["rank"], "RFFT")
    dims = x.shape.as_list() if x.shape.rank is not None else None
    if dims is None:
        return TensorShape(None), _REAL_TO_COMPLEX[x.dtype]
    dims[-1] = None if dims[-1] is None else dims[-1] // 2 + 1
    return TensorShape(dims), _REAL_TO_COMPLEX[x.dtype]


def _infer_irfft(inputs, attrs):
    x = inputs[0]
    if x.dtype not in _COMPLEX:
        raise TypeError(f"IRFFT needs a complex64 or complex128 tensor, got {x.dtype.name}")
    _check_rank(x, attrs["rank"], "IRFFT")
    if x.shape.rank is None:
        return TensorShape(None), x.dtype.real_dtype
    dims = x.shape.as_list()
    dims[-1] = attrs["n"]
    return TensorShape(dims), x.dtype.real_dtype


def _size(x, rank):
    n = 1
    for d in x.shape.as_list()[-rank:]:
        n *= d
    return n


def _fft_grad(op, g):
    rank, inverse = op.attrs["rank"], op.attrs["inverse"]
    n = _size(op.inputs[0], rank)
    if inverse:
        return [_fft(g, rank, False) * (1.0 / n)]
    return [_fft(g, rank, True) * n]


def _rfft_grad(op, g):
    x = op.inputs[0]
    rank = op.attrs["rank"]
    n_last = x.shape[-1]
    half = g.shape[-1]
    full = _pad_last(g, n_last - half)
    return [C.real(_fft(full, rank, True)) * _size(x, rank)]


def _irfft_grad(op, g):
    rank, n = op.attrs["rank"], op.attrs["n"]
    spectrum = execute(get_op("RFFT"), [g], {"rank": rank})
    weights = np.full(n // 2 + 1, 2.0)
    weights[0] = 1.0
    if n % 2 == 0:
        weights[-1] = 1.0
    w = convert_to_tensor(weights / _size(g, rank), dtype=g.dtype)
    return [spectrum * C.complex(w, w * 0)]


register_op("FFT", infer=_infer_fft, grad=_fft_grad)
register_op("RFFT", infer=_infer_rfft, grad=_rfft_grad)
register_op("IRFFT", infer=_infer_irfft, grad=_irfft_grad)


def _fft(x, rank, inverse, name=None):
    return execute(get_op("FFT"), [x], {"rank": rank, "inverse": inverse}, name)


def _pad_last(x, extra):
    from tensorweave.ops.indexing_ops import pad
    if extra <= 0:
        return x
    return pad(x, [[0, 0]] * (x.shape.rank - 1) + [[0, extra]])


def _fit(x, sizes):
    """Crops or zero-pads the innermost ``len(sizes)`` dimensions of ``x`` to ``sizes``."""
    from tensorweave.ops.indexing_ops import pad, slice as slice_
    dims = x.shape.as_list()
    k = len(sizes)
    if any(d is None for d in dims[-k:]):
        raise ValueError(f"fft_length needs static inner dimensions, got shape {fmt(x.shape)}")
    inner = dims[-k:]
    if any(s < d for s, d in zip(sizes, inner)):
        x = slice_(x, [0] * len(dims), [-1] * (len(dims) - k) + [min(s, d) for s, d in zip(sizes, inner)])
    if any(s > d for s, d in zip(sizes, inner)):
        x = pad(x, [[0, 0]] * (len(dims) - k) + [[0, max(s - d, 0)] for s, d in zip(sizes, inner)])
    return x


def _complex_input(x, what):
    x = convert_to_tensor(x)
    _infer_fft([x], {"rank": 0})
    return x


def _make_fft(rank, inverse):
    def fn(input, name=None):  # noqa: A002 - TF's argument name
        x = _complex_input(input, "fft")
        _check_rank(x, rank, fn.__name__)
        return _fft(x, rank, inverse, name)
    fn.__name__ = ("ifft" if inverse else "fft") + ("" if rank == 1 else f"{rank}d")
    fn.__doc__ = (f"The {'inverse ' if inverse else ''}discrete Fourier transform over the innermost {rank} "
                  "dimension(s) of a complex tensor.")
    return fn


fft, fft2d, fft3d = (_make_fft(r, False) for r in (1, 2, 3))
ifft, ifft2d, ifft3d = (_make_fft(r, True) for r in (1, 2, 3))


def _make_rfft(rank):
    def fn(input_tensor, fft_length=None, name=None):
        x = convert_to_tensor(input_tensor)
        _infer_rfft([x], {"rank": rank})
        if fft_length is not None:
            x = _fit(x, [int(v) for v in np.ravel(np.asarray(fft_length))])
        return execute(get_op("RFFT"), [x], {"rank": rank}, name)
    fn.__name__ = "rfft" + ("" if rank == 1 else f"{rank}d")
    fn.__doc__ = (f"The non-negative-frequency half of the DFT of a real tensor over its innermost {rank} "
                  "dimension(s); ``fft_length`` crops or zero-pads those dimensions first.")
    return fn


def _make_irfft(rank):
    def fn(input_tensor, fft_length=None, name=None):
        x = convert_to_tensor(input_tensor)
        _infer_irfft([x], {"rank": rank, "n": None})
        dims = x.shape.as_list()
        if fft_length is None:
            sizes = dims[-rank:-1] + [2 * (dims[-1] - 1)]
        else:
            sizes = [int(v) for v in np.ravel(np.asarray(fft_length))]
        x = _fit(x, sizes[:-1] + [sizes[-1] // 2 + 1])
        return execute(get_op("IRFFT"), [x], {"rank": rank, "n": sizes[-1]}, name)
    fn.__name__ = "irfft" + ("" if rank == 1 else f"{rank}d")
    fn.__doc__ = (f"The inverse of ``rfft{'' if rank == 1 else f'{rank}d'}``: a real tensor whose innermost "
                  "dimension has ``fft_length[-1]`` (default ``2 * (n - 1)``) entries.")
    return fn


rfft, rfft2d, rfft3d = (_make_rfft(r) for r in (1, 2, 3))
irfft, irfft2d, irfft3d = (_make_irfft(r) for r in (1, 2, 3))


def _nd_axes(x, fft_length, axes):
    rank = x.shape.rank
    axes = list(range(-len(fft_length), 0)) if axes is None and fft_length is not None else axes
    axes = list(range(rank)) if axes is None else [int(a) % rank for a in np.ravel(axes)]
    if sorted(axes) != list(range(rank - len(axes), rank)):
        raise ValueError(f"fftnd supports the innermost axes only, got axes={axes} for rank {rank}")
    return len(axes)


def _fftnd(input, fft_length, axes, inverse, what, name):  # noqa: A002
    x = _complex_input(input, what)
    k = _nd_axes(x, fft_length, axes)
    if fft_length is not None:
        x = _fit(x, list(fft_length))
    return _fft(x, k, inverse, name)


def fftnd(input, fft_length=None, axes=None, norm=None, name=None):  # noqa: A002
    """The DFT over ``axes`` (the innermost ones; default all)."""
    return _fftnd(input, fft_length, axes, False, "fftnd", name)


def ifftnd(input, fft_length=None, axes=None, norm=None, name=None):  # noqa: A002
    """The inverse DFT over ``axes`` (the innermost ones; default all)."""
    return _fftnd(input, fft_length, axes, True, "ifftnd", name)


def rfftnd(input_tensor, fft_length=None, axes=None, norm=None, name=None):
    """``rfft`` over ``axes`` (the innermost ones; default all)."""
    x = convert_to_tensor(input_tensor)
    return _make_rfft(_nd_axes(x, fft_length, axes))(x, fft_length, name)


def irfftnd(input_tensor, fft_length=None, axes=None, norm=None, name=None):
    """``irfft`` over ``axes`` (the innermost ones; default all)."""
    x = convert_to_tensor(input_tensor)
    return _make_irfft(_nd_axes(x, fft_length, axes))(x, fft_length, name)


def _shift(x, axes, sign):
    from tensorweave.ops.indexing_ops import roll
    x = convert_to_tensor(x)
    axes = list(range(x.shape.rank)) if axes is None else [int(a) for a in np.ravel(axes)]
    shifts = [sign * (x.shape[a] // 2) for a in axes]
    return roll(x, shifts, axes)


def fftshift(x, axes=None, name=None):
    """Moves the zero frequency to the centre (NumPy's ``fftshift``)."""
    return _shift(x, axes, 1)


def ifftshift(x, axes=None, name=None):
    """The inverse of ``fftshift``."""
    return _shift(x, axes, -1)


# ---- SBP rules (core/sbp.py): transforms over the last ``rank`` axes split the others and are
# linear (P -> P; for RFFT/IRFFT too: real-linear).
for _name in ("FFT", "RFFT", "IRFFT"):
    get_op(_name).sbp = sbp_rules.batched_rule(lambda a: (a["rank"],), lambda a: (a["rank"],), linear=(0,))
