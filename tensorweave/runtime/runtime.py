"""One rank's execution state: a :class:`Runtime` is passed to plan building and running.

Everything a plan needs besides its own data lives here, per rank, never in a module
global: the logical devices and the placement settings, the inter-op thread pool, the
intra-op pool of tiled kernels, the eager random state (global seed, op-seed counter,
eager streams, global ``Generator``), the profiler hook, the copy hooks between device
types, and the resources (variables, random streams) that plans which arrived as data
refer to by name. Several runtimes in one process (the in-process ranks of the distribute
package) do not see each other.

A thread runs under one runtime: the innermost :meth:`Runtime.as_default`, else the
process's :func:`default_runtime`, which reads the process-wide device settings
(``tw.config``) so existing programs keep their behaviour; a rank makes its own, and its
thread and its pools' threads run under it. Lower layers reach it through
``core.context.current_runtime()``.

>>> import numpy as np
>>> from tensorweave.runtime.runtime import Runtime
>>> rt = Runtime("rank1", rank=1, cpu_count=2)
>>> rt.device_count("CPU"), rt.place("/cpu:1", _OpDefLike()), rt.place("/cpu:5", _OpDefLike())
(2, '/job:localhost/replica:0/task:0/device:CPU:1', '/job:localhost/replica:0/task:0/device:CPU:0')
>>> rt.copy(np.ones(2), "/device:CPU:0", "/device:CPU:1").tolist()   # shared host memory
[1.0, 1.0]
>>> import tensorweave as tw
>>> before = default_runtime().random.seed
>>> with rt.as_default():                 # this rank's seed, not the process's
...     tw.random.set_seed(1)
...     x = tw.random.uniform([2]).numpy()
>>> rt.random.seed, default_runtime().random.seed == before
(1, True)
"""
import contextlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor

from tensorweave.core import context, devices
from tensorweave.kernels import threads
from tensorweave.ops.random_ops import RandomState


class _OpDefLike:
    """(for the doctest) an op with a CPU kernel."""
    name = "Demo"
    kernels = {"CPU": None}


def _same_buffer(value, src, dst):
    # Logical CPU devices share host memory and kernels never write into an input (the
    # in-place optimizer updates write only variable storage, copy-on-write), so a
    # CPU-to-CPU transfer is the same buffer.
    return value


class Runtime:
    """Devices, thread pools, random state, profiler hook, copy hooks and resources of one rank.

    ``cpu_count``/``soft_placement``/``log_placement`` of None follow the process-wide
    settings (``tw.config``) as they are when a plan is built.
    """

    def __init__(self, name="default", rank=0, cpu_count=None, soft_placement=None, log_placement=None,
                 max_workers=None, device_counts=None):
        self.name = name
        self.rank = int(rank)
        self.cpu_count = cpu_count
        self.device_counts = {k.upper(): int(v) for k, v in (device_counts or {}).items()}
        if cpu_count is not None:
            self.device_counts["CPU"] = int(cpu_count)
        self.soft_placement = soft_placement
        self.log_placement = log_placement
        self.max_workers = max_workers
        self.profiler = None          # a recorder with record_node/record_run (tw.profiler)
        self.copy_hooks = {}          # (source device type, destination device type) -> fn(value, src, dst)
        self.resources = {}           # (kind, name) -> live object, for plans bound from data
        self.random = RandomState()   # eager seeds and streams (ops/random_ops.py)
        self._pool = None
        self._intra_pool = None
        self._lock = threading.Lock()

    # ---- the thread's runtime ----------------------------------------------------------------
    @contextlib.contextmanager
    def as_default(self):
        """Runs the body under this runtime on the calling thread (its random state, its
        intra-op pool); nests, and restores the previous one on exit."""
        saved, context.ctx.runtime = context.ctx.runtime, self
        try:
            yield self
        finally:
            context.ctx.runtime = saved

    def bind_thread(self):
        """Makes this the calling thread's runtime for the thread's life (a rank's own thread,
        this runtime's pool threads)."""
        context.ctx.runtime = self

    # ---- devices ---------------------------------------------------------------------------
    def device_count(self, device_type="CPU"):
        n = self.device_counts.get(device_type.upper())
        return devices.device_count(device_type) if n is None else n

    def place(self, requested, opdef, soft=None):
        """The device for an op (see ``devices.place``) among this runtime's devices."""
        if soft is None:
            soft = self.soft_placement
        return devices.place(requested, opdef, soft, self.device_counts or None)

    def log(self, op_name, op_type, device, force=False):
        if force or self.log_placement:
            devices.log_placement(op_name, op_type, device, force=True)
        elif self.log_placement is None:
            devices.log_placement(op_name, op_type, device)

    # ---- copies between devices ----------------------------------------------------------------
    def register_copy(self, src_type, dst_type, fn):
        """Sets the transfer ``fn(value, src device, dst device)`` for one pair of device types."""
        self.copy_hooks[(src_type.upper(), dst_type.upper())] = fn

    def copy_fn(self, src, dst):
        """The function a plan's copy step calls for an edge from ``src`` to ``dst``."""
        pair = (devices.device_type_of(src), devices.device_type_of(dst))
        fn = self.copy_hooks.get(pair)
        if fn is None:
            if pair != ("CPU", "CPU"):
                from tensorweave.core import errors
                raise errors.UnimplementedError(
                    f"no copy registered from {pair[0]} to {pair[1]} in runtime '{self.name}'. "
                    "Hint: Runtime.register_copy(src_type, dst_type, fn)")
            fn = _same_buffer
        return fn

    def copy(self, value, src, dst):
        return self.copy_fn(src, dst)(value, src, dst)

    # ---- threads ------------------------------------------------------------------------------
    def pool(self):
        """This rank's inter-op thread pool (made on first use)."""
        pool = self._pool
        if pool is None:
            with self._lock:
                if self._pool is None:
                    n = self.max_workers or max(4, os.cpu_count() or 2)
                    self._pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix=f"tw-{self.name}",
                                                    initializer=self.bind_thread)
                pool = self._pool
        return pool

    def intra_op_pool(self):
        """This rank's helper threads for tiled kernels (``kernels/cpu/tiles.py``; made on first
        use): ``cores - 1`` of them, the calling thread being the last. Each runtime has its own,
        so two ranks' tiles never queue behind each other."""
        pool = self._intra_pool
        if pool is None:
            with self._lock:
                if self._intra_pool is None:
                    self._intra_pool = ThreadPoolExecutor(
                        max_workers=max(1, threads.cores() - 1), thread_name_prefix=f"tw-{self.name}-intra",
                        initializer=self.bind_thread)
                pool = self._intra_pool
        return pool

    def shutdown(self):
        with self._lock:
            pools, self._pool, self._intra_pool = (self._pool, self._intra_pool), None, None
        for pool in pools:
            if pool is not None:
                pool.shutdown(wait=True)

    # ---- resources -------------------------------------------------------------------------------
    def add_resource(self, kind, name, obj):
        self.resources[(kind, name)] = obj
        return obj

    def add_variable(self, name, value, trainable=True):
        """Creates this rank's variable ``name`` holding ``value`` (for plans bound from data)."""
        from tensorweave.core.context import init_scope
        from tensorweave.ops.variables import Variable
        with init_scope():
            var = Variable(value, name=name, trainable=trainable)
        return self.add_resource("variable", name, var)

    def resource(self, kind, name):
        obj = self.resources.get((kind, name))
        if obj is None:
            from tensorweave.core import errors
            raise errors.NotFoundError(
                f"runtime '{self.name}' has no {kind} named {name!r} (the plan refers to it). "
                "Hint: Runtime.add_variable(name, value), or load the plan with its state")
        return obj

    def __repr__(self):
        return f"<Runtime {self.name!r} rank={self.rank}>"


_DEFAULT = Runtime("default")
context.set_default_runtime(_DEFAULT)


def default_runtime():
    """The process's runtime (used when none is given); follows ``tw.config``'s device settings."""
    return _DEFAULT
