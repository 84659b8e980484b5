"""A TF1 serving export, run by TensorFlow 2.21 (``v1_saved_model_oracle.py``) and by tensorweave
(``tests/test_v1_saved_model.py``) with only the ``tf`` module swapped: train a linear model,
export it with ``SavedModelBuilder`` (two signatures, a main op, a second tag set) and with
``simple_save``, then load each into a fresh graph and session and serve through the signatures."""
import os

import numpy as np

X = np.cos(np.arange(12, dtype=np.float64)).reshape(6, 2).astype(np.float32)
Y = (X @ np.array([[1.5], [-2.0]], np.float32) + 0.5).astype(np.float32)


def run(tf, workdir):
    out = {}
    sm = tf.saved_model
    with tf.Graph().as_default(), tf.Session() as sess:
        x = tf.placeholder(tf.float32, [None, 2], name="x")
        y = tf.placeholder(tf.float32, [None, 1], name="y")
        w = tf.Variable(tf.zeros([2, 1]), name="w")
        b = tf.Variable(0.0, name="b")
        pred = tf.add(tf.matmul(x, w), b, name="pred")
        counter = tf.Variable(0, name="counter", trainable=False, collections=[tf.GraphKeys.LOCAL_VARIABLES])
        bump = tf.group(tf.local_variables_initializer(), name="init_locals")
        loss = tf.reduce_mean(tf.square(pred - y))
        train = tf.train.GradientDescentOptimizer(0.2).minimize(loss)
        sess.run([tf.global_variables_initializer(), bump])
        for _ in range(20):
            sess.run(train, {x: X, y: Y})
        out["trained"] = sess.run(pred, {x: X}).tolist()
        builder = sm.builder.SavedModelBuilder(os.path.join(workdir, "built"))
        predict = sm.signature_def_utils.predict_signature_def({"x": x}, {"pred": pred})
        regress = sm.signature_def_utils.build_signature_def(
            inputs={"features": sm.utils.build_tensor_info(x)},
            outputs={"scores": sm.utils.build_tensor_info(pred * 2.0)},
            method_name=sm.signature_constants.REGRESS_METHOD_NAME)
        out["valid"] = [sm.signature_def_utils.is_valid_signature(predict),
                        sm.signature_def_utils.is_valid_signature(regress)]
        builder.add_meta_graph_and_variables(
            sess, [sm.tag_constants.SERVING],
            signature_def_map={sm.signature_constants.DEFAULT_SERVING_SIGNATURE_DEF_KEY: predict, "double": regress},
            main_op=bump)
        builder.add_meta_graph([sm.tag_constants.TRAINING])
        builder.save()
        sm.simple_save(sess, os.path.join(workdir, "simple"), inputs={"x": x}, outputs={"pred": pred})
        sess.run(counter.assign(5))
    with tf.Graph().as_default() as g, tf.Session() as sess:
        meta = sm.loader.load(sess, [sm.tag_constants.SERVING], os.path.join(workdir, "built"))
        sig = meta.signature_def[sm.signature_constants.DEFAULT_SERVING_SIGNATURE_DEF_KEY]
        out["served"] = sess.run(sig.outputs["pred"].name, {sig.inputs["x"].name: X}).tolist()
        double = meta.signature_def["double"]
        out["method"] = double.method_name
        out["doubled"] = sess.run(double.outputs["scores"].name, {double.inputs["features"].name: X[:2]}).tolist()
        out["counter_after_main_op"] = int(sess.run(g.get_tensor_by_name("counter:0")))
        out["names"] = [sig.inputs["x"].name, sig.outputs["pred"].name]
        tensor = sm.utils.get_tensor_from_tensor_info(sig.outputs["pred"])
        out["via_tensor_info"] = sess.run(tensor, {"x:0": X[:1]}).tolist()
    with tf.Graph().as_default(), tf.Session() as sess:
        sm.loader.load(sess, [sm.tag_constants.TRAINING], os.path.join(workdir, "built"), import_scope="t")
        out["training_w"] = sess.run("t/w:0").tolist()
    with tf.Graph().as_default(), tf.Session() as sess:
        meta = sm.loader.load(sess, ["serve"], os.path.join(workdir, "simple"))
        sig = meta.signature_def["serving_default"]
        out["simple"] = sess.run(sig.outputs["pred"].name, {sig.inputs["x"].name: X}).tolist()
        out["simple_method"] = sig.method_name
    try:
        with tf.Graph().as_default(), tf.Session() as sess:
            sm.loader.load(sess, ["gpu"], os.path.join(workdir, "simple"))
        out["missing_tag"] = None
    except RuntimeError as e:
        out["missing_tag"] = str(e).split(".")[0]
    out["contains"] = [sm.loader.maybe_saved_model_directory(os.path.join(workdir, "simple")),
                       sm.loader.maybe_saved_model_directory(workdir)]
    return out
