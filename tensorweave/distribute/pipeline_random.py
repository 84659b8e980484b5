"""Random ops in pipeline stages (on Ray workers; on in-process ranks each device's controller
thread, ``pipeline._Step.draws_in``): each micro-batch gets its rows of the draw the
unpipelined step makes for the whole batch, and the stages continue the streams as one device's
program does.

Unpipelined, a stage's ``tw.nn.dropout(h, rate, seed=s)`` draws one mask of shape
``[batch, ...]`` per step from the op's stream; pipelined, the stage runs once per micro-batch
on ``rows`` of those rows. :class:`MicroBatchDraws` (one per worker and step) makes the two
equal: while a micro-batch's forward runs, an eager draw (uniform, normal, truncated normal,
bounded integers) whose first dimension is the micro-batch's rows on this worker is drawn whole
(``[batch] + rest``) — once per step, kept for the other micro-batches — and the micro-batch gets
its rows; a draw of another shape (a ``noise_shape`` of 1 along the batch) is the same whole draw
for every micro-batch. ``categorical``/``multinomial`` draws the whole batch's uniforms (the
kernel reads ``[batch, samples]`` of them in row order) and each micro-batch applies its rows of
them to its own logits. The k-th draw of one stream within a forward is the k-th of the
unpipelined forward (two dropouts with one seed).

Which draws, from where (TF's seed rules, ``random_ops``):

- **op seed given** (rules 3, 4): the op's stream, keyed as one device's eager kernel cache keys
  it (op type, dtype, seed pair). A stream used by two stages continues from one to the next as
  on one device: each forward hand-off carries, besides the activation, a small message with
  where the stages so far left every stream (:meth:`MicroBatchDraws.outgoing`). The driver keeps
  the streams' positions between steps: the step call carries them, the last stage's workers
  report where the step left them, and the driver moves its own streams there — so a draw on
  the driver after ``train_step`` continues as after one device's step.
- **global seed, no op seed** (rule 2): one device gives each random op call the next value of
  a counter; the k-th unseeded draw of stage ``s``'s forward is counter value ``base + (draws of
  the stages before s) + k`` (``base``: the driver's counter at the step's start, the count before
  ``s`` travels with the hand-off), and the driver's counter moves on by the whole forward's
  draws after the step.
- **no seed at all** (rule 1): fresh OS entropy on each worker, per micro-batch: draws differ per
  call, per step and per worker (a data-parallel stage's workers never repeat each other's
  masks), as TF's unseeded ops differ per call; not equal to any other run, by design. In a
  tensor-parallel stage every worker holds the same replicated draw, so there it comes from the
  step's :func:`step_entropy` that the driver sends (:meth:`MicroBatchDraws.unseeded_key`).

Not covered: ``shuffle`` of the micro-batch's rows (a permutation of the whole batch mixes the
micro-batches: an error says so; a shuffle of anything else is drawn whole), ``Generator``
draws (a stage holding a generator is an error at the bind; ``get_global_generator()`` inside a
stage is the worker's own). Draws inside tensor-parallel stages (planned functions,
``ray/pipeline_tp.py``) come here too: each worker of the stage makes the stage's draws eagerly
inside :meth:`MicroBatchDraws.micro_batch` and feeds them to the stage's plans.

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
import json
import secrets

import numpy as np

from tensorweave.core import errors

_SHAPED = ("RandomUniform", "RandomStandardNormal", "TruncatedNormal", "RandomUniformInt")


def stream_name(op_type, dtype, seed, seed2):
    """A seeded eager stream's name, the same in every process: one device's cache key as JSON."""
    return json.dumps([op_type, None if dtype is None else dtype.name, seed, seed2])


def position_to_data(position):
    """A NumPy bit generator's state as JSON-compatible data (arrays as lists)."""
    return {k: position_to_data(v) if isinstance(v, dict) else v.tolist() if isinstance(v, np.ndarray) else v
            for k, v in position.items()}


def position_from_data(data):
    """:func:`position_to_data`'s inverse (Philox's arrays are uint64)."""
    return {k: position_from_data(v) if isinstance(v, dict) else np.asarray(v, np.uint64) if isinstance(v, list)
            else v for k, v in data.items()}


def encode(info):
    """A hand-off's random message as bytes (an array ``send`` carries)."""
    return np.frombuffer(json.dumps(info).encode(), np.uint8)


def decode(array):
    return json.loads(np.asarray(array, np.uint8).tobytes().decode())


class _Rows:
    """Stands for a generator whose ``random`` gives rows already drawn (multinomial's uniforms)."""

    def __init__(self, values):
        self.values = values

    def random(self, shape):
        assert tuple(shape) == self.values.shape, (shape, self.values.shape)
        return self.values


class MicroBatchDraws:
    """One worker's draws in one pipeline step of ``total`` rows (see the module): ``base`` the
    driver's rule-2 counter at the step's start, ``positions`` the driver's streams
    (:func:`stream_name` -> :func:`position_to_data`), ``entropy`` the step's
    :func:`step_entropy` (tensor-parallel stages' unseeded draws, :meth:`unseeded_key`)."""

    def __init__(self, total, base=0, positions=None, entropy=None):
        self.total = int(total)
        self.base = int(base)
        self.positions = dict(positions or {})
        self.entropy = entropy
        self._whole = {}      # (stage, stream name or "unseeded", k) -> the whole batch's draw
        self._ends = {}       # (stage, stream name, k) -> where that whole draw left the stream
        self._incoming = {}   # stage -> {"n": unseeded draws before it, "ends": {name: position data}}
        self._out = {}        # stage -> what its forward hands on (:meth:`outgoing`)
        self._streams = {}    # name -> this worker's stream of it (moved by finish)
        self._current = None  # (stage, first row, rows) of the forward running now
        self._counts = {}
        self._unseeded = 0

    @contextlib.contextmanager
    def micro_batch(self, stage, lo, rows, incoming=None):
        """Inside: ``stage``'s forward of rows ``[lo, lo + rows)`` of the step's batch;
        ``incoming`` the previous stage's :meth:`outgoing` (None: the first stage)."""
        from tensorweave.ops.random_ops import eager_draw_hook
        self._incoming.setdefault(stage, incoming or {"n": 0, "ends": {}})
        self._current, self._counts, self._unseeded = (stage, int(lo), int(rows)), {}, 0
        eager_draw_hook.hook = self._draw
        try:
            yield
        finally:
            eager_draw_hook.hook = None
            self._current = None
        came = self._incoming[stage]
        ends = dict(came["ends"])
        for name, k in self._counts.items():
            ends[name] = position_to_data(self._ends[(stage, name, k - 1)])
        self._out[stage] = {"n": came["n"] + self._unseeded, "ends": ends}

    def unseeded_key(self, stage, micro_batch, k):
        """The seed key of micro-batch ``micro_batch``'s ``k``-th draw without any seed in
        tensor-parallel stage ``stage``: the same on each of the stage's workers (they share the
        step's entropy), another for every step, micro-batch and draw; None: no entropy sent."""
        if self.entropy is None:
            return None
        return (_UNSEEDED_TAG, int(self.entropy), int(stage), int(micro_batch), int(k))

    def outgoing(self, stage):
        """What ``stage``'s forward hands the next stage: the unseeded draws so far in the
        forward and where every seeded stream is (the stages so far, in program order)."""
        return self._out.get(stage, self._incoming.get(stage, {"n": 0, "ends": {}}))

    def _start(self, stage, name, k, stream):
        if k:
            return self._ends[(stage, name, k - 1)]
        came = self._incoming[stage]["ends"].get(name) or self.positions.get(name)
        return position_from_data(came) if came is not None else _position(stream)

    def _draw(self, opdef, inputs, attrs, name, dtype, derived):
        from tensorweave.ops.array_ops import constant
        from tensorweave.ops.random_ops import _SeedState, _op_key
        stage, lo, rows = self._current
        seed, seed2 = attrs["seed"], attrs["seed2"]
        if seed is None:
            return None                           # rule 1: this worker's entropy, per call
        if derived:                               # rule 2: the one-device counter value of this draw
            k = self._unseeded
            self._unseeded += 1
            key = (stage, "unseeded", k)
            scratch = _SeedState(_op_key(seed, self.base + self._incoming[stage]["n"] + k))
            start = None
        else:
            sname = stream_name(opdef.name, dtype, seed, seed2)
            k = self._counts.get(sname, 0)
            self._counts[sname] = k + 1
            key = (stage, sname, k)
            self._streams[sname] = attrs["state"]
            scratch = _SeedState(attrs["state"].key)
            start = None if key in self._whole else self._start(stage, sname, k, attrs["state"])
        whole = self._whole.get(key)
        if opdef.name == "Multinomial":
            return self._multinomial(inputs, attrs, key, whole, scratch, start, lo, rows)
        if opdef.name == "RandomShuffle":
            value = inputs[0]
            if value.shape.rank and value.shape[0] == rows and rows != self.total:
                raise errors.UnimplementedError(
                    f"pipeline stage {stage}: RandomShuffle of the micro-batch's {rows} rows; on one device it "
                    f"permutes the whole batch's {self.total} rows, which mixes the micro-batches. Hint: shuffle in the input "
                    "pipeline (tw.data), before the pipeline")
            if whole is None:
                whole = self._keep(key, *_run_on(opdef, list(inputs), attrs, name, scratch, start))
            return constant(whole)
        if opdef.name not in _SHAPED:
            return None
        dims = [int(d) for d in np.asarray(inputs[0].numpy()).reshape(-1)]
        batch = bool(dims) and dims[0] == rows
        if whole is None:
            logical = [self.total] + dims[1:] if batch else dims
            shape_input = constant(np.asarray(logical, np.asarray(inputs[0].numpy()).dtype))
            whole = self._keep(key, *_run_on(opdef, [shape_input] + list(inputs[1:]), attrs, name, scratch, start))
        return constant(whole[lo:lo + rows] if batch else whole)

    def _keep(self, key, whole, end):
        self._whole[key] = whole
        if key[1] != "unseeded":
            self._ends[key] = end
        return whole

    def _multinomial(self, inputs, attrs, key, whole, scratch, start, lo, rows):
        """The whole batch's uniforms (``[total, samples]``, the kernel's one read of the
        stream), this micro-batch's rows of them applied to its logits."""
        from tensorweave.kernels.cpu.random_kernels import multinomial
        from tensorweave.ops.array_ops import constant
        logits = np.asarray(inputs[0].numpy())
        n = int(np.asarray(inputs[1].numpy()))
        if logits.ndim != 2 or logits.shape[0] != rows:        # not the batch's rows: one draw per step
            if whole is None:
                whole = self._keep(key, *_run_on(_op("Multinomial"), list(inputs), attrs, None, scratch, start))
            return constant(whole)
        if whole is None:
            gen = _stream(scratch)
            if start is not None:
                gen.bit_generator.state = start
            drawn = self.total > 0 and n > 0 and logits.shape[1] > 0
            whole = self._keep(key, gen.random((self.total, n)) if drawn else np.zeros((self.total, n)),
                               gen.bit_generator.state)
        return constant(multinomial(_Rows(whole[lo:lo + rows]), logits, n, attrs["output_dtype"].np_dtype))

    def report(self, last_stage):
        """What the driver needs after the step (from a worker of the last stage): the forward's
        unseeded draws and where every seeded stream was left."""
        return self._out.get(last_stage)

    def finish(self):
        """Moves this worker's streams to where the stages' whole draws left them (the driver
        keeps the positions for the next step; this keeps the worker's own in step)."""
        final = {}
        for out in self._out.values():
            final.update(out["ends"])
        for name, stream in self._streams.items():
            if name in final:
                _stream(stream).bit_generator.state = position_from_data(final[name])
        self._whole.clear()
        self._ends.clear()


# Marks the streams of :meth:`MicroBatchDraws.unseeded_key` apart from every seeded one (whose keys
# start with ``random_ops._OP_TAG``).
_UNSEEDED_TAG = 0x7470_756E_7365_6564     # "tpunseed"


def step_entropy():
    """A fresh 63-bit value from the driver's OS entropy, sent with each pipeline step: where
    a tensor-parallel stage's unseeded draws come from (:meth:`MicroBatchDraws.unseeded_key`)."""
    return secrets.randbits(63)


def _op(name):
    from tensorweave.core.registry import get_op
    return get_op(name)


def _stream(state):
    from tensorweave.kernels.cpu.random_kernels import cpu_stream
    return cpu_stream(state)


def _position(state):
    return _stream(state).bit_generator.state


def _run_on(opdef, inputs, attrs, name, scratch, start):
    """The op run on the scratch stream ``scratch`` (moved to ``start`` first unless None; the
    op's own stream does not move); the output and where it leaves ``scratch``."""
    from tensorweave.core.dispatch import execute
    if start is not None:
        _stream(scratch).bit_generator.state = start
    out = execute(opdef, inputs, dict(attrs, state=scratch), name)
    return np.asarray(out.numpy()), _position(scratch)


def driver_positions(state, names):
    """The driver's positions of the streams ``names`` its random state holds (the step sends them)."""
    out = {}
    for name in names:
        op, dtype, seed, seed2 = json.loads(name)
        st = state.cache.get((op, dtype, seed, seed2))
        if st is not None:
            out[name] = position_to_data(_position(st))
    return out


def driver_after_step(state, report):
    """Moves the driver's random state as one device's step would have: the rule-2 counter by
    the forward's unseeded draws, each seeded stream to where the stages left it; the names."""
    from tensorweave.ops.random_ops import _SeedState, _op_key
    if not report:
        return ()
    with state.lock:
        if state.seed is not None:
            state.counter += int(report["n"])
        for name, data in report["ends"].items():
            op, dtype, seed, seed2 = json.loads(name)
            st = state.cache.get((op, dtype, seed, seed2))
            if st is None:
                st = state.cache[(op, dtype, seed, seed2)] = _SeedState(_op_key(seed, seed2))
            _stream(st).bit_generator.state = position_from_data(data)
    return tuple(report["ends"])


__all__ = ["MicroBatchDraws", "stream_name", "driver_positions", "driver_after_step"]
