"""The driver's ``fit`` loop of ``MultiWorkerMirroredStrategy``: callbacks, failures, elastic membership.

The driver runs Keras' loop itself and asks the active workers for *chunks* of steps
(``multi_worker_replica.run_steps``; the same call on every active worker): one step per
call when a callback hooks batches (it then sees every batch's logs, and the model's weights
after that batch), else the whole epoch in one call (as Keras' ``steps_per_execution``: the
progress bar moves once per chunk). The logs are the global ones: the loss of the global
batch and every metric's state combined over the active workers. Callbacks run on the
driver, on the driver's model: it takes the workers' state before each callback that can see
it (epoch ends, batch ends when hooked, the end of training); what callbacks change that the
workers need — ``model.stop_training`` and a settable learning rate
(``LearningRateScheduler``, ``ReduceLROnPlateau``) — goes to the workers with the next chunk.

Failures (:class:`FailureConfig`): when a call fails the driver pings the active workers;
none dead means a real error (raised as the rank's own exception). A dead one (``kill -9``,
a lost node) counts against ``max_failures`` and then either

- *restart* (default): the dead workers are restarted in their placement bundles, the
  driver's model goes back to the latest checkpoint — a ``BackupAndRestore`` callback's
  backup when the fit has one, else the state the fit started from (as Ray Train without a
  checkpoint) — every worker gets it and training continues where it was taken (the epoch,
  or the step after a mid-epoch backup; History forgets the epochs after it). With a deterministic input (no shuffling, or arrays: their
  shuffling is seeded per epoch) the final weights are those of a run without the failure.
- *elastic*: the survivors carry on without a restart or disk: the one that completed the
  most steps holds the state, which is boxed onto the survivors (``B`` on ``[holder]`` ->
  ``B`` on the survivors) and the global batch is re-sharded over them from the next step;
  with ``rejoin`` the lost ranks are restarted at the next epoch boundary and join the same
  way. The global batch stays the same, so the updates are those of the failure-free run
  (to float rounding: the sum runs over other shards); a pipeline each worker reads on its
  own (FILE, OFF, HINT) keeps the epoch's split, the lost ranks' pipelines read on by
  survivors (``Replica.carry_over``), and is cut for the new ranks at the next epoch.

Growth (elastic with ``max_workers``): at each epoch boundary ranks are added beyond the
placement group while Ray has room (``Cluster.add_worker``), and join the same way.
"""
import os

import numpy as np

from tensorweave.distribute.ray import multi_worker_replica as rep


class FailureConfig:
    """What ``fit`` does when a worker dies (Ray Train's ``FailureConfig`` name).

    Args:
        max_failures: how many worker deaths a fit survives (0: none, the error is raised;
            -1: any number).
        elastic: False restarts the dead workers and resumes from the latest checkpoint;
            True continues on the survivors (the state re-boxed onto them, no restart from disk).
        rejoin: (elastic) restart the lost workers at the next epoch boundary and let them join.
        min_workers: (elastic) fewer survivors than this fall back to restarting.
        max_workers: (elastic) grow to this many ranks: at each epoch boundary, while Ray has
            room for one more worker, a rank is added in a placement group of its own and
            joins as a rejoining rank does (``Cluster.add_worker``). None: never grow.

    >>> FailureConfig(max_failures=2, elastic=True)
    FailureConfig(max_failures=2, elastic=True, rejoin=True, min_workers=1)
    """

    def __init__(self, max_failures=0, elastic=False, rejoin=True, min_workers=1, max_workers=None):
        if isinstance(max_failures, bool) or not isinstance(max_failures, int) or max_failures < -1:
            raise ValueError(f"FailureConfig: max_failures must be an int >= -1 (-1: no limit), got {max_failures!r}")
        if isinstance(min_workers, bool) or not isinstance(min_workers, int) or min_workers < 1:
            raise ValueError(f"FailureConfig: min_workers must be a positive int, got {min_workers!r}")
        if max_workers is not None:
            if isinstance(max_workers, bool) or not isinstance(max_workers, int) or max_workers < min_workers:
                raise ValueError(f"FailureConfig: max_workers must be None or an int >= min_workers ({min_workers}), "
                                 f"got {max_workers!r}")
            if not elastic:
                raise ValueError("FailureConfig: max_workers (growing the fit) needs elastic=True")
        self.max_failures, self.elastic, self.rejoin, self.min_workers = max_failures, bool(elastic), bool(
            rejoin), min_workers
        self.max_workers = max_workers

    def __repr__(self):
        grow = "" if self.max_workers is None else f", max_workers={self.max_workers}"
        return (f"FailureConfig(max_failures={self.max_failures}, elastic={self.elastic}, rejoin={self.rejoin}, "
                f"min_workers={self.min_workers}{grow})")


class _Restart(Exception):
    """Control flow: continue the fit at step ``step`` of ``epoch`` (after a restart from a checkpoint)."""

    def __init__(self, epoch, step=0):
        super().__init__(epoch, step)
        self.epoch, self.step = epoch, step


_BATCH_HOOKS = ("on_train_batch_begin", "on_train_batch_end", "on_batch_begin", "on_batch_end")


def _hooks_batches(callback):
    """Whether ``callback`` does something per batch (then chunks are one step: it sees each).
    The checkpointing callbacks hook batches but act only at epoch ends with ``save_freq="epoch"``."""
    from tensorweave.keras.callbacks import BackupAndRestore, ModelCheckpoint
    from tensorweave.keras.callbacks.callback import Callback
    if isinstance(callback, (BackupAndRestore, ModelCheckpoint)) and getattr(callback, "save_freq", None) == "epoch":
        return False
    return any(getattr(type(callback), h, None) is not getattr(Callback, h) for h in _BATCH_HOOKS)


def _learning_rate(model):
    """The driver's learning rate when callbacks may change it (a number or a variable), else None."""
    opt = model.optimizer
    lr = getattr(opt, "_learning_rate", None)
    if isinstance(lr, (int, float)) and not isinstance(lr, bool):
        return float(lr)
    from tensorweave.ops.variables import Variable
    if isinstance(lr, Variable):
        return float(np.asarray(lr.numpy()))
    return None


class FitRun:
    """One ``fit`` of a model on the cluster (see the module docstring)."""

    def __init__(self, strategy, model, data, args, callbacks, failure_config):
        from tensorweave.keras.callbacks import History, ProgbarLogger
        self.cluster = strategy.cluster
        self.model, self.data, self.args, self.cbs = model, data, args, callbacks
        self.package = None
        self.config = failure_config or FailureConfig()
        self.active = list(range(self.cluster.num_workers))
        self.lost, self.failures = [], 0
        self.resources = dict(getattr(getattr(strategy, "cluster_resolver", None), "resources_per_worker", None) or {"CPU": 1})
        user = [c for c in callbacks if not isinstance(c, (History, ProgbarLogger))]
        self.per_batch = any(_hooks_batches(c) for c in user)
        self.sees_model = bool(user)

    # ---- calls on the workers ------------------------------------------------------------------
    def _call(self, fn, *args, ranks=None):
        return self.cluster.run(fn, *args, ranks=self.active if ranks is None else ranks)

    def _sync(self):
        """The driver's model takes the first active worker's weights and optimizer state."""
        from tensorweave.distribute.ray.multi_worker import unpack_into
        weights, opt_values = self._call(rep.state, ranks=[self.active[0]])[0]
        unpack_into(self.model, weights, opt_values)

    def traffic(self):
        return self._call(rep.traffic)

    # ---- the loop --------------------------------------------------------------------------------
    def fit(self, initial_epoch, epochs):
        from tensorweave.distribute.ray.multi_worker import package_model
        model, cbs = self.model, self.cbs
        model.stop_training = False
        cbs.on_train_begin()
        # BackupAndRestore may have restored an earlier run's state and asked to resume after it
        if getattr(model, "_initial_epoch", None) is not None:
            initial_epoch, model._initial_epoch = model._initial_epoch, None
        self.package = package_model(model)
        self.start = (self.package, initial_epoch)
        self._call(rep.begin, self.package, self.data, self.args, self.active)
        epoch, start, logs = initial_epoch, 0, {}
        while epoch < epochs:
            try:
                logs = self._epoch(epoch, start)
            except _Restart as r:
                epoch, start = r.epoch, r.step
                continue
            epoch, start = epoch + 1, 0
            if model.stop_training:
                break
        self._sync()
        cbs.on_train_end(logs)
        return model.history

    def _epoch(self, epoch, start=0):
        model, cbs = self.model, self.cbs
        if self.lost and self.config.rejoin:
            self._rejoin()
        if self.config.elastic and self.config.max_workers is not None:
            self._grow()
        cbs.on_epoch_begin(epoch)
        pos, logs = start, {}
        while True:
            cbs.on_train_batch_begin(pos)
            try:
                out = self._call(rep.run_steps, epoch, pos, 1 if self.per_batch else None,
                                 _learning_rate(model))[0]
            except Exception as e:  # noqa: BLE001 - _recover re-raises what is not a lost worker
                pos = self._recover(e)
                continue
            if out["pos"] > pos:
                pos, logs = out["pos"], out["logs"]
                if self.per_batch:
                    self._sync()
                cbs.on_train_batch_end(pos - 1, logs)
            if out["end"] or model.stop_training:
                break
        epoch_logs = dict(logs)
        validation = self.args["validation"]
        if validation and (epoch + 1) % validation["validation_freq"] == 0:
            while True:
                try:
                    val = self._call(rep.evaluate, validation)[0]
                    break
                except Exception as e:  # noqa: BLE001
                    self._recover(e)
            epoch_logs.update({"val_" + k: v for k, v in val.items()})
        if self.sees_model:
            self._sync()
        cbs.on_epoch_end(epoch, epoch_logs)
        return epoch_logs

    # ---- failures ------------------------------------------------------------------------------
    def _dead(self):
        """The active ranks whose actor is gone."""
        import ray
        refs = {r: self.cluster.workers[r].ping.remote() for r in self.active}
        dead = []
        for r, ref in refs.items():
            try:
                ray.get(ref, timeout=120)
            except ray.exceptions.RayActorError:
                dead.append(r)
        return dead

    def _recover(self, error):
        """After a failed call: re-raises ``error`` unless workers died and a failure is left;
        else shrinks (elastic: returns the step to continue at) or restarts (raises _Restart)."""
        dead = self._dead()
        if not dead:
            raise error
        self.failures += 1
        limit = self.config.max_failures
        if limit != -1 and self.failures > limit:
            if hasattr(error, "add_note"):
                error.add_note(f"(ranks {dead} died; failure {self.failures} of a fit with max_failures={limit})")
            raise error
        survivors = [r for r in self.active if r not in dead]
        if self.config.elastic and len(survivors) >= self.config.min_workers:
            return self._shrink(survivors, dead)
        for r in dead:
            self.cluster.restart_worker(r)
        epoch, step = self._resume_point()
        self._call(rep.begin, self.package, self.data, self.args, self.active, True)
        raise _Restart(epoch, step)

    def _shrink(self, survivors, dead):
        where = self._call(rep.progress, ranks=survivors)
        holder = survivors[max(range(len(survivors)), key=lambda i: where[i][1])]
        self._call(rep.rebox, holder, survivors, ranks=survivors)
        self.active = survivors
        self.lost += dead
        return max(p for _, p, _ in where)

    def _rejoin(self):
        """Restarts the lost ranks and boxes the state onto them (an epoch boundary)."""
        joining, self.lost = self.lost, []
        for r in joining:
            self.cluster.restart_worker(r)
        active = sorted(self.active + joining)
        self._call(rep.begin, self.package, self.data, self.args, active, True, ranks=joining)
        self._call(rep.rebox, self.active[0], active, ranks=active)
        self.active = active

    def _grow(self):
        """Adds ranks beyond the placement group while fewer than ``max_workers`` and Ray has
        room; they join as rejoining ranks do (an epoch boundary)."""
        from tensorweave.distribute.ray import multi_worker_grow as grow
        joining = []
        while (len(self.active) + len(self.lost) + len(joining) < self.config.max_workers
               and grow.room_for_worker(self.resources)):
            joining.append(self.cluster.add_worker(self.resources))
        if not joining:
            return
        active = sorted(self.active + joining)
        self._call(rep.begin, self.package, self.data, self.args, active, True, ranks=joining)
        self._call(rep.rebox, self.active[0], active, ranks=active)
        self.active = active

    def _resume_point(self):
        """Puts the driver's model back to the latest checkpoint; returns ``(epoch, step)`` to
        continue at. A backup made mid-epoch (``save_freq`` an integer) resumes at the step after
        it — not at the epoch's start as Keras does, which trains those batches twice — so the
        weights still follow the failure-free run (that epoch's logged metrics cover the steps
        after the backup only)."""
        from tensorweave.distribute.ray.multi_worker import package_model, package_values, unpack_into
        from tensorweave.keras.callbacks import BackupAndRestore, History
        backup = next((c for c in self.cbs if isinstance(c, BackupAndRestore)), None)
        if backup is not None and os.path.exists(backup._backup_path):
            backup.on_train_begin()
            epoch, self.model._initial_epoch = self.model._initial_epoch, None
            step = _backup_step(backup)
            self.package = package_model(self.model)
        else:
            (self.package, epoch), step = self.start, 0
            unpack_into(self.model, *package_values(self.package))
        for h in self.cbs:
            if isinstance(h, History):
                drop = sum(1 for e in h.epoch if e >= epoch)
                if drop:
                    h.epoch = h.epoch[:-drop]
                    h.history = {k: v[:-drop] for k, v in h.history.items()}
        return epoch, step


def _backup_step(backup):
    """The step after the batch a ``BackupAndRestore`` backup was made at (0 for an epoch-end one)."""
    from tensorweave.keras.callbacks.backup_and_restore import _FORMAT
    from tensorweave.saving.tensor_file import read_metadata
    from tensorweave.saving.validation import parse_json
    meta = read_metadata(backup._backup_path)
    state = parse_json(meta["state"].encode("utf-8", "surrogatepass"), "backup state") \
        if meta.get("format") == _FORMAT else {}
    batch = state.get("batch") if isinstance(state, dict) else None
    return batch + 1 if isinstance(batch, int) and not isinstance(batch, bool) and batch >= 0 else 0
