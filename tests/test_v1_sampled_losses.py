"""``tf.nn.nce_loss``, ``sampled_softmax_loss``, the candidate samplers and partitioned
``embedding_lookup`` against TensorFlow 2.21 (``tf.compat.v1``).

TF_VALUES were recorded by running the same calls in TensorFlow with the same fixed
``sampled_values`` (so the losses do not depend on the random draws) and, for the samplers,
with ``unique=False`` (where the expected counts depend only on the classes).
"""
import numpy as np
import pytest

import tensorweave.compat.v1 as tf

TF_VALUES = {
    'nce1': [7.3482561111450195, 4.485247611999512, 2.7269837856292725],
    'nce2_hits': [7.578681945800781, 4.486826419830322, 4.035966873168945],
    'ssm1': [5.891208171844482, 2.3470089435577393, 1.0314847230911255],
    'ssm2': [6.175604820251465, 2.0220773220062256, 1.2857166528701782],
    'ssm_mod_shards': [5.891208171844482, 2.3470089435577393, 1.0314847230911255],
    'emb_div': [[1.764052391052246, 0.40015721321105957, 0.978738009929657, 2.2408931255340576], [0.7610377073287964, 0.12167501449584961, 0.44386324286460876, 0.3336743414402008], [1.4940791130065918, -0.2051582634449005, 0.3130677044391632, -0.8540957570075989], [2.269754648208618, -1.4543657302856445, 0.04575851559638977, -0.18718385696411133], [1.5327792167663574, 1.4693588018417358, 0.154947429895401, 0.37816253304481506], [1.2302906513214111, 1.202379822731018, -0.38732680678367615, -0.302302747964859]],
    'emb_mod': [[1.764052391052246, 0.40015721321105957, 0.978738009929657, 2.2408931255340576], [0.7610377073287964, 0.12167501449584961, 0.44386324286460876, 0.3336743414402008], [1.4940791130065918, -0.2051582634449005, 0.3130677044391632, -0.8540957570075989], [2.269754648208618, -1.4543657302856445, 0.04575851559638977, -0.18718385696411133], [1.5327792167663574, 1.4693588018417358, 0.154947429895401, 0.37816253304481506], [1.2302906513214111, 1.202379822731018, -0.38732680678367615, -0.302302747964859]],
    'log_uniform_true_expected': [[0.6763683557510376], [0.3041359782218933], [0.19647736847400665]],
    'uniform_true_expected': [[0.4000000059604645], [0.4000000059604645], [0.4000000059604645]],
    'unigram_true_expected': [[0.2517707049846649], [0.39808446168899536], [0.5035414099693298]],
    'hits_rows': [0, 1],
    'hits_ids': [1, 0],
}


def _inputs():
    rng = np.random.RandomState(0)
    W = rng.randn(10, 4).astype(np.float32)
    b = rng.randn(10).astype(np.float32)
    x = rng.randn(3, 4).astype(np.float32)
    labels1 = np.array([[1], [4], [7]])
    labels2 = np.array([[1, 2], [4, 0], [7, 3]])
    sampled = np.array([0, 2, 5, 9], np.int64)
    texp1 = rng.rand(3, 1).astype(np.float32) + 0.1
    texp2 = rng.rand(3, 2).astype(np.float32) + 0.1
    sexp = rng.rand(4).astype(np.float32) + 0.1
    return W, b, x, labels1, labels2, sampled, texp1, texp2, sexp


def test_sampled_losses_samplers_and_sharded_lookup_match_tensorflow():
    W, b, x, labels1, labels2, sampled, texp1, texp2, sexp = _inputs()
    g = tf.Graph()
    with g.as_default():
        Wt = tf.constant(W)
        shards_mod = [tf.constant(W[i::3]) for i in range(3)]
        bshards_mod = [tf.constant(b[i::3]) for i in range(3)]
        emb_div = [tf.constant(W[:4]), tf.constant(W[4:7]), tf.constant(W[7:])]
        t = {
            "nce1": tf.nn.nce_loss(Wt, b, labels1, x, 4, 10, sampled_values=(sampled, texp1, sexp)),
            "nce2_hits": tf.nn.nce_loss(Wt, b, labels2, x, 4, 10, num_true=2, sampled_values=(sampled, texp2, sexp),
                                        remove_accidental_hits=True),
            "ssm1": tf.nn.sampled_softmax_loss(Wt, b, labels1, x, 4, 10, sampled_values=(sampled, texp1, sexp)),
            "ssm2": tf.nn.sampled_softmax_loss(Wt, b, labels2, x, 4, 10, num_true=2,
                                               sampled_values=(sampled, texp2, sexp)),
            "ssm_mod_shards": tf.nn.sampled_softmax_loss(shards_mod, bshards_mod, labels1, x, 4, 10,
                                                         sampled_values=(sampled, texp1, sexp),
                                                         partition_strategy="mod"),
            "emb_div": tf.nn.embedding_lookup(emb_div, [0, 3, 4, 6, 7, 9], partition_strategy="div"),
            "emb_mod": tf.nn.embedding_lookup(shards_mod, [0, 3, 4, 6, 7, 9], partition_strategy="mod"),
            "log_uniform_true_expected": tf.nn.log_uniform_candidate_sampler(labels1, 1, 4, False, 10)[1],
            "uniform_true_expected": tf.nn.uniform_candidate_sampler(labels1, 1, 4, False, 10)[1],
            "unigram_true_expected": tf.nn.fixed_unigram_candidate_sampler(
                labels1, 1, 4, False, 10, unigrams=list(range(1, 11)), distortion=0.5)[1],
        }
        hits = tf.nn.compute_accidental_hits(labels2, sampled, 2)
    with tf.Session(graph=g) as sess:
        values = sess.run(t)
        rows, ids, weights = sess.run(hits)
    for k, v in values.items():
        np.testing.assert_allclose(v, TF_VALUES[k], rtol=2e-5, atol=1e-6, err_msg=k)
    np.testing.assert_array_equal(rows, TF_VALUES["hits_rows"])
    np.testing.assert_array_equal(ids, TF_VALUES["hits_ids"])
    assert (weights == -np.finfo(np.float32).max).all()


def test_samplers_draw_from_their_distribution_and_replay_with_seeds():
    def draws(seed):
        g = tf.Graph()
        with g.as_default():
            tf.set_random_seed(seed)
            s, t, e = tf.nn.log_uniform_candidate_sampler([[0]], 1, 5, True, 50)
            u = tf.nn.uniform_candidate_sampler([[0]], 1, 2000, False, 4)[0]
        with tf.Session(graph=g) as sess:
            return [sess.run([s, e]) for _ in range(40)], sess.run(u)
    first, u = draws(3)
    again, _ = draws(3)
    assert all((a[0] == b[0]).all() for a, b in zip(first, again))
    assert all(len(set(c.tolist())) == 5 and c.max() < 50 for c, _ in first)
    # Log-uniform favours small ids: id 0 is drawn far more often than id 40.
    counts = np.bincount(np.concatenate([c for c, _ in first]), minlength=50)
    assert counts[0] > 4 * counts[40:].mean()
    assert all(((e > 0) & (e <= 1)).all() for _, e in first)
    np.testing.assert_allclose(np.bincount(u, minlength=4) / 2000, 0.25, atol=0.04)


def test_word2vec_style_training_with_nce_loss_lowers_the_loss():
    rng = np.random.RandomState(0)
    vocab, dim = 30, 8
    centers = rng.randint(0, vocab, size=256)
    contexts = (centers + 1) % vocab
    g = tf.Graph()
    with g.as_default():
        tf.set_random_seed(1)
        emb = tf.Variable(tf.random_uniform([vocab, dim], -1.0, 1.0))
        nce_w = [tf.Variable(tf.truncated_normal([vocab // 2, dim], stddev=0.3)) for _ in range(2)]
        nce_b = tf.Variable(tf.zeros([vocab]))
        x = tf.placeholder(tf.int32, [None])
        y = tf.placeholder(tf.int64, [None, 1])
        loss = tf.reduce_mean(tf.nn.nce_loss(nce_w, nce_b, y, tf.nn.embedding_lookup(emb, x), 6, vocab))
        train = tf.train.GradientDescentOptimizer(1.0).minimize(loss)
        init = tf.global_variables_initializer()
    with tf.Session(graph=g) as sess:
        sess.run(init)
        feed = {x: centers, y: contexts[:, None]}
        start = np.mean([sess.run(loss, feed) for _ in range(5)])
        for _ in range(60):
            sess.run(train, feed)
        end = np.mean([sess.run(loss, feed) for _ in range(5)])
    assert end < 0.5 * start


def test_all_candidate_sampler_makes_sampled_softmax_the_full_softmax():
    W, b, x, labels1, *_ = _inputs()
    g = tf.Graph()
    with g.as_default():
        sampled = tf.nn.all_candidate_sampler(labels1, 1, 10, True)
        loss = tf.nn.sampled_softmax_loss(W, b, labels1, x, 10, 10, sampled_values=sampled,
                                          remove_accidental_hits=True)
    with tf.Session(graph=g) as sess:
        got = sess.run(loss)
    logits = x @ W.T + b
    full = np.log(np.exp(logits).sum(1)) - logits[np.arange(3), labels1[:, 0]]
    np.testing.assert_allclose(got, full, rtol=1e-5)


def test_sampler_errors():
    g = tf.Graph()
    with g.as_default():
        with pytest.raises(ValueError, match=r"num_sampled \(6\) must not exceed range_max \(5\) when unique"):
            tf.nn.uniform_candidate_sampler([[0]], 1, 6, True, 5)
        with pytest.raises(ValueError, match="true_classes must be \\[batch, num_true\\]"):
            tf.nn.uniform_candidate_sampler([0, 1], 1, 2, True, 5)
        with pytest.raises(ValueError, match="11 unigrams .* for range_max=10"):
            tf.nn.fixed_unigram_candidate_sampler([[0]], 1, 2, True, 10, unigrams=[1] * 11)
