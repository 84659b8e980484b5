"""Runs one case with a TensorFlow-like module (``tensorflow`` or ``tensorweave``) and encodes the
result as JSON-safe data: outputs' dtypes, shapes and values, or the raised error's class.

The same source text runs in both frameworks (their APIs share names), so a case is one
expression over ``tf`` (the module), ``np``, ``nan``, ``inf`` and ``grad`` (gradients through a
GradientTape).
"""
import math

import numpy as np


def make_grad(tf):
    def grad(fn, *values, dtype="float32"):
        """Gradients of ``sum(fn(*xs))`` with respect to each input (None where unconnected)."""
        xs = [tf.constant(np.asarray(v, dtype=dtype)) for v in values]
        with tf.GradientTape() as tape:
            for x in xs:
                tape.watch(x)
            y = fn(*xs)
        return tuple(tape.gradient(y, xs))
    return grad


def _value(v):
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return v
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, list):
        return [_value(e) for e in v]
    return v


def encode(result, tf=None):
    """JSON-safe description of an op's result (nested tuples/lists of tensors, None, scalars).
    Sparse gradients (IndexedSlices) are compared by their dense value."""
    if result is None:
        return {"none": True}
    if type(result).__name__ == "IndexedSlices" and tf is not None:
        result = tf.convert_to_tensor(result)
    if type(result).__name__ == "RaggedTensor":    # flat values, then each level's row splits
        return {"ragged": [encode(result.flat_values, tf)] + [encode(s, tf) for s in result.nested_row_splits]}
    if type(result).__name__ == "SparseTensor":
        return {"sparse": [encode(result.indices, tf), encode(result.values, tf), encode(result.dense_shape, tf)]}
    if hasattr(result, "numpy") and hasattr(result, "dtype"):
        arr = np.asarray(result.numpy())
        name = result.dtype.name
        if arr.dtype.kind == "f" or name == "bfloat16":
            arr = arr.astype(np.float64)
        if arr.dtype.kind == "c":   # complex: each value as [real, imag]
            return {"dtype": name, "shape": list(arr.shape),
                    "value": _value(np.stack([arr.real, arr.imag], -1).astype(np.float64).tolist())}
        return {"dtype": name, "shape": list(arr.shape), "value": _value(arr.tolist())}
    if hasattr(result, "as_list") and hasattr(result, "rank"):
        return {"tensor_shape": None if result.rank is None else result.as_list()}
    if isinstance(result, (tuple, list)):
        return {"list": [encode(r, tf) for r in result]}
    if isinstance(result, (bool, int, float, str, np.generic)):
        return {"py": _value(np.asarray(result).tolist())}
    return {"py_type": type(result).__name__}


def make_graph_run(tf):
    def graph_run(build, initialize=True):
        """``build()`` in a fresh graph, run in a session after the variable initializers (TF1 style);
        the fetched values come back as eager tensors. With ``initialize=False``, ``build()`` returns
        ``(ops to run first, fetches)`` instead."""
        g = tf.Graph()
        with g.as_default():
            out = build()
            if initialize:
                init = [tf.global_variables_initializer(), tf.local_variables_initializer()]
            else:
                init, out = out
            with tf.Session(graph=g) as sess:
                sess.run(init)
                values = sess.run(out)
        if isinstance(values, (list, tuple)):
            return [tf.convert_to_tensor(v) for v in values]
        return tf.convert_to_tensor(values)
    return graph_run


def make_metric_run(tf):
    def metric_run(build, batches=1):
        """TF1 streaming metric: ``build()`` gives ``(value, update_op)``; runs the initializers, the
        update ``batches`` times, then fetches the value."""
        g = tf.Graph()
        with g.as_default():
            value, update = build()
            with tf.Session(graph=g) as sess:
                sess.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
                for _ in range(batches):
                    sess.run(update)
                out = sess.run(value)
        return tf.convert_to_tensor(out)
    return metric_run


def make_minimize_steps(tf):
    def minimize_steps(make_optimizer, steps=3):
        """The weights of a small least-squares model after ``steps`` of ``make_optimizer().minimize``
        in a TF1 graph and session."""
        g = tf.Graph()
        with g.as_default():
            x = tf.constant([[1.0, 2.0], [-1.0, 0.5], [0.3, -2.0]])
            y = tf.constant([[1.0], [0.0], [-1.0]])
            w = tf.Variable([[0.5], [-0.3]])
            train = make_optimizer().minimize(tf.reduce_mean(tf.square(tf.matmul(x, w) - y)))
            with tf.Session(graph=g) as sess:
                sess.run(tf.global_variables_initializer())
                for _ in range(steps):
                    sess.run(train)
                value = sess.run(w)
        return tf.convert_to_tensor(value)
    return minimize_steps


def make_reader_run(tf):
    def reader_run(make_reader, files, reads, records=None, options=None, up_to=None):
        """Writes ``files`` ({name: bytes}; with ``records``, {name: [records]} as TFRecord files), queues
        their paths, runs ``make_reader().read`` (or ``read_up_to(up_to)``) ``reads`` times in a TF1
        session with queue runners; returns ``[key file:suffix, value hex]`` per read, or the error."""
        import os
        import tempfile
        d = tempfile.mkdtemp()
        paths = []
        for name, content in sorted(files.items()):
            path = os.path.join(d, name)
            if records:
                with tf.python_io.TFRecordWriter(path, options) as w:
                    for r in content:
                        w.write(r)
            else:
                with open(path, "wb") as f:
                    f.write(content)
            paths.append(path)
        g = tf.Graph()
        out = []
        with g.as_default():
            queue = tf.train.string_input_producer(paths, num_epochs=1, shuffle=False)
            reader = make_reader()
            key, value = reader.read_up_to(queue, up_to) if up_to else reader.read(queue)
            produced, completed = reader.num_records_produced(), reader.num_work_units_completed()
            with tf.Session(graph=g) as sess:
                sess.run(tf.local_variables_initializer())
                coord = tf.train.Coordinator()
                threads = tf.train.start_queue_runners(sess, coord)
                try:
                    for _ in range(reads):
                        k, v = sess.run([key, value])
                        ks, vs = (list(k), list(v)) if up_to else ([k], [v])
                        out.append([[os.path.basename(x.decode()) for x in ks],     # the temporary dir differs
                                    [os.path.basename(x.decode()) if x.startswith(d.encode()) else x.hex() for x in vs]])
                except tf.errors.OutOfRangeError:
                    out.append("OutOfRange")
                out.append([int(sess.run(produced)), int(sess.run(completed))])
                coord.request_stop()
                coord.join(threads, ignore_live_threads=True) if "ignore_live_threads" in \
                    coord.join.__code__.co_varnames else coord.join(threads)
        return out
    return reader_run


def run(tf, src):
    """The encoded result of evaluating case source ``src`` with module ``tf``."""
    env = {"tf": tf, "np": np, "grad": make_grad(tf), "nan": float("nan"), "inf": float("inf"),
           "graph_run": make_graph_run(tf), "minimize_steps": make_minimize_steps(tf),
           "reader_run": make_reader_run(tf), "metric_run": make_metric_run(tf)}
    try:
        out = eval(src, env)  # noqa: S307 - the case table is ours, checked into the repo
        return encode(out, tf)
    except Exception as e:  # noqa: BLE001 - raising is a result to compare
        msg = str(e).strip().splitlines()
        return {"error": type(e).__name__, "message": msg[0][:200] if msg else ""}
