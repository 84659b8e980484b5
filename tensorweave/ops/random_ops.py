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

import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core.context import building_graph, executing_eagerly
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.dispatch import execute
from tensorweave.core.graph import constant_value
from tensorweave.core.registry import NOT_DIFFERENTIABLE, get_op, register_op
from tensorweave.core.shape import TensorShape, fmt
from tensorweave.core.tensor import Tensor
from tensorweave.ops.array_ops import _shape_input, identity
from tensorweave.ops.array_ops import shape as _shape_of

__all__ = [
    "set_seed", "get_seed", "uniform", "normal", "truncated_normal", "categorical", "shuffle",
    "stateless_uniform", "stateless_normal", "stateless_truncated_normal", "stateless_categorical",
    "Generator", "get_global_generator", "set_global_generator", "dropout", "DEFAULT_GRAPH_SEED",
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

    __slots__ = ("key", "_streams", "_lock")

    def __init__(self, key):
        self.key = None if key is None else tuple(int(w) % 2**64 for w in key)
        self._streams = {}
        self._lock = threading.Lock()

    def stream(self, device_type, make):
        s = self._streams.get(device_type)
        if s is None:
            with self._lock:
                s = self._streams.get(device_type)
                if s is None:
                    s = self._streams[device_type] = make(self.key)
        return s

    def reset(self, key):
        with self._lock:
            self.key = None if key is None else tuple(int(w) % 2**64 for w in key)
            self._streams = {}

    def __repr__(self):
        return f"<random stream key={self.key}>"


class _Global:
    """Process-wide eager seed state (the graph-level seed lives on each Graph)."""
    seed = None
    counter = 0              # eager op seeds under rule 2; set_seed resets it
    cache = {}               # (op type, dtype, seed, seed2) -> _SeedState, TF's eager kernel cache
    entropy = _SeedState(None)   # rule 1 in eager mode
    generator = None         # the global Generator
    lock = threading.Lock()


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
    rule-2 op counter and the global :class:`Generator`.

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
    with _Global.lock:
        _Global.seed = seed
        _Global.counter = 0
        _Global.cache = {}
        _Global.generator = None


set_random_seed = set_seed


def get_seed(op_seed):
    """The ``(seed, seed2)`` pair a new random op uses (``tf.compat.v1.get_seed``).

    ``(None, None)`` means "draw from OS entropy". A ``tw.function`` graph without a seed of
    its own uses the global seed in force when it is traced, as TensorFlow's FuncGraph does.

    >>> import tensorweave as tw
    >>> tw.random.get_seed(5)
    (87654321, 5)
    """
    op_seed = None if op_seed is None else _int_seed(op_seed, "op seed")
    g = building_graph()
    global_seed = _Global.seed if g is None else g.seed
    if global_seed is None and g is not None and g.is_function_graph:
        global_seed = _Global.seed
    if global_seed is not None:
        if op_seed is None:
            if g is None:
                with _Global.lock:
                    op_seed = _Global.counter
                    _Global.counter += 1
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
        return _Global.entropy
    if derived:
        # A counter-derived seed is never asked for again: caching it would only grow the cache.
        return _SeedState(_op_key(seed, seed2))
    key = (op_type, dtype.name if dtype is not None else None, seed, seed2)
    with _Global.lock:
        st = _Global.cache.get(key)
        if st is None:
            st = _Global.cache[key] = _SeedState(_op_key(seed, seed2))
    return st


_BIND_LOCK = threading.Lock()


def _bind_state(op):
    """Gives a graph random op its stream, kept on the op so it outlives plans."""
    st = op.attrs.get("_state")      # bound to a Generator
    if st is not None:
        return {"state": st}
    with _BIND_LOCK:
        extra = op._extra
        if extra is None:
            extra = op._extra = {}
        st = extra.get("random_state")
        if st is None:
            st = extra["random_state"] = _SeedState(_op_key(op.attrs["seed"], op.attrs["seed2"]))
    return {"state": st}


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
    elif state is not None:
        attrs["_state"] = state
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
    rnd = _run_random(opdef, [_shape_input(shape)], {"dtype": dtype}, seed,
                      None if affine else name, dtype, state)
    return _affine(rnd, scale, shift, name) if affine else rnd


def _draw_int(shape, minval, maxval, dtype, seed, name, state=None):
    if maxval is None:
        raise ValueError(f"Must specify maxval for integer dtype {dtype.name}")
    lo, hi = _ct(minval, dtype=dtype), _ct(maxval, dtype=dtype)
    return _run_random(_UNIFORM_INT, [_shape_input(shape), lo, hi], {}, seed, name, dtype, state)


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
    n = num_samples if isinstance(num_samples, Tensor) else _ct(num_samples, dtype=_dt.int32)
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
    rnd = execute(get_op(op_name), [_shape_input(shape), _seed_tensor(seed)], {"dtype": dtype},
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
            return execute(get_op("StatelessRandomUniformFullInt"), [_shape_input(shape), _seed_tensor(seed)],
                           {"dtype": dtype}, name)
        if maxval is None:
            raise ValueError(f"Must specify maxval for integer dtype {dtype.name} "
                             "(or neither bound for the full range)")
        return execute(get_op("StatelessRandomUniformInt"),
                       [_shape_input(shape), _seed_tensor(seed), _ct(minval, dtype=dtype),
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
    n = num_samples if isinstance(num_samples, Tensor) else _ct(num_samples, dtype=_dt.int32)
    return execute(get_op("StatelessMultinomial"), [_ct(logits), n, _seed_tensor(seed)],
                   {"output_dtype": _dt.as_dtype(dtype)}, name)


# ---- Generator -------------------------------------------------------------------------------
class Generator:
    """A random number generator with its own state (``tf.random.Generator``).

    Its draws do not depend on the global seed; ops made from it in a graph or a
    ``tw.function`` share the generator's one stream. The state lives in Python (it is
    not a variable, so checkpoints do not save it).

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
        from tensorweave.kernels.cpu.random_kernels import philox
        words = self._state.stream("CPU", philox).integers(0, 2**63, size=(count, 2))
        out = []
        for w in words:
            g = Generator.__new__(Generator)
            g._state = _SeedState((_GENERATOR_TAG,) + tuple(int(v) for v in w))
            g.algorithm = self.algorithm
            out.append(g)
        return out


def get_global_generator():
    """The process-wide :class:`Generator`; seeded from the global seed when one is set
    (``set_seed`` makes a new one), else from OS entropy."""
    with _Global.lock:
        if _Global.generator is None:
            _Global.generator = Generator(_Global.seed)
        return _Global.generator


def set_global_generator(generator):
    with _Global.lock:
        _Global.generator = generator


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
