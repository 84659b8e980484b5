"""``tw.train.CheckpointManager`` and ``tw.train.latest_checkpoint`` (TensorFlow 2 semantics).

A manager numbers the checkpoints of one :class:`~tensorweave.train.Checkpoint` in one
directory (``<directory>/<checkpoint_name>-<n>``), keeps the newest ``max_to_keep``, keeps one
every ``keep_checkpoint_every_n_hours`` for good, and records them in the directory's
``checkpoint`` state file, which a later process (or :func:`latest_checkpoint`) reads to find
where to resume.

Order of a save, so that a crash at any point leaves a loadable latest checkpoint: the new
checkpoint file is written and renamed into place; then the state file is replaced by one
that names it (and no longer names those about to go); only then are old files deleted. A
crash before the state file is replaced leaves the previous state, whose files all still
exist; a leftover newer file is simply overwritten by the next save with that number.

>>> import os, tempfile
>>> import tensorweave as tw
>>> from tensorweave.train import Checkpoint, CheckpointManager, latest_checkpoint
>>> step = tw.Variable(0, dtype=tw.int64)
>>> directory = tempfile.mkdtemp()
>>> manager = CheckpointManager(Checkpoint(step=step), directory, max_to_keep=2)
>>> for _ in range(3):
...     _ = step.assign_add(1)
...     _ = manager.save()
>>> [os.path.basename(p) for p in manager.checkpoints]
['ckpt-2', 'ckpt-3']
>>> latest_checkpoint(directory) == manager.latest_checkpoint
True
>>> restored = tw.Variable(0, dtype=tw.int64)
>>> resumed = CheckpointManager(Checkpoint(step=restored), directory, max_to_keep=2)
>>> os.path.basename(resumed.restore_or_initialize()), int(restored.numpy())
('ckpt-3', 3)
"""
import os
import re
import threading
import time

import numpy as np

from tensorweave.core.context import init_scope
from tensorweave.saving import atomic
from tensorweave.saving.sharded import STAGING
from tensorweave.train import _io
from tensorweave.train.checkpoint import Checkpoint, checkpoint_exists, remove_checkpoint, write_checkpoint

__all__ = ["CheckpointManager", "latest_checkpoint", "get_checkpoint_state"]


def get_checkpoint_state(checkpoint_dir, latest_filename=None):
    """The directory's :class:`~tensorweave.train._io.CheckpointState` (paths resolved), or None."""
    if latest_filename not in (None, _io.STATE_FILE):
        raise ValueError(f"latest_filename must be {_io.STATE_FILE!r} (tensorweave keeps one state file name)")
    return _io.read_state(os.fspath(checkpoint_dir))


def latest_checkpoint(checkpoint_dir, latest_filename=None):
    """The prefix of the newest checkpoint recorded in ``checkpoint_dir`` (for
    ``Checkpoint.restore``), or None when there is none or its file is gone."""
    state = get_checkpoint_state(checkpoint_dir, latest_filename)
    if state is None:
        return None
    path = state.model_checkpoint_path
    return path if checkpoint_exists(path) else None


def _number(x):
    if x is None:
        return None
    if hasattr(x, "numpy"):
        x = x.numpy()
    return int(x)


class CheckpointManager:
    """Saves numbered checkpoints of ``checkpoint`` in ``directory`` and deletes old ones.

    Args (``tf.train.CheckpointManager``):
        checkpoint: the :class:`Checkpoint` to save and restore.
        directory: where the checkpoints and the ``checkpoint`` state file go.
        max_to_keep: how many recent checkpoints to keep (None: all).
        keep_checkpoint_every_n_hours: besides those, keep one checkpoint for good every this
            many hours (it leaves the managed list but not the disk).
        checkpoint_name: the file prefix (default "ckpt").
        step_counter, checkpoint_interval: with both, ``save()`` writes only when the step
            counter (a variable or tensor) has advanced by ``checkpoint_interval`` since the last
            save by this manager.
        init_fn: called by :meth:`restore_or_initialize` when there is nothing to restore.
        async_save: ``save()`` takes a snapshot of the values (no copy: variable storage is
            copy-on-write while the snapshot holds it) and returns; the write, the commit, the
            state file and the deletions run in a background thread while training goes on.
            The next ``save`` (and ``restore_or_initialize``) waits for the previous one;
            :meth:`wait_until_finished` waits explicitly and raises a failed save's error.
            ``latest_checkpoint`` and ``checkpoints`` list a checkpoint once it is committed.

    Only checkpoints named ``<checkpoint_name>-<n>`` (``.safetensors`` files or ``.sharded``
    directories, for global variables) inside ``directory`` are ever deleted, whatever the
    state file lists.
    """

    def __init__(self, checkpoint, directory, max_to_keep=5, keep_checkpoint_every_n_hours=None,
                 checkpoint_name="ckpt", step_counter=None, checkpoint_interval=None, init_fn=None,
                 async_save=False):
        if not isinstance(checkpoint, Checkpoint):
            raise TypeError(f"CheckpointManager needs a tw.train.Checkpoint, got {type(checkpoint).__name__}")
        if max_to_keep is not None and (not isinstance(max_to_keep, int) or max_to_keep <= 0):
            raise ValueError(f"max_to_keep must be a positive integer or None, got {max_to_keep!r}")
        if checkpoint_interval is not None and step_counter is None:
            raise ValueError("`step_counter` should be passed if `checkpoint_interval` is not None.")
        if not checkpoint_name or os.sep in checkpoint_name or "/" in checkpoint_name:
            raise ValueError(f"checkpoint_name must be a plain file name, got {checkpoint_name!r}")
        self._checkpoint = checkpoint
        self._directory = os.fspath(directory)
        self._max_to_keep = max_to_keep
        self._keep_every_n_hours = keep_checkpoint_every_n_hours
        self._checkpoint_name = checkpoint_name
        self._prefix = os.path.join(self._directory, checkpoint_name)
        self._step_counter = step_counter
        self._checkpoint_interval = checkpoint_interval
        self._init_fn = init_fn
        self._async = bool(async_save)
        self._pending = None            # the SaveHandle of an asynchronous save in flight
        self._lock = threading.Lock()   # the list, the state file and the deletions
        self._last_checkpoint_step = None
        self._own = re.compile(re.escape(checkpoint_name) + r"-\d+")
        os.makedirs(self._directory, exist_ok=True)
        self._remove_stale_temporaries()
        state = _io.read_state(self._directory)
        self._paths, self._stamps = [], []
        self._last_preserved = time.time()
        if state is not None:
            # Files that a crash (or a user) removed are dropped from the list; the order is kept.
            for p, t in zip(state.all_model_checkpoint_paths, state.all_model_checkpoint_timestamps):
                if checkpoint_exists(p):
                    self._paths.append(p)
                    self._stamps.append(t)
            self._last_preserved = state.last_preserved_timestamp
            # A kill after the state file dropped them but before they were deleted.
            for p in state.pending_deletions:
                if p not in self._paths:
                    self._delete(p)

    def _remove_stale_temporaries(self):
        # Temporary files of writes that were killed before their rename: nothing reads them
        # (those a live writer still holds locked are left alone).
        atomic.remove_stale(self._directory, [f".tmp-{self._checkpoint_name}-", f".tmp-{_io.STATE_FILE}-",
                                              f"{STAGING}{self._checkpoint_name}-"])

    # ---- properties -----------------------------------------------------------------------------
    @property
    def directory(self):
        return self._directory

    @property
    def checkpoint(self):
        return self._checkpoint

    @property
    def checkpoint_interval(self):
        return self._checkpoint_interval

    @property
    def latest_checkpoint(self):
        """The prefix of the newest checkpoint managed here, or None."""
        return self._paths[-1] if self._paths else None

    @property
    def checkpoints(self):
        """The prefixes of the managed checkpoints, oldest first."""
        return list(self._paths)

    # ---- saving ---------------------------------------------------------------------------------
    def save(self, checkpoint_number=None, check_interval=True, options=None):
        """Writes a new checkpoint (numbered ``checkpoint_number``, else by the save counter,
        which is incremented either way); returns its prefix, or None when the interval since
        the last save has not passed. With ``async_save``, returns once the values are
        snapshotted (see the class docstring)."""
        self.wait_until_finished()
        step = None
        if self._step_counter is not None:
            step = _number(self._step_counter)
            if (check_interval and self._checkpoint_interval is not None and self._last_checkpoint_step is not None
                    and step < self._last_checkpoint_step + self._checkpoint_interval):
                return None
        counter = self._checkpoint.save_counter
        with init_scope():
            counter.assign_add(np.int64(1))
        number = _number(checkpoint_number) if checkpoint_number is not None else _number(counter)
        prefix = f"{self._prefix}-{number}"
        self._last_checkpoint_step = step
        if self._async:
            self._pending = write_checkpoint(prefix, self._checkpoint, async_then=self._record, options=options)
            return prefix
        path = write_checkpoint(prefix, self._checkpoint, options=options)
        self._record(path)
        return path

    def _record(self, path):
        """After the checkpoint at ``path`` is complete: list it, write the state file, delete
        the checkpoints beyond ``max_to_keep`` (all of them committed ones from the list)."""
        with self._lock:
            now = time.time()
            if path in self._paths:
                i = self._paths.index(path)
                del self._paths[i], self._stamps[i]
            self._paths.append(path)
            self._stamps.append(now)
            doomed = self._sweep()
            _io.write_state(self._directory, path, self._paths, self._stamps, self._last_preserved, doomed)
            for i, old in enumerate(doomed):
                self._delete(old)
                if i == 0:
                    _io.crash_point("during_delete")

    def wait_until_finished(self):
        """Waits for an asynchronous save in flight; raises its error if it failed (the
        checkpoint it was writing is then not listed; the previous one stays the latest)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.wait()

    def _sweep(self):
        """Drops the oldest checkpoints beyond ``max_to_keep`` from the list; returns those to delete."""
        doomed = []
        if self._max_to_keep is None:
            return doomed
        while len(self._paths) > self._max_to_keep:
            path, stamp = self._paths.pop(0), self._stamps.pop(0)
            if self._keep_every_n_hours is not None and \
                    stamp - self._keep_every_n_hours * 3600.0 >= self._last_preserved:
                self._last_preserved = stamp       # kept for good: no longer managed, not deleted
                continue
            doomed.append(path)
        return doomed

    def _delete(self, path):
        if os.path.abspath(os.path.dirname(path)) != os.path.abspath(self._directory) or \
                not self._own.fullmatch(os.path.basename(path)):
            return     # not one of ours (a state file can name anything): never delete it
        remove_checkpoint(path)

    # ---- restoring ------------------------------------------------------------------------------
    def restore_or_initialize(self):
        """Restores the latest checkpoint and returns its prefix; with none, calls ``init_fn``
        (when given) and returns None."""
        self.wait_until_finished()
        latest = self.latest_checkpoint
        if latest is not None:
            self._checkpoint.restore(latest)
            return latest
        if self._init_fn is not None:
            self._init_fn()
        return None

    def sync(self):
        """Waits for an asynchronous save in flight (:meth:`wait_until_finished`)."""
        self.wait_until_finished()
