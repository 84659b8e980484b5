"""Weight initializers (``keras.initializers``): callables ``init(shape, dtype)``.

Random initializers draw with tensorweave's random ops, so ``keras.utils.set_random_seed``
(which sets the global seed) makes weights reproducible bit for bit.

>>> from tensorweave.keras import initializers
>>> initializers.get("zeros")((2,)).numpy()
array([0., 0.], dtype=float32)
"""
import math

import numpy as np

import tensorweave as tw


class Initializer:
    def __call__(self, shape, dtype=None):
        raise NotImplementedError

    def get_config(self):
        return {}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def _dtype(dtype):
    return tw.as_dtype(dtype or "float32")


def _random(kind, shape, a, b, dtype, seed):
    """Draws ``kind`` ("uniform", "normal", "truncated_normal") with parameters ``a, b``. An integer
    ``seed`` makes the draw a function of the seed (Keras: a seeded initializer gives the same values
    on every call and in every instance); without one, the global seed rules of ``tw.random`` apply."""
    if isinstance(seed, int) and not isinstance(seed, bool):
        fn = {"uniform": tw.random.stateless_uniform, "normal": tw.random.stateless_normal,
              "truncated_normal": tw.random.stateless_truncated_normal}[kind]
        return fn(shape, [seed, 0], a, b, dtype=dtype)
    fn = {"uniform": tw.random.uniform, "normal": tw.random.normal,
          "truncated_normal": tw.random.truncated_normal}[kind]
    return fn(shape, a, b, dtype=dtype, seed=seed)


class Zeros(Initializer):
    def __call__(self, shape, dtype=None):
        return tw.zeros(shape, _dtype(dtype))


class Ones(Initializer):
    def __call__(self, shape, dtype=None):
        return tw.ones(shape, _dtype(dtype))


class Constant(Initializer):
    def __init__(self, value=0.0):
        self.value = value

    def __call__(self, shape, dtype=None):
        return tw.constant(np.broadcast_to(np.asarray(self.value, _dtype(dtype).np_dtype), tuple(shape)).copy())

    def get_config(self):
        return {"value": self.value if np.isscalar(self.value) else np.asarray(self.value).tolist()}


class RandomUniform(Initializer):
    def __init__(self, minval=-0.05, maxval=0.05, seed=None):
        self.minval, self.maxval, self.seed = minval, maxval, seed

    def __call__(self, shape, dtype=None):
        # integer dtypes too: TF's random_uniform_initializer (this class) takes them
        return _random("uniform", shape, self.minval, self.maxval, _dtype(dtype), self.seed)

    def get_config(self):
        return {"minval": self.minval, "maxval": self.maxval, "seed": self.seed}


class RandomNormal(Initializer):
    def __init__(self, mean=0.0, stddev=0.05, seed=None):
        self.mean, self.stddev, self.seed = mean, stddev, seed

    def __call__(self, shape, dtype=None):
        return _random("normal", shape, self.mean, self.stddev, _float(dtype, type(self).__name__), self.seed)

    def get_config(self):
        return {"mean": self.mean, "stddev": self.stddev, "seed": self.seed}


class TruncatedNormal(RandomNormal):
    def __call__(self, shape, dtype=None):
        return _random("truncated_normal", shape, self.mean, self.stddev, _float(dtype, type(self).__name__),
                       self.seed)


def _fans(shape, input_axes=None, output_axes=None):
    """``(fan_in, fan_out)`` of a weight shape: Keras' rule (kernels are ``(..., in, out)``), or the
    products over the given axes."""
    shape = tuple(shape)
    if input_axes is not None and output_axes is not None:
        return int(np.prod([shape[a] for a in input_axes])), int(np.prod([shape[a] for a in output_axes]))
    if len(shape) < 1:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    if len(shape) == 2:
        return shape[0], shape[1]
    receptive = int(np.prod(shape[:-2]))
    return shape[-2] * receptive, shape[-1] * receptive


def _float(dtype, who):
    d = _dtype(dtype)
    if not d.is_floating:
        raise TypeError(f"{who}: a random initializer makes floating-point values; got dtype {d.name}. "
                        "Hint: initialize in float32 and cast.")
    return d


class VarianceScaling(Initializer):
    def __init__(self, scale=1.0, mode="fan_in", distribution="truncated_normal", seed=None, input_axes=None,
                 output_axes=None):
        if scale <= 0.0:
            raise ValueError(f"Argument `scale` must be positive float. Received: scale={scale}")
        if mode not in ("fan_in", "fan_out", "fan_avg"):
            raise ValueError(f"Invalid `mode` argument: {mode!r}; use one of 'fan_in', 'fan_out', 'fan_avg'")
        distribution = distribution.lower()
        if distribution == "normal":   # Keras' spelling of the truncated normal
            distribution = "truncated_normal"
        if distribution not in ("truncated_normal", "untruncated_normal", "uniform"):
            raise ValueError(f"Invalid `distribution` argument: {distribution!r}; use one of 'uniform', "
                             "'truncated_normal', 'untruncated_normal'")
        self.scale, self.mode, self.distribution, self.seed = scale, mode, distribution, seed
        self.input_axes, self.output_axes = input_axes, output_axes

    def __call__(self, shape, dtype=None):
        return _random(*self._draw(shape, dtype), self.seed)

    def _draw(self, shape, dtype):
        """``(kind, shape, a, b, dtype)`` of the draw: its parameters come from the logical shape."""
        fan_in, fan_out = _fans(shape, self.input_axes, self.output_axes)
        n = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2.0}[self.mode]
        scale = self.scale / max(1.0, n)
        d = _float(dtype, type(self).__name__)
        if self.distribution == "uniform":
            limit = math.sqrt(3.0 * scale)
            return "uniform", shape, -limit, limit, d
        if self.distribution == "truncated_normal":
            # the stddev of a normal truncated at 2 sigma is 0.8796 of the untruncated one
            return "truncated_normal", shape, 0.0, math.sqrt(scale) / 0.87962566103423978, d
        return "normal", shape, 0.0, math.sqrt(scale), d

    def get_config(self):
        return {"scale": self.scale, "mode": self.mode, "distribution": self.distribution, "seed": self.seed,
                "input_axes": self.input_axes, "output_axes": self.output_axes}


def _preset(name, scale, mode, distribution):
    class Preset(VarianceScaling):
        def __init__(self, seed=None, input_axes=None, output_axes=None):
            super().__init__(scale, mode, distribution, seed, input_axes, output_axes)

        def get_config(self):
            return {"seed": self.seed, "input_axes": self.input_axes, "output_axes": self.output_axes}
    Preset.__name__ = Preset.__qualname__ = name
    return Preset


GlorotUniform = _preset("GlorotUniform", 1.0, "fan_avg", "uniform")
GlorotNormal = _preset("GlorotNormal", 1.0, "fan_avg", "truncated_normal")
HeUniform = _preset("HeUniform", 2.0, "fan_in", "uniform")
HeNormal = _preset("HeNormal", 2.0, "fan_in", "truncated_normal")
LecunUniform = _preset("LecunUniform", 1.0, "fan_in", "uniform")
LecunNormal = _preset("LecunNormal", 1.0, "fan_in", "truncated_normal")


class Orthogonal(Initializer):
    def __init__(self, gain=1.0, seed=None):
        self.gain, self.seed = gain, seed

    def __call__(self, shape, dtype=None):
        shape = tuple(shape)
        if len(shape) < 2:
            raise ValueError("The tensor to initialize must be at least two-dimensional. "
                             f"Received: shape={shape} of rank {len(shape)}.")
        _float(dtype, "Orthogonal")
        rows, cols = int(np.prod(shape[:-1])), shape[-1]
        from tensorweave.core.context import eager_mode
        with eager_mode():  # the QR step runs in NumPy, even while a TF1 graph is being built
            a = _random("normal", (max(rows, cols), min(rows, cols)), 0.0, 1.0, tw.float32, self.seed).numpy()
        q, r = np.linalg.qr(a.astype(np.float64))
        q = q * np.sign(np.diag(r))
        if rows < cols:
            q = q.T
        return tw.constant((self.gain * q[:rows, :cols]).reshape(shape).astype(_dtype(dtype).np_dtype))

    def get_config(self):
        return {"gain": self.gain, "seed": self.seed}


class Identity(Initializer):
    def __init__(self, gain=1.0):
        self.gain = gain

    def __call__(self, shape, dtype=None):
        shape = tuple(shape)
        if len(shape) != 2:
            raise ValueError("Identity matrix initializer can only be used for 2D matrices. "
                             f"Received: shape={shape} of rank {len(shape)}.")
        return tw.constant((self.gain * np.eye(*shape)).astype(_dtype(dtype).np_dtype))

    def get_config(self):
        return {"gain": self.gain}


class STFT(Initializer):
    """Kernels of a convolution that computes a short-time Fourier transform (Keras'
    ``STFTInitializer``): for a shape ``(frame_length, 1, bins)``, ``cos`` (``side="real"``) or
    ``sin`` (``"imag"``) of ``-2 pi t k / (2 (bins - 1))``, times a SciPy window (``hann``...,
    ``periodic`` or symmetric, or given values) scaled by its L2 (``"density"``) or L1
    (``"spectrum"``) norm.

    >>> from tensorweave.keras import initializers
    >>> initializers.STFT(window=None)((4, 1, 3))[:, 0, 1].numpy().round(3)
    array([ 1.,  0., -1., -0.], dtype=float32)
    """

    def __init__(self, side="real", window="hann", scaling="density", periodic=False):
        if side not in ("real", "imag"):
            raise ValueError(f"side should be 'real' or 'imag', not {side}")
        if isinstance(window, str):
            import scipy.signal
            scipy.signal.get_window(window, 1)   # an unknown window name raises here, as in Keras
        if scaling is not None and scaling not in ("density", "spectrum"):
            raise ValueError(f"Scaling is invalid, it must be `None`, 'density' or 'spectrum'. Received scaling={scaling}")
        self.side, self.window, self.scaling, self.periodic = side, window, scaling, periodic

    def __call__(self, shape, dtype=None):
        d = _dtype(dtype)
        frame_length, _, bins = shape
        t = np.arange(frame_length, dtype=np.float64).reshape(frame_length, 1, 1)
        k = np.arange(bins, dtype=np.float64).reshape(1, 1, bins)
        arg = -2.0 * t * (k / ((bins - 1) * 2)) * np.pi
        kernel = np.cos(arg) if self.side == "real" else np.sin(arg)
        if self.window is not None:
            win = self.window
            if isinstance(win, str):
                import scipy.signal
                win = scipy.signal.get_window(win, frame_length, self.periodic)
            win = np.asarray(win, np.float64)
            if win.ndim != 1 or win.shape[-1] != frame_length:
                raise ValueError(f"The shape of `window` must be equal to [frame_length]. Received: window shape={win.shape}")
            win = win.reshape(frame_length, 1, 1)
            norm = {"density": np.sqrt(np.sum(win ** 2)), "spectrum": np.sum(np.abs(win)), None: 1.0}[self.scaling]
            kernel = kernel * win / norm
        return tw.constant(kernel.astype(d.np_dtype))

    def get_config(self):
        return {"side": self.side, "window": self.window, "periodic": self.periodic, "scaling": self.scaling}


def slice_of(init, shape, dtype, slices):
    """``init(shape, dtype)[slices]`` as an array, made without the whole value (a sharded
    variable's piece: ``distribute/variables.py``), or None where ``init`` cannot do that.

    Zeros, Ones, Constant and the seeded random initializers (RandomUniform, RandomNormal,
    TruncatedNormal, VarianceScaling and its Glorot/He/Lecun presets) in float32/float64 draw
    only the slice, the same bits as the whole draw (``distribute.sharded_draws.stateless_slice``); a subclass
    with its own ``__call__``, an unseeded or integer draw, Orthogonal, Identity: None.

    >>> import numpy as np
    >>> init = GlorotUniform(seed=3)
    >>> part = slice_of(init, (6, 4), "float32", (slice(0, 6), slice(2, 4)))
    >>> bool((part == init((6, 4)).numpy()[:, 2:4]).all())
    True
    """
    d = _dtype(dtype)
    call = type(init).__call__
    piece = tuple(s.stop - s.start for s in slices)
    if call is Zeros.__call__ or call is Ones.__call__:
        return (np.zeros if call is Zeros.__call__ else np.ones)(piece, d.np_dtype)
    if call is Constant.__call__:
        return np.array(np.broadcast_to(np.asarray(init.value, d.np_dtype), tuple(shape))[tuple(slices)])
    if call is VarianceScaling.__call__:
        draw = init._draw(shape, dtype)
    elif call is RandomUniform.__call__ and d.is_floating:
        draw = "uniform", shape, init.minval, init.maxval, d
    elif call in (RandomNormal.__call__, TruncatedNormal.__call__):
        kind = "normal" if call is RandomNormal.__call__ else "truncated_normal"
        draw = kind, shape, init.mean, init.stddev, _float(dtype, type(init).__name__)
    else:
        return None
    kind, _, a, b, d = draw
    seed = init.seed
    if (not isinstance(seed, int) or isinstance(seed, bool) or d.np_dtype not in (np.float32, np.float64)
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b))):
        return None
    from tensorweave.distribute.sharded_draws import stateless_slice
    return stateless_slice(kind, shape, [seed, 0], a, b, d, tuple(slices)).numpy()

_ALIASES = {"zeros": Zeros, "ones": Ones, "constant": Constant, "uniform": RandomUniform,
            "random_uniform": RandomUniform, "normal": RandomNormal, "random_normal": RandomNormal,
            "truncated_normal": TruncatedNormal, "glorot_uniform": GlorotUniform, "glorot_normal": GlorotNormal,
            "he_uniform": HeUniform, "he_normal": HeNormal, "lecun_uniform": LecunUniform,
            "lecun_normal": LecunNormal, "orthogonal": Orthogonal, "identity": Identity,
            "variance_scaling": VarianceScaling, "stft": STFT}
_CLASSES = {c.__name__: c for c in set(_ALIASES.values())}
# Keras 2's class names, which Keras 3 keeps for old configs.
_CLASSES.update(IdentityInitializer=Identity, OrthogonalInitializer=Orthogonal, STFTInitializer=STFT)
IdentityInitializer, OrthogonalInitializer, STFTInitializer = Identity, Orthogonal, STFT


def get(identifier):
    """An initializer from a name, a config dict, an instance or a callable."""
    if identifier is None:
        return None
    if isinstance(identifier, str):
        cls = _ALIASES.get(identifier) or _CLASSES.get(identifier)
        if cls is None:
            raise ValueError(f"Unknown initializer {identifier!r}; known: {sorted(_ALIASES)}")
        return cls()
    if isinstance(identifier, dict):
        cls = _CLASSES.get(identifier["class_name"])
        if cls is None:
            raise ValueError(f"Unknown initializer class {identifier['class_name']!r}")
        return cls.from_config(identifier.get("config", {}))
    if callable(identifier):
        return identifier
    raise TypeError(f"Could not interpret initializer {identifier!r}")


def serialize(init):
    if isinstance(init, Initializer):
        return {"class_name": type(init).__name__, "config": init.get_config()}
    raise ValueError(f"Cannot serialize the custom initializer {init!r}")


def deserialize(config, custom_objects=None):
    """The initializer described by :func:`serialize` (or a name)."""
    if isinstance(config, dict) and custom_objects and config.get("class_name") in custom_objects:
        return custom_objects[config["class_name"]].from_config(config.get("config", {}))
    return get(config)


# Keras' lower-case names are the classes (``initializers.glorot_uniform(seed=1)``).
globals().update(_ALIASES)

# TF2's ``tf.*_initializer`` names (``tf.random_normal_initializer(0.0, 0.02)``): tensorweave's
# namespace exposes them from here.
TF_NAMES = {"random_normal_initializer": RandomNormal, "random_uniform_initializer": RandomUniform,
            "truncated_normal_initializer": TruncatedNormal, "constant_initializer": Constant,
            "zeros_initializer": Zeros, "ones_initializer": Ones, "glorot_uniform_initializer": GlorotUniform,
            "glorot_normal_initializer": GlorotNormal, "orthogonal_initializer": Orthogonal,
            "variance_scaling_initializer": VarianceScaling}
