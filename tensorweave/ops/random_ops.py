"""Random tensors with TensorFlow's global-seed / op-seed rules, stateless random ops,
``Generator`` objects and ``dropout``.

Seeds work as ``tf.random.set_seed`` documents them. A random op gets a seed pair
``(global seed, op seed)`` when it is created (see :func:`get_seed`):

1. neither seed set: the op draws from fresh OS entropy (different every run);
2. global seed set, no op seed: the op seed is derived from the number of ops already in
   the graph (graph mode, ``tw.function``) or from a counter that ``set_seed`` resets
   (eager), so a program re-run after ``set_seed`` repeats its numbers;
3. op seed set, no global seed: the global seed defaults to ``DEFAULT_GRAPH_SEED``;
4. both set: the pair fixes the sequence.

A graph op keeps its own stream: each ``Session.run`` (or call of a traced function)
gives new values, and rebuilding the graph with the same seeds replays them. Two ops
of one graph with the same seed pair give the same values, as in TensorFlow. The stream
belongs to the op, not to a Session: a second Session on the same graph continues it
(TensorFlow starts it again, since there kernels live per session). Eagerly, a
stream is kept per (op type, dtype, seed pair), as TensorFlow's kernel cache does, so
``uniform([2], seed=1)`` called twice gives two different values and ``set_seed`` starts
the streams again.

The eager state (global seed, op-seed counter, eager streams, global ``Generator``) is a
:class:`RandomState` held by the thread's ``Runtime`` (``core.context.current_runtime()``):
in one process with one runtime it is TensorFlow's process-wide state; each in-process rank
has its own, so what one rank draws does not depend on when another rank's thread runs.

>>> import tensorweave as tw
>>> tw.random.set_seed(7)
>>> a = tw.random.uniform([3], seed=1).numpy()
>>> b = tw.random.uniform([3], seed=1).numpy()
>>> bool((a != b).any())                      # the op's stream moved on
True
>>> tw.random.set_seed(7)
>>> bool((tw.random.uniform([3], seed=1).numpy() == a).all())   # ... and replays
True
>>> tw.random.set_seed(None)
"""
import numbers
import threading
import weakref

import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core.context import building_graph, current_runtime, executing_eagerly
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.dispatch import execute
from tensorweave.core.graph import constant_value
from tensorweave.core.philox import philox
from tensorweave.core.plan_data import Resource
from tensorweave.core.registry import NOT_DIFFERENTIABLE, get_op, register_op
from tensorweave.core.sbp import B, S, Signature
from tensorweave.core.sbp_rules import signatures
from tensorweave.core.shape import TensorShape, fmt
from tensorweave.core.tensor import Tensor
from tensorweave.ops.array_ops import _shape_input, identity
from tensorweave.ops.arguments import int_argument
from tensorweave.ops.array_ops import shape as _shape_of

__all__ = [
    "set_seed", "get_seed", "uniform", "normal", "truncated_normal", "categorical", "shuffle",
    "stateless_uniform", "stateless_normal", "stateless_truncated_normal", "stateless_categorical",
    "Generator", "get_global_generator", "set_global_generator", "dropout", "DEFAULT_GRAPH_SEED",
    "get_rng_state", "set_rng_state",
    # TF1 names
    "set_random_seed", "random_uniform", "random_normal", "random_shuffle", "multinomial",
]

_ct = convert_to_tensor

# TensorFlow's default graph-level seed, used when only an op seed is given (rule 3).
DEFAULT_GRAPH_SEED = 87654321

# First word of a stream key, so that a Generator seeded with s and an op whose seed pair
# starts with s never share a stream.
_OP_TAG = 0x0B5EED
_GENERATOR_TAG = 0x6E5EED


class _SeedState:
    """Where one random stream lives: a seed key and the generators made from it.

    ``key`` is a tuple of ints (None: fresh OS entropy). Each device type makes its own
    generator from the key on first use (``stream``), so kernels of other device types
    can keep theirs beside the CPU one.
    """

    __slots__ = ("key", "_streams", "_lock", "_saved", "__weakref__")

    def __init__(self, key):
        self.key = None if key is None else tuple(int(w) % 2**64 for w in key)
        self._streams = {}
        self._lock = threading.Lock()
        self._saved = None    # {device type: stream position} restored from a checkpoint, not yet used

    def stream(self, device_type, make):
        s = self._streams.get(device_type)
        if s is None:
            with self._lock:
                s = self._streams.get(device_type)
                if s is None:
                    s = make(self.key)
                    # A restored position is applied when the stream is first made, so it
                    # reaches device types whose kernels run only after the restore.
                    saved = self._saved.pop(device_type, None) if self._saved else None
                    if saved is not None:
                        _set_stream_position(s, saved)
                    self._streams[device_type] = s
        return s

    def reset(self, key):
        with self._lock:
            self.key = None if key is None else tuple(int(w) % 2**64 for w in key)
            self._streams = {}
            self._saved = None

    def __repr__(self):
        return f"<random stream key={self.key}>"


class RandomState:
    """One runtime's random state (``Runtime.random``; the graph-level seed lives on each Graph).

    What TensorFlow keeps per process, kept per rank: ``set_seed``, the eager streams, the
    global :class:`Generator` and :func:`get_rng_state` act on the state of the calling
    thread's runtime (``core.context.current_runtime()``).

    >>> from tensorweave.runtime.runtime import Runtime
    >>> rt = Runtime("r1", rank=1)
    >>> with rt.as_default():
    ...     set_seed(5)
    >>> rt.random.seed, current_state().seed is rt.random
    (5, False)
    """

    __slots__ = ("seed", "counter", "cache", "entropy", "generator", "lock", "graph_states", "pending_graph")

    def __init__(self):
        self.seed = None
        self.counter = 0              # eager op seeds under rule 2; set_seed resets it
        self.cache = {}               # (op type, dtype, seed, seed2) -> _SeedState, TF's eager kernel cache
        self.entropy = _SeedState(None)   # rule 1 in eager mode
        self.generator = None         # the global Generator
        self.lock = threading.Lock()
        self.graph_states = []        # weak references to graph ops' streams, in the order they were made
        self.pending_graph = {}       # stream key -> positions (restored, for graph ops not made yet), FIFO

    def __repr__(self):
        return f"<RandomState seed={self.seed} counter={self.counter}>"


def current_state():
    """The :class:`RandomState` of the calling thread's runtime."""
    return current_runtime().random


def _int_seed(seed, what):
    if isinstance(seed, Tensor):
        seed = constant_value(seed)
        if seed is None:
            raise TypeError(f"{what} must be a Python int (or a constant), got a computed tensor")
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (numbers.Integral, np.ndarray)):
        raise TypeError(f"{what} must be an int, got {seed!r}")
    return int(seed)


# ---- seeds -----------------------------------------------------------------------------------
def set_seed(seed):
    """Sets the global random seed (``tf.random.set_seed``); ``None`` clears it.

    While a graph is being built (TF1 mode, or inside a ``tw.function`` trace) it sets that
    graph's seed; eagerly it sets the process-wide seed and restarts every eager stream, the
    rule-2 op counter and the global :class:`Generator` (of the calling thread's runtime: a rank
    has its own, see :class:`RandomState`).

    >>> import tensorweave as tw
    >>> tw.random.set_seed(3); x = tw.random.normal([2]).numpy()
    >>> tw.random.set_seed(3); bool((tw.random.normal([2]).numpy() == x).all())
    True
    >>> tw.random.set_seed(None)
    """
    seed = None if seed is None else _int_seed(seed, "seed")
    g = building_graph()
    if g is not None:
        g.seed = seed
        return
    st = current_state()
    with st.lock:
        st.seed = seed
        st.counter = 0
        st.cache = {}
        st.generator = None
        st.pending_graph = {}   # positions restored for graph ops not yet made: a new seed supersedes them


set_random_seed = set_seed


def get_seed(op_seed):
    """The ``(seed, seed2)`` pair a new random op uses (``tf.compat.v1.get_seed``).

    ``(None, None)`` means "draw from OS entropy". A ``tw.function`` graph without a seed of
    its own uses the global seed in force when it is traced, as TensorFlow's FuncGraph does.

    >>> import tensorweave as tw
    >>> tw.random.set_seed(None)      # no global seed: a fixed graph-level default
    >>> tw.random.get_seed(5)
    (87654321, 5)
    """
    op_seed = None if op_seed is None else _int_seed(op_seed, "op seed")
    g = building_graph()
    st = current_state()
    global_seed = st.seed if g is None else g.seed
    if global_seed is None and g is not None and g.is_function_graph:
        global_seed = st.seed
    if global_seed is not None:
        if op_seed is None:
            if g is None:
                with st.lock:
                    op_seed = st.counter
                    st.counter += 1
            else:
                op_seed = len(g._ops)
        return global_seed, op_seed
    if op_seed is not None:
        return DEFAULT_GRAPH_SEED, op_seed
    return None, None


def _op_key(seed, seed2):
    return None if seed is None else (_OP_TAG, seed, seed2)


def _eager_state(op_type, dtype, seed, seed2, derived):
    if seed is None:
        return current_state().entropy
    if derived:
        # A counter-derived seed is never asked for again: caching it would only grow the cache.
        return _SeedState(_op_key(seed, seed2))
    key = (op_type, dtype.name if dtype is not None else None, seed, seed2)
    rs = current_state()
    with rs.lock:
        st = rs.cache.get(key)
        if st is None:
            st = rs.cache[key] = _SeedState(_op_key(seed, seed2))
    return st


_BIND_LOCK = threading.Lock()


def _bind_state(op):
    """Gives a graph random op its stream, kept on the op so it outlives plans. A plan holds it
    as a resource (seed key and position), so the plan can be shipped to another rank."""
    st = op.attrs.get("_state")      # bound to a Generator
    if st is not None:
        return {"state": Resource("random_stream", f"{op.name}/generator", st)}
    with _BIND_LOCK:
        extra = op._extra
        if extra is None:
            extra = op._extra = {}
        st = extra.get("random_state")
        if st is None:
            st = extra["random_state"] = _SeedState(_op_key(op.attrs["seed"], op.attrs["seed2"]))
            _register_graph_state(st)
    return {"state": Resource("random_stream", op.name, st)}


def stream_state(st):
    """A random stream (``_SeedState``) as JSON-compatible data: its seed key and positions."""
    return _seed_state_get(st)


def stream_from_state(data, what="random stream"):
    """A new random stream from :func:`stream_state`'s data (validated; ``None``: OS entropy)."""
    if data is None:
        return _SeedState(None)
    key, streams = _check_seed_state(data, what)
    st = _SeedState(key)
    _seed_state_set(st, key, streams)
    return st


# While set (a pipeline stage's forward of one micro-batch on a Ray worker: distribute/
# pipeline_random.py), eager draws of the seed rules go through ``hook(opdef, inputs, attrs,
# name, dtype, derived)`` (``derived``: the op seed came from the rule-2 counter), which gives the
# micro-batch its rows of the whole batch's draw (None: draw as usual).
eager_draw_hook = threading.local()

# While set (a tensor-parallel pipeline stage traced into planned functions on the driver:
# distribute/ray/pipeline_tp.py), a draw added to a graph goes through ``hook(opdef, inputs,
# attrs, name, dtype, op_seed)``, which may return a tensor standing for it (the function's
# argument its workers feed with the micro-batch's rows of the whole batch's draw; None: add the
# op as usual).
graph_draw_hook = threading.local()


def _run_random(opdef, inputs, attrs, op_seed, name, dtype=None, state=None):
    """Runs (eager) or adds (graph) a stateful random op with its seeds or explicit stream."""
    if state is not None:              # a Generator's op: its stream decides, not the seeds
        seed = seed2 = None
    else:
        seed, seed2 = get_seed(op_seed)
    attrs = dict(attrs, seed=seed, seed2=seed2)
    if executing_eagerly():
        attrs["state"] = state if state is not None else _eager_state(
            opdef.name, dtype, seed, seed2, op_seed is None)
        hook = getattr(eager_draw_hook, "hook", None)
        if hook is not None and state is None:
            out = hook(opdef, inputs, attrs, name, dtype, op_seed is None)
            if out is not None:
                return out
    elif state is not None:
        attrs["_state"] = state
    else:
        hook = getattr(graph_draw_hook, "hook", None)
        if hook is not None:
            out = hook(opdef, inputs, attrs, name, dtype, op_seed)
            if out is not None:
                return out
    return execute(opdef, inputs, attrs, name)


# ---- shape and dtype rules -------------------------------------------------------------------
def _static_shape(s, op):
    if not s.dtype.is_integer:
        raise TypeError(f"{op}: shape must be an int32 or int64 tensor, got {s.dtype.name}")
    if s.shape.rank not in (None, 1):
        raise ValueError(f"{op}: shape must be a 1-D tensor, got a tensor of shape {fmt(s.shape)}")
    v = constant_value(s)
    if v is not None:
        dims = [int(d) for d in np.asarray(v).reshape(-1)]
        if any(d < 0 for d in dims):
            raise ValueError(f"{op}: shape must not have negative dimensions, got {dims}")
        return TensorShape(dims)
    n = s.shape[0] if s.shape.rank == 1 else None
    return TensorShape(None if n is None else [None] * n)


def _check_float(dtype, op):
    if dtype not in _dt.FLOATING:
        raise TypeError(f"{op}: dtype must be a floating type ({', '.join(d.name for d in _dt.FLOATING)}), "
                        f"got {dtype.name}")
    return dtype


def _check_seed_input(seed, op):
    if not seed.dtype.is_integer:
        raise TypeError(f"{op}: seed must be an int32 or int64 tensor, got {seed.dtype.name}")
    if not seed.shape.is_compatible_with(TensorShape([2])):
        raise ValueError(f"{op}: seed must have shape [2], got {fmt(seed.shape)}")


def _infer_float(op):
    def infer(inputs, attrs):
        if len(inputs) > 1:
            _check_seed_input(inputs[1], op)
        return _static_shape(inputs[0], op), _check_float(attrs["dtype"], op)
    return infer


def _infer_int(op):
    def infer(inputs, attrs):
        s, lo, hi = inputs[0], inputs[-2], inputs[-1]
        if len(inputs) == 4:
            _check_seed_input(inputs[1], op)
        if not lo.dtype.is_integer or lo.dtype is not hi.dtype:
            raise TypeError(f"{op}: minval and maxval must have one integer dtype, "
                            f"got {lo.dtype.name} and {hi.dtype.name}")
        if lo.shape.rank not in (None, 0) or hi.shape.rank not in (None, 0):
            raise ValueError(f"{op}: minval and maxval must be scalars, got shapes "
                             f"{fmt(lo.shape)} and {fmt(hi.shape)}")
        return _static_shape(s, op), lo.dtype
    return infer


def _infer_full_int(inputs, attrs):
    _check_seed_input(inputs[1], "StatelessRandomUniformFullInt")
    return _static_shape(inputs[0], "StatelessRandomUniformFullInt"), attrs["dtype"]


def _infer_multinomial(op):
    def infer(inputs, attrs):
        logits, n = inputs[0], inputs[1]
        if len(inputs) == 3:
            _check_seed_input(inputs[2], op)
        if logits.shape.rank not in (None, 2):
            raise ValueError(f"{op}: logits must be 2-D [batch_size, num_classes], got shape {fmt(logits.shape)}")
        if not logits.dtype.is_floating:
            raise TypeError(f"{op}: logits must be floating point, got {logits.dtype.name}")
        if not n.dtype.is_integer or n.shape.rank not in (None, 0):
            raise TypeError(f"{op}: num_samples must be an integer scalar, got {n.dtype.name} {fmt(n.shape)}")
        if attrs["output_dtype"] not in (_dt.int32, _dt.int64):
            raise TypeError(f"{op}: output dtype must be int32 or int64, got {attrs['output_dtype'].name}")
        k = constant_value(n)
        batch = logits.shape[0] if logits.shape.rank == 2 else None
        return TensorShape([batch, None if k is None else int(k)]), attrs["output_dtype"]
    return infer


def _infer_shuffle(inputs, attrs):
    return inputs[0].shape, inputs[0].dtype


# Random values do not depend differentiably on the shape, seed or bounds inputs.
for _name, _infer in [("RandomUniform", _infer_float("RandomUniform")),
                      ("RandomStandardNormal", _infer_float("RandomStandardNormal")),
                      ("TruncatedNormal", _infer_float("TruncatedNormal")),
                      ("RandomUniformInt", _infer_int("RandomUniformInt")),
                      ("Multinomial", _infer_multinomial("Multinomial")),
                      ("RandomShuffle", _infer_shuffle)]:
    register_op(_name, infer=_infer, stateful=True, grad=NOT_DIFFERENTIABLE, bind=_bind_state)

for _name, _infer in [("StatelessRandomUniform", _infer_float("StatelessRandomUniform")),
                      ("StatelessRandomNormal", _infer_float("StatelessRandomNormal")),
                      ("StatelessTruncatedNormal", _infer_float("StatelessTruncatedNormal")),
                      ("StatelessRandomUniformInt", _infer_int("StatelessRandomUniformInt")),
                      ("StatelessRandomUniformFullInt", _infer_full_int),
                      ("StatelessMultinomial", _infer_multinomial("StatelessMultinomial"))]:
    register_op(_name, infer=_infer, grad=NOT_DIFFERENTIABLE)

_UNIFORM = get_op("RandomUniform")
_UNIFORM_INT = get_op("RandomUniformInt")
_NORMAL = get_op("RandomStandardNormal")
_TRUNCATED = get_op("TruncatedNormal")
_MULTINOMIAL = get_op("Multinomial")
_SHUFFLE = get_op("RandomShuffle")
# The public names that errors about a bad ``shape`` argument cite.
_PUBLIC = {"RandomUniform": "random.uniform", "RandomUniformInt": "random.uniform",
           "RandomStandardNormal": "random.normal", "TruncatedNormal": "random.truncated_normal",
           "StatelessRandomUniform": "random.stateless_uniform",
           "StatelessRandomUniformInt": "random.stateless_uniform",
           "StatelessRandomUniformFullInt": "random.stateless_uniform",
           "StatelessRandomNormal": "random.stateless_normal",
           "StatelessTruncatedNormal": "random.stateless_truncated_normal"}


def _shape_arg(shape, op_name, dtype):
    return _shape_input(shape, _PUBLIC.get(op_name, op_name), dtype=_dt.as_dtype(dtype).np_dtype)


# ---- helpers ---------------------------------------------------------------------------------
def _is_number(x, value):
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and x == value


def _affine(rnd, scale, shift, name):
    """``rnd * scale + shift``, skipping the identity parts (so plain draws stay one op)."""
    has_shift = not _is_number(shift, 0)
    if not _is_number(scale, 1):
        rnd = _mul(rnd, scale, None if has_shift else name)
    if has_shift:
        rnd = _add(rnd, shift, name)
    return rnd


def _mul(x, y, name):
    from tensorweave.ops.math_ops import multiply
    return multiply(x, y, name=name)


def _add(x, y, name):
    from tensorweave.ops.math_ops import add
    return add(x, y, name=name)


def _needs_affine(scale, shift):
    return not (_is_number(scale, 1) and _is_number(shift, 0))


def _draw_float(opdef, shape, scale, shift, dtype, seed, name, state=None):
    dtype = _check_float(_dt.as_dtype(dtype), opdef.name)
    affine = _needs_affine(scale, shift)
    rnd = _run_random(opdef, [_shape_arg(shape, opdef.name, dtype)], {"dtype": dtype}, seed,
                      None if affine else name, dtype, state)
    return _affine(rnd, scale, shift, name) if affine else rnd


def _draw_int(shape, minval, maxval, dtype, seed, name, state=None):
    if maxval is None:
        raise ValueError(f"Must specify maxval for integer dtype {dtype.name}")
    lo, hi = _ct(minval, dtype=dtype), _ct(maxval, dtype=dtype)
    return _run_random(_UNIFORM_INT, [_shape_arg(shape, "RandomUniformInt", dtype), lo, hi], {}, seed, name, dtype,
                       state)


def _uniform(shape, minval, maxval, dtype, seed, name, state=None):
    dtype = _dt.as_dtype(dtype)
    if dtype.is_integer:
        return _draw_int(shape, minval, maxval, dtype, seed, name, state)
    if not dtype.is_floating:
        raise TypeError(f"uniform: dtype must be floating or integer, got {dtype.name}")
    if maxval is None:
        maxval = 1
    if _is_number(minval, 0):
        scale = maxval
    elif isinstance(minval, numbers.Real) and isinstance(maxval, numbers.Real):
        scale = maxval - minval
    else:
        from tensorweave.ops.math_ops import subtract
        scale = subtract(maxval, minval) if isinstance(maxval, Tensor) else \
            subtract(_ct(maxval, dtype=dtype), minval)
    return _draw_float(_UNIFORM, shape, scale, minval, dtype, seed, name, state)


# ---- stateful ops ----------------------------------------------------------------------------
def uniform(shape, minval=0, maxval=None, dtype=_dt.float32, seed=None, name=None):
    """Uniform values in ``[minval, maxval)`` (``maxval`` defaults to 1 for floats and is
    required for integer dtypes).

    >>> import tensorweave as tw
    >>> x = tw.random.uniform([2, 3], minval=-1.0, maxval=1.0, seed=4)
    >>> x.shape, bool(((x.numpy() >= -1) & (x.numpy() < 1)).all())
    (TensorShape([2, 3]), True)
    >>> tw.random.uniform([4], maxval=10, dtype=tw.int64, seed=4).dtype
    tw.int64
    """
    return _uniform(shape, minval, maxval, dtype, seed, name)


def normal(shape, mean=0.0, stddev=1.0, dtype=_dt.float32, seed=None, name=None):
    """Normally distributed values.

    >>> import tensorweave as tw
    >>> tw.random.normal([10000], mean=5.0, seed=1).numpy().mean().round()
    np.float32(5.0)
    """
    return _draw_float(_NORMAL, shape, stddev, mean, dtype, seed, name)


def truncated_normal(shape, mean=0.0, stddev=1.0, dtype=_dt.float32, seed=None, name=None):
    """Normal values re-drawn while more than two standard deviations from the mean.

    >>> import tensorweave as tw
    >>> float(abs(tw.random.truncated_normal([1000], seed=2).numpy()).max()) <= 2.0
    True
    """
    return _draw_float(_TRUNCATED, shape, stddev, mean, dtype, seed, name)


def categorical(logits, num_samples, dtype=None, seed=None, name=None):
    """Draws ``num_samples`` class indices per row of ``logits`` ``[batch, classes]``.

    >>> import tensorweave as tw
    >>> s = tw.random.categorical(tw.math.log([[0.5, 0.5, 0.0]]), 5, seed=1)
    >>> s.shape, s.dtype, int(s.numpy().max()) < 2
    (TensorShape([1, 5]), tw.int64, True)
    """
    dtype = _dt.int64 if dtype is None else _dt.as_dtype(dtype)
    logits = _ct(logits)
    n = num_samples if isinstance(num_samples, Tensor) else _ct(
        int_argument(num_samples, "random.categorical", "num_samples", 0), dtype=_dt.int32)
    return _run_random(_MULTINOMIAL, [logits, n], {"output_dtype": dtype}, seed, name, dtype)


def multinomial(logits, num_samples, seed=None, name=None, output_dtype=None):
    """TF1's name for :func:`categorical`."""
    return categorical(logits, num_samples, dtype=output_dtype, seed=seed, name=name)


def shuffle(value, seed=None, name=None):
    """Shuffles ``value`` along its first dimension.

    >>> import tensorweave as tw
    >>> sorted(tw.random.shuffle(tw.constant([0, 1, 2, 3, 4]), seed=3).numpy().tolist())
    [0, 1, 2, 3, 4]
    """
    value = _ct(value)
    return _run_random(_SHUFFLE, [value], {}, seed, name, value.dtype)


random_uniform = uniform
random_normal = normal
random_shuffle = shuffle


# ---- stateless ops ---------------------------------------------------------------------------
def _seed_tensor(seed):
    if isinstance(seed, Tensor):
        return seed
    arr = np.asarray(seed)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"seed must be a pair of ints, got {seed!r}")
    return _ct(arr.astype(np.int64))


def _stateless_float(op_name, shape, seed, scale, shift, dtype, name):
    dtype = _check_float(_dt.as_dtype(dtype), op_name)
    affine = _needs_affine(scale, shift)
    rnd = execute(get_op(op_name), [_shape_arg(shape, op_name, dtype), _seed_tensor(seed)], {"dtype": dtype},
                  None if affine else name)
    return _affine(rnd, scale, shift, name) if affine else rnd


def stateless_uniform(shape, seed, minval=0, maxval=None, dtype=_dt.float32, name=None, alg=None):
    """Uniform values fixed by ``seed`` (a pair of ints): equal seeds give equal values.

    Integer dtypes need ``maxval``, or neither bound for the dtype's full range.

    >>> import tensorweave as tw
    >>> a = tw.random.stateless_uniform([3], seed=[1, 2])
    >>> bool((a.numpy() == tw.random.stateless_uniform([3], seed=[1, 2]).numpy()).all())
    True
    """
    dtype = _dt.as_dtype(dtype)
    if dtype.is_integer:
        if minval is None and maxval is None:
            return execute(get_op("StatelessRandomUniformFullInt"),
                           [_shape_arg(shape, "StatelessRandomUniformFullInt", dtype), _seed_tensor(seed)],
                           {"dtype": dtype}, name)
        if maxval is None:
            raise ValueError(f"Must specify maxval for integer dtype {dtype.name} "
                             "(or neither bound for the full range)")
        return execute(get_op("StatelessRandomUniformInt"),
                       [_shape_arg(shape, "StatelessRandomUniformInt", dtype), _seed_tensor(seed),
                        _ct(minval, dtype=dtype),
                        _ct(maxval, dtype=dtype)], {}, name)
    if maxval is None:
        maxval = 1
    if isinstance(minval, numbers.Real) and isinstance(maxval, numbers.Real):
        scale = maxval - minval
    else:
        from tensorweave.ops.math_ops import subtract
        scale = subtract(_ct(maxval, dtype=dtype) if not isinstance(maxval, Tensor) else maxval, minval)
    return _stateless_float("StatelessRandomUniform", shape, seed, scale, minval, dtype, name)


def stateless_normal(shape, seed, mean=0.0, stddev=1.0, dtype=_dt.float32, name=None, alg=None):
    """Normal values fixed by ``seed`` (a pair of ints).

    >>> import tensorweave as tw
    >>> tw.random.stateless_normal([2, 2], seed=[0, 1]).shape
    TensorShape([2, 2])
    """
    return _stateless_float("StatelessRandomNormal", shape, seed, stddev, mean, dtype, name)


def stateless_truncated_normal(shape, seed, mean=0.0, stddev=1.0, dtype=_dt.float32, name=None, alg=None):
    """Truncated normal values (see :func:`truncated_normal`) fixed by ``seed``."""
    return _stateless_float("StatelessTruncatedNormal", shape, seed, stddev, mean, dtype, name)


def stateless_categorical(logits, num_samples, seed, dtype=_dt.int64, name=None):
    """Class indices (see :func:`categorical`) fixed by ``seed``."""
    n = num_samples if isinstance(num_samples, Tensor) else _ct(
        int_argument(num_samples, "random.categorical", "num_samples", 0), dtype=_dt.int32)
    return execute(get_op("StatelessMultinomial"), [_ct(logits), n, _seed_tensor(seed)],
                   {"output_dtype": _dt.as_dtype(dtype)}, name)


# ---- Generator -------------------------------------------------------------------------------
class Generator:
    """A random number generator with its own state (``tf.random.Generator``).

    Its draws do not depend on the global seed; ops made from it in a graph or a
    ``tw.function`` share the generator's one stream. The state lives in Python (not in a
    variable); ``tw.train.Checkpoint`` saves and restores it (see :func:`get_rng_state`).

    >>> import tensorweave as tw
    >>> g = tw.random.Generator.from_seed(1)
    >>> x = g.normal([2]).numpy()
    >>> g.reset_from_seed(1)
    >>> bool((g.normal([2]).numpy() == x).all())
    True
    """

    def __init__(self, seed=None, alg=None):
        key = None if seed is None else (_GENERATOR_TAG, _int_seed(seed, "seed"))
        self._state = _SeedState(key)
        self.algorithm = alg or "philox"

    @classmethod
    def from_seed(cls, seed, alg=None):
        return cls(seed, alg)

    @classmethod
    def from_non_deterministic_state(cls, alg=None):
        return cls(None, alg)

    def reset_from_seed(self, seed):
        self._state.reset((_GENERATOR_TAG, _int_seed(seed, "seed")))

    def _checkpoint_state(self):
        """The generator's key, stream positions and algorithm, JSON-compatible."""
        return dict(_seed_state_get(self._state), algorithm=self.algorithm)

    @staticmethod
    def _check_checkpoint_state(data):
        if not isinstance(data, dict) or set(data) != {"key", "streams", "algorithm"} \
                or not isinstance(data["algorithm"], str):
            raise ValueError("random state: a Generator's state must have key, streams and algorithm")
        key, streams = _check_seed_state({"key": data["key"], "streams": data["streams"]}, "generator")
        return key, streams, data["algorithm"]

    def _restore_checked(self, checked):
        key, streams, alg = checked
        _seed_state_set(self._state, key, streams)
        self.algorithm = alg

    def _restore_checkpoint_state(self, data):
        """Puts back what :meth:`_checkpoint_state` returned (``ValueError`` when malformed)."""
        self._restore_checked(self._check_checkpoint_state(data))

    def uniform(self, shape, minval=0, maxval=None, dtype=_dt.float32, name=None):
        return _uniform(shape, minval, maxval, dtype, None, name, self._state)

    def normal(self, shape, mean=0.0, stddev=1.0, dtype=_dt.float32, name=None):
        return _draw_float(_NORMAL, shape, stddev, mean, dtype, None, name, self._state)

    def truncated_normal(self, shape, mean=0.0, stddev=1.0, dtype=_dt.float32, name=None):
        return _draw_float(_TRUNCATED, shape, stddev, mean, dtype, None, name, self._state)

    def make_seeds(self, count=1):
        """``[2, count]`` int64 seeds for the stateless ops, drawn from this generator."""
        info = np.iinfo(np.int64)
        return self.uniform([2, count], minval=info.min, maxval=info.max, dtype=_dt.int64)

    def split(self, count=1):
        """``count`` new generators whose streams are fixed by this one's (the parent advances)."""
        words = self._state.stream("CPU", philox).integers(0, 2**63, size=(count, 2))
        out = []
        for w in words:
            g = Generator.__new__(Generator)
            g._state = _SeedState((_GENERATOR_TAG,) + tuple(int(v) for v in w))
            g.algorithm = self.algorithm
            out.append(g)
        return out


def get_global_generator():
    """The global :class:`Generator` (of the calling thread's runtime: one per process unless
    ranks make runtimes of their own); seeded from the global seed when one is set (``set_seed``
    makes a new one), else from OS entropy."""
    st = current_state()
    with st.lock:
        if st.generator is None:
            st.generator = Generator(st.seed)
        return st.generator


def set_global_generator(generator):
    st = current_state()
    with st.lock:
        st.generator = generator


# ---- saving and restoring the random state (tw.train.Checkpoint) -------------------------------
# A stream position is NumPy's Philox state as JSON-compatible ints. Restoring validates every
# field first (a checkpoint is untrusted input) and raises ValueError for anything malformed.
_U64 = 2**64


def _stream_position(gen):
    bg = getattr(gen, "bit_generator", None)
    st = getattr(bg, "state", None)
    if not isinstance(st, dict) or st.get("bit_generator") != "Philox":
        raise TypeError(f"cannot save the position of random stream {gen!r} (only NumPy Philox streams)")
    return {"counter": [int(w) for w in st["state"]["counter"]], "key": [int(w) for w in st["state"]["key"]],
            "buffer": [int(w) for w in st["buffer"]], "buffer_pos": int(st["buffer_pos"]),
            "has_uint32": int(st["has_uint32"]), "uinteger": int(st["uinteger"])}


def _is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def _check_words(value, n, what):
    if not isinstance(value, list) or len(value) != n or not all(_is_int(w) and 0 <= w < _U64 for w in value):
        raise ValueError(f"random state: {what} must be a list of {n} unsigned 64-bit ints, got {value!r:.80}")
    return np.asarray(value, dtype=np.uint64)


def _check_position(pos, what="stream position"):
    if not isinstance(pos, dict) or set(pos) != {"counter", "key", "buffer", "buffer_pos", "has_uint32", "uinteger"}:
        raise ValueError(f"random state: {what} must be an object with counter, key, buffer, buffer_pos, "
                         f"has_uint32 and uinteger, got {pos!r:.80}")
    out = {"bit_generator": "Philox",
           "state": {"counter": _check_words(pos["counter"], 4, "counter"), "key": _check_words(pos["key"], 2, "key")},
           "buffer": _check_words(pos["buffer"], 4, "buffer")}
    for name, hi in (("buffer_pos", 4), ("has_uint32", 1), ("uinteger", 2**32 - 1)):
        v = pos[name]
        if not _is_int(v) or not 0 <= v <= hi:
            raise ValueError(f"random state: {name} must be an int in [0, {hi}], got {v!r:.80}")
        out[name] = v
    return out


def _set_stream_position(gen, checked):
    gen.bit_generator.state = checked


def _seed_state_get(st):
    """``{"key", "streams"}`` of a ``_SeedState`` (positions of the streams made so far, plus
    restored positions not used yet)."""
    with st._lock:
        streams = {dev: _stream_position(g) for dev, g in st._streams.items()}
        for dev, checked in (st._saved or {}).items():
            streams.setdefault(dev, _unchecked(checked))
        return {"key": None if st.key is None else list(st.key), "streams": streams}


def _unchecked(checked):
    return {"counter": [int(w) for w in checked["state"]["counter"]],
            "key": [int(w) for w in checked["state"]["key"]], "buffer": [int(w) for w in checked["buffer"]],
            "buffer_pos": checked["buffer_pos"], "has_uint32": checked["has_uint32"],
            "uinteger": checked["uinteger"]}


def _check_seed_state(data, what):
    if not isinstance(data, dict) or set(data) != {"key", "streams"}:
        raise ValueError(f"random state: {what} must be an object with key and streams, got {data!r:.80}")
    key = data["key"]
    if key is not None and (not isinstance(key, list) or not 1 <= len(key) <= 8 or
                            not all(_is_int(w) and 0 <= w < _U64 for w in key)):
        raise ValueError(f"random state: {what}.key must be null or a list of 1 to 8 unsigned ints, got {key!r:.80}")
    streams = data["streams"]
    if not isinstance(streams, dict) or len(streams) > 16 or not all(isinstance(d, str) for d in streams):
        raise ValueError(f"random state: {what}.streams must map device types to positions")
    return (None if key is None else tuple(key)), {d: _check_position(p, f"{what}.streams[{d!r}]")
                                                   for d, p in streams.items()}


def _seed_state_set(st, key, streams):
    st.reset(key)
    st._saved = dict(streams) or None


def _register_graph_state(st):
    # Called under _BIND_LOCK when a graph op gets its stream: a restored position waiting
    # for this key (ops of a function traced after the restore) is handed to it, in order.
    rs = current_state()
    with rs.lock:
        queue = rs.pending_graph.get(st.key)
        if queue:
            st._saved = dict(queue.pop(0)) or None
            if not queue:
                del rs.pending_graph[st.key]
        refs = rs.graph_states
        if len(refs) > 64 and len(refs) % 64 == 0:
            refs[:] = [r for r in refs if r() is not None]
        refs.append(weakref.ref(st))


def get_rng_state():
    """The random state (of the calling thread's runtime: the process's unless ranks made
    their own) as JSON-compatible data: the global seed, the eager op
    counter and streams, the streams of graph ops (``tw.function`` and TF1 graphs, in the
    order they were first run), and the global :class:`Generator`.

    :func:`set_rng_state` puts it back; graph ops built afterwards (a function traced again
    in a new process) receive their saved positions when they first run, matched by seed
    key and order. Streams drawn from OS entropy are saved too, so a restored run continues
    them. ``tw.train.RNGState`` puts this in a checkpoint.

    >>> import tensorweave as tw
    >>> tw.random.set_seed(1)
    >>> _ = tw.random.uniform([2], seed=5)
    >>> state = tw.random.get_rng_state()
    >>> a = tw.random.uniform([2], seed=5).numpy()
    >>> tw.random.set_rng_state(state)
    >>> bool((tw.random.uniform([2], seed=5).numpy() == a).all())
    True
    >>> tw.random.set_seed(None)
    """
    rs = current_state()
    with rs.lock:
        cache = list(rs.cache.items())
        graph = [r() for r in rs.graph_states]
        pending = {k: list(v) for k, v in rs.pending_graph.items()}
        seed, counter, gen = rs.seed, rs.counter, rs.generator
    eager = [{"op": op, "dtype": dt, "seed": s1, "seed2": s2, "state": _seed_state_get(st)}
             for (op, dt, s1, s2), st in cache]
    graph_out = [_seed_state_get(st) for st in graph if st is not None]
    for key, queue in pending.items():   # restored but not yet handed out: keep them for the next restore
        graph_out += [{"key": None if key is None else list(key),
                       "streams": {d: _unchecked(c) for d, c in p.items()}} for p in queue]
    return {"global_seed": seed, "counter": counter, "eager": eager, "graph": graph_out,
            "generator": None if gen is None else gen._checkpoint_state()}


def set_rng_state(state):
    """Restores what :func:`get_rng_state` returned (validated first: ``ValueError`` when malformed)."""
    if not isinstance(state, dict) or set(state) != {"global_seed", "counter", "eager", "graph", "generator"}:
        raise ValueError("random state must be an object with global_seed, counter, eager, graph and generator")
    seed, counter = state["global_seed"], state["counter"]
    if seed is not None and not _is_int(seed):
        raise ValueError(f"random state: global_seed must be an int or null, got {seed!r:.80}")
    if not _is_int(counter) or counter < 0:
        raise ValueError(f"random state: counter must be a non-negative int, got {counter!r:.80}")
    if not isinstance(state["eager"], list) or not isinstance(state["graph"], list):
        raise ValueError("random state: eager and graph must be lists")
    cache = {}
    for i, e in enumerate(state["eager"]):
        if not isinstance(e, dict) or set(e) != {"op", "dtype", "seed", "seed2", "state"}:
            raise ValueError(f"random state: eager[{i}] must have op, dtype, seed, seed2 and state")
        if not isinstance(e["op"], str) or not (e["dtype"] is None or isinstance(e["dtype"], str)) \
                or not _is_int(e["seed"]) or not _is_int(e["seed2"]):
            raise ValueError(f"random state: eager[{i}] has fields of the wrong type")
        key, streams = _check_seed_state(e["state"], f"eager[{i}].state")
        st = _SeedState(key)
        st._saved = dict(streams) or None
        cache[(e["op"], e["dtype"], e["seed"], e["seed2"])] = st
    graph = [_check_seed_state(g, f"graph[{i}]") for i, g in enumerate(state["graph"])]
    gen_state = state["generator"]
    gen_checked = None if gen_state is None else Generator._check_checkpoint_state(gen_state)
    by_key = {}
    for key, streams in graph:
        by_key.setdefault(key, []).append(streams)
    rs = current_state()
    with rs.lock:
        live = [st for st in (r() for r in rs.graph_states) if st is not None]
        rs.seed, rs.counter, rs.cache = seed, counter, cache
        gen = rs.generator
    for st in live:                      # ops that exist now take their positions at once ...
        queue = by_key.get(st.key)
        if queue:
            _seed_state_set(st, st.key, queue.pop(0))
    with rs.lock:                        # ... the others when a graph op with that key first runs
        rs.pending_graph = {k: v for k, v in by_key.items() if v}
    if gen_checked is None:
        with rs.lock:
            rs.generator = None
    else:
        if gen is None:
            gen = Generator.__new__(Generator)
            gen._state = _SeedState(None)
        gen._restore_checked(gen_checked)
        with rs.lock:
            rs.generator = gen


# ---- dropout ---------------------------------------------------------------------------------
def _noise_shape(x, noise_shape):
    if noise_shape is None:
        return x.shape.as_list() if x.shape.is_fully_defined() else _shape_of(x)
    if isinstance(noise_shape, Tensor):
        return noise_shape
    dims = list(noise_shape.as_list() if isinstance(noise_shape, TensorShape) else noise_shape)
    for i, d in enumerate(dims):
        if d is None:
            known = x.shape[i] if x.shape.rank is not None and i < x.shape.rank else None
            dims[i] = known if known is not None else _shape_of(x)[i]
    return dims


def dropout(x, rate, noise_shape=None, seed=None, name=None):
    """Zeroes each element with probability ``rate`` and scales the rest by ``1 / (1 - rate)``
    (``tf.nn.dropout``); ``noise_shape`` broadcasts one keep/drop decision over dimensions.

    The result is ``x * mask`` with ``mask`` in {0, 1/(1-rate)}, so the gradient is the
    same mask.

    >>> import tensorweave as tw
    >>> y = tw.nn.dropout(tw.ones([1000]), rate=0.5, seed=1).numpy()
    >>> sorted(set(y.tolist()))
    [0.0, 2.0]
    """
    x = _ct(x)
    if not x.dtype.is_floating:
        raise ValueError(f"x has to be a floating point tensor since it's going to be scaled. "
                         f"Got a {x.dtype.name} tensor instead.")
    if isinstance(rate, Tensor):
        if rate.shape.rank not in (None, 0):
            raise ValueError(f"rate must be a scalar tensor, got shape {fmt(rate.shape)}")
        from tensorweave.ops.math_ops import cast
        rate_v = cast(rate, x.dtype)
        scale = 1 / (1 - rate_v)
    else:
        if not isinstance(rate, numbers.Real) or isinstance(rate, bool) or not 0 <= rate < 1:
            raise ValueError(f"rate must be a scalar tensor or a float in the range [0, 1), got {rate!r}")
        if rate == 0:   # nothing is dropped (TF returns x itself too)
            return x if executing_eagerly() else identity(x, name=name)
        rate_v, scale = float(rate), 1.0 / (1.0 - float(rate))
    from tensorweave.ops.math_ops import cast, greater_equal, multiply
    u = uniform(_noise_shape(x, noise_shape), dtype=x.dtype, seed=seed)
    # One multiply by a mask that already holds the scale: dropped entries are exact zeros
    # and the gradient (from Mul) is exactly mask * scale.
    mask = cast(greater_equal(u, rate_v), x.dtype) * scale
    return multiply(x, mask, name=name)


# ---- SBP rules (core/sbp.py): a random tensor may come out split along any axis, each rank
# holding its slice of the single-device draw, so the logical value is the one a single device
# draws. Uniform floats and full-range integers of 32/64-bit types use a fixed number of Philox
# words per value: a rank computes only its values by counter offset (SbpRandomPiece; no whole
# draw, as JAX's partitionable threefry). The other samplers (normal: rejection; bounded
# integers: Lemire's rejection) draw whole and keep the slice (SbpSliceOf). Shuffling permutes
# rows: other axes split through (same stream per rank).
_COUNTER_OPS = ("RandomUniform", "StatelessRandomUniform", "StatelessRandomUniformFullInt")
_COUNTER_DTYPES = ("float32", "float64", "int32", "int64", "uint32", "uint64")


def _slice_hook(op_type, attrs, shard):
    if op_type in ("SbpSliceOf", "SbpRandomPiece"):
        op_type, attrs = attrs["sbp_op"], {k: v for k, v in attrs.items() if k not in ("sbp_op", "sbp_slices")}
    by_counter = op_type in _COUNTER_OPS and attrs["dtype"].name in _COUNTER_DTYPES
    return "SbpRandomPiece" if by_counter else "SbpSliceOf", {
        **attrs, "sbp_op": op_type, "sbp_slices": tuple((s.start, s.stop) for s in shard.out_slices[0])}


def _random_sbp(inputs, attrs):
    shapes = attrs.get("_out_shapes")
    if shapes:
        for j in range(len(shapes[0])):
            yield Signature([B] * len(inputs), [S(j)], _slice_hook)


def _shuffle_sbp(inputs, attrs):
    yield from (([S(i)], [S(i)]) for i in range(1, inputs[0].rank))


for _name in ("RandomUniform", "RandomStandardNormal", "TruncatedNormal", "RandomUniformInt", "Multinomial",
              "StatelessRandomUniform", "StatelessRandomNormal", "StatelessTruncatedNormal",
              "StatelessRandomUniformInt", "StatelessRandomUniformFullInt", "StatelessMultinomial"):
    get_op(_name).sbp = signatures(_random_sbp)
get_op("RandomShuffle").sbp = signatures(_shuffle_sbp)
