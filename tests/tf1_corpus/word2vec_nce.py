"""Skip-gram word2vec with NCE loss, after the classic TF1 ``word2vec_basic`` tutorial: an embedding
table, a skip-gram batch generator, ``tf.nn.nce_loss`` with a log-uniform sampler, SGD, and
nearest neighbours by cosine similarity.

Changes from a TF1 program: the text is a synthetic corpus of 40 words in which each word is
followed by one of two fixed successors (instead of the text8 download); 1,500 steps; the NCE
weights are two shards looked up with ``partition_strategy="mod"``; 400 steps; ``main`` returns
the numbers the test checks. Metric: for how many words the highest-scoring output word
(``embedding @ nce_weights.T + biases``) is one of its true neighbours in the text.
"""
import collections

import numpy as np
import tensorweave.compat.v1 as tf

METRIC = ("context_accuracy", "higher")
TF_REFERENCE = {"first_loss": 6.600440979003906, "last_loss": 1.5259920358657837, "metric": 0.4}


def make_corpus(n_words=40, length=6000, seed=0):
    rng = np.random.RandomState(seed)
    successors = {w: ((w * 7 + 3) % n_words, (w * 11 + 5) % n_words) for w in range(n_words)}
    words = [0]
    for _ in range(length - 1):
        words.append(successors[words[-1]][rng.randint(2)])
    return np.array(words), successors


def generate_batch(data, index, batch_size, num_skips, skip_window):
    batch = np.ndarray(shape=(batch_size,), dtype=np.int32)
    labels = np.ndarray(shape=(batch_size, 1), dtype=np.int32)
    span = 2 * skip_window + 1
    buffer = collections.deque(maxlen=span)
    for _ in range(span):
        buffer.append(data[index])
        index = (index + 1) % len(data)
    for i in range(batch_size // num_skips):
        context = [w for w in range(span) if w != skip_window]
        for j, c in enumerate(context[:num_skips]):
            batch[i * num_skips + j] = buffer[skip_window]
            labels[i * num_skips + j, 0] = buffer[c]
        buffer.append(data[index])
        index = (index + 1) % len(data)
    return batch, labels, index


def main():
    data, successors = make_corpus()
    vocabulary_size, embedding_size, num_sampled = 40, 16, 8
    batch_size, skip_window, num_skips = 64, 1, 2
    tf.set_random_seed(1)
    train_inputs = tf.placeholder(tf.int32, shape=[batch_size])
    train_labels = tf.placeholder(tf.int32, shape=[batch_size, 1])
    embeddings = tf.Variable(tf.random_uniform([vocabulary_size, embedding_size], -1.0, 1.0))
    embed = tf.nn.embedding_lookup(embeddings, train_inputs)
    nce_weights = [tf.Variable(tf.truncated_normal([vocabulary_size // 2, embedding_size],
                                                   stddev=1.0 / np.sqrt(embedding_size))) for _ in range(2)]
    nce_biases = tf.Variable(tf.zeros([vocabulary_size]))
    loss = tf.reduce_mean(tf.nn.nce_loss(weights=nce_weights, biases=nce_biases, labels=train_labels,
                                         inputs=embed, num_sampled=num_sampled, num_classes=vocabulary_size,
                                         partition_strategy="mod"))
    optimizer = tf.train.GradientDescentOptimizer(1.0).minimize(loss)
    all_weights = tf.nn.embedding_lookup(nce_weights, tf.range(vocabulary_size), partition_strategy="mod")
    scores = tf.matmul(embeddings, all_weights, transpose_b=True) + nce_biases
    init = tf.global_variables_initializer()

    with tf.Session() as session:
        init.run()
        index, losses = 0, []
        for step in range(400):
            batch_inputs, batch_labels, index = generate_batch(data, index, batch_size, num_skips, skip_window)
            _, loss_val = session.run([optimizer, loss], {train_inputs: batch_inputs, train_labels: batch_labels})
            losses.append(loss_val)
        predicted = np.argmax(session.run(scores), axis=1)
    neighbours = collections.defaultdict(set)
    for a, b in zip(data[:-1], data[1:]):
        neighbours[a].add(b)
        neighbours[b].add(a)
    hits = sum(int(predicted[w] in neighbours[w]) for w in range(vocabulary_size))
    return {"first_loss": float(np.mean(losses[:20])), "last_loss": float(np.mean(losses[-20:])),
            "metric": hits / vocabulary_size}
