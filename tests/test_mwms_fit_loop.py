"""The driver's fit loop of MultiWorkerMirroredStrategy without Ray: a scripted cluster checks
which worker holds the state after a failure, what is re-boxed where, when a failure is an
error, what a restart sends, which callbacks force one step per call, and the learning rate
that travels."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.distribute.ray import multi_worker_replica as rep
from tensorweave.distribute.ray.multi_worker_fit import FailureConfig, FitRun, _hooks_batches, _learning_rate, _Restart

keras = tw.keras


class _Cluster:
    """Answers ``run`` from a script and records the calls."""

    def __init__(self, n, answers=None):
        self.num_workers = n
        self.calls, self.restarted = [], []
        self.answers = answers or {}

    def run(self, fn, *args, ranks=None):
        self.calls.append((fn.__name__, args, list(ranks)))
        answer = self.answers.get(fn.__name__)
        return answer(list(ranks)) if callable(answer) else [answer] * len(ranks)

    def restart_worker(self, rank):
        self.restarted.append(rank)


class _Strategy:
    def __init__(self, cluster):
        self.cluster = cluster


def _model():
    keras.utils.set_random_seed(0)
    m = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    m.compile(keras.optimizers.SGD(0.1), "mse")
    return m


def _run(cluster, config, dead, callbacks=()):
    from tensorweave.keras.callbacks import CallbackList
    model = _model()
    cbs = CallbackList(list(callbacks), add_history=True, model=model)
    run = FitRun(_Strategy(cluster), model, {}, {"validation": {}}, cbs, config)
    run._dead = lambda: list(dead)
    return run, model


def test_elastic_shrink_takes_the_state_of_the_survivor_that_went_furthest():
    progress = {0: (1, 3, 7), 2: (1, 4, 8), 3: (1, 3, 7)}
    cluster = _Cluster(4, {"progress": lambda ranks: [progress[r] for r in ranks]})
    # exactly min_workers survivors still shrink; the first of max_failures=2 is survived
    run, _ = _run(cluster, FailureConfig(max_failures=2, elastic=True, min_workers=3), dead=[1])
    assert run._recover(RuntimeError("lost")) == 4                   # continue after step 4
    assert cluster.calls[-1] == ("rebox", (2, [0, 2, 3]), [0, 2, 3])  # rank 2 completed step 4: it holds
    assert run.active == [0, 2, 3] and run.lost == [1] and cluster.restarted == []
    # the next failure is past max_failures: the error itself, with a note naming the ranks
    run.config = FailureConfig(max_failures=1, elastic=True)
    run._dead = lambda: [3]
    error = RuntimeError("lost again")
    with pytest.raises(RuntimeError, match="lost again") as info:
        run._recover(error)
    assert info.value is error and "ranks [3] died; failure 2 of a fit with max_failures=1" in info.value.__notes__[0]


def test_a_failure_without_a_dead_worker_is_the_error_itself():
    run, _ = _run(_Cluster(2), FailureConfig(max_failures=-1, elastic=True), dead=[])
    error = ValueError("bad shapes")
    with pytest.raises(ValueError) as info:
        run._recover(error)
    assert info.value is error and run.failures == 0


def test_too_few_survivors_fall_back_to_a_restart_from_the_fit_start():
    cluster = _Cluster(3)
    run, model = _run(cluster, FailureConfig(max_failures=-1, elastic=True, min_workers=2), dead=[0, 2])
    start = rep.state_of(model)[0]
    run.package = ("doc", "tensors", {})
    run.start = (_package(model), 3)
    model.layers[0].kernel.assign(np.full((2, 1), 9.0, np.float32))         # trained on since the start
    with pytest.raises(_Restart) as info:
        run._recover(RuntimeError("lost"))
    assert (info.value.epoch, info.value.step) == (3, 0) and cluster.restarted == [0, 2] and run.active == [0, 1, 2]
    name, args, ranks = cluster.calls[-1]
    assert name == "begin" and ranks == [0, 1, 2] and args[-1] is True       # every worker rebuilds
    assert args[0] is run.start[0]
    for k, v in rep.state_of(model)[0].items():                              # the driver's model went back
        np.testing.assert_array_equal(v, start[k])


def _package(model):
    from tensorweave.distribute.ray.multi_worker import package_model
    return package_model(model)


@pytest.mark.parametrize("mid_epoch", [False, True])
def test_a_restart_resumes_from_the_backup_and_history_forgets_later_epochs(tmp_path, mid_epoch):
    model = _model()
    backup = keras.callbacks.BackupAndRestore(tmp_path, save_freq=2 if mid_epoch else "epoch")
    backup.set_model(model)
    if mid_epoch:                  # a backup after batch 3 of epoch 1: resume at its step 4
        backup.on_epoch_begin(1)
        for batch in range(4):
            backup.on_train_batch_end(batch)
        want = (1, 4)
    else:                          # a backup after epochs 0 and 1
        backup.on_epoch_end(1)
        want = (2, 0)
    saved = model.get_weights()
    cluster = _Cluster(2)
    run, _ = _run(cluster, FailureConfig(max_failures=1), dead=[1], callbacks=[backup])
    run.model = model
    for c in run.cbs:
        c.set_model(model)
    history = [c for c in run.cbs if isinstance(c, keras.callbacks.History)][0]
    history.epoch, history.history = [0, 1, 2], {"loss": [3.0, 2.0, 1.0]}
    model.set_weights([w + 1 for w in saved])
    with pytest.raises(_Restart) as info:
        run._recover(RuntimeError("lost"))
    assert (info.value.epoch, info.value.step) == want and cluster.restarted == [1]
    assert history.epoch == list(range(want[0])) and history.history == {"loss": [3.0, 2.0][:want[0]]}
    for a, b in zip(model.get_weights(), saved):
        np.testing.assert_array_equal(a, b)
    assert cluster.calls[-1][1][0] is run.package and run.package[0]["weights"]


def test_which_callbacks_need_one_step_per_call():
    class Batches(keras.callbacks.Callback):
        def on_batch_end(self, batch, logs=None):
            pass

    class Epochs(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            pass
    assert _hooks_batches(Batches()) and not _hooks_batches(Epochs())
    assert not _hooks_batches(keras.callbacks.BackupAndRestore("/tmp/x"))
    assert _hooks_batches(keras.callbacks.BackupAndRestore("/tmp/x", save_freq=2))
    assert not _hooks_batches(keras.callbacks.ModelCheckpoint("/tmp/x.weights.h5"))
    cluster = _Cluster(2)
    assert FitRun(_Strategy(cluster), _model(), {}, {}, [Batches()], None).per_batch
    assert not FitRun(_Strategy(cluster), _model(), {}, {}, [Epochs(), keras.callbacks.History()], None).per_batch


def test_the_learning_rate_that_travels_to_the_workers():
    model = _model()
    assert _learning_rate(model) == pytest.approx(0.1)
    model.optimizer.build(model.trainable_variables)
    model.optimizer.learning_rate = 0.25                     # a variable now, set by a callback
    assert _learning_rate(model) == 0.25
    sched = keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.5)
    model.compile(keras.optimizers.SGD(sched), "mse")
    assert _learning_rate(model) is None                     # a schedule is the workers' own


def test_failure_config_checks_its_arguments():
    with pytest.raises(ValueError, match="min_workers must be a positive int"):
        FailureConfig(min_workers=0)
    for bad in (True, -2, 1.0):
        with pytest.raises(ValueError, match="max_failures must be an int >= -1"):
            FailureConfig(max_failures=bad)
    assert FailureConfig(max_failures=-1).max_failures == -1
