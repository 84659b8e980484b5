"""Seeded random ops in pipeline stages on Ray workers: each micro-batch gets its rows of the
draw the unpipelined step makes for the whole batch.

Unpipelined, a stage's ``tw.nn.dropout(h, rate, seed=s)`` draws one mask of shape
``[batch, ...]`` per step from the op's stream; pipelined, the stage runs once per micro-batch
on ``rows`` of those rows. :class:`MicroBatchDraws` (one per worker and step) makes the two
equal: while a micro-batch's forward runs, a seeded eager draw (uniform, normal, truncated
normal, bounded integers) whose first dimension is the micro-batch's rows on this worker is
drawn whole (``[batch] + rest``) from where the op's stream was at the start of the step — once
per step, kept for the other micro-batches — and the micro-batch gets its rows; a draw of
another shape (a ``noise_shape`` of 1 along the batch) is the same whole draw for every
micro-batch. At the end of the step each stream is moved to where the whole draws leave it, so
the next step continues as the unpipelined one does. The k-th draw of one stream within a
forward is the k-th of the unpipelined forward (two dropouts with one seed).

Not covered: unseeded draws (their per-op seeds come from a counter that counts every op of the
step, across the stages' processes), multinomial and shuffle draws (they run as usual, per
micro-batch), a stream shared by two stages on one worker (virtual stages with one seed).

>>> import numpy as np, tensorweave as tw
>>> draws = MicroBatchDraws(total=4)
>>> tw.random.set_seed(1)
>>> parts = []
>>> for lo, rows in ((0, 3), (3, 1)):            # two micro-batches of 3 and 1 rows
...     with draws.micro_batch(0, lo, rows):
...         parts.append(tw.random.uniform([rows, 2], seed=5).numpy())
>>> draws.finish()
>>> tw.random.set_seed(1)
>>> bool((np.concatenate(parts) == tw.random.uniform([4, 2], seed=5).numpy()).all())
True
"""
import contextlib

import numpy as np

_SHAPED = ("RandomUniform", "RandomStandardNormal", "TruncatedNormal", "RandomUniformInt")


class MicroBatchDraws:
    """One worker's seeded draws in one pipeline step of ``total`` rows (see the module)."""

    def __init__(self, total):
        self.total = int(total)
        self._whole = {}      # (stage, id(stream), k) -> the whole batch's draw
        self._ends = {}       # id(stream) -> (stream, where its last whole draw left it)
        self._current = None  # (stage, first row, rows) of the forward running now
        self._counts = {}

    @contextlib.contextmanager
    def micro_batch(self, stage, lo, rows):
        """Inside: ``stage``'s forward of rows ``[lo, lo + rows)`` of the step's batch."""
        from tensorweave.ops.random_ops import eager_draw_hook
        self._current, self._counts = (stage, int(lo), int(rows)), {}
        eager_draw_hook.hook = self._draw
        try:
            yield
        finally:
            eager_draw_hook.hook = None
            self._current = None

    def _draw(self, opdef, inputs, attrs, name):
        from tensorweave.ops.array_ops import constant
        if opdef.name not in _SHAPED:
            return None
        stage, lo, rows = self._current
        stream = attrs["state"]
        dims = [int(d) for d in np.asarray(inputs[0].numpy()).reshape(-1)]
        batch = bool(dims) and dims[0] == rows
        k = self._counts.get(id(stream), 0)
        self._counts[id(stream)] = k + 1
        key = (stage, id(stream), k)
        whole = self._whole.get(key)
        if whole is None:
            start = self._ends[id(stream)][1] if id(stream) in self._ends else _position(stream)
            logical = [self.total] + dims[1:] if batch else dims
            whole, end = _draw_from(opdef, inputs, attrs, name, logical, start)
            self._whole[key] = whole
            self._ends[id(stream)] = (stream, end)
        return constant(whole[lo:lo + rows] if batch else whole)

    def finish(self):
        """Moves every stream drawn from to where the whole batch's draws leave it."""
        for stream, end in self._ends.values():
            _stream(stream).bit_generator.state = end
        self._ends.clear()
        self._whole.clear()


def _stream(state):
    from tensorweave.kernels.cpu.random_kernels import cpu_stream
    return cpu_stream(state)


def _position(state):
    return _stream(state).bit_generator.state


def _draw_from(opdef, inputs, attrs, name, shape, start):
    """The op's draw of ``shape`` from stream position ``start`` (a scratch copy of the
    stream: the op's own does not move) and where it leaves the stream."""
    from tensorweave.core.dispatch import execute
    from tensorweave.ops.array_ops import constant
    from tensorweave.ops.random_ops import _SeedState
    scratch = _SeedState(attrs["state"].key)
    _stream(scratch).bit_generator.state = start
    shape_input = constant(np.asarray(shape, np.asarray(inputs[0].numpy()).dtype))
    out = execute(opdef, [shape_input] + list(inputs[1:]), dict(attrs, state=scratch), name)
    return np.asarray(out.numpy()), _position(scratch)


__all__ = ["MicroBatchDraws"]
