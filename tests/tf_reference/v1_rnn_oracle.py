"""TensorFlow 2.21's results for tests/test_v1_rnn_while.py (RNNs on while loops), written to
``v1_rnn.json``. Run with the benchmark venv (never tensorweave's)::

    TF_USE_LEGACY_KERAS=1 ~/.cache/tensorweave/bench-tf-venv/bin/python tests/tf_reference/v1_rnn_oracle.py \
        tests/tf_reference/v1_rnn.json

The test runs this same program under tensorweave with the import line swapped.
"""
import json, sys
import numpy as np


def main(path):
    import tensorflow.compat.v1 as tf
    tf.disable_v2_behavior()
    W = (np.arange(28, dtype=np.float64).reshape(7, 4) % 5 - 2) / 7.0
    XV = np.sin(np.arange(30, dtype=np.float64)).reshape(2, 5, 3)

    class MyCell(tf.nn.rnn_cell.RNNCell):
        def __init__(self, n):
            super().__init__()
            self._n = n
        @property
        def state_size(self): return self._n
        @property
        def output_size(self): return self._n
        def __call__(self, inputs, state, scope=None):
            with tf.variable_scope(scope or "my_cell"):
                w = tf.get_variable("w", [7, self._n], dtype=inputs.dtype, initializer=tf.constant_initializer(W))
                h = tf.tanh(tf.matmul(tf.concat([inputs, state], 1), w))
            return h, h

    res = {}
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float64, [None, None, 3])
        L = tf.placeholder(tf.int32, [None])
        out, st = tf.nn.dynamic_rnn(MyCell(4), x, sequence_length=L, dtype=tf.float64)
        loss = tf.reduce_sum(out ** 2) + tf.reduce_sum(st)
        w = tf.global_variables()[0]
        gw, gx = tf.gradients(loss, [w, x])
        with tf.Session() as s:
            s.run(tf.global_variables_initializer())
            o, stv, gwv, gxv = s.run([out, st, gw, gx], {x: XV, L: [5, 2]})
        res["dynamic"] = {"names": [v.name for v in tf.global_variables()], "out": o.tolist(), "state": stv.tolist(),
                          "gw": gwv.tolist(), "gx": gxv.tolist()}
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float64, [5, 2, 3])    # time-major, as raw_rnn's docs
        seq = tf.constant([5, 2])
        inputs_ta = tf.TensorArray(dtype=tf.float64, size=5).unstack(x)
        cell = MyCell(4)
        def loop_fn(time, cell_output, cell_state, loop_state):
            emit_output = cell_output
            next_cell_state = cell.zero_state(2, tf.float64) if cell_output is None else cell_state
            finished = time >= seq
            next_input = tf.cond(tf.reduce_all(finished), lambda: tf.zeros([2, 3], dtype=tf.float64),
                                 lambda: inputs_ta.read(time))
            return finished, next_input, next_cell_state, emit_output, None
        ta, fst, _ = tf.nn.raw_rnn(cell, loop_fn)
        outs = ta.stack()
        loss = tf.reduce_sum(outs ** 2) + tf.reduce_sum(fst)
        w = tf.global_variables()[0]
        gw, gx = tf.gradients(loss, [w, x])
        with tf.Session() as s:
            s.run(tf.global_variables_initializer())
            o, stv, gwv, gxv = s.run([outs, fst, gw, gx], {x: XV.transpose(1, 0, 2)})
        res["raw"] = {"names": [v.name for v in tf.global_variables()], "out": o.tolist(), "state": stv.tolist(),
                      "gw": gwv.tolist(), "gx": gxv.tolist()}
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float64, [None, None, 3])
        cell = tf.nn.rnn_cell.LSTMCell(2, use_peepholes=True, initializer=tf.constant_initializer(0.1))
        out, st = tf.nn.dynamic_rnn(cell, x, sequence_length=[5, 3], dtype=tf.float64)
        loss = tf.reduce_sum(out) + tf.reduce_sum(st.c)
        vs = tf.trainable_variables()
        gs = tf.gradients(loss, vs)
        with tf.Session() as s:
            s.run(tf.global_variables_initializer())
            o, gv = s.run([out, gs], {x: XV})
        res["peephole"] = {"names": [v.name for v in vs], "out": o.tolist(), "grads": [g.tolist() for g in gv]}
    json.dump(res, open(path, "w"))


if __name__ == "__main__":
    main(sys.argv[1])
