"""Steps through FIFOs: a planned step's calls on Ray workers of the driver's node, with no thread
spinning anywhere and no pickle on the way.

A compiled Ray graph (``cluster._StepGraph``) moves a step's inputs and answers through Ray's
shared-memory channels, whose read waits by polling (``PlasmaObjectHeader::ReadAcquire``:
``sched_yield`` between looks, no setting turns it off): measured 622 / 641 ms of CPU per second
per idle worker of a live graph on 2 cores, CPU its peer rank and the driver lose. A
:class:`StepChannel` is the same single-controller step over two FIFOs (in ``/dev/shm``, under the
cluster's prefix) per rank: the driver writes a request frame into the rank's request FIFO; a
thread in the rank's actor (:func:`serve`), asleep in ``read(2)`` until then, runs it as
``RankWorker.step_call`` does (an exception comes back as a value after the rank's groups are
aborted) and writes the answer frame into its answer FIFO, on which the driver sleeps in ``select``.

Frames are ``step_frame.py``'s: a fixed header and plain values and arrays, parsed with ``struct``
and ``np.frombuffer``; the step functions are registered on each rank once through a Ray actor
call (``RankWorker.register_steps``: Ray's own transport) and named by id. A step whose
arguments fall outside the frames' set raises :class:`~.step_frame.Unencodable` before anything is
written (the cluster sends it by actor calls).

Requests may be *posted ahead* (:meth:`StepChannel.post` before the earlier steps'
:meth:`StepChannel.collect`): a rank finds its next step queued and never waits for the driver;
answers come back in the order posted. The driver writes and reads without blocking (a large
answer and a large request in flight at once cannot deadlock). Every second of a wait it checks
that the ranks' processes live (a dead one raises Ray's own error for that actor); a wait longer
than ``timeout`` raises :class:`StepTimeout` naming the ranks that have not answered. Only for
ranks on the driver's node (FIFOs are node-local): elsewhere the compiled graph stays.

>>> import tensorweave as tw                                              # doctest: +SKIP
>>> cluster = tw.distribute.connect(num_workers=2)                        # doctest: +SKIP
>>> ch = StepChannel(cluster.workers, (0, 1), "/dev/shm/tw-doc")          # doctest: +SKIP
>>> ch.run([(lambda w: w.rank * 10, (), 0)] * 2)                          # doctest: +SKIP
[0, 10]
>>> ch.teardown()                                                         # doctest: +SKIP
"""
import collections
import itertools
import os
import select
import threading
import time

from tensorweave.distribute.ray import step_frame as sf

_CHECK_S = 1.0             # seconds between checks that the ranks' processes live
_MAX_FNS = 256             # registered step functions kept before the registries start afresh


class StepTimeout(TimeoutError):
    """A step's answers did not all come within the channel's timeout; ``ranks``: the missing."""

    def __init__(self, ranks, seconds):
        super().__init__(f"a step did not finish within {seconds} s: ranks {list(ranks)} had not answered")
        self.ranks = list(ranks)


def _read_exactly(f, n):
    """``n`` bytes (a bytearray) from a blocking raw file ``f``, or None at its end."""
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = f.readinto(view[got:])
        if not k:
            return None
        got += k
    return buf


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def serve(worker, request_path, answer_path):
    """Starts the thread of ``worker`` (a ``RankWorker``) that runs the request frames of one
    channel until a stop frame (or a frame it rejects: it answers with the error and ends);
    returns at once. The step functions are ``worker.step_fns`` (``register_steps``)."""
    # read-only / write-only, blocking: the thread sleeps in read(2) until a request, and the driver
    # (which holds both FIFOs open from before this call to its teardown) is their only other end, so
    # its close wakes the thread whatever it was doing: end of file in a read (a request left half
    # written), EPIPE in a write (an answer no one will read). Opened non-blocking (a driver gone
    # already: no open waits for it; the answer FIFO's raises ENXIO), then blocking.
    fd = os.open(request_path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        ans = os.open(answer_path, os.O_WRONLY | os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    for f in (fd, ans):
        os.set_blocking(f, True)
    req = open(fd, "rb", buffering=0)

    def answer(kind, step, values):
        try:
            frame = sf.encode(kind, step, worker.rank, 0, values)
        except sf.Unencodable as e:
            err = TypeError(f"rank {worker.rank}: a step's answer cannot cross the step channel: {e}. Hint: "
                            "return arrays, scalars, str, tuples and lists, or set TW_RAY_STEPS=graph")
            frame = sf.encode(sf.KIND_ERROR, step, worker.rank, 0, sf.error_values(err, worker.rank))
        _write_all(ans, frame)

    def loop():
        from tensorweave.distribute.ray.cluster import _Raised
        try:
            while True:
                head = _read_exactly(req, sf.HEADER.size)
                if head is None:
                    return
                step = 0
                try:
                    h = sf.parse_header(head)
                    step = h.step
                    if h.kind == sf.KIND_STOP:
                        return
                    if h.kind != sf.KIND_REQUEST:
                        raise sf.FrameError(f"step frame: kind {h.kind} where a request was expected")
                    body = _read_exactly(req, h.body_len)
                    if body is None:
                        return
                    fn = worker.step_fns.get(h.fn)
                    if fn is None:
                        raise sf.FrameError(f"step frame: function id {h.fn} was not registered on this worker")
                    args = sf.decode(h, body, worker.step_fns)
                except sf.FrameError as e:       # the stream cannot be trusted past it: say why and end
                    answer(sf.KIND_ERROR, step, sf.error_values(e, worker.rank))
                    return
                out = worker.step_call(fn, args, h.gen)
                if isinstance(out, _Raised):
                    answer(sf.KIND_ERROR, step, sf.error_values(out.error, worker.rank))
                else:
                    answer(sf.KIND_ANSWER, step, (out,))
        except BrokenPipeError:
            return                              # the driver tore the channel down: no one reads answers
        finally:
            req.close()
            os.close(ans)
    threading.Thread(target=loop, name=f"tw-steps-{os.path.basename(request_path)}", daemon=True).start()


class _Rank:
    """The driver's end of one rank: its FIFOs, the bytes still to write, the answers read."""

    __slots__ = ("rank", "pid", "req_path", "ans_path", "req", "ans", "out", "buf", "answers")

    def __init__(self, rank, pid, path):
        self.rank, self.pid = rank, pid
        self.req_path, self.ans_path = f"{path}-q{rank}", f"{path}-a{rank}"
        for p in (self.req_path, self.ans_path):
            os.mkfifo(p, 0o600)
        # RDWR: neither end's open blocks, and no end of file while the other side restarts
        self.req = os.open(self.req_path, os.O_RDWR | os.O_NONBLOCK)
        self.ans = os.open(self.ans_path, os.O_RDWR | os.O_NONBLOCK)
        self.out = bytearray()            # request bytes not yet in the FIFO
        self.buf = bytearray()            # answer bytes read, not yet a whole frame
        self.answers = collections.deque()    # (header, body) of whole answer frames

    def pump(self, readable, writable):
        """Moves what the FIFOs take and give now."""
        if writable and self.out:
            try:
                del self.out[:os.write(self.req, self.out)]
            except BlockingIOError:
                pass
        if readable:
            try:
                while True:
                    chunk = os.read(self.ans, 1 << 20)
                    if not chunk:
                        break
                    self.buf += chunk
            except BlockingIOError:
                pass
            while len(self.buf) >= sf.HEADER.size:
                h = sf.parse_header(bytes(self.buf[:sf.HEADER.size]))
                end = sf.HEADER.size + h.body_len
                if len(self.buf) < end:
                    break
                self.answers.append((h, self.buf[sf.HEADER.size:end]))
                del self.buf[:end]

    def close(self):
        for fd in (self.req, self.ans):
            try:
                os.close(fd)
            except OSError:
                pass
        for p in (self.req_path, self.ans_path):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass


class StepChannel:
    """The steps of ``ranks`` (their ``RankWorker`` actors in ``workers``) through FIFOs named
    ``<path>-q<rank>`` / ``<path>-a<rank>`` (see the module docstring). ``run(packed)``: one step,
    ``packed[i]`` the ``(fn, args, generation)`` of the i-th rank; the answers in rank order (a
    rank's exception as ``cluster._Raised``). ``timeout``: seconds a step's answers may take
    (None: as long as its collectives allow)."""

    def __init__(self, workers, ranks, path, timeout=None):
        import ray
        self.workers, self.ranks, self.timeout = workers, tuple(ranks), timeout
        here = ray.get_runtime_context().get_node_id()
        pings = ray.get([workers[r].ping.remote() for r in self.ranks])
        if any(node != here for _, _, node in pings):
            raise RuntimeError("StepChannel: every rank must run on the driver's node")
        self._ranks = []
        try:
            for r, (_, pid, _) in zip(self.ranks, pings):
                self._ranks.append(_Rank(r, pid, path))
            ray.get([workers[c.rank].serve_steps.remote(c.req_path, c.ans_path) for c in self._ranks])
        except BaseException:
            self.teardown()
            raise
        self.pending = 0                   # steps posted and not collected
        self._steps = itertools.count(1)
        self._posted = collections.deque()     # step ids posted, oldest first
        self._fn_ids = {}                  # id(fn) -> (its id on the ranks, fn: kept so the id stays its)
        self._next_fn = itertools.count(1)

    def post(self, packed):
        """Queues a step on every rank (returns once the requests are in the FIFOs). Raises
        :class:`~.step_frame.Unencodable` (nothing sent) for arguments outside the frames' set."""
        if len(self._fn_ids) > _MAX_FNS and not self.pending:
            self._register({}, reset=True)           # one-off functions (lambdas made per call) go
        new, step = {}, next(self._steps)

        def fn_id(f):
            known = self._fn_ids.get(id(f)) or new.get(id(f))
            if known is None:
                known = new[id(f)] = (next(self._next_fn), f)
            return known[0]
        frames = [sf.encode(sf.KIND_REQUEST, step, gen, fn_id(fn), tuple(args), fn_id) for fn, args, gen in packed]
        if new:
            self._register(new)
        for c, frame in zip(self._ranks, frames):
            c.out += frame
        self.pending += 1
        self._posted.append(step)
        self._pump(lambda: not any(c.out for c in self._ranks), None)

    def _register(self, new, reset=False):
        import ray
        fns = {i: f for i, f in new.values()}
        ray.get([self.workers[c.rank].register_steps.remote(fns, reset) for c in self._ranks])
        if reset:
            self._fn_ids.clear()
        self._fn_ids.update(new)

    def collect(self):
        """The answers of the oldest posted step, in rank order."""
        from tensorweave.distribute.ray.cluster import _Raised
        if not self.pending:
            raise RuntimeError("StepChannel.collect: no step was posted")
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        self._pump(lambda: all(c.answers for c in self._ranks), deadline)
        self.pending -= 1
        step = self._posted.popleft()
        out = []
        for c in self._ranks:
            h, body = c.answers.popleft()
            values = sf.decode(h, body)
            if h.kind == sf.KIND_ERROR and values[:1] == ["FrameError"]:
                raise sf.exception_of(values)      # the rank rejected a frame (of any step) and stopped serving
            if h.step != step or h.gen != c.rank or h.kind not in (sf.KIND_ANSWER, sf.KIND_ERROR):
                raise sf.FrameError(f"step frame: rank {c.rank} answered step {h.step} (kind {h.kind}, from "
                                    f"{h.gen}) where step {step} of rank {c.rank} was due")
            out.append(_Raised(sf.exception_of(values)) if h.kind == sf.KIND_ERROR else values[0])
        return out

    def run(self, packed):
        self.post(packed)
        return self.collect()

    def _pump(self, done, deadline):
        """Reads answers and writes requests until ``done()``; every :data:`_CHECK_S` seconds of
        waiting, a rank whose process is gone raises (Ray's error for its actor); past
        ``deadline`` (``time.monotonic``), :class:`StepTimeout`."""
        from tensorweave.distribute.ray.cluster import _pid_alive
        while not done():
            wait = _CHECK_S if deadline is None else max(0.0, min(_CHECK_S, deadline - time.monotonic()))
            rd = [c.ans for c in self._ranks]
            wr = [c.req for c in self._ranks if c.out]
            readable, writable, _ = select.select(rd, wr, [], wait)
            if not readable and not writable:
                for c in self._ranks:
                    if not _pid_alive(c.pid):
                        self._dead(c)
                if deadline is not None and time.monotonic() >= deadline:
                    raise StepTimeout([c.rank for c in self._ranks if not c.answers], self.timeout)
                continue
            for c in self._ranks:
                c.pump(c.ans in readable, c.req in writable)

    def _dead(self, c):
        import ray
        ray.get(self.workers[c.rank].ping.remote(), timeout=60)     # raises Ray's error for the dead actor
        raise RuntimeError(f"StepChannel: rank {c.rank}'s process {c.pid} is gone")

    def teardown(self):
        """Ends the ranks' serving threads (a rank busy in a step ends after it) and removes the
        FIFOs: a stop frame where the request FIFO takes one, and closing the driver's ends (the
        only other ends: :func:`serve`) wakes a thread that reads a request left half written, or
        writes an answer, with end of file or EPIPE."""
        stop = sf.HEADER.pack(sf.MAGIC, sf.VERSION, sf.KIND_STOP, 0, 0, 0, 0, 0, 0)
        for c in self._ranks:
            try:
                if not c.out:              # (after a request half written it would read as its rest)
                    os.write(c.req, stop)
            except OSError:
                pass                       # full (a busy or dead rank's): the close below ends it
            c.close()
        self._ranks = []
