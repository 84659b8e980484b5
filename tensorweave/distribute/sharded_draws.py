"""One rank's slice of a random draw, without the whole draw ever existing on that rank.

A sharded variable's initializer (``distribute/variables.py`` ``InitialPieces``) must give
the one-device value bit for bit while each rank holds only its slice. NumPy's samplers fill
an array in C order from one stream, value after value, so a draw of ``N`` values is the
concatenation of draws of consecutive blocks of it. :func:`slice_of_draw` walks the logical
array in blocks of at most :data:`BLOCK` values (whole trailing rows, so a block's part of
the slice is a plain index), draws each block and keeps the values of the slice:

* uniform floats consume a fixed number of stream words per value, so a block holding none
  of the slice is skipped by moving the counter (``sbp_local_kernels``' counter draws);
* normal values (NumPy's ziggurat rejects a variable number of words) are drawn and
  dropped: every rank spends the whole draw's time, never its memory;
* a truncated normal (``random_kernels.truncated_normal``: the values beyond 2 sigma are
  drawn again, all of them in one later draw, in C order, until none is left) keeps, per
  round, only the count of values still to redraw and the positions among them of the
  slice's own (``_RedrawRounds``).

Peak memory: the slice plus one block (and the slice's redraw positions).

>>> from tensorweave.core.philox import philox
>>> whole = philox((1, 2)).standard_normal((6, 5), dtype=np.float32)
>>> part = slice_of_draw("normal", philox((1, 2)), np.float32, (6, 5), (slice(2, 5), slice(1, 3)))
>>> bool((part == whole[2:5, 1:3]).all())
True
"""
import numpy as np

BLOCK = 1 << 18          # values drawn at once (1 MB of float32): the extra memory per rank

KINDS = ("uniform", "normal", "truncated_normal")
DTYPES = (np.dtype(np.float32), np.dtype(np.float64))     # the samplers that fill value by value


def _blocks(shape, slices):
    """``(count, take, out_at)`` per block of the C-order draw of ``shape``: ``count`` values
    drawn, ``take(values)`` the slice's part of them (C order; None when it has none) and
    ``out_at`` where that part goes in the slice's flat leading index."""
    shape = tuple(int(d) for d in shape)
    k = _lead_axes(shape)     # the leading k axes index blocks; the others are whole in each block
    lead, inner = shape[:k], shape[k:]
    inner_size = int(np.prod(inner, dtype=np.int64))
    rows = max(1, BLOCK // max(1, inner_size))
    n_lead = int(np.prod(lead, dtype=np.int64))
    inner_slices = tuple(slices[k:])
    done = 0
    for j0 in range(0, n_lead, rows):
        j1 = min(n_lead, j0 + rows)
        index = np.unravel_index(np.arange(j0, j1), lead) if k else ()
        mine = np.ones(j1 - j0, bool)
        for axis, s in enumerate(slices[:k]):
            mine &= (index[axis] >= s.start) & (index[axis] < s.stop)
        count = (j1 - j0) * inner_size
        if not mine.any() or any(s.stop <= s.start for s in inner_slices):
            yield count, None, done
            continue
        picked = int(mine.sum())

        def take(values, mine=mine, j=j1 - j0):
            return values.reshape((j,) + inner)[(mine,) + inner_slices]
        yield count, take, done
        done += picked


def _skip(bitgen, np_dtype, count):
    from tensorweave.kernels.cpu.sbp_local_kernels import _state_after
    bitgen.state = _state_after(bitgen.state, np_dtype, count)


def _normal(gen, count, np_dtype):
    return gen.standard_normal(count, dtype=np_dtype)


class _RedrawRounds:
    """The slice's values beyond 2 sigma, as positions among each round's redraws."""

    def __init__(self):
        self.total, self.out, self.order = 0, [], []      # order: position among this round's redraws

    def note_block(self, values, take, out_at, out_flat_len):
        """Counts a first-round block's values to redraw and files the slice's own."""
        bad = np.abs(values) > 2
        if take is not None:
            where = np.flatnonzero(take(bad))
            if where.size:
                ahead = np.cumsum(bad)          # a bad value's position among the redraws: bad ones before it
                self.order.append(take(ahead).reshape(-1)[where] + (self.total - 1))
                self.out.append(where + out_at * out_flat_len)
        self.total += int(np.count_nonzero(bad))

    def run(self, gen, np_dtype, out):
        out_idx = np.concatenate(self.out) if self.out else np.zeros(0, np.int64)
        order = np.concatenate(self.order) if self.order else np.zeros(0, np.int64)
        self.out = self.order = None
        flat = out.reshape(-1)
        while self.total:
            total, self.total = self.total, 0
            keep_out, keep_order = [], []
            for o0 in range(0, total, BLOCK):
                values = _normal(gen, min(BLOCK, total - o0), np_dtype)
                bad = np.abs(values) > 2
                here = np.flatnonzero((order >= o0) & (order < o0 + len(values)))
                local = order[here] - o0
                flat[out_idx[here]] = values[local]
                still = bad[local]
                if still.any():
                    keep_out.append(out_idx[here][still])
                    keep_order.append(np.cumsum(bad)[local][still] + (self.total - 1))
                self.total += int(np.count_nonzero(bad))
            out_idx = np.concatenate(keep_out) if keep_out else order[:0]
            order = np.concatenate(keep_order) if keep_order else order[:0]


def slice_of_draw(kind, gen, np_dtype, shape, slices):
    """``draw(shape)[slices]`` for ``kind`` in :data:`KINDS` (the standard draws of
    ``random_kernels``: ``uniform01``, ``standard_normal``, ``truncated_normal``) from ``gen``
    (a NumPy Generator on Philox), for ``np_dtype`` in :data:`DTYPES`, with at most
    :data:`BLOCK` values of the draw in memory besides the slice."""
    np_dtype = np.dtype(np_dtype)
    if kind not in KINDS or np_dtype not in DTYPES:
        raise ValueError(f"slice_of_draw: {kind} draws of {np_dtype} are not drawn per slice")
    slices = tuple(slice(*s.indices(int(d))[:2]) for s, d in zip(slices, shape))
    out_shape = tuple(s.stop - s.start for s in slices)
    out = np.empty(out_shape, np_dtype)
    inner = out_shape[_lead_axes(shape):]
    out_rows = out.reshape((-1,) + inner) if out.size else out.reshape(-1)
    row_len = int(np.prod(inner, dtype=np.int64))
    rounds = _RedrawRounds() if kind == "truncated_normal" else None
    for count, take, out_at in _blocks(shape, slices):
        if kind == "uniform":
            if take is None:
                _skip(gen.bit_generator, np_dtype, count)
                continue
            values = gen.random(count, dtype=np_dtype)
        else:
            values = _normal(gen, count, np_dtype)
        if rounds is not None:
            rounds.note_block(values, take, out_at, row_len)
        if take is not None and out.size:
            part = take(values)
            out_rows[out_at:out_at + part.shape[0]] = part
    if rounds is not None:
        rounds.run(gen, np_dtype, out)
    return out


def _lead_axes(shape):
    k = len(shape)
    while k > 0 and int(np.prod(shape[k - 1:], dtype=np.int64)) <= BLOCK:
        k -= 1
    return k


def stateless_slice(kind, shape, seed, a, b, dtype, slices):
    """``stateless_<kind>(shape, seed, a, b, dtype=dtype)[slices]`` for ``kind`` "uniform"
    (``a, b``: minval, maxval), "normal" or "truncated_normal" (mean, stddev), with Python
    numbers for ``a, b`` and a float32/float64 ``dtype``: the same bits, drawing only the
    slice (a sharded variable's initializer on one rank, ``keras.initializers.slice_of``).

    >>> import tensorweave as tw
    >>> whole = tw.random.stateless_normal([4, 3], seed=[5, 0], mean=1.0, stddev=2.0)
    >>> part = stateless_slice("normal", (4, 3), [5, 0], 1.0, 2.0, tw.float32, (slice(1, 3), slice(0, 3)))
    >>> bool((part.numpy() == whole.numpy()[1:3]).all())
    True
    """
    from tensorweave.core import dtypes as _dt
    from tensorweave.core.convert import convert_to_tensor
    from tensorweave.kernels.cpu.random_kernels import stateless_stream
    from tensorweave.ops.random_ops import _is_number
    dtype = _dt.as_dtype(dtype)
    scale, shift = (b - a, a) if kind == "uniform" else (b, a)      # as stateless_uniform/normal
    out = slice_of_draw(kind, stateless_stream(np.asarray(seed)), dtype.np_dtype, shape, slices)
    # _affine's multiply and add (a Python number takes the draw's dtype), in place: no copies
    if not _is_number(scale, 1):
        np.multiply(out, np.asarray(scale, out.dtype), out=out)
    if not _is_number(shift, 0):
        np.add(out, np.asarray(shift, out.dtype), out=out)
    return convert_to_tensor(out, dtype)
