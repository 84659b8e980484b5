"""TF1's custom gradients by name, run by TensorFlow 2.21 (``v1_gradient_override_oracle.py``) and
by tensorweave (``tests/test_v1_gradient_override.py``) with only the ``tf`` module swapped:
``@tf.RegisterGradient("Name")`` with ``graph.gradient_override_map``, a straight-through
estimator (``{"Round": "Identity"}``, ``{"Sign": "Identity"}``), nested maps and ops outside them."""
import numpy as np

X = [0.3, -1.2, 2.6, 0.5]


def run(tf, suffix=""):
    half, clip = "HalfGrad" + suffix, "ClipGrad" + suffix

    @tf.RegisterGradient(half)
    def _half(op, grad):
        return grad * 0.5

    @tf.RegisterGradient(clip)
    def _clip(op, grad):
        return tf.clip_by_value(grad, -0.1, 0.1)

    out = {}
    g = tf.Graph()
    with g.as_default():
        x = tf.constant(X)
        with g.gradient_override_map({"Identity": half, "Square": half}):
            y = tf.identity(x)
            z = tf.square(x)
            with g.gradient_override_map({"Square": clip}):
                zc = tf.square(x)
        w = tf.identity(x)
        total = tf.reduce_sum(y * y) + tf.reduce_sum(z) + tf.reduce_sum(zc) + tf.reduce_sum(w * w * w)
        with g.gradient_override_map({"Round": "Identity", "Sign": "Identity"}):
            q = tf.round(x * 4.0) / 4.0
            s = tf.sign(x)
        ste = tf.reduce_sum(q * q) + tf.reduce_sum(s * x)
        grads = tf.gradients([total, ste], [x])[0]
        with tf.Session() as sess:
            out["grads"] = sess.run(grads).tolist()
            out["forward"] = sess.run([total, ste])
            out["forward"] = [float(v) for v in out["forward"]]
    return out


if __name__ == "__main__":
    import tensorflow.compat.v1 as tf
    tf.disable_v2_behavior()
    print(run(tf))
