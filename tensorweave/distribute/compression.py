"""Gradient compression on the reducing collectives (boxing's ``P -> B`` and ``P -> S`` edges).

A :class:`Compression` turns a float array into a smaller *payload* (a tuple of arrays) and
back. :func:`all_reduce` and :func:`reduce_scatter` send each member's compressed
contribution once (one rendezvous through the group's ``exchange`` primitive, so they run on
in-process ranks, shared memory and Ray's object store alike); every member decodes all
contributions and sums them in rank order in the input's dtype, so every member gets the same
bits. With *error feedback* a member keeps what compression lost this time (``x + r -
decode(encode(x + r))``) and adds it to its next contribution to the same edge (``key``), so
the errors do not accumulate over steps (1-bit SGD / EF-SGD, Seide et al. 2014, Karimireddy et
al. 2019).

==========  =================================  =====================  ==================
name        payload                            bytes vs float32       error feedback
==========  =================================  =====================  ==================
``fp16``    the values as float16              1/2                    off by default
``bf16``    the values as bfloat16             1/2                    off by default
``int8``    int8 values, one float32 scale     ~1/4                   on by default
            per block of 1024 (max |v| / 127)
==========  =================================  =====================  ==================

Sums are made after decoding (never in the compressed type), so the only error is each
member's rounding of its own contribution. fp16 turns values beyond 65504 into inf (no loss
scaling here): prefer ``bf16`` for unnormalised gradients.

:class:`CommunicationOptions` is TF's ``tf.distribute.experimental.CommunicationOptions``
(``bytes_per_pack``, ``timeout_seconds``, ``implementation``) plus ``compression``, the option
``MultiWorkerMirroredStrategy`` and :func:`~tensorweave.distribute.boxing.run_boxing_on_rank`
take.

>>> import numpy as np
>>> from concurrent.futures import ThreadPoolExecutor
>>> from tensorweave.distribute.collective import InProcessGroup
>>> group = InProcessGroup([0, 1])
>>> codecs = [get("int8") for _ in range(2)]        # one per rank: each keeps its own residuals
>>> def on_rank(i):
...     x = np.linspace(-1, 1, 8, dtype=np.float32) * (i + 1)
...     return all_reduce(group.communicator(i), x, codecs[i], key="w")
>>> with ThreadPoolExecutor(2) as pool:
...     a, b = pool.map(on_rank, range(2))
>>> bool(np.array_equal(a, b)), bool(np.abs(a - np.linspace(-3, 3, 8)).max() < 0.02)
(True, True)
"""
import ml_dtypes
import numpy as np

BLOCK = 1024            # int8: one scale per this many values (a large value costs only its block precision)


class Compression:
    """How one member encodes its contributions (subclasses: :class:`CastCompression`,
    :class:`Int8Compression`). Holds this member's error-feedback residuals by ``key``, so
    make one object per member and per training run."""

    name = "none"

    def __init__(self, error_feedback=False):
        self.error_feedback = bool(error_feedback)
        self._residuals = {}

    def encode(self, x):
        """The payload (a tuple of arrays) of the float array ``x``."""
        raise NotImplementedError

    def decode(self, payload, dtype, shape):
        """The array of ``dtype`` and ``shape`` a payload stands for."""
        raise NotImplementedError

    def wire_bytes(self, n):
        """Bytes of the payload of ``n`` values."""
        raise NotImplementedError

    def encode_with_feedback(self, x, key):
        """``encode(x + residual[key])``, keeping the new residual when error feedback is on."""
        x = np.asarray(x)
        if not self.error_feedback:
            return self.encode(x)
        r = self._residuals.get(key)
        v = x if r is None or r.shape != x.shape else x + r
        payload = self.encode(v)
        self._residuals[key] = v - self.decode(payload, x.dtype, x.shape)
        return payload

    def reset(self):
        """Forgets the residuals (a new run, or a member that joined)."""
        self._residuals.clear()

    def __repr__(self):
        return f"{type(self).__name__}({self.name!r}, error_feedback={self.error_feedback})"


class CastCompression(Compression):
    """Sends the values in a 2-byte float type (``"fp16"`` or ``"bf16"``)."""

    _TYPES = {"fp16": np.dtype(np.float16), "bf16": np.dtype(ml_dtypes.bfloat16)}

    def __init__(self, name="fp16", error_feedback=False):
        if name not in self._TYPES:
            raise ValueError(f"CastCompression: name must be one of {sorted(self._TYPES)}, got {name!r}")
        super().__init__(error_feedback)
        self.name = name
        self.wire = self._TYPES[name]

    def encode(self, x):
        return (np.asarray(x).astype(self.wire).reshape(-1),)

    def decode(self, payload, dtype, shape):
        return payload[0].astype(dtype).reshape(shape)

    def wire_bytes(self, n):
        return int(n) * self.wire.itemsize


class Int8Compression(Compression):
    """Symmetric int8 quantization with one float32 scale per block of :data:`BLOCK` values
    (``max |v| / 127``; rounding to nearest), error feedback on by default."""

    name = "int8"

    def __init__(self, error_feedback=True):
        super().__init__(error_feedback)

    def encode(self, x):
        flat = np.asarray(x, np.float32).reshape(-1)
        n = flat.size
        blocks = -(-n // BLOCK)
        padded = np.zeros(blocks * BLOCK, np.float32)
        padded[:n] = flat
        padded = padded.reshape(blocks, BLOCK)
        scale = np.abs(padded).max(axis=1) / np.float32(127)
        safe = np.where(scale > 0, scale, np.float32(1))
        q = np.clip(np.rint(padded / safe[:, None]), -127, 127).astype(np.int8).reshape(-1)[:n]
        return q, scale.astype(np.float32)

    def decode(self, payload, dtype, shape):
        q, scale = payload
        n = q.size
        out = np.zeros(scale.size * BLOCK, np.float32)
        out[:n] = q
        out = out.reshape(scale.size, BLOCK) * scale[:, None]
        return out.reshape(-1)[:n].astype(dtype).reshape(shape)

    def wire_bytes(self, n):
        return int(n) + 4 * (-(-int(n) // BLOCK))


NAMES = ("fp16", "bf16", "int8")


def get(spec):
    """A fresh :class:`Compression` for ``spec``: None / ``"none"`` (no compression: returns
    None), ``"fp16"``, ``"bf16"``, ``"int8"``, or a Compression (its type and settings, with
    residuals of its own: each member needs its own object)."""
    if spec is None or spec == "none":
        return None
    if isinstance(spec, Compression):
        out = object.__new__(type(spec))
        out.__dict__.update(spec.__dict__)
        out._residuals = {}
        return out
    if spec in ("fp16", "bf16"):
        return CastCompression(spec)
    if spec == "int8":
        return Int8Compression()
    raise ValueError(f"compression must be None, 'none', one of {NAMES} or a Compression, got {spec!r}")


def payload_bytes(payload):
    return int(sum(np.asarray(a).nbytes for a in payload))


def _exchange(comm, kind, value):
    return comm.group.exchange(comm.index, kind, value, getattr(comm, "timeout", None))


def _check(values, comm, what, x):
    for r, (shape, dtype, name, *_rest) in enumerate(values):
        if (tuple(shape), np.dtype(dtype), name) != (x.shape, x.dtype, values[comm.index][2]):
            from tensorweave.core import errors
            raise errors.InvalidArgumentError(
                f"{what}: rank {comm.ranks[r]} gave shape {list(shape)} {np.dtype(dtype)} ({name}) but rank {comm.rank} gave "
                f"{list(x.shape)} {x.dtype} ({values[comm.index][2]})")


def all_reduce(comm, x, compression, key=None, exact=None):
    """The sum over the members of ``comm`` of ``x`` (each member's contribution compressed
    by its ``compression``, error feedback under ``key``). ``exact``: an optional small array
    summed without compression (row counts, losses) returned second: ``(sum, exact_sum)``."""
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.floating):
        raise TypeError(f"compressed all_reduce: only float arrays are compressed, got {x.dtype}")
    payload = compression.encode_with_feedback(x, key)
    extra = None if exact is None else np.asarray(exact)
    values = _exchange(comm, "compressed_all_reduce", (x.shape, x.dtype.str, compression.name, payload, extra))
    _check(values, comm, "compressed all_reduce", x)
    out = compression.decode(values[0][3], x.dtype, x.shape)
    for v in values[1:]:
        out += compression.decode(v[3], x.dtype, x.shape)
    if exact is None:
        return out
    total = np.array(values[0][4])
    for v in values[1:]:
        total += v[4]
    return out, total


def reduce_scatter(comm, x, compression, axis=0, key=None):
    """This member's balanced slice along ``axis`` of the sum of every member's ``x``; each
    member sends every other member only the compressed chunk that member keeps."""
    from tensorweave.distribute.layout import balanced_bounds
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.floating):
        raise TypeError(f"compressed reduce_scatter: only float arrays are compressed, got {x.dtype}")
    if compression.error_feedback:
        r = compression._residuals.get(key)
        v = x if r is None or r.shape != x.shape else x + r
    else:
        v = x
    bounds = balanced_bounds(x.shape[axis], comm.size)
    chunks = [v[(slice(None),) * axis + (slice(lo, hi),)] for lo, hi in bounds]
    payloads = [compression.encode(c) for c in chunks]
    if compression.error_feedback:
        back = [compression.decode(p, x.dtype, c.shape) for p, c in zip(payloads, chunks)]
        compression._residuals[key] = v - np.concatenate(back, axis=axis)
    values = _exchange(comm, "compressed_reduce_scatter", (x.shape, x.dtype.str, compression.name, payloads))
    _check(values, comm, "compressed reduce_scatter", x)
    mine = chunks[comm.index].shape
    out = compression.decode(values[0][3][comm.index], x.dtype, mine)
    for v_ in values[1:]:
        out += compression.decode(v_[3][comm.index], x.dtype, mine)
    return out


class CommunicationOptions:
    """TF's ``tf.distribute.experimental.CommunicationOptions`` plus ``compression``.

    Args: ``bytes_per_pack`` (TF: pack gradients into chunks of this size; 0 = one pack; kept
    for compatibility), ``timeout_seconds`` (the collectives' timeout; None = the
    cluster's), ``implementation`` (``"AUTO"``, ``"RING"``, ``"NCCL"``: TF's
    ``CommunicationImplementation``; the transport is chosen by ``connect``), ``compression``
    (None, ``"fp16"``, ``"bf16"``, ``"int8"`` or a :class:`Compression`): the gradients'
    all-reduce sends each worker's contribution compressed.

    >>> CommunicationOptions(compression="int8")
    CommunicationOptions(bytes_per_pack=0, timeout_seconds=None, implementation='AUTO', compression='int8')
    """

    def __init__(self, bytes_per_pack=0, timeout_seconds=None, implementation="AUTO", compression=None):
        if isinstance(bytes_per_pack, bool) or not isinstance(bytes_per_pack, int) or bytes_per_pack < 0:
            raise ValueError(f"CommunicationOptions: bytes_per_pack must be a non-negative int, got {bytes_per_pack!r}")
        implementation = getattr(implementation, "name", implementation)
        if implementation not in ("AUTO", "RING", "NCCL"):
            raise ValueError(f"CommunicationOptions: implementation must be AUTO, RING or NCCL, got {implementation!r}")
        get(compression)                          # checks the name now, not on the workers
        self.bytes_per_pack = bytes_per_pack
        self.timeout_seconds = timeout_seconds
        self.implementation = implementation
        self.compression = compression

    def __repr__(self):
        return (f"CommunicationOptions(bytes_per_pack={self.bytes_per_pack}, timeout_seconds={self.timeout_seconds}, "
                f"implementation={self.implementation!r}, compression={self.compression!r})")


__all__ = ["Compression", "CastCompression", "Int8Compression", "CommunicationOptions", "get", "all_reduce",
           "reduce_scatter", "payload_bytes"]
