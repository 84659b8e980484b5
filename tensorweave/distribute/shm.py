"""A shared-memory transport for ranks that are processes on one node (Linux, ``/dev/shm``).

:class:`ShmGroup` is one member's view of a group and gives the ``exchange``/``post``/``take``
primitives :class:`~tensorweave.distribute.collective.InProcessCommunicator` is written
against, so every collective (and every boxing step built on them) runs over it unchanged,
with the same reduction order and so the same bits as in-process ranks.

Each member owns a small *control* segment (its pid, how many rounds it published and
consumed, its data segment's generation, a failure flag and reason, how many messages it
posted to each peer) and two *data* segments, used by alternate rounds (each grown by replacing
it with a bigger generation). An exchange writes the member's buffers once into the data
segment of its round and bumps its published count; peers read them in place (NumPy views, no
copy until the collective builds its result). A member writes round ``s`` only after every peer
is done with round ``s - 2`` (the last one in that segment) — which its own wait in round
``s - 1`` already saw — so an exchange is one wait: for the peers' round. Point-to-point messages are one segment each (``send`` never blocks); the
receiver copies and unlinks it. Waiting polls the peers' counters with a short back-off;
every wait has a timeout naming the ranks that did not arrive, and notices a peer that
failed or whose process died (named too), and an external abort (``check_abort``).

Segments are named ``<prefix>-r<rank>-c`` / ``-r<rank>-d<slot>g<gen>`` / ``-p<src>-<dst>-<n>``
(global ranks), mode 0600. :meth:`ShmGroup.close` unlinks a member's own; :func:`sweep`
unlinks what is left under a prefix (a cluster's shutdown, a dead worker's segments).

>>> import numpy as np
>>> from concurrent.futures import ThreadPoolExecutor
>>> import uuid
>>> prefix = "tw-doc-" + uuid.uuid4().hex[:8]
>>> groups = [ShmGroup((0, 1), i, prefix) for i in range(2)]
>>> def on_rank(i):
...     groups[i].connect()
...     return groups[i].communicator(i).all_reduce(np.array([1.0, 2.0]) * (i + 1)).tolist()
>>> with ThreadPoolExecutor(2) as pool:
...     list(pool.map(on_rank, range(2)))
[[3.0, 6.0], [3.0, 6.0]]
>>> for g in groups: g.close()
>>> sweep(prefix)
0
"""
import glob
import json
import mmap
import os
import select
import time

import numpy as np

from tensorweave.core import errors
from tensorweave.distribute.collective import (_REDUCE, DEFAULT_TIMEOUT, CollectiveAbortedError,
                                               CollectiveTimeoutError, InProcessCommunicator, _read_only, _Ready)
from tensorweave.distribute.layout import balanced_bounds
from tensorweave.distribute.shm_reduce import reduce_bucket

SHM_DIR = "/dev/shm"
_MAGIC = 0x7477736D           # "twsm"
# control segment: int64 words, then the failure reason
_PID, _READY, _CONSUMED, _FAILED, _MAGIC_AT, _SENT = 0, 1, 2, 4, 5, 8
_GEN = (3, 6)                 # the generation of each of the two data segments (rounds alternate)
_REASON_BYTES = 2048
_ALIGN = 64
_SPINS = 20                   # yields before a waiter sleeps on its FIFO
_POLL_SLOW = 0.05             # seconds between checks that the pending peers' processes are alive
# all-reduces up to this size go in one round (every member reduces everything, one wait) rather
# than two (each reduces a chunk); measured in BENCHMARKS.md (ray14, session 11)
ONE_ROUND_BYTES = 1 << 20
_POLL_ABORT = 0.5             # seconds between asks whether the group was aborted from outside (a Ray call)


def available():
    """Whether this machine has POSIX shared memory as files (Linux ``/dev/shm``)."""
    return os.path.isdir(SHM_DIR) and os.access(SHM_DIR, os.W_OK)


def sweep(prefix, pattern="*"):
    """Unlinks the segments named ``<prefix>-<pattern>``; returns how many were left."""
    n = 0
    for path in glob.glob(os.path.join(SHM_DIR, glob.escape(prefix) + "-" + pattern)):
        try:
            os.unlink(path)
            n += 1
        except FileNotFoundError:
            pass                    # its owner unlinked it meanwhile
    return n


class _Segment:
    """A named shared-memory file mapped into this process."""

    __slots__ = ("name", "mm", "size")

    def __init__(self, name, size=None):
        path = os.path.join(SHM_DIR, name)
        if size is None:
            fd = os.open(path, os.O_RDWR)
        else:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            if size is not None:
                os.ftruncate(fd, size)
            self.size = os.fstat(fd).st_size
            self.mm = mmap.mmap(fd, self.size)
        except BaseException:
            os.close(fd)
            if size is not None:
                os.unlink(path)
            raise
        os.close(fd)
        self.name = name

    def close(self):
        try:
            self.mm.close()
        except BufferError:
            pass                    # a view is still alive somewhere; the mapping goes with it

    def unlink(self):
        try:
            os.unlink(os.path.join(SHM_DIR, self.name))
        except FileNotFoundError:
            pass


def _view(mm, shape, dtype, offset):
    """An array over ``mm``'s bytes that holds the mapping while it lives: ``np.frombuffer`` keeps a
    buffer export, so ``mmap.close()`` refuses (``BufferError``) instead of unmapping under the view
    (``np.ndarray(buffer=mm)`` keeps none, and a read after the close would crash the process)."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    return np.frombuffer(mm, dtype, count, offset).reshape(shape)


def _aligned(n):
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def _dtype_name(dt):
    return dt.str if dt.kind != "V" else dt.name      # custom dtypes (bfloat16) by name


class _Reserved:
    """Room for an array in a segment, left unwritten (the sender fills it later)."""

    __slots__ = ("shape", "dtype", "nbytes")

    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


def _encode(value, arrays):
    """A JSON-able description of ``value`` with its arrays appended to ``arrays``."""
    if isinstance(value, _Reserved):
        arrays.append(value)
        return {"a": len(arrays) - 1, "dt": _dtype_name(value.dtype), "sh": list(value.shape)}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (np.ndarray, np.generic)):
        a = np.asarray(value)
        if a.dtype.hasobject:
            raise TypeError(f"shared-memory transport: cannot send an array of dtype {a.dtype}")
        arrays.append(a)
        return {"a": len(arrays) - 1, "dt": _dtype_name(a.dtype), "sh": list(a.shape)}
    if isinstance(value, np.dtype):
        return {"d": _dtype_name(value)}
    if isinstance(value, tuple):
        return {"t": [_encode(v, arrays) for v in value]}
    if isinstance(value, list):
        return {"l": [_encode(v, arrays) for v in value]}
    raise TypeError(f"shared-memory transport: cannot send a {type(value).__name__}")


def _decode(desc, arrays):
    if isinstance(desc, dict):
        if "a" in desc:
            return arrays[desc["a"]]
        if "d" in desc:
            return np.dtype(desc["d"])
        if "t" in desc:
            return tuple(_decode(v, arrays) for v in desc["t"])
        return [_decode(v, arrays) for v in desc["l"]]
    return desc


def _layout(meta_bytes, arrays):
    """Offsets of the arrays after an 8-byte length and the metadata; the total size."""
    off = _aligned(8 + len(meta_bytes))
    offsets = []
    for a in arrays:
        offsets.append(off)
        off += _aligned(a.nbytes)
    return offsets, off


def _write(mm, meta_bytes, arrays, offsets):
    _view(mm, (1,), np.int64, 0)[0] = len(meta_bytes)
    mm[8:8 + len(meta_bytes)] = meta_bytes
    for a, off in zip(arrays, offsets):
        if a.nbytes and not isinstance(a, _Reserved):
            _view(mm, a.shape, a.dtype, off)[...] = a


def _read(mm, copy):
    """``(meta, arrays)`` from a segment written by :func:`_write` (views unless ``copy``)."""
    n = int(_view(mm, (1,), np.int64, 0)[0])
    meta = json.loads(bytes(mm[8:8 + n]))
    descs = []
    _collect(meta["v"], descs)
    descs.sort(key=lambda d: d["a"])
    arrays, off = [], _aligned(8 + n)
    for d in descs:
        dt, shape = np.dtype(d["dt"]), tuple(d["sh"])
        count = int(np.prod(shape, dtype=np.int64))
        if count:
            a = _view(mm, shape, dt, off)
        else:
            a = np.empty(shape, dt)
        a = a.copy() if copy else a
        a.flags.writeable = copy
        arrays.append(a)
        off += _aligned(count * dt.itemsize)
    return meta, arrays


def _collect(desc, out):
    if isinstance(desc, dict):
        if "a" in desc:
            out.append(desc)
        for k in ("t", "l"):
            for v in desc.get(k, ()):
                _collect(v, out)
    elif isinstance(desc, list):
        for v in desc:
            _collect(v, out)


def _tag_key(tag):
    return json.dumps(_encode(tag, []))


class ShmGroup:
    """Member ``index`` of the group ``ranks`` over shared memory (see the module docstring).

    ``prefix``: the segments' common name prefix (unique per group). Call :meth:`connect`
    once every member has made its object (it creates this member's control segment and
    attaches the peers'; ``share``, when given, is a collective ``share(info) -> [info of
    every member]`` run in between, e.g. over a Ray rendezvous, so no one attaches early).
    ``check_abort``: an optional ``() -> reason or None`` polled during long waits."""

    def __init__(self, ranks, index, prefix, timeout=None, check_abort=None):
        self.ranks = tuple(int(r) for r in ranks)
        self.index = int(index)
        self.prefix = prefix
        self.timeout = DEFAULT_TIMEOUT if timeout is None else float(timeout)
        self._check_abort = check_abort
        self._seq = 0
        self.waited = 0.0               # seconds spent waiting for peers (a benchmark's decomposition)
        self._ctl = None
        self._data = [None, None]       # this member's data segment of even and odd rounds
        self._offsets = [None, None]
        self._peers = {}            # index -> control segment words
        self._peer_segs = {}
        self._peer_data = {}        # (index, slot) -> (generation, _Segment)
        self._recvd = [0] * len(self.ranks)
        self._mail = {}
        self._results = None        # this member's result buffers of buckets (shm_reduce._Results)
        self._failure = None
        self._wake = None           # this member's wake-up FIFO (read end), and the peers' (write ends)
        self._peer_wake = {}
        n_words = _SENT + len(self.ranks)
        self._ctl_bytes = n_words * 8 + _REASON_BYTES
        self._n_words = n_words

    @property
    def size(self):
        return len(self.ranks)

    def _name(self, kind, rank=None):
        return f"{self.prefix}-r{self.ranks[self.index] if rank is None else rank}-{kind}"

    def _words(self, seg):
        return _view(seg.mm, (self._n_words,), np.int64, 0)

    def connect(self, share=None):
        """Creates this member's control segment and wake-up FIFO, attaches every peer's."""
        path = os.path.join(SHM_DIR, self._name("w"))
        os.mkfifo(path, 0o600)
        self._wake = os.open(path, os.O_RDWR | os.O_NONBLOCK)     # RDWR: peers' opens never fail
        self._ctl_seg = _Segment(self._name("c"), self._ctl_bytes)
        self._ctl = self._words(self._ctl_seg)
        self._ctl[_PID] = os.getpid()
        self._ctl[_MAGIC_AT] = _MAGIC
        if share is not None:
            share(os.getpid())
        deadline = time.monotonic() + self.timeout
        for j in range(self.size):
            if j == self.index:
                continue
            while True:                       # without ``share`` (threads, tests) a peer may be late
                try:
                    seg = _Segment(self._name("c", self.ranks[j]))
                    if seg.size >= self._ctl_bytes and self._words(seg)[_MAGIC_AT] == _MAGIC:
                        break
                    seg.close()
                except (FileNotFoundError, ValueError):
                    pass                              # not made yet, or not sized yet
                if time.monotonic() > deadline:
                    raise CollectiveTimeoutError(
                        f"shared-memory setup on ranks {list(self.ranks)}: rank {self.ranks[j]} did not arrive "
                        f"within {self.timeout:g} s", [self.ranks[j]])
                time.sleep(0.001)
            self._peer_segs[j] = seg
            self._peers[j] = self._words(seg)
            self._peer_wake[j] = os.open(os.path.join(SHM_DIR, self._name("w", self.ranks[j])),
                                         os.O_WRONLY | os.O_NONBLOCK)
        return self

    def _notify(self, only=None):
        """Wakes the peers (``only``: that one) that may sleep on their FIFO after a counter of this
        member's changed: one byte each (a full FIFO already holds a wake-up)."""
        for j, fd in self._peer_wake.items():
            if only is None or j == only:
                try:
                    os.write(fd, b"!")
                except (BlockingIOError, OSError):
                    pass

    def _sleep(self, seconds):
        """Sleeps until a peer's counter may have changed (a byte in this member's FIFO) or
        ``seconds`` passed; drains the FIFO."""
        if self._wake is None:
            time.sleep(seconds)
            return
        ready, _, _ = select.select([self._wake], [], [], seconds)
        if ready:
            try:
                while os.read(self._wake, 4096):
                    pass
            except (BlockingIOError, OSError):
                pass

    def communicator(self, index=None):
        """This member's communicator (``index`` must be this member's)."""
        if index is not None and int(index) != self.index:
            raise ValueError(f"ShmGroup member {self.index} cannot make the communicator of member {index}")
        return ShmCommunicator(self, self.index)

    # ---- failure -------------------------------------------------------------------------------
    def abort(self, reason):
        """Marks the group failed: every member's waits end with :class:`CollectiveAbortedError`."""
        if self._failure is None:
            self._failure = reason
        if self._ctl is not None and not self._ctl[_FAILED]:
            data = reason.encode()[:_REASON_BYTES]
            off = self._n_words * 8
            self._ctl_seg.mm[off:off + _REASON_BYTES] = data.ljust(_REASON_BYTES, b"\0")
            self._ctl[_FAILED] = 1
            self._notify()

    def _raise_failed(self):
        if self._failure is not None:
            raise CollectiveAbortedError(f"collective on ranks {list(self.ranks)} abandoned: {self._failure}")
        for j, words in self._peers.items():
            if words[_FAILED]:
                off = self._n_words * 8
                reason = bytes(self._peer_segs[j].mm[off:off + _REASON_BYTES]).rstrip(b"\0").decode(errors="replace")
                self._failure = reason
                raise CollectiveAbortedError(f"collective on ranks {list(self.ranks)} abandoned: {reason}")

    def _slow_checks(self, pending, ask_abort):
        for j in pending:
            try:
                os.kill(int(self._peers[j][_PID]), 0)
            except ProcessLookupError:
                reason = f"rank {self.ranks[j]} died (its process {int(self._peers[j][_PID])} is gone)"
                self.abort(reason)
                raise CollectiveAbortedError(f"collective on ranks {list(self.ranks)} abandoned: {reason}") from None
            except PermissionError:
                pass
        if ask_abort and self._check_abort is not None:
            reason = self._check_abort()
            if reason:
                self.abort(reason)
                self._raise_failed()

    def _wait(self, ready, what, timeout):
        """Waits until ``ready(j)`` for every peer ``j``; the error names the ones that are not."""
        limit = self.timeout if timeout is None else timeout
        start = time.monotonic()
        next_slow, next_abort, spins = start + _POLL_SLOW, start + _POLL_ABORT, 0
        while True:
            pending = [j for j in self._peers if not ready(j)]
            if not pending:
                self.waited += time.monotonic() - start
                return
            self._raise_failed()
            now = time.monotonic()
            if now - start > limit:
                gone = [self.ranks[j] for j in pending]
                self.abort(f"a timeout ({what}; ranks {gone} did not arrive)")
                raise CollectiveTimeoutError(
                    f"{what} on ranks {list(self.ranks)}: ranks {gone} did not arrive within {limit:g} s. "
                    "Hint: every rank of a group must make the same collective calls in the same order", gone)
            if now > next_slow:
                ask = now > next_abort
                self._slow_checks(pending, ask)
                next_slow = now + _POLL_SLOW
                next_abort = now + _POLL_ABORT if ask else next_abort
            # yield at once, then sleep until a peer's counter changes (its byte in our FIFO; at
            # most until the next slow check): a spinning or napping waiter either takes the
            # cores its peers need or oversleeps their arrival by up to its nap
            spins += 1
            if spins < _SPINS:
                time.sleep(0)
            else:
                self._sleep(max(0.0, min(next_slow, start + limit) - now))

    # ---- the primitives InProcessCommunicator uses -------------------------------------------
    def exchange(self, index, kind, value, timeout=None, keep_last=False):
        """Publishes this member's ``value`` for its next call ``kind``; returns every member's
        value (peers' arrays are read-only views, valid until this member's next call;
        ``keep_last``: this call still reads the last call's views, valid until the next)."""
        seq, self._seq = self._seq, self._seq + 1
        if self.size == 1:              # a group of one (a one-worker plan's boxings): nothing to share
            self._raise_failed()
            return [value]
        slot = seq % 2
        what = f"{kind} (call #{seq})"
        self._raise_failed()
        self._ctl[_CONSUMED] = seq - 1 if keep_last else seq      # done with the views of rounds before
        self._notify()
        # round seq - 2 was the last in this slot: every peer is done with it once it entered call
        # seq - 1, which this member's wait in its call seq - 1 saw (published), unless that peer
        # kept the round's views (keep_last): then this waits for it
        self._wait(lambda j: self._peers[j][_CONSUMED] >= seq - 1, what, timeout)
        arrays = []
        meta = json.dumps({"k": kind, "s": seq, "v": _encode(value, arrays)}).encode()
        offsets, total = _layout(meta, arrays)
        if self._data[slot] is None or self._data[slot].size < total:
            self._grow(slot, total)
        _write(self._data[slot].mm, meta, arrays, offsets)
        self._offsets[slot] = offsets
        self._ctl[_READY] = seq + 1
        self._notify()
        self._wait(lambda j: self._peers[j][_READY] >= seq + 1, what, timeout)
        values = []
        for j in range(self.size):
            if j == self.index:
                values.append(value)
                continue
            got, peer_arrays = _read(self._peer_segment(j, slot).mm, copy=False)
            if got["k"] != kind:
                msg = (f"collective mismatch on ranks {list(self.ranks)} (call #{seq}): rank {self.ranks[index]} "
                       f"called {kind} while rank {self.ranks[j]} called {got['k']}")
                self.abort(msg)
                raise errors.InternalError(msg)
            values.append(_decode(got["v"], peer_arrays))
        return values

    def all_reduce_large(self, x, op, ride=None):
        """An all-reduce that copies each member's buffer once: a member writes only the
        balanced chunks its peers reduce (its own chunk stays in its private ``x``), reduces its
        chunk of every member's ``x`` in rank order (the bits of the in-process ranks) straight
        into the slot of its segment kept for it, and after one more counter round copies
        every member's reduced chunk into the result."""
        flat = x.reshape(-1)
        bounds = balanced_bounds(flat.size, self.size)
        lo, hi = bounds[self.index]
        chunks = [_Reserved((b - a,), flat.dtype) if j == self.index else flat[a:b] for j, (a, b) in enumerate(bounds)]
        slot = self._seq % 2
        values = self._all_reduce_values(x, op, chunks, ride)
        mine = _view(self._data[slot].mm, (hi - lo,), flat.dtype, self._offsets[slot][self.index])
        parts = [flat[lo:hi] if j == self.index else v[3][self.index] for j, v in enumerate(values)]
        np.copyto(mine, parts[0])
        for part in parts[1:]:
            _REDUCE[op](mine, part, out=mine)
        # a round without data (in the other segment) that keeps the last round's views
        self.exchange(self.index, "all_reduce_gather", None, keep_last=True)
        out = np.empty_like(flat)
        for j, (a, b) in enumerate(bounds):
            out[a:b] = mine if j == self.index else values[j][3][j]
        return out.reshape(x.shape), _ridden(values)

    def all_reduce_one_round(self, x, op, ride=None):
        """An all-reduce in one exchange (one wait): every member reduces all members' ``x`` in
        rank order (the in-process ranks' bits). More reading than :meth:`all_reduce_large`
        (``size`` buffers per member instead of about two), but one counter round instead of
        two: on shared cores each round waits for the slowest member's time slice."""
        values = self._all_reduce_values(x, op, x, ride)
        out = np.array(values[0][3])
        for v in values[1:]:
            _REDUCE[op](out, v[3], out=out)
        return out, _ridden(values)

    def _all_reduce_values(self, x, op, payload, ride=None):
        values = self.exchange(self.index, "all_reduce", (x.shape, x.dtype, op, payload, list(ride or ())))
        me = self.ranks[self.index]
        for r, (shape, dtype, o, _, _) in enumerate(values):
            if (shape, dtype, o) != (x.shape, x.dtype, op):
                raise errors.InvalidArgumentError(
                    f"all_reduce: rank {self.ranks[r]} gave shape {list(shape)} {dtype} ({o}) but rank "
                    f"{me} gave {list(x.shape)} {x.dtype} ({op})")
        return values

    def _grow(self, slot, need):
        old = self._data[slot]
        gen = int(self._ctl[_GEN[slot]]) + (old is not None)
        self._data[slot] = _Segment(self._name(f"d{slot}g{gen}"), max(need, 2 * (old.size if old else 0), 1 << 16))
        self._ctl[_GEN[slot]] = gen
        if old is not None:                          # every peer is done with the last round written there
            old.unlink()
            old.close()

    def _peer_segment(self, j, slot):
        gen = int(self._peers[j][_GEN[slot]])
        have = self._peer_data.get((j, slot))
        if have is None or have[0] != gen:
            if have is not None:
                have[1].close()
            have = self._peer_data[(j, slot)] = (gen, _Segment(self._name(f"d{slot}g{gen}", self.ranks[j])))
        return have[1]

    def post(self, src, dst, tag, value):
        """Point to point: a segment holding ``value`` for member ``dst`` (does not block)."""
        n = int(self._ctl[_SENT + dst])
        arrays = []
        meta = json.dumps({"k": "send", "s": n, "tag": _tag_key(tag), "v": _encode(value, arrays)}).encode()
        offsets, total = _layout(meta, arrays)
        seg = _Segment(f"{self.prefix}-p{self.ranks[src]}-{self.ranks[dst]}-{n}", max(total, 1))
        _write(seg.mm, meta, arrays, offsets)
        seg.close()
        self._ctl[_SENT + dst] = n + 1
        self._notify(dst)

    def take(self, src, dst, tag, timeout=None):
        """The next value member ``src`` posted here with ``tag``."""
        key, box = _tag_key(tag), None

        def arrived(j):
            nonlocal box
            self._drain(src)
            box = self._mail.get((src, key))
            return bool(box)
        self._wait(lambda j: j != src or arrived(j), f"recv (tag {tag}) on rank {self.ranks[dst]}", timeout)
        if box is None:
            arrived(src)
        return box.pop(0)

    def _drain(self, src):
        posted = int(self._peers[src][_SENT + self.index])
        while self._recvd[src] < posted:
            n = self._recvd[src]
            seg = _Segment(f"{self.prefix}-p{self.ranks[src]}-{self.ranks[self.index]}-{n}")
            meta, arrays = _read(seg.mm, copy=True)
            seg.close()
            seg.unlink()
            self._mail.setdefault((src, meta["tag"]), []).append(_decode(meta["v"], arrays))
            self._recvd[src] = n + 1

    def close(self):
        """Unmaps everything and unlinks this member's segments (and its undelivered messages)."""
        if self._results is not None:
            self._results.close()
            self._results = None
        self._peers.clear()                          # views first: a mapping with views cannot close
        self._ctl = None
        for seg in [s for _, s in self._peer_data.values()] + list(self._peer_segs.values()):
            seg.close()
        self._peer_data.clear()
        self._peer_segs.clear()
        for seg in self._data + [getattr(self, "_ctl_seg", None)]:
            if seg is not None:
                seg.unlink()
                seg.close()
        self._data, self._ctl_seg = [None, None], None
        for fd in list(self._peer_wake.values()) + ([self._wake] if self._wake is not None else []):
            os.close(fd)
        self._peer_wake, self._wake = {}, None
        try:
            os.unlink(os.path.join(SHM_DIR, self._name("w")))
        except FileNotFoundError:
            pass
        sweep(self.prefix, f"p{self.ranks[self.index]}-*")


def _ridden(values):
    """The values the first member's all-reduce carried besides its buffer (``ride``), copied out
    of its segment (they outlive the round)."""
    return [_read_only(np.array(v)) for v in values[0][4]]


class _Bucket:
    """A started bucket on the shared-memory transport: reduced at :meth:`wait` (nothing can
    overlap on the members' own cores), so the first member's :meth:`attach` ed values (a folded
    ``_Once`` read: ``plan_ops._OnceInto``) ride on the bucket's exchange instead of a broadcast
    of their own. Every member starts and waits at the same points of its plan, so the
    exchanges still match."""

    __slots__ = ("comm", "arrays", "op", "ride", "values", "extra")

    def __init__(self, comm, arrays, op):
        self.comm, self.arrays, self.op, self.ride = comm, arrays, op, []
        self.values = self.extra = None

    def attach(self, values):
        self.ride.extend(np.asarray(v) for v in values)

    def wait(self):
        if self.values is None:
            self.values, self.extra = self.comm._bucket(self.arrays, self.op, self.ride)
            self.arrays = self.ride = None
        return self.values

    def extras(self, count):
        self.wait()
        return self.extra[:count]


class ShmCommunicator(InProcessCommunicator):
    """A member of a :class:`ShmGroup`: the in-process communicator's collectives, with an
    all-reduce in one round up to ``ONE_ROUND_BYTES`` and above that one that copies each buffer
    once (:meth:`ShmGroup.all_reduce_large`), a bucket of all-reduces as one, and an all-to-all
    that sends only the peers' chunks."""

    def all_reduce(self, x, op="sum"):
        x = np.asarray(x)
        if self.size == 1:
            return super().all_reduce(x, op)
        return self._all_reduce(x, op)[0]

    def _all_reduce(self, x, op, ride=None):
        if x.nbytes <= ONE_ROUND_BYTES:
            return self.group.all_reduce_one_round(x, op, ride)
        return self.group.all_reduce_large(x, op, ride)

    def all_reduce_start(self, arrays, op="sum"):
        """A bucket (a planned step's gradients) as one all-reduce per dtype of its arrays one after
        another (``shm_reduce.py``: not concatenated; the sums in a reused buffer): one or two
        counter rounds for the bucket instead of per array (each round waits for the slowest
        member; on shared cores, for its next time slice). Each element is
        reduced in rank order as before: the same bits. Reduced at the handle's ``wait`` (nothing
        overlaps: the members' cores are the ones computing), so values the first member
        attaches meanwhile ride on it (:class:`_Bucket`); the reduced arrays are read-only."""
        arrays = [np.asarray(a) for a in arrays]
        if self.size == 1:
            return _Ready([_read_only(np.array(a)) for a in arrays])
        return _Bucket(self, arrays, op)

    def _bucket(self, arrays, op, ride):
        """``(sums, the first member's ridden values)`` of a bucket (``shm_reduce.py``: no concatenation,
        a reused result buffer)."""
        return reduce_bucket(self.group, arrays, op, ride)

    def all_to_all(self, chunks, axis=None):
        # a member's own chunk stays in its memory: only the peers' chunks go through the segment
        if len(chunks) != self.size:
            return super().all_to_all(chunks, axis)          # the error
        chunks = [np.asarray(c) for c in chunks]
        sent = [_Reserved((0,), c.dtype) if j == self.index else c for j, c in enumerate(chunks)]
        values = self._x("all_to_all", sent)
        got = [chunks[j] if j == self.index else v[self.index] for j, v in enumerate(values)]
        return np.concatenate(got, axis=axis) if axis is not None else [np.array(g) for g in got]

    def __repr__(self):
        return f"<ShmCommunicator rank {self.rank} ({self.index} of {list(self.ranks)})>"
