"""Several Ray nodes on this machine, each started by ``ray start`` (its own raylet, object store
and node id): how a test or a benchmark puts ranks on two nodes without two machines.

The first node is a head (``ray start --head --port P``), the others join it (``ray start
--address 127.0.0.1:P``), exactly as on a cluster; every one runs with ``--block`` in a process
group of its own and its own ``--temp-dir`` (so ``ray.init()`` elsewhere on the machine never
finds it: Ray's "current cluster" file is written there, not in ``/tmp/ray``), with free ports
(the GCS, the client server, the dashboard agent: two nodes on one machine would take the same
defaults), no dashboard, token authentication. The nodes listen on the machine's routable address,
as a cluster's must: Ray resolves 127.0.0.1 to it unless its single-node mode is on, and that mode
refuses a second node (``connect``'s own local instance, one node, stays on loopback).
:meth:`LocalNodes.stop` ends only those processes: SIGTERM to each ``ray start`` (Ray then stops
the processes it started), then SIGKILL to what is left of each one's process group.
``ray stop`` is never used: it stops every Ray process of the machine.

>>> from tensorweave.distribute.ray.local_nodes import LocalNodes    # doctest: +SKIP
>>> with LocalNodes(count=2, cpus=1) as nodes:                       # doctest: +SKIP
...     cluster = tw.distribute.connect(address=nodes.address, num_workers=2,
...                                     strategy="STRICT_SPREAD")
...     ...
...     tw.distribute.shutdown()
"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading

READY = "Ray runtime started"


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ray_command():
    """The ``ray`` command of this Python's environment."""
    return [os.path.join(os.path.dirname(sys.executable), "ray")]


def node_env(env=None):
    """The environment of a ``ray start``: clusters allowed (Ray's single-node switch, which
    ``connect`` sets for its own local instance, would refuse a second node), token
    authentication as ``connect``'s, no drain wait at SIGTERM (nothing to drain in a test), and
    ``PYTHONPATH`` made absolute (the workers the nodes start import what this process does)."""
    out = dict(os.environ if env is None else env)
    if out.get("PYTHONPATH"):
        out["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in out["PYTHONPATH"].split(os.pathsep) if p)
    out.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
    out.setdefault("RAY_AUTH_MODE", "token")
    out["RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"] = "0"
    out.setdefault("RAY_worker_niceness", "0")
    return out


class LocalNodes:
    """``count`` Ray nodes of ``cpus`` CPUs (Ray's logical count) and ``object_store_mb`` each;
    ``address`` is the head's (``host:port``). Raises (after stopping what started) when a node
    does not start within ``timeout`` seconds, with its output."""

    def __init__(self, count=2, cpus=1, object_store_mb=200, timeout=180, env=None):
        # short: Ray's socket paths under it must fit a Unix socket name (107 bytes)
        self.temp_dir = tempfile.mkdtemp(prefix="twn-", dir="/tmp")
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.env = node_env(env)
        self.procs, self.outputs = [], []
        try:
            for i in range(count):
                self._start(self.command(i, cpus, object_store_mb), timeout)
        except BaseException:
            self.stop()
            raise

    def command(self, i, cpus, object_store_mb):
        """The ``ray start`` arguments of node ``i`` (0: the head)."""
        common = ["--block", "--num-cpus", str(cpus), "--object-store-memory", str(object_store_mb << 20),
                  "--temp-dir", self.temp_dir, "--dashboard-agent-listen-port", str(free_port()),
                  "--disable-usage-stats"]
        if i == 0:
            return ["start", "--head", "--port", str(self.port), "--include-dashboard", "false",
                    "--ray-client-server-port", str(free_port())] + common
        # one log monitor per machine (Ray's advice: a second one sends every log line twice)
        return ["start", "--address", self.address, "--include-log-monitor", "false"] + common

    def _start(self, args, timeout, tries=2):
        """Starts one node; again (once) when Ray gave up itself: on a loaded machine a raylet can
        miss Ray's fixed 30 s to register with the GCS ("timed out during startup")."""
        for _ in range(tries):
            proc, lines, started = self._launch(args, timeout)
            if started:
                return
            self._kill(proc)
            self.procs.pop()
            self.outputs.pop()
        raise RuntimeError(f"ray {' '.join(args[:2])} did not start ({tries} tries):\n" + "".join(lines[-40:]))

    def _launch(self, args, timeout):
        proc = subprocess.Popen(ray_command() + args, env=self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                                start_new_session=True)
        lines, ready, started = [], threading.Event(), []
        self.procs.append(proc)
        self.outputs.append(lines)

        def read():                      # the whole output, so a blocked node never fills its pipe
            for line in proc.stdout:
                lines.append(line)
                if READY in line:
                    started.append(True)
                    ready.set()
            ready.set()                  # ended without starting
        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(timeout):
            raise RuntimeError(f"ray {' '.join(args[:2])} did not start within {timeout} s:\n" + "".join(lines[-40:]))
        return proc, lines, bool(started)

    def stop(self, timeout=30):
        """Stops the nodes started here (the joined ones first), and removes the temp dir."""
        for proc in reversed(self.procs):
            self._kill(proc, timeout)
        self.procs = []
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    @staticmethod
    def _kill(proc, timeout=30):
        """SIGTERM to a node's ``ray start`` (Ray stops what it started), then SIGKILL to what is left
        of its process group (its own: ``start_new_session``)."""
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
