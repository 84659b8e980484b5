"""TensorArrays as ``tf.while_loop`` loop variables, as TF1 code writes them, run by TensorFlow 2.21
(``v1_tensor_array_loop_oracle.py``) and by tensorweave (``tests/test_v1_tensor_array_loop.py``)
with only the ``tf`` module swapped: rows written over an unknown number of steps, an unstacked
input read while an output is written (a hand-written RNN), a dynamic-size array, a given element
shape, ``maximum_iterations``, and gradients through all of them."""
import numpy as np

XV = np.arange(6, dtype=np.float32).reshape(2, 3)
SEQ = np.sin(np.arange(24, dtype=np.float32)).reshape(4, 2, 3)      # [time, batch, features]
W = ((np.arange(15).reshape(5, 3) % 4) - 1.5).astype(np.float32) / 3.0


def run(tf):
    out = {}
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 3])
        n = tf.shape(x)[0]
        ta = tf.TensorArray(tf.float32, size=n)

        def body(i, acc, ta):
            row = x[i] * tf.cast(i + 1, tf.float32)
            return i + 1, acc + tf.reduce_sum(row), ta.write(i, row)
        _, total, ta = tf.while_loop(lambda i, a, t: i < n, body, [tf.constant(0), tf.constant(0.0), ta])
        rows = ta.stack()
        rows_grad = tf.gradients(tf.reduce_sum(rows * rows), x)[0]

        seq = tf.placeholder(tf.float32, [None, 2, 3])
        steps = tf.shape(seq)[0]
        w = tf.constant(W)
        inputs = tf.TensorArray(tf.float32, size=steps).unstack(seq)
        outputs = tf.TensorArray(tf.float32, size=steps, element_shape=[2, 3])

        def rnn_step(t, h, outputs):
            h = tf.tanh(tf.matmul(tf.concat([inputs.read(t), h[:, :2]], 1), w))
            return t + 1, h, outputs.write(t, h)
        _, h_last, outputs = tf.while_loop(lambda t, h, o: t < steps, rnn_step,
                                           (tf.constant(0), tf.zeros([2, 3]), outputs))
        rnn = outputs.stack()
        rnn_grad = tf.gradients(tf.reduce_sum(rnn) + tf.reduce_sum(h_last), seq)[0]

        grow = tf.TensorArray(tf.float32, size=0, dynamic_size=True)
        _, grow = tf.while_loop(lambda i, a: i < 5, lambda i, a: [i + 1, a.write(i, tf.cast(i * i, tf.float32))],
                                [tf.constant(0), grow], maximum_iterations=4)
        grown = grow.stack()
        with tf.Session() as sess:
            feed = {x: XV, seq: SEQ}
            r = sess.run([rows, total, rows_grad, rnn, h_last, rnn_grad, grown, grow.size()], feed)
    keys = ["rows", "total", "rows_grad", "rnn", "h_last", "rnn_grad", "grown", "grown_size"]
    for k, v in zip(keys, r):
        out[k] = np.asarray(v).tolist()
    return out
