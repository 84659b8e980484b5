"""A custom Estimator on census-like data, after the TF1 "Creating Custom Estimators" and "wide and
deep" tutorials: a ``model_fn`` over ``tf.feature_column.input_layer`` (numeric, bucketized,
vocabulary and hash-bucket columns through indicator/embedding columns), ``tf.losses``,
``tf.metrics`` in ``eval_metric_ops``, ``RunConfig(save_checkpoints_steps=...)`` and
``train_and_evaluate`` with a ``TrainSpec``/``EvalSpec``.

Changes from a TF1 program: the data (a synthetic table with the census columns' kinds instead of
the UCI Adult download); 240 steps; a temporary model_dir; ``main`` returns the numbers the test
checks. Metric: evaluation accuracy.

TensorFlow 2.21 has no ``tf.estimator`` (see estimator_premade_dnn.py), so the reference run
executes ``equivalent_graph``: the same model_fn body, input columns and optimizer in a compat.v1
session loop over the same batches. The hash-bucket column hashes differently there (FarmHash),
which moves its ids but not what can be learned.
"""
import tempfile

import numpy as np
import tensorweave.compat.v1 as tf

METRIC = ("accuracy", "higher")
TF_REFERENCE = {"first_loss": 0.6966930627822876, "last_loss": 0.28430482745170593, "metric": 0.8725000023841858}

EDUCATION = ["Bachelors", "HS-grad", "Masters", "Some-college", "Doctorate"]
OCCUPATIONS = [f"occ-{i}" for i in range(30)]


def load_data(n, seed):
    rng = np.random.RandomState(seed)
    age = rng.uniform(18, 80, n).astype(np.float32)
    hours = rng.uniform(10, 70, n).astype(np.float32)
    edu = rng.randint(0, len(EDUCATION), n)
    occ = rng.randint(0, len(OCCUPATIONS), n)
    score = (0.04 * (age - 45) - 0.002 * (age - 45) ** 2 + 0.05 * (hours - 40) + np.array([0.8, -0.6, 1.2, -0.2,
             1.6])[edu] + 0.8 * ((occ % 3) == 0) - 0.3 + 0.4 * rng.randn(n))
    features = {"age": age, "hours_per_week": hours,
                "education": np.array([EDUCATION[i].encode() for i in edu], dtype=object),
                "occupation": np.array([OCCUPATIONS[i].encode() for i in occ], dtype=object)}
    return features, (score > 0).astype(np.int64)


def columns():
    age = tf.feature_column.numeric_column("age")
    education = tf.feature_column.categorical_column_with_vocabulary_list("education", EDUCATION)
    occupation = tf.feature_column.categorical_column_with_hash_bucket("occupation", hash_bucket_size=50)
    return [tf.feature_column.bucketized_column(age, [25, 35, 45, 55, 65]),
            tf.feature_column.numeric_column("hours_per_week", normalizer_fn=lambda x: (x - 40.0) / 15.0),
            tf.feature_column.indicator_column(education),
            tf.feature_column.embedding_column(occupation, dimension=4)]


def model_body(features, labels):
    net = tf.feature_column.input_layer(features, columns())
    w1 = tf.Variable(tf.truncated_normal([int(net.shape[1]), 16], stddev=0.1), name="w1")
    hidden = tf.nn.relu(tf.matmul(net, w1) + tf.Variable(tf.zeros([16]), name="b1"))
    w2 = tf.Variable(tf.truncated_normal([16, 2], stddev=0.1), name="w2")
    logits = tf.matmul(hidden, w2) + tf.Variable(tf.zeros([2]), name="b2")
    loss = None if labels is None else tf.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
    return logits, loss


def model_fn(features, labels, mode, params):
    logits, loss = model_body(features, labels)
    predicted = tf.argmax(logits, 1)
    if mode == tf.estimator.ModeKeys.PREDICT:
        return tf.estimator.EstimatorSpec(mode, predictions={"class_ids": predicted,
                                                             "probabilities": tf.nn.softmax(logits)})
    metrics = {"accuracy": tf.metrics.accuracy(labels=labels, predictions=predicted),
               "auc": tf.metrics.auc(labels=labels, predictions=tf.nn.softmax(logits)[:, 1])}
    if mode == tf.estimator.ModeKeys.EVAL:
        return tf.estimator.EstimatorSpec(mode, loss=loss, eval_metric_ops=metrics)
    optimizer = tf.train.AdamOptimizer(learning_rate=params["learning_rate"])
    train_op = optimizer.minimize(loss, global_step=tf.train.get_global_step())
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)


def main():
    if not hasattr(tf, "estimator"):
        return equivalent_graph()
    train_x, train_y = load_data(800, 0)
    test_x, test_y = load_data(400, 1)
    config = tf.estimator.RunConfig(model_dir=tempfile.mkdtemp(), save_checkpoints_steps=80, tf_random_seed=2)
    estimator = tf.estimator.Estimator(model_fn=model_fn, config=config, params={"learning_rate": 0.01})
    train_input = tf.estimator.inputs.numpy_input_fn(train_x, train_y, batch_size=40, num_epochs=None, shuffle=True)
    eval_input = tf.estimator.inputs.numpy_input_fn(test_x, test_y, batch_size=100, shuffle=False)
    first = estimator.evaluate(eval_input)
    result, _ = tf.estimator.train_and_evaluate(estimator, tf.estimator.TrainSpec(train_input, max_steps=240),
                                                tf.estimator.EvalSpec(eval_input, steps=None))
    return {"first_loss": float(first["loss"]), "last_loss": float(result["loss"]),
            "metric": float(result["accuracy"]), "auc": float(result["auc"]), "global_step": int(result["global_step"])}


def equivalent_graph():
    """The model_fn's computation in a compat.v1 session loop (the TensorFlow reference)."""
    train_x, train_y = load_data(800, 0)
    test_x, test_y = load_data(400, 1)
    tf.set_random_seed(2)
    ph = {"age": tf.placeholder(tf.float32, [None]), "hours_per_week": tf.placeholder(tf.float32, [None]),
          "education": tf.placeholder(tf.string, [None]), "occupation": tf.placeholder(tf.string, [None])}
    labels = tf.placeholder(tf.int64, [None])
    logits, loss = model_body(ph, labels)
    train = tf.train.AdamOptimizer(0.01).minimize(loss)
    accuracy, acc_update = tf.metrics.accuracy(labels, tf.argmax(logits, 1))
    mean_loss, loss_update = tf.metrics.mean(loss)
    rng = np.random.RandomState(0)

    def evaluate(sess):
        sess.run(tf.local_variables_initializer())
        for i in range(0, 400, 100):
            sess.run([acc_update, loss_update], {**{ph[k]: v[i:i + 100] for k, v in test_x.items()},
                                                 labels: test_y[i:i + 100]})
        return sess.run([mean_loss, accuracy])
    with tf.Session() as sess:
        sess.run([tf.global_variables_initializer(), tf.tables_initializer()])
        first, _ = evaluate(sess)
        order = np.concatenate([rng.permutation(800) for _ in range(13)])
        for step in range(240):
            idx = order[step * 40:(step + 1) * 40]
            sess.run(train, {**{ph[k]: v[idx] for k, v in train_x.items()}, labels: train_y[idx]})
        last, acc = evaluate(sess)
    return {"first_loss": float(first), "last_loss": float(last), "metric": float(acc), "global_step": 240}
