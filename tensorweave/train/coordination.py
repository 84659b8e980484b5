"""``tw.train.Coordinator``, ``ClusterSpec`` and ``checkpoints_iterator``.

>>> import tensorweave as tw
>>> spec = tw.train.ClusterSpec({"worker": ["w0:2222", "w1:2222"], "ps": ["p0:2222"]})
>>> spec.jobs, spec.num_tasks("worker"), spec.task_address("worker", 1)
(['ps', 'worker'], 2, 'w1:2222')
>>> coord = tw.train.Coordinator()
>>> coord.request_stop(); coord.should_stop()
True
"""
import contextlib
import os
import sys
import threading
import time

from tensorweave.core import errors


class Coordinator:
    """Lets threads request a common stop and report the first exception (``tf.train.Coordinator``)."""

    def __init__(self, clean_stop_exception_types=None):
        # an input pipeline running dry (OutOfRangeError) is a clean stop, as in TF
        self._clean = tuple(clean_stop_exception_types or (errors.OutOfRangeError,))
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._exc_info = None
        self._threads = set()

    def should_stop(self):
        return self._stop.is_set()

    def request_stop(self, ex=None):
        """Asks every thread to stop; ``ex`` (an exception or exc_info) is re-raised by ``join``."""
        with self._lock:
            if ex is not None and self._exc_info is None and not isinstance(
                    ex if isinstance(ex, BaseException) else ex[1], self._clean):
                self._exc_info = ex if isinstance(ex, tuple) else (type(ex), ex, ex.__traceback__)
            self._stop.set()

    def clear_stop(self):
        with self._lock:
            self._exc_info = None
            self._stop.clear()

    @contextlib.contextmanager
    def stop_on_exception(self):
        """A context in which an exception requests a stop (and is kept for ``join``)."""
        try:
            yield
        except Exception:  # noqa: BLE001 - handed to the coordinator, as TF does
            self.request_stop(sys.exc_info())

    def wait_for_stop(self, timeout=None):
        return self._stop.wait(timeout)

    def register_thread(self, thread):
        with self._lock:
            self._threads.add(thread)

    def raise_requested_exception(self):
        with self._lock:
            if self._exc_info is not None:
                raise self._exc_info[1].with_traceback(self._exc_info[2])

    def join(self, threads=None, stop_grace_period_secs=120, ignore_live_threads=False):
        """Waits for the threads after a stop request; re-raises the first reported exception."""
        threads = set(threads or ()) | self._threads
        self._stop.wait()
        deadline = time.monotonic() + stop_grace_period_secs
        for t in threads:
            t.join(max(deadline - time.monotonic(), 0))
        alive = [t.name for t in threads if t.is_alive()]
        self.raise_requested_exception()
        if alive and not ignore_live_threads:
            raise RuntimeError(f"Coordinator stopped with threads still running: {alive}")

    @property
    def joined(self):
        return not any(t.is_alive() for t in self._threads)


class ClusterSpec:
    """Job names mapped to task addresses: ``{"worker": ["host:port", ...]}`` or ``{job: {index: address}}``."""

    def __init__(self, cluster):
        if isinstance(cluster, ClusterSpec):
            cluster = cluster.as_dict()
        self._jobs = {}
        for job, tasks in dict(cluster).items():
            if isinstance(tasks, dict):
                self._jobs[job] = {int(i): str(a) for i, a in tasks.items()}
            else:
                self._jobs[job] = {i: str(a) for i, a in enumerate(tasks)}

    def as_dict(self):
        out = {}
        for job, tasks in self._jobs.items():
            idx = sorted(tasks)
            out[job] = [tasks[i] for i in idx] if idx == list(range(len(idx))) else dict(tasks)
        return out

    @property
    def jobs(self):
        return sorted(self._jobs)

    def num_tasks(self, job_name):
        return len(self._tasks(job_name))

    def task_indices(self, job_name):
        return sorted(self._tasks(job_name))

    def task_address(self, job_name, task_index):
        tasks = self._tasks(job_name)
        if task_index not in tasks:
            raise ValueError(f"No task with index {task_index} in job {job_name!r}")
        return tasks[task_index]

    def job_tasks(self, job_name):
        tasks = self._tasks(job_name)
        return [tasks.get(i) for i in range(max(tasks) + 1)] if tasks else []

    def _tasks(self, job_name):
        if job_name not in self._jobs:
            raise ValueError(f"No such job in cluster: {job_name!r}; jobs: {self.jobs}")
        return self._jobs[job_name]

    def __bool__(self):
        return bool(self._jobs)

    def __eq__(self, other):
        return isinstance(other, ClusterSpec) and self._jobs == other._jobs

    def __repr__(self):
        return f"ClusterSpec({self.as_dict()!r})"


def checkpoints_iterator(checkpoint_dir, min_interval_secs=0, timeout=None, timeout_fn=None):
    """Yields each new latest checkpoint of ``checkpoint_dir`` as it appears; stops after ``timeout``
    seconds without one (unless ``timeout_fn`` returns False, which keeps waiting)."""
    from tensorweave.train.manager import latest_checkpoint
    last = None
    while True:
        start = time.monotonic()
        path = None
        while True:
            path = latest_checkpoint(os.fspath(checkpoint_dir))
            if path is not None and path != last:
                break
            if timeout is not None and time.monotonic() - start >= timeout:
                path = None
                break
            time.sleep(1.0)
        if path is None:
            if timeout_fn is not None and not timeout_fn():
                continue
            return
        last = path
        yield path
        wait = min_interval_secs - (time.monotonic() - start)
        if wait > 0:
            time.sleep(wait)
