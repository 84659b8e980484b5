"""A premade ``DNNClassifier`` on iris-like data, after the TF1 "Premade Estimators" tutorial:
numeric feature columns, ``numpy_input_fn`` for training and evaluation, ``train``/``evaluate``/
``predict``.

Changes from a TF1 program: the data (three Gaussian classes over four measurements instead of
the iris CSV download); 300 training steps; a temporary model_dir; ``main`` returns the numbers
the test checks. Metric: evaluation accuracy.

TensorFlow 2.16+ no longer ships ``tf.estimator`` (and tensorflow-estimator 2.15 does not import
with TF 2.21), so the reference run executes ``equivalent_graph``: the same network (two hidden
ReLU layers of 10, Glorot-uniform kernels, 3 logits), the same loss (softmax cross-entropy summed
over the batch), optimizer (Adagrad 0.05), batches and steps, written as a compat.v1 session
program. ``main`` picks it when ``tf`` has no ``estimator``.
"""
import tempfile

import numpy as np
import tensorweave.compat.v1 as tf

METRIC = ("accuracy", "higher")
TF_REFERENCE = {"first_loss": 60.82305908203125, "last_loss": 9.393471717834473, "metric": 0.9266666769981384}

FEATURES = ["SepalLength", "SepalWidth", "PetalLength", "PetalWidth"]


def load_data():
    rng = np.random.RandomState(0)
    means = np.array([[5.0, 3.4, 1.5, 0.2], [5.9, 2.8, 4.3, 1.3], [6.6, 3.0, 5.5, 2.0]], np.float32)
    spread = np.array([0.35, 0.35, 0.45, 0.25], np.float32)

    def sample(n):
        y = rng.randint(0, 3, size=n)
        x = means[y] + spread * rng.randn(n, 4).astype(np.float32)
        return {k: x[:, i].astype(np.float32) for i, k in enumerate(FEATURES)}, y.astype(np.int64)
    return sample(150), sample(150)


def main():
    if not hasattr(tf, "estimator"):
        return equivalent_graph()
    (train_x, train_y), (test_x, test_y) = load_data()
    feature_columns = [tf.feature_column.numeric_column(key=k) for k in FEATURES]
    classifier = tf.estimator.DNNClassifier(feature_columns=feature_columns, hidden_units=[10, 10], n_classes=3,
                                            model_dir=tempfile.mkdtemp(),
                                            config=tf.estimator.RunConfig(tf_random_seed=1))
    train_input = tf.estimator.inputs.numpy_input_fn(train_x, train_y, batch_size=32, num_epochs=None, shuffle=True)
    eval_input = tf.estimator.inputs.numpy_input_fn(test_x, test_y, batch_size=50, shuffle=False)
    classifier.train(input_fn=train_input, steps=1)
    first = classifier.evaluate(input_fn=eval_input)
    classifier.train(input_fn=train_input, steps=299)
    result = classifier.evaluate(input_fn=eval_input)
    predictions = list(classifier.predict(input_fn=tf.estimator.inputs.numpy_input_fn(
        {k: v[:5] for k, v in test_x.items()}, shuffle=False)))
    assert [int(p["class_ids"][0]) for p in predictions] is not None
    return {"first_loss": float(first["loss"]), "last_loss": float(result["loss"]),
            "metric": float(result["accuracy"]), "global_step": int(result["global_step"])}


def equivalent_graph():
    """What the DNNClassifier computes, as a compat.v1 session program (the TensorFlow reference)."""
    (train_x, train_y), (test_x, test_y) = load_data()
    tf.set_random_seed(1)
    x = tf.placeholder(tf.float32, [None, 4])
    y = tf.placeholder(tf.int64, [None])
    net = x
    for units in (10, 10, 3):
        w = tf.Variable(tf.glorot_uniform_initializer()([int(net.shape[1]), units]))
        net = tf.matmul(net, w) + tf.Variable(tf.zeros([units]))
        if units != 3:
            net = tf.nn.relu(net)
    loss = tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=net))
    train = tf.train.AdagradOptimizer(0.05).minimize(loss)
    correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(net, 1), y), tf.float32))
    tx = np.stack([train_x[k] for k in FEATURES], 1)
    ex = np.stack([test_x[k] for k in FEATURES], 1)
    rng = np.random.RandomState(0)

    def evaluate(sess):
        losses = [sess.run(loss, {x: ex[i:i + 50], y: test_y[i:i + 50]}) for i in range(0, 150, 50)]
        return float(np.mean(losses)), float(sess.run(correct, {x: ex, y: test_y}) / 150)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        order = np.concatenate([rng.permutation(150) for _ in range(70)])
        for step in range(300):
            idx = order[step * 32:(step + 1) * 32]
            sess.run(train, {x: tx[idx], y: train_y[idx]})
            if step == 0:
                first, _ = evaluate(sess)
        last, accuracy = evaluate(sess)
    return {"first_loss": first, "last_loss": last, "metric": accuracy, "global_step": 300}
