"""``tw.distribute.connect``: ranks as Ray actors (one per rank), and running a function on all.

``connect()`` with no address starts a local Ray instance bound to loopback, with the
dashboard off and Ray's token authentication on; ``address="auto"`` or ``"ray://host:port"``
attaches to a running cluster (``ray start``). Each rank is a :class:`RankWorker` actor in
one placement group (``"PACK"``: fill a node first, ``"SPREAD"``: one rank per node where
possible) holding its rank id and its communicators. :meth:`Cluster.run` calls
``fn(worker, *args)`` on every rank at once (the single controller's one call per worker
and step); a rank that raises surfaces as the original exception type with ``.rank`` set
and a note naming the rank, after the other ranks' pending collectives are aborted (no hang).

>>> import tensorweave as tw                                          # doctest: +SKIP
>>> cluster = tw.distribute.connect(num_workers=2)                    # doctest: +SKIP
>>> cluster.run(lambda w: w.comm().all_gather([w.rank]).tolist())     # doctest: +SKIP
[[0, 1], [0, 1]]
>>> tw.distribute.shutdown()                                          # doctest: +SKIP
"""
import copy
import os
import threading
import uuid

from tensorweave.core import errors
from tensorweave.distribute.ray import members

_lock = threading.Lock()
_current = None


def _ray():
    try:
        import ray
    except ImportError as e:   # pragma: no cover - the ray extra is installed in CI
        raise ImportError("tw.distribute.connect needs Ray: pip install 'tensorweave[ray]'") from e
    return ray


class RankWorker:
    """The actor of one rank (its class is made remote in :func:`connect`): the rank id, the
    world's ranks, communicators per group (made on first use), and a dict of values the
    driver's steps may keep on the worker between calls."""

    def __init__(self, rank, ranks, cluster_id, timeout, transport="object_store"):
        keep_freed_memory()
        self.rank = int(rank)
        self.ranks = tuple(ranks)
        self.store = {}
        self.runtime = None               # the rank's Runtime, made by the first plan or op it runs
        self.transport = transport
        self._cluster_id = cluster_id
        self._timeout = timeout
        self._comms = {}
        self._shm_groups = []
        self._generation = 0
        self._gates = {}                  # step gate path -> its write end (compiled steps)
        self.step_fns = {}                # id -> step function of the step channels (register_steps)

    def comm(self, ranks=None, transport=None):
        """This rank's communicator in the group ``ranks`` (default: all ranks) over
        ``transport`` (``"shm"``, ``"object_store"`` or ``"hier"``: shared memory inside each
        node, the object store between nodes, ``hier.py``; default: the cluster's)."""
        from tensorweave.distribute.ray.group import RayGroup
        ranks = self.ranks if ranks is None else tuple(int(r) for r in ranks)
        transport = self.transport if transport is None else transport
        if transport not in TRANSPORTS:
            raise ValueError(f"comm: transport must be one of {TRANSPORTS}, got {transport!r}")
        c = self._comms.get((ranks, transport))
        if c is None:
            groups_id = f"{self._cluster_id}-g{self._generation}" if self._generation else self._cluster_id
            index = ranks.index(self.rank)
            if transport == "hier":
                from tensorweave.distribute.ray.hier import on_ray
                hier = on_ray(groups_id, ranks, index, self._timeout)
                self._shm_groups.append(hier)
                c = hier.communicator(index)
            else:
                group = RayGroup(ranks, _rendezvous(groups_id, ranks), self._timeout)
                if transport == "shm":
                    shm = group.shm_group(index, shm_prefix(groups_id, ranks))
                    self._shm_groups.append(shm)
                    c = shm.communicator(index)
                else:
                    c = group.communicator(index)
            self._comms[(ranks, transport)] = c
        return c

    def set_transport(self, transport):
        self.transport = transport

    def renumber(self, rank, ranks):
        """This actor is rank ``rank`` of the world ``ranks`` now (a rank was added or removed:
        :meth:`Cluster.add_worker`, :meth:`Cluster.remove_worker`); its groups are made anew."""
        self.close()
        self.rank, self.ranks = int(rank), tuple(ranks)

    def close(self):
        """Unlinks this rank's shared-memory segments (before the actor is killed)."""
        for g in self._shm_groups:
            g.close()
        self._shm_groups.clear()
        self._comms.clear()

    def call(self, fn, args, generation=0):
        if generation != self._generation:
            # a rank raised since the last call: its groups were aborted; make fresh ones
            self.close()
            self._generation = generation
        return fn(self, *args)

    def step_call(self, fn, args, generation=0):
        """``call(fn, args, generation)`` for a step of a compiled graph or a step channel: an
        exception comes back as a value (:class:`_Raised`), after this rank's groups are aborted
        (the other ranks' collectives end at once and come back too), so every step completes and
        the graph or channel stays usable."""
        from tensorweave.distribute.collective import CollectiveAbortedError
        try:
            return self.call(fn, args, generation)
        except BaseException as e:  # noqa: BLE001 - handed to the driver, which raises it
            if not isinstance(e, CollectiveAbortedError):      # (an abandoned collective: failed already)
                for c in list(self._comms.values()):
                    c.group.abort(f"rank {self.rank} raised {type(e).__name__}")
            return _Raised(e)

    def graph_call(self, packed):
        """A step of a compiled graph (:class:`_StepGraph`; Ray runs it on a thread of its own):
        :meth:`step_call` of ``packed``, taken out of the channel first (:func:`_owned`)."""
        data, gate = packed
        try:
            out = self.step_call(*_owned(data))
            if isinstance(out, _Raised):
                try:
                    _ray().cloudpickle.dumps(out.error)          # Ray's channel must be able to carry it
                except Exception:  # noqa: BLE001 - an exception that does not serialize: its text
                    out = _Raised(RuntimeError(f"{type(out.error).__name__}: {out.error}"))
            return out
        finally:
            if gate is not None:
                self._signal(gate)

    def serve_steps(self, request_path, answer_path):
        """Starts this rank's thread of a step channel (``step_channel.serve``)."""
        from tensorweave.distribute.ray.step_channel import serve
        serve(self, request_path, answer_path)

    def register_steps(self, fns, reset=False):
        """Step functions a step channel's frames name by id (``step_channel.py``): they come here
        by Ray's own transport, never through the channel. ``reset``: the earlier ones go."""
        if reset:
            self.step_fns.clear()
        self.step_fns.update(fns)

    def _signal(self, path):
        """One byte into the driver's step gate (:class:`_StepGate`): this rank's answer is next."""
        fd = self._gates.get(path)
        try:
            if fd is None:
                for old in self._gates.values():      # an earlier graph's (a worker is in one at a time)
                    os.close(old)
                self._gates.clear()
                fd = self._gates[path] = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            os.write(fd, b"s")
        except OSError:
            pass                          # the gate is gone (torn down): the driver reads the channel

    def ping(self):
        return self.rank, os.getpid(), _ray().get_runtime_context().get_node_id()


class _Raised:
    """What :meth:`RankWorker.graph_call` returns for a step that raised."""

    __slots__ = ("error",)

    def __init__(self, error):
        self.error = error


def _owned(value):
    """``value`` with every array in it copied out of the compiled graph's channel. Ray hands a
    NumPy array read from a channel back as a zero-copy view of the channel's shared memory that
    holds the channel's read lock while it lives: a driver keeping such a value (a local
    variable's new value, a step's loss) held a buffer Ray frees at ``teardown``/``ray.shutdown``,
    and Python freeing the array later (the garbage collector, at exit) called Ray's
    ``ReadRelease`` on freed memory: SIGSEGV. A deep copy owns its memory (``ndarray.__deepcopy__``
    copies the data); the views are dropped at once by the caller."""
    return copy.deepcopy(value)


class _StepGate:
    """What the driver waits on during a compiled step: a FIFO (in ``/dev/shm``, under the
    cluster's prefix) into which each rank writes a byte just before its answer. Ray's channel
    read spins (``sched_yield`` between looks at the channel) until the answer is there; on a
    machine whose cores the ranks use (two workers on two cores) that spinning driver is a third
    runnable process taking a share of the workers' time for the whole step (measured: 5.7-7.4 ms
    of driver CPU per 20 ms step that only sleeps, 2.5 ms with actor calls, at load ~20). The
    driver sleeps in ``select`` on the FIFO instead and reads the channel once every rank has
    written. Only where the ranks run on the driver's node; every second of a long step it
    checks that their processes live (a dead one: Ray's read raises, as without the gate)."""

    def __init__(self, path, pids):
        self.path, self.pids = path, pids
        os.mkfifo(path, 0o600)
        self.fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)     # RDWR: no EOF while no rank has it open

    def wait(self, n, loops=()):
        """Until ``n`` ranks wrote, a rank's process is gone, or one of Ray's worker loops of the
        graph (``loops``: their refs) ended (an error outside a step); then Ray's read decides."""
        import select
        got = 0
        while got < n:
            ready, _, _ = select.select([self.fd], [], [], 1.0)
            if ready:
                try:
                    got += len(os.read(self.fd, n - got))
                except BlockingIOError:
                    pass
            elif not all(_pid_alive(p) for p in self.pids) or (loops and _ray().wait(loops, timeout=0)[0]):
                return

    def close(self):
        os.close(self.fd)
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


class _StepGraph:
    """A compiled Ray graph (``ray.dag`` ``experimental_compile``) that calls
    :meth:`RankWorker.graph_call` on each of ``ranks`` with its own argument: a step's inputs
    and answers travel through shared-memory channels to a loop the workers run, instead of an
    actor call per worker (measured: ~0.7 ms instead of ~2 ms per 2-worker step at load 18).
    ``gate``: a :class:`_StepGate` path when the ranks share the driver's node, else None."""

    def __init__(self, workers, ranks, gate=None):
        from ray.dag import InputNode, MultiOutputNode
        self.gate = None
        if gate is not None:
            pids = [pid for _, pid, node in _ray().get([workers[r].ping.remote() for r in ranks])
                    if node == _ray().get_runtime_context().get_node_id()]
            if len(pids) == len(ranks):
                self.gate = _StepGate(gate, pids)
        with InputNode() as inp:
            dag = MultiOutputNode([workers[r].graph_call.bind(inp[i]) for i, r in enumerate(ranks)])
        # no submit timeout: a step runs as long as its collectives allow (they time out themselves)
        self.graph = dag.experimental_compile(_submit_timeout=-1)

    def run(self, packed):
        gate = self.gate.path if self.gate is not None else None
        refs = self.graph.execute(*[(p, gate) for p in packed])
        if self.gate is not None:
            self.gate.wait(len(packed), list(getattr(self.graph, "worker_task_refs", {}).values()))
        answers = _ray().get(refs, timeout=-1)
        owned = [_owned(a) for a in answers]
        del answers                       # the channel's views go now, not at the next collection
        return owned

    def teardown(self):
        try:
            self.graph.teardown()
        except Exception:  # noqa: BLE001 - a graph with a dead worker is gone anyway
            pass
        if self.gate is not None:
            self.gate.close()


TRANSPORTS = ("shm", "object_store", "hier")
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3       # glibc's mallopt parameters (malloc.h)
KEEP_FREED_BYTES = 2 ** 31 - 1                     # mallopt's int: 2 GB


def keep_freed_memory(limit=KEEP_FREED_BYTES):
    """Makes this process's large allocations (up to ``limit`` bytes) come from glibc's heap and
    keeps freed memory there instead of returning it to the kernel at once. A rank's steps and
    collectives allocate results of the same sizes every step; by default glibc maps each block
    above 32 MB afresh and unmaps it when freed, so every step pays the kernel's zeroing of new
    pages again (measured: 70-85 % of a 100 MB all-to-all's CPU time on a rank). A memory
    allocator with a cache (as PyTorch's, jemalloc) reuses them. ``TW_RAY_KEEP_FREED=0`` turns it
    off; not glibc (musl, macOS): nothing is changed. Returns whether the setting was made."""
    if os.environ.get("TW_RAY_KEEP_FREED", "1") == "0":
        return False
    import ctypes
    import ctypes.util
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, ctypes.c_int(limit))) and \
        bool(mallopt(_M_TRIM_THRESHOLD, ctypes.c_int(limit)))


def shm_prefix(cluster_id, ranks):
    """The shared-memory segment prefix of a group (under the cluster's ``tw-<id>`` prefix)."""
    import hashlib
    return f"tw-{cluster_id}-{hashlib.sha1(repr(tuple(ranks)).encode()).hexdigest()[:8]}"


def _rendezvous(cluster_id, ranks):
    ray = _ray()
    from tensorweave.distribute.ray.group import Rendezvous
    name = f"tw-rdv-{cluster_id}-{'_'.join(map(str, ranks))}"
    actor = ray.remote(num_cpus=0, max_concurrency=1000)(Rendezvous)
    # detached: a group's first member creates it, but the others still need it after that member
    # has moved on (or failed); Cluster.shutdown kills the cluster's rendezvous actors by name
    return actor.options(name=name, get_if_exists=True, lifetime="detached").remote(ranks)


def _rendezvous_actors(cluster_id):
    """The (detached) rendezvous actors of a cluster's groups, by name."""
    ray = _ray()
    prefix = f"tw-rdv-{cluster_id}"
    for entry in ray.util.list_named_actors(all_namespaces=False):
        name = entry if isinstance(entry, str) else entry.get("name", "")
        if name.startswith(prefix):
            try:
                yield ray.get_actor(name)
            except ValueError:
                pass                      # gone meanwhile


def _kill_rendezvous(cluster_id):
    """Stops the rendezvous actors of a cluster's groups."""
    for actor in _rendezvous_actors(cluster_id):
        _ray().kill(actor)


def _abort_rendezvous(cluster_id, reason):
    """Fails every group of the cluster (a rank raised): their waits end at once."""
    for actor in _rendezvous_actors(cluster_id):
        actor.abort.remote(reason)


SWITCH_AFTER = 2


def next_live(live, contender, ranks, switch_after=SWITCH_AFTER):
    """Whether a steady call of ``ranks`` (which has no compiled graph) compiles one, tearing down
    the live graph (``live``: one exists), and the new ``contender`` ``(ranks, calls in a row)``.

    One compiled graph is live at a time. Between steps Ray's loop on each of its workers waits
    for the next input spinning (``sched_yield`` between looks at the channel), and on a kernel
    with EEVDF (Linux >= 6.6) a spinning thread takes a fair share of a core: measured 0.3 s of
    CPU per second per idle worker at load 2, on 2 cores. So the workers of a graph that is not
    running are not idle: a second graph on other workers (the one-worker baseline beside the
    two-worker step), or actor calls on the graph's own workers, ran at half speed beside them.
    A set of ranks that keeps being called (``switch_after`` steady calls in a row, with no
    step of the live graph between) takes the graph over; one call in between (a step on other
    ranks now and then) goes by actor calls and leaves the live graph as it is, so steps that
    alternate between two sets do not compile a graph at every call.

    >>> next_live(False, (None, 0), (0, 1))
    (True, (None, 0))
    >>> next_live(True, (None, 0), (2,))
    (False, ((2,), 1))
    >>> next_live(True, ((2,), 1), (2,))
    (True, (None, 0))
    """
    if not live:
        return True, (None, 0)
    calls = contender[1] + 1 if contender[0] == ranks else 1
    if calls >= switch_after:
        return True, (None, 0)
    return False, (ranks, calls)


class Cluster:
    """The ranks started by :func:`connect` (``num_workers`` actors)."""

    def __init__(self, workers, cluster_id, started_ray, placement_group, transport="object_store",
                 resources=None, timeout=None):
        self.workers = workers
        # where each rank's actor runs: (placement group, bundle index, resources); ranks added by
        # add_worker beyond the group get a group of their own (in _own_groups, removed with them)
        self._resources = dict(resources or {"CPU": 1})
        self._slots = [(placement_group, i, dict(self._resources)) for i in range(len(workers))]
        self._own_groups = []
        self._timeout = timeout
        self._generation = 0
        self.cluster_id = cluster_id
        self.transport = transport
        self._started_ray = started_ray
        self._pg = placement_group
        self.heap = None        # the keys of the values global tensors keep on the workers (ray/pieces.py)
        # steps (run_each(..., steady=True)) through compiled Ray graphs, one per set of ranks
        # (TW_RAY_COMPILED_STEPS=0 or this attribute turns them off: an actor call per worker)
        self.compiled_steps = os.environ.get("TW_RAY_COMPILED_STEPS", "1") != "0"
        # the driver waits for a compiled step's ranks on a FIFO (_StepGate) instead of in Ray's
        # spinning read; TW_RAY_STEP_GATE=0 or this attribute (before a graph is made) turns it off
        self.step_gate = os.environ.get("TW_RAY_STEP_GATE", "1") != "0"
        # a planned function's consecutive gradient buckets shipped as one (ray/spec_buckets.py);
        # TW_RAY_MERGE_BUCKETS=0 or this attribute (before a function is first called) turns it off
        self.merge_buckets = os.environ.get("TW_RAY_MERGE_BUCKETS", "1") != "0"
        # "fifo": steady steps of ranks on the driver's node through a step channel (step_channel.py:
        # FIFOs, binary frames, no thread spinning between steps), else and elsewhere the compiled Ray
        # graph ("graph"); TW_RAY_STEPS or this attribute (before a graph is made) picks
        self.step_loop = os.environ.get("TW_RAY_STEPS", "fifo")
        # seconds a step channel's step may take before its collectives are aborted and
        # DeadlineExceededError names the ranks that had not answered (None: the collectives' own)
        timeout_s = os.environ.get("TW_RAY_STEP_TIMEOUT", "").strip()
        self.step_timeout = float(timeout_s) if timeout_s else None
        # a planned step whose outputs are all global with static shapes (and that updates no
        # driver-local variable) returns before the workers answer; they find the next step posted
        # (post_each); its error raises at the next call. TW_RAY_POST_AHEAD=0 or this attribute: off
        self.post_ahead = os.environ.get("TW_RAY_POST_AHEAD", "1") != "0"
        self._graphs = {}
        self._posted = []       # (ranks, check) of the steps posted ahead and not read (post_each)
        # the set of ranks asking for the workers of the live graph, and its consecutive steady calls
        self._contender = (None, 0)

    @property
    def num_workers(self):
        return len(self.workers)

    def run(self, fn, *args, ranks=None):
        """``[fn(worker, *args) for each rank]`` run concurrently, one call per worker, results
        in rank order. ``fn`` travels by Ray's own serialization (code from this driver)."""
        ranks = range(len(self.workers)) if ranks is None else list(ranks)
        return self.run_each(fn, [args] * len(ranks), ranks)

    def run_each(self, fn, per_rank_args, ranks=None, steady=False):
        """``[fn(worker, *per_rank_args[i]) for the i-th of ranks]``: as :meth:`run`, with each
        rank's own arguments (its pieces, its plan): still one call per worker. ``steady``: a
        call made again and again (a planned step): it goes through the compiled graph of these
        ranks when :attr:`compiled_steps` (see :meth:`_step_graph`)."""
        ray = _ray()
        self.drain()                      # a step posted ahead comes first (its updates, its error)
        ranks = range(len(self.workers)) if ranks is None else list(ranks)
        graph = self._step_graph(tuple(ranks)) if steady else None
        if graph is not None:
            from tensorweave.distribute.ray.step_frame import Unencodable
            try:
                return self._run_graph(graph, fn, per_rank_args, ranks)
            except Unencodable:
                pass                      # arguments a step frame cannot carry: this step by actor calls
        refs = [self.workers[r].call.remote(fn, args, self._generation) for r, args in zip(ranks, per_rank_args)]
        if len(refs) == 1:
            try:
                return [ray.get(refs[0])]
            except Exception as e:  # noqa: BLE001 - re-raised below as the rank's own exception
                self._failed(ranks[0], e)
                raise _original(ranks[0], e) from None
        # the common case in one wait; a rank that failed while the others wait in a collective is
        # seen within a second, then the loop below aborts the others' collectives
        done, pending = ray.wait(refs, num_returns=len(refs), timeout=1.0)
        if not pending:
            try:
                return ray.get(refs)
            except Exception:  # noqa: BLE001 - which rank: the loop below looks at each
                done, pending = [], list(refs)
        failed = []

        def check(ref):
            try:
                ray.get(ref)
            except Exception as e:  # noqa: BLE001 - re-raised below as the rank's own exception
                rank = ranks[refs.index(ref)]
                self._failed(rank, e, first=not failed)
                failed.append((rank, e))
        for ref in done:            # a rank that failed within the first second: the others may wait for it
            check(ref)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            check(done[0])
        if failed:
            # the cause, not a rank whose collective was abandoned because of it
            from tensorweave.distribute.collective import CollectiveAbortedError
            causes = [f for f in failed if not isinstance(_cause(f[1]), CollectiveAbortedError)]
            raise _original(*(causes or failed)[0])
        return ray.get(refs)

    def _step_graph(self, ranks):
        """The compiled graph of ``ranks`` (made at its first steady call), or None: compiled
        steps off, or Ray without compiled graphs, or another set's graph is live and ``ranks``
        has not had :data:`SWITCH_AFTER` steady calls in a row (see :func:`next_live`)."""
        if not self.compiled_steps:
            return None
        if ranks in self._graphs:
            if self._graphs[ranks] is not None:
                self._contender = (None, 0)
            return self._graphs[ranks]
        live = [k for k, g in self._graphs.items() if g is not None]
        switch, self._contender = next_live(bool(live), self._contender, ranks)
        if not switch:
            return None
        self._drop_graphs()
        graph = None
        path = self._gate_path(ranks, force=True) if self.step_loop == "fifo" else None
        if path is not None:
            from tensorweave.distribute.ray.step_channel import StepChannel
            try:
                graph = StepChannel(self.workers, ranks, path, self.step_timeout)
            except Exception:  # noqa: BLE001 - a rank on another node: the compiled graph
                graph = None
        if graph is None:
            try:
                graph = _StepGraph(self.workers, ranks, self._gate_path(ranks))
            except Exception:  # noqa: BLE001 - no compiled graphs here: the actor calls remain
                graph = None
        self._graphs[ranks] = graph
        return graph

    def _gate_path(self, ranks, force=False):
        """A fresh path under the cluster's shared-memory prefix for a step gate (``force``: for a
        step channel's FIFOs, whatever :attr:`step_gate` says), or None."""
        from tensorweave.distribute import shm
        if not (self.step_gate or force) or not shm.available():
            return None
        return os.path.join(shm.SHM_DIR, f"{shm_prefix(self.cluster_id, ranks)}-gate-{uuid.uuid4().hex[:8]}")

    def _drop_graphs(self, rank=None):
        """Tears down the compiled graphs (those with ``rank`` in them); the next steady call of
        their ranks compiles anew."""
        if self._posted:
            try:
                self.drain()
            except Exception:  # noqa: BLE001 - the graphs go (a failure, a membership change): its error too
                pass
        for ranks in [k for k in self._graphs if rank is None or rank in k]:
            graph = self._graphs.pop(ranks)
            if graph is not None:
                graph.teardown()

    def post_each(self, fn, per_rank_args, ranks, check=None):
        """Posts ``fn(worker, *per_rank_args[i])`` on ``ranks`` as a steady call whose answers the
        driver does not wait for (*post-ahead*): the step runs while the driver goes on, and the
        previous posted step's answers are read now, after this one is queued, so the workers
        find their next step waiting. Returns False (nothing posted) unless the steps of ``ranks``
        go through a live step channel (``step_channel.py``; :meth:`run_each` makes it) and the
        arguments fit its frames. A posted step's answers are read by the next post or by
        :meth:`drain` (every other call of the cluster drains first): its error raises there, with
        its rank; ``check(answers)`` is called on them (a step's expectations).
        ``per_rank_args`` may be a function that makes them (called only when the step is posted)."""
        from tensorweave.distribute.ray.step_channel import StepChannel
        from tensorweave.distribute.ray.step_frame import Unencodable
        graph = self._graphs.get(tuple(ranks)) if self.compiled_steps else None
        if not isinstance(graph, StepChannel):
            return False                  # run_each makes the channel (or not): see _step_graph
        if self._posted and self._posted[0][0] != tuple(ranks):
            self.drain()                  # another set's steps first
        if callable(per_rank_args):       # made only now that the step goes (it may take from the heap)
            per_rank_args = per_rank_args()
        try:
            graph.post([(fn, args, self._generation) for args in per_rank_args])
        except Unencodable:
            return False                  # nothing sent: the caller runs the step (by actor calls)
        except Exception as e:  # noqa: BLE001 - a worker died while the request went in
            self._posted.clear()
            self._lost(tuple(ranks), e)
        self._posted.append((tuple(ranks), check))
        if len(self._posted) > 1:
            try:
                self._collect(graph)
            except BaseException:
                try:                      # the step just posted ran into the failed one's abort: its
                    self.drain()          # error is a consequence, this one the cause
                except Exception:  # noqa: BLE001
                    pass
                raise
        return True

    def drain(self):
        """Reads the answers of the steps posted ahead (:meth:`post_each`); raises the first
        error among them (the later ones are read and dropped: their ranks were aborted)."""
        first = None
        while self._posted:
            try:
                self._collect(self._graphs.get(self._posted[0][0]))
            except Exception as e:  # noqa: BLE001 - raised after every posted step is read
                first = first or e
        if first is not None:
            raise first

    def _collect(self, graph):
        ranks, check = self._posted.pop(0)
        try:
            out = graph.collect()
        except Exception as e:  # noqa: BLE001 - a worker died or the step timed out: as in _run_graph
            self._posted.clear()
            self._lost(ranks, e)
        out = self._answers(ranks, out)
        if check is not None:
            check(out)
        return out

    def _lost(self, ranks, e):
        """Raises a step's error after its channel or graph broke (a worker died, or the step timed
        out: its collectives are aborted and the error names the ranks that had not answered)."""
        from tensorweave.distribute.ray.step_channel import StepTimeout
        if isinstance(e, StepTimeout):
            _abort_rendezvous(self.cluster_id, str(e))
            self._generation += 1
            self._drop_graphs()
            err = errors.DeadlineExceededError(
                f"{e} (Cluster.step_timeout); their collectives were aborted and the step channel dropped")
            err.ranks = e.ranks
            raise err from None
        self._drop_graphs()
        dead = [r for r in ranks if not self._alive(r)]
        self._failed(dead[0] if dead else ranks[0], e)
        raise _original(dead[0] if dead else ranks[0], e) from None

    def _run_graph(self, graph, fn, per_rank_args, ranks):
        from tensorweave.distribute.ray.step_frame import Unencodable
        try:
            out = graph.run([(fn, args, self._generation) for args in per_rank_args])
        except Unencodable:
            raise                         # nothing was sent (run_each: actor calls)
        except Exception as e:  # noqa: BLE001 - a worker died: the graph is gone; name the rank
            self._lost(ranks, e)
        return self._answers(ranks, out)

    def _answers(self, ranks, out):
        """A step's answers, or the error of its first failed rank (not one that only saw the abort)."""
        failed = [(r, o.error) for r, o in zip(ranks, out) if isinstance(o, _Raised)]
        if failed:
            from tensorweave.distribute.collective import CollectiveAbortedError
            causes = [f for f in failed if not isinstance(f[1], CollectiveAbortedError)]
            rank, e = (causes or failed)[0]
            self._failed(rank, e)
            raise _original(rank, e)
        return out

    def _alive(self, rank):
        try:
            _ray().get(self.workers[rank].ping.remote(), timeout=30)
            return True
        except Exception:  # noqa: BLE001 - dead, or too slow to answer: not usable
            return False

    def _failed(self, rank, e, first=True):
        if isinstance(e, _ray().exceptions.RayActorError):
            _sweep_rank(self.cluster_id, rank)      # a dead worker cannot unlink its segments
        if first:
            _abort_rendezvous(self.cluster_id, f"rank {rank} raised {type(_cause(e)).__name__}")
            self._generation += 1      # the next call's collectives use fresh groups

    def restart_worker(self, rank):
        """Replaces rank ``rank``'s actor (dead or not) by a fresh one in the same placement
        bundle; what it kept in ``store`` is gone, and groups it was in must be made anew."""
        ray = _ray()
        self._drop_graphs(rank)
        ray.kill(self.workers[rank])
        _sweep_rank(self.cluster_id, rank)
        self.workers[rank] = members.spawn(self, rank)
        ray.get(self.workers[rank].set_transport.remote(self.transport))
        self._generation += 1          # groups with the old actor in them are made anew

    def add_worker(self, resources=None, timeout_s=120):
        """Adds one rank (the next number) and returns it: a bundle of the cluster's placement
        group that no rank uses (one :meth:`remove_worker` freed), else a placement group of one
        bundle of its own, removed with the rank or at :meth:`shutdown` (``members.py``)."""
        return members.add_worker(self, resources, timeout_s)

    def remove_worker(self, rank=None):
        """Stops rank ``rank`` (default: the last); the ranks above it move down by one."""
        return members.remove_worker(self, rank)

    def shutdown(self):
        ray = _ray()
        if self.heap is not None:
            self.heap.alive = False      # the values global tensors kept on the workers go with them
        self._drop_graphs()
        try:
            ray.get([w.close.remote() for w in self.workers], timeout=60)
        except Exception:  # noqa: BLE001 - a dead or stuck worker; its segments are swept below
            pass
        for w in self.workers:
            ray.kill(w)
        _kill_rendezvous(self.cluster_id)
        from tensorweave.distribute import shm
        shm.sweep(f"tw-{self.cluster_id}")
        from ray.util.placement_group import remove_placement_group
        for pg in ([self._pg] if self._pg is not None else []) + self._own_groups:
            remove_placement_group(pg)
        self._own_groups = []
        if self._started_ray:
            ray.shutdown()


def _sweep_rank(cluster_id, rank):
    """Unlinks a dead rank's shared-memory segments and the messages posted to it (on this
    node; a driver elsewhere leaves them to the cluster's shutdown on the workers' node)."""
    from tensorweave.distribute import shm
    prefix = f"tw-{cluster_id}"
    for pattern in (f"*-r{rank}-*", f"*-p{rank}-*", f"*-p*-{rank}-*"):
        shm.sweep(prefix, pattern)


def _cause(exc):
    """The exception a rank raised inside Ray's wrapper (the wrapper when there is none)."""
    cause = getattr(exc, "cause", None)
    if cause is None and hasattr(exc, "as_instanceof_cause"):
        cause = exc.as_instanceof_cause()
    return cause if isinstance(cause, BaseException) else exc


def _original(rank, exc):
    """The exception a rank raised, as its own type, with ``.rank`` and a note."""
    out = _cause(exc)
    try:
        out.rank = rank
    except AttributeError:
        pass
    if hasattr(out, "add_note"):
        out.add_note(f"(raised on rank {rank} of the Ray cluster)")
    return out


def _loopback_only(ray):
    """Makes a local instance listen on 127.0.0.1 only. On Linux Ray resolves "127.0.0.1" to
    the node's routable address (for clusters) unless its single-node mode is on; that mode is
    read from the environment by the processes Ray starts, and from a constant by this one
    (already imported here). A test checks the addresses, so a Ray that changes this fails it."""
    if os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER") is None:
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
        from ray._private import ray_constants
        ray_constants.ENABLE_RAY_CLUSTER = False


_probe_cache = {}


def _probe_step(worker, transport, sizes, repeat):
    """Median seconds of an all-reduce of each size (bytes) on ``transport``, summed."""
    import time

    import numpy as np
    comm = worker.comm(transport=transport)
    total = 0.0
    for nbytes in sizes:
        x = np.ones(max(nbytes // 4, 1), np.float32)
        comm.all_reduce(x)
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            comm.all_reduce(x)
            times.append(time.perf_counter() - t0)
        total += sorted(times)[len(times) // 2]
    return total


def candidates(nodes, shm_ok=True):
    """The transports ranks on ``nodes`` (rank ``r`` on ``nodes[r]``) can use: shared memory
    when all share a node, ``hier`` (shared memory inside each node, the object store between
    them) when they do not but some do, the object store always; shared memory only where
    every rank has ``/dev/shm`` (``shm_ok``).

    >>> candidates(["a", "a"]), candidates(["a", "b", "a"]), candidates(["a", "b"])
    (('shm', 'object_store'), ('hier', 'object_store'), ('object_store',))
    """
    if len(nodes) == 1 or not shm_ok:
        return ("object_store",)
    if len(set(nodes)) == 1:
        return ("shm", "object_store")
    if len(set(nodes)) < len(nodes):
        return ("hier", "object_store")
    return ("object_store",)


def _choose_transport(cluster, nodes):
    """``TW_RAY_TRANSPORT`` (shm, object_store or hier) if set; else the fastest of the
    :func:`candidates` on a short probe (a small and a 1 MB all-reduce). The probe's answer is
    kept for this process (per number of ranks, and how many share each node)."""
    from tensorweave.distribute import shm
    forced = os.environ.get("TW_RAY_TRANSPORT", "").strip()
    if forced:
        if forced not in TRANSPORTS:
            raise ValueError(f"TW_RAY_TRANSPORT must be one of {TRANSPORTS}, got {forced!r}")
        return forced
    options = candidates(nodes)
    if len(options) > 1 and not all(cluster.run(lambda w: shm.available())):
        options = candidates(nodes, shm_ok=False)
    if len(options) == 1:
        return options[0]
    key = cluster.num_workers if len(set(nodes)) == 1 else (
        cluster.num_workers, tuple(sorted(nodes.count(n) for n in set(nodes))))
    if key not in _probe_cache:
        timing = {t: max(cluster.run(_probe_step, t, (8, 1 << 20), 3)) for t in options}
        _probe_cache[key] = min(timing, key=timing.get)
    return _probe_cache[key]


def connect(address=None, num_workers=2, resources_per_worker=None, strategy="PACK", timeout=None,
            transport=None):
    """Starts (or attaches to) Ray and makes ``num_workers`` rank actors; returns the
    :class:`Cluster` (also kept as the current one: :func:`current`, :func:`shutdown`).

    ``address``: None starts a local instance (loopback only, dashboard off, token auth);
    ``"auto"`` or ``"ray://..."`` attaches. ``resources_per_worker``: Ray resources of each
    rank (default one CPU). ``timeout``: the collectives' (default 120 s). ``transport``:
    ``"shm"`` (shared memory, every rank on one node), ``"object_store"`` or ``"hier"``
    (ranks on several nodes: shared memory inside each, the object store between them);
    default ``TW_RAY_TRANSPORT`` or a short measurement (:func:`_choose_transport`)."""
    global _current
    ray = _ray()
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
        raise ValueError(f"connect: num_workers must be a positive int, got {num_workers!r}")
    if transport is not None and transport not in TRANSPORTS:
        raise ValueError(f"connect: transport must be one of {TRANSPORTS}, got {transport!r}")
    if strategy not in ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"):
        raise ValueError(f"connect: strategy must be PACK, SPREAD, STRICT_PACK or STRICT_SPREAD, got {strategy!r}")
    resources = dict(resources_per_worker or {"CPU": 1})
    with _lock:
        if _current is not None:
            raise errors.FailedPreconditionError(
                "connect: a cluster is already connected; call tw.distribute.shutdown() first")
        started = False
        if not ray.is_initialized():
            if address is None:
                _loopback_only(ray)
                # Ray runs workers at niceness 15 (background tasks); rank actors are the job's
                # compute, as torchrun's processes are, so they keep the driver's priority
                # (read by the processes Ray starts; an explicit RAY_worker_niceness wins)
                os.environ.setdefault("RAY_worker_niceness", "0")
                # Ray (>= 2.59, the extra's pin) turns token authentication on for a new local
                # instance unless RAY_AUTH_MODE says otherwise.
                ray.init(num_cpus=max(num_workers * int(resources.get("CPU", 1)), os.cpu_count() or 1),
                         include_dashboard=False, _node_ip_address="127.0.0.1", logging_level="ERROR",
                         log_to_driver=False, configure_logging=False)
            else:
                ray.init(address=address, logging_level="ERROR", log_to_driver=False)
            started = True
        from ray.util.placement_group import placement_group
        pg = placement_group([dict(resources) for _ in range(num_workers)], strategy=strategy)
        ray.get(pg.ready(), timeout=600)
        cluster_id = uuid.uuid4().hex[:12]
        cluster = Cluster([None] * num_workers, cluster_id, started, pg, resources=resources, timeout=timeout)
        cluster.workers = [members.spawn(cluster, i) for i in range(num_workers)]
        nodes = [node for _, _, node in ray.get([w.ping.remote() for w in cluster.workers])]
        workers = cluster.workers
        try:
            cluster.transport = transport or _choose_transport(cluster, nodes)
            ray.get([w.set_transport.remote(cluster.transport) for w in workers])
        except BaseException:
            cluster.shutdown()
            raise
        _current = cluster
        return _current


def current():
    """The connected :class:`Cluster`, or None."""
    return _current


def shutdown():
    """Stops the current cluster's actors (and Ray, when :func:`connect` started it)."""
    global _current
    with _lock:
        if _current is not None:
            cluster, _current = _current, None
            cluster.shutdown()
