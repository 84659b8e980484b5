"""Skip-gram word embeddings: ``tf.nn.embedding_lookup`` into a ``tf.random_uniform`` table, a
softmax over the vocabulary with ``sparse_softmax_cross_entropy_with_logits``, and cosine
similarity of ``tf.nn.l2_normalize``-d embeddings for nearest neighbours (the basic word2vec
tutorial's graph; its NCE loss replaced by the full softmax on this small vocabulary).

Changes from a TF1 program: the import line; data: a synthetic corpus of sentences whose words
come from one group of four each (instead of the text8 download); 1500 steps; the loss is the
full softmax; ``main`` reports how many words have a word of their group as nearest neighbour.
"""
import numpy as np
import tensorweave.compat.v1 as tf

METRIC = ("neighbour_accuracy", "higher")
# TensorFlow 2.21 tf.compat.v1 on this file (run_reference.py --tensorflow, TF_USE_LEGACY_KERAS=1):
TF_REFERENCE = {"first_loss": 3.931972, "last_loss": 1.503926, "metric": 1.0}
vocabulary_size, embedding_size, batch_size = 40, 16, 64


def make_corpus(rng, n_sentences=4000, length=5, group=4):
    # Words form groups of ``group``: each sentence uses the words of one group only, so words of a
    # group share their contexts and should end up as each other's neighbours.
    groups = rng.randint(0, vocabulary_size // group, n_sentences)
    words = groups[:, None] * group + rng.randint(0, group, (n_sentences, length))
    return words


def generate_batch(data, rng):
    rows = rng.randint(0, data.shape[0], batch_size)
    pos = rng.randint(0, data.shape[1], batch_size)
    step = np.where(pos == 0, 1, np.where(pos == data.shape[1] - 1, -1, rng.choice([-1, 1], batch_size)))
    return data[rows, pos].astype(np.int32), data[rows, pos + step].astype(np.int32)


def main():
    rng = np.random.RandomState(0)
    data = make_corpus(rng)
    tf.set_random_seed(9)
    train_inputs = tf.placeholder(tf.int32, shape=[batch_size])
    train_labels = tf.placeholder(tf.int32, shape=[batch_size])
    embeddings = tf.Variable(tf.random_uniform([vocabulary_size, embedding_size], -1.0, 1.0))
    embed = tf.nn.embedding_lookup(embeddings, train_inputs)
    softmax_weights = tf.Variable(tf.truncated_normal([embedding_size, vocabulary_size],
                                                      stddev=1.0 / np.sqrt(embedding_size)))
    softmax_biases = tf.Variable(tf.zeros([vocabulary_size]))
    logits = tf.matmul(embed, softmax_weights) + softmax_biases
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=train_labels, logits=logits))
    optimizer = tf.train.GradientDescentOptimizer(1.0).minimize(loss)
    norm = tf.sqrt(tf.reduce_sum(tf.square(embeddings), 1, keepdims=True))
    normalized_embeddings = embeddings / norm
    similarity = tf.matmul(normalized_embeddings, normalized_embeddings, transpose_b=True)
    init = tf.global_variables_initializer()
    with tf.Session() as session:
        init.run()
        eval_batch = generate_batch(data, np.random.RandomState(5))
        first = session.run(loss, {train_inputs: eval_batch[0], train_labels: eval_batch[1]})
        for step in range(1500):
            batch_inputs, batch_labels = generate_batch(data, rng)
            session.run(optimizer, {train_inputs: batch_inputs, train_labels: batch_labels})
        last = session.run(loss, {train_inputs: eval_batch[0], train_labels: eval_batch[1]})
        sim = similarity.eval()
    np.fill_diagonal(sim, -np.inf)
    nearest = sim.argmax(1)
    same_group = nearest // 4 == np.arange(vocabulary_size) // 4
    return {"first_loss": float(first), "last_loss": float(last), "metric": float(same_group.mean())}
