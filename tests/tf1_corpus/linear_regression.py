"""Linear regression by gradient descent: placeholders, variables, a session and a feed loop
(the first program of the classic TF1 example collections).

Changes from a TF1 program: the data (a fixed synthetic line with noise instead of a hand-typed
table); 40 epochs; ``main`` returns the numbers the test checks instead of printing them.
"""
import numpy as np
import tensorweave.compat.v1 as tf

METRIC = ("test_mse", "lower")
# TensorFlow 2.21 tf.compat.v1 on this file (run_reference.py --tensorflow, TF_USE_LEGACY_KERAS=1):
TF_REFERENCE = {"first_loss": 0.52672, "last_loss": 0.038707, "metric": 0.028952}


def main():
    rng = np.random.RandomState(0)
    train_X = rng.uniform(0, 10, 50).astype(np.float32)
    train_Y = (0.3 * train_X + 1.5 + rng.normal(0, 0.2, 50)).astype(np.float32)
    test_X = np.linspace(0, 10, 20).astype(np.float32)
    test_Y = 0.3 * test_X + 1.5

    learning_rate, training_epochs = 0.01, 40
    tf.set_random_seed(1)
    X = tf.placeholder("float")
    Y = tf.placeholder("float")
    W = tf.Variable(rng.randn(), name="weight")
    b = tf.Variable(rng.randn(), name="bias")
    pred = tf.add(tf.multiply(X, W), b)
    n_samples = train_X.shape[0]
    cost = tf.reduce_sum(tf.pow(pred - Y, 2)) / (2 * n_samples)
    optimizer = tf.train.GradientDescentOptimizer(learning_rate).minimize(cost)
    init = tf.global_variables_initializer()

    with tf.Session() as sess:
        sess.run(init)
        first = sess.run(cost, feed_dict={X: train_X, Y: train_Y})
        for epoch in range(training_epochs):
            for (x, y) in zip(train_X, train_Y):
                sess.run(optimizer, feed_dict={X: x, Y: y})
        last = sess.run(cost, feed_dict={X: train_X, Y: train_Y})
        test_mse = sess.run(tf.reduce_sum(tf.pow(pred - Y, 2)) / (2 * test_X.shape[0]),
                            feed_dict={X: test_X, Y: test_Y})
    return {"first_loss": float(first), "last_loss": float(last), "metric": float(test_mse)}
