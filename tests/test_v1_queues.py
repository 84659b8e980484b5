"""TF1's queue input pipeline: queues as graph ops, queue runners on threads, producers, batching."""
import threading

import numpy as np
import pytest

import tensorweave.compat.v1 as tf
from tensorweave.compat.v1_queues import CancelledError


def _drain(sess, fetch):
    out = []
    try:
        while True:
            out.append(sess.run(fetch))
    except tf.errors.OutOfRangeError:
        return out


def _with_runners(g, body):
    with tf.Session(graph=g) as sess:
        sess.run(tf.group(tf.global_variables_initializer(), tf.local_variables_initializer()))
        coord = tf.train.Coordinator()
        threads = tf.train.start_queue_runners(sess, coord)
        try:
            return body(sess)
        finally:
            coord.request_stop()
            coord.join(threads)


def test_fifo_queue_ops_and_closing():
    g = tf.Graph()
    with g.as_default():
        q = tf.FIFOQueue(10, [tf.float32, tf.int64], shapes=[[2], []])
        x = tf.placeholder(tf.float32, [None, 2])
        fill = q.enqueue_many([x, tf.range(3, dtype=tf.int64)])
        one = q.enqueue([[9.0, 9.0], 7])
        first = q.dequeue()
        many = q.dequeue_many(2)
        up_to = q.dequeue_up_to(5)
        size, closed, close = q.size(), q.is_closed(), q.close()
    assert first[0].shape.as_list() == [2] and many[0].shape.as_list() == [2, 2]
    assert up_to[1].shape.as_list() == [None]
    with tf.Session(graph=g) as sess:
        sess.run(fill, {x: np.arange(6, dtype=np.float32).reshape(3, 2)})
        sess.run(one)
        assert sess.run(size) == 4
        a, b = sess.run(first)
        assert a.tolist() == [0.0, 1.0] and b == 0
        a, b = sess.run(many)
        assert a.tolist() == [[2.0, 3.0], [4.0, 5.0]] and b.tolist() == [1, 2]
        sess.run(close)
        assert bool(sess.run(closed))
        a, b = sess.run(up_to)                      # the last, smaller batch of a closed queue
        assert b.tolist() == [7]
        with pytest.raises(tf.errors.OutOfRangeError, match="is closed and has insufficient elements "
                                                            r"\(requested 1, current size 0\)"):
            sess.run(first)
        with pytest.raises(CancelledError, match="is closed"):
            sess.run(one)


def test_blocking_producer_and_consumer_threads():
    g = tf.Graph()
    with g.as_default():
        q = tf.FIFOQueue(2, tf.int32, shapes=[])
        v = tf.placeholder(tf.int32, [])
        put, get, close = q.enqueue(v), q.dequeue(), q.close()
    with tf.Session(graph=g) as sess:
        def produce():
            for i in range(20):
                sess.run(put, {v: i})
            sess.run(close)
        t = threading.Thread(target=produce)
        t.start()
        got = _drain(sess, get)
        t.join()
    assert got == list(range(20))


def test_random_shuffle_and_padding_queues():
    g = tf.Graph()
    with g.as_default():
        rq = tf.RandomShuffleQueue(50, min_after_dequeue=5, dtypes=tf.int32, shapes=[], seed=3)
        fill, close, take = rq.enqueue_many([tf.range(30)]), rq.close(), rq.dequeue_up_to(7)
        pq = tf.PaddingFIFOQueue(5, [tf.int32], shapes=[[None]])
        seq = tf.placeholder(tf.int32, [None])
        put, padded = pq.enqueue([seq]), pq.dequeue_many(3)
    with tf.Session(graph=g) as sess:
        sess.run(fill)
        head = sess.run(take)
        sess.run(close)
        rest = np.concatenate(_drain(sess, take))
        for s in ([1], [2, 3, 4], [5, 6]):
            sess.run(put, {seq: s})
        assert sess.run(padded).tolist() == [[1, 0, 0], [2, 3, 4], [5, 6, 0]]
    order = np.concatenate([head, rest]).tolist()
    assert sorted(order) == list(range(30)) and order != list(range(30))


def test_string_input_producer_epochs_and_shuffle():
    names = [b"a.png", b"b.png", b"c.png"]
    g = tf.Graph()
    with g.as_default():
        ordered = tf.train.string_input_producer(names, num_epochs=2, shuffle=False).dequeue()
    got = _with_runners(g, lambda sess: _drain(sess, ordered))
    assert got == names * 2
    g = tf.Graph()
    with g.as_default():
        tf.set_random_seed(0)
        mixed = tf.train.string_input_producer(names, num_epochs=3, shuffle=True, seed=1).dequeue()
    got = _with_runners(g, lambda sess: _drain(sess, mixed))
    epochs = [sorted(got[i:i + 3]) for i in (0, 3, 6)]
    assert epochs == [names] * 3 and len(got) == 9


def test_shuffle_batch_sees_every_example_once_per_epoch():
    x = np.arange(50, dtype=np.int64)
    g = tf.Graph()
    with g.as_default():
        tf.set_random_seed(0)
        ex, ey = tf.train.slice_input_producer([x, x * 2], num_epochs=1, shuffle=True, seed=2)
        bx, by = tf.train.shuffle_batch([ex, ey], batch_size=8, capacity=20, min_after_dequeue=5, num_threads=2,
                                        seed=4, allow_smaller_final_batch=True)
    batches = _with_runners(g, lambda sess: _drain(sess, [bx, by]))
    seen = np.concatenate([b[0] for b in batches])
    assert sorted(seen.tolist()) == x.tolist()
    assert all((b[1] == 2 * b[0]).all() for b in batches)
    assert [len(b[0]) for b in batches[:-1]] == [8] * (len(batches) - 1)


def test_tf1_queue_training_loop_lowers_the_loss():
    rng = np.random.RandomState(0)
    xs = rng.randn(200, 3).astype(np.float32)
    ys = (xs @ np.array([1.0, -2.0, 0.5], np.float32) + 0.3).astype(np.float32)
    g = tf.Graph()
    with g.as_default():
        tf.set_random_seed(0)
        x, y = tf.train.slice_input_producer([xs, ys], shuffle=True, seed=1)
        bx, by = tf.train.batch([x, y], batch_size=20)
        w = tf.Variable(tf.zeros([3, 1]))
        b = tf.Variable(0.0)
        loss = tf.reduce_mean(tf.square(tf.squeeze(tf.matmul(bx, w), 1) + b - by))
        train = tf.train.GradientDescentOptimizer(0.1).minimize(loss)

    def run(sess):
        first = sess.run(loss)
        for _ in range(150):
            sess.run(train)
        return first, sess.run(loss)
    first, last = _with_runners(g, run)
    assert last < 0.01 * first


def test_coordinator_reraises_a_thread_exception_and_queue_errors():
    coord = tf.train.Coordinator()

    def worker():
        with coord.stop_on_exception():
            raise RuntimeError("worker failed")
    t = threading.Thread(target=worker)
    t.start()
    with pytest.raises(RuntimeError, match="worker failed"):
        coord.join([t])
    g = tf.Graph()
    with g.as_default():
        q = tf.FIFOQueue(3, [tf.int32], shapes=[[2]])
        with pytest.raises(TypeError, match="component 0 has dtype float32, the queue holds int32"):
            q.enqueue([tf.constant([1.0, 2.0])])
        with pytest.raises(ValueError, match=r"component 0 has shape \(3,\), the queue's shape is \(2,\)"):
            q.enqueue([tf.constant([1, 2, 3])])
        with pytest.raises(ValueError, match="min_after_dequeue \\(5\\) must be smaller than capacity \\(5\\)"):
            tf.RandomShuffleQueue(5, 5, tf.int32)
        with pytest.raises(ValueError, match="shapes must be fully defined"):
            tf.train.batch([tf.placeholder(tf.float32, [None])], 4)


def test_batch_join_maybe_batch_and_match_filenames_once(tmp_path):
    for n in ("a.csv", "b.csv", "c.txt"):
        (tmp_path / n).write_text("x")
    g = tf.Graph()
    with g.as_default():
        files = tf.train.match_filenames_once(str(tmp_path / "*.csv"))
        xs = [tf.train.slice_input_producer([np.arange(k * 10, k * 10 + 5, dtype=np.int64)], num_epochs=1,
                                            shuffle=False) for k in range(2)]
        joined = tf.train.batch_join(xs, batch_size=4, allow_smaller_final_batch=True)
        v = tf.constant(np.arange(8, dtype=np.int64))
        kept = tf.train.maybe_batch([v], keep_input=tf.equal(v % 2, 0), batch_size=4, enqueue_many=True)

    def body(sess):
        names = sorted(x.decode() for x in sess.run(files))
        got = np.concatenate([b[0] for b in _drain(sess, joined)]).tolist()
        return names, got, sess.run(kept)[0].tolist()
    names, got, evens = _with_runners(g, body)
    assert names == [str(tmp_path / "a.csv"), str(tmp_path / "b.csv")]
    assert sorted(got) == [0, 1, 2, 3, 4, 10, 11, 12, 13, 14]
    assert evens == [0, 2, 4, 6]
