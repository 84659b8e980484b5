"""tw.train: ExponentialMovingAverage, Coordinator, ClusterSpec, checkpoints_iterator, Example classes."""
import threading

import numpy as np
import pytest

import tensorweave as tw


def test_ema_follows_tf_formula_eager_and_graph():
    w = tw.Variable([0.0, 2.0])
    step = tw.Variable(0, dtype=tw.int64, trainable=False)
    ema = tw.train.ExponentialMovingAverage(0.99, num_updates=step)
    ema.apply([w])
    w.assign([10.0, 2.0])
    step.assign(5)
    ema.apply([w])
    decay = min(0.99, 6 / 15)
    np.testing.assert_allclose(ema.average(w).numpy(), [(1 - decay) * 10.0, 2.0], rtol=1e-6)
    assert ema.average_name(w).endswith("/ExponentialMovingAverage") and not ema.average(w).trainable
    g = tw.Graph()
    with g.as_default():
        v = tw.Variable(1.0)
        e = tw.train.ExponentialMovingAverage(0.5)
        op = e.apply([v])
        with tw.Session(graph=g) as sess:
            sess.run(tw.compat.v1.global_variables_initializer())
            sess.run(v.assign(3.0))
            sess.run(op)
            assert sess.run(e.average(v)) == pytest.approx(2.0)
    with pytest.raises(TypeError, match="only float variables can be averaged"):
        tw.train.ExponentialMovingAverage(0.9).apply([tw.Variable(1)])


def test_coordinator_stops_threads_and_reraises():
    coord = tw.train.Coordinator()
    started = threading.Event()

    def worker():
        with coord.stop_on_exception():
            started.set()
            coord.wait_for_stop()

    def failing():
        with coord.stop_on_exception():
            started.wait()
            raise ValueError("boom")
    threads = [threading.Thread(target=worker), threading.Thread(target=failing)]
    for t in threads:
        t.start()
    with pytest.raises(ValueError, match="boom"):
        coord.join(threads)
    assert coord.should_stop()
    coord.clear_stop()
    assert not coord.should_stop()


def test_cluster_spec():
    spec = tw.train.ClusterSpec({"worker": {0: "a:1", 2: "c:1"}, "ps": ["p:1"]})
    assert spec.task_indices("worker") == [0, 2] and spec.job_tasks("worker") == ["a:1", None, "c:1"]
    assert tw.train.ClusterSpec(spec) == spec and bool(spec)
    with pytest.raises(ValueError, match="No such job in cluster: 'chief'"):
        spec.num_tasks("chief")


def test_checkpoints_iterator_yields_the_latest_then_times_out(tmp_path):
    ckpt = tw.train.Checkpoint(v=tw.Variable(1.0))
    first = ckpt.save(str(tmp_path / "c"))
    assert list(tw.train.checkpoints_iterator(str(tmp_path), timeout=0)) == [first]


def test_sequence_example_classes_and_options():
    fl = tw.train.FeatureList(feature=[tw.train.Feature(int64_list=tw.train.Int64List(value=[1]))])
    se = tw.train.SequenceExample(feature_lists=tw.train.FeatureLists(feature_list={"a": fl}))
    assert tw.train.SequenceExample.FromString(se.SerializeToString()) == se
    assert tw.train.CheckpointOptions() is not None
