"""Steps through FIFOs: a planned step's calls on Ray workers of the driver's node, with no thread
spinning anywhere.

A compiled Ray graph (``cluster._StepGraph``) moves a step's inputs and answers through Ray's
shared-memory channels, whose read waits by polling (``PlasmaObjectHeader::ReadAcquire``:
``sched_yield`` between looks, no setting turns it off). Between steps every worker of a live
graph sits in that read: measured 622 / 641 ms of CPU per second per idle worker on 2 cores
(14 with no graph), CPU its peer rank and the driver lose. A :class:`StepChannel` is the same
single-controller step over two FIFOs (in ``/dev/shm``) per rank: the driver writes a request
(``[8-byte length][cloudpickle of (fn, args, generation)]``) into the rank's request FIFO; a thread
in the rank's actor (:func:`serve`), blocked in ``read`` until then, runs it as
``RankWorker.graph_call`` does (an exception comes back as a value after the rank's groups are
aborted) and writes the answer into its answer FIFO, on which the driver sleeps in ``select``.

Requests may be *posted ahead* (:meth:`StepChannel.post` before the earlier steps'
:meth:`StepChannel.collect`): a rank finds its next step queued and never waits for the driver;
answers come back in the order posted. The driver writes and reads without blocking (a large
answer and a large request in the two directions at once cannot deadlock). Every second of a
wait it checks that the ranks' processes live; a dead one raises Ray's own error for that actor.
Only for ranks on the driver's node (FIFOs are node-local): elsewhere the compiled graph stays.

>>> import tensorweave as tw                                              # doctest: +SKIP
>>> cluster = tw.distribute.connect(num_workers=2)                        # doctest: +SKIP
>>> ch = StepChannel(cluster.workers, (0, 1), "/dev/shm/tw-doc")          # doctest: +SKIP
>>> ch.run([(lambda w: w.rank * 10, (), 0)] * 2)                          # doctest: +SKIP
[0, 10]
>>> ch.teardown()                                                         # doctest: +SKIP
"""
import collections
import os
import select
import struct
import threading

_LEN = struct.Struct("<q")
_STOP = -1                 # a request length that ends the rank's serving thread
_CHECK_S = 1.0             # seconds between checks that the ranks' processes live


def _dumps(value):
    from ray import cloudpickle
    return cloudpickle.dumps(value, protocol=5)


def _loads(data):
    import pickle
    return pickle.loads(data)           # bytes the driver (or the rank) of this cluster wrote, never a file


def _read_exactly(fd, n):
    """``n`` bytes from a blocking ``fd``, or None at its end."""
    parts, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def serve(worker, request_path, answer_path):
    """Starts the thread of ``worker`` (a ``RankWorker``) that runs the requests of one channel
    until told to stop (or its FIFO goes); returns at once."""
    req = os.open(request_path, os.O_RDWR)        # blocking reads: the thread sleeps until a request
    ans = os.open(answer_path, os.O_RDWR)

    def loop():
        try:
            while True:
                head = _read_exactly(req, _LEN.size)
                if head is None:
                    return
                n = _LEN.unpack(head)[0]
                if n == _STOP:
                    return
                data = _read_exactly(req, n)
                if data is None:
                    return
                try:
                    answer = worker.graph_call((_loads(data), None), owned=True)
                    payload = _dumps(answer)
                except BaseException as e:  # noqa: BLE001 - a request or answer that does not (un)pickle
                    from tensorweave.distribute.ray.cluster import _Raised
                    payload = _dumps(_Raised(RuntimeError(f"rank {worker.rank}: {type(e).__name__}: {e}")))
                _write_all(ans, _LEN.pack(len(payload)) + payload)
        finally:
            os.close(req)
            os.close(ans)
    threading.Thread(target=loop, name=f"tw-steps-{os.path.basename(request_path)}", daemon=True).start()


class _Rank:
    """The driver's end of one rank: its FIFOs, the bytes still to write, the answer being read."""

    __slots__ = ("rank", "pid", "req_path", "ans_path", "req", "ans", "out", "buf", "answers")

    def __init__(self, rank, pid, path):
        self.rank, self.pid = rank, pid
        self.req_path, self.ans_path = f"{path}-q{rank}", f"{path}-a{rank}"
        for p in (self.req_path, self.ans_path):
            os.mkfifo(p, 0o600)
        # RDWR: neither end's open blocks, and no end of file while the other side restarts
        self.req = os.open(self.req_path, os.O_RDWR | os.O_NONBLOCK)
        self.ans = os.open(self.ans_path, os.O_RDWR | os.O_NONBLOCK)
        self.out = bytearray()            # requests not yet in the FIFO
        self.buf = bytearray()            # answer bytes read, not yet a whole answer
        self.answers = collections.deque()

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
            while len(self.buf) >= _LEN.size:
                n = _LEN.unpack_from(self.buf)[0]
                if len(self.buf) < _LEN.size + n:
                    break
                self.answers.append(bytes(self.buf[_LEN.size:_LEN.size + n]))
                del self.buf[:_LEN.size + n]

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
    ``packed[i]`` the ``(fn, args, generation)`` of the i-th rank; the answers in rank order
    (a rank's exception as ``cluster._Raised``)."""

    def __init__(self, workers, ranks, path):
        import ray
        self.workers, self.ranks = workers, tuple(ranks)
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

    def post(self, packed):
        """Queues a step on every rank (returns once the requests are in the FIFOs)."""
        for c, p in zip(self._ranks, packed):
            data = _dumps(p)
            c.out += _LEN.pack(len(data)) + data
        self.pending += 1
        self._pump(lambda: not any(c.out for c in self._ranks))

    def collect(self):
        """The answers of the oldest posted step, in rank order."""
        if not self.pending:
            raise RuntimeError("StepChannel.collect: no step was posted")
        self._pump(lambda: all(c.answers for c in self._ranks))
        self.pending -= 1
        return [_loads(c.answers.popleft()) for c in self._ranks]

    def run(self, packed):
        self.post(packed)
        return self.collect()

    def _pump(self, done):
        """Reads answers and writes requests until ``done()``; every :data:`_CHECK_S` seconds of
        waiting, a rank whose process is gone raises (Ray's error for its actor)."""
        from tensorweave.distribute.ray.cluster import _pid_alive
        while not done():
            rd = [c.ans for c in self._ranks]
            wr = [c.req for c in self._ranks if c.out]
            readable, writable, _ = select.select(rd, wr, [], _CHECK_S)
            if not readable and not writable:
                for c in self._ranks:
                    if not _pid_alive(c.pid):
                        self._dead(c)
                continue
            for c in self._ranks:
                c.pump(c.ans in readable, c.req in writable)

    def _dead(self, c):
        import ray
        ray.get(self.workers[c.rank].ping.remote(), timeout=60)     # raises Ray's error for the dead actor
        raise RuntimeError(f"StepChannel: rank {c.rank}'s process {c.pid} is gone")

    def teardown(self):
        """Ends the ranks' serving threads (a rank busy in a step ends after it) and removes the FIFOs."""
        for c in self._ranks:
            try:
                os.write(c.req, _LEN.pack(_STOP))
            except OSError:
                pass                       # full (a dead rank's): its thread is gone anyway
            c.close()
        self._ranks = []
