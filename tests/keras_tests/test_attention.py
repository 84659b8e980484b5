"""Attention layers: MultiHeadAttention and Attention against NumPy references (per batch and
head loops, written from the Keras 3 equations) given the same weights, with attention masks,
the causal mask, masks carried by inputs, attention_axes; the layer harness (config round
trip, tw.function == eager, float64 gradients); PyTorch parity when torch is installed."""
import json

import numpy as np
import pytest

import tensorweave as tw
from tensorweave import keras
from tensorweave.keras.layers.attention import Attention, MultiHeadAttention
from tensorweave.keras.layers.embedding import Embedding

from keras_tests.layer_harness import layer_test


def _np(t):
    return np.asarray(t.numpy() if hasattr(t, "numpy") else t)


def _softmax(s):
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def ref_mha(query, value, key, weights, mask=None):
    """3-D inputs ``[B, T, dim]``; ``weights`` in Keras' order; ``mask`` bool ``[B or 1, T, S]``.
    Returns (output ``[B, T, *out]``, scores ``[B, H, T, S]``)."""
    wq, bq, wk, bk, wv, bv, wo, bo = [np.asarray(w, np.float64) for w in weights]
    q = np.tensordot(query, wq, axes=(-1, 0)) + bq          # [B, T, H, kd]
    k = np.tensordot(key, wk, axes=(-1, 0)) + bk
    v = np.tensordot(value, wv, axes=(-1, 0)) + bv
    b, t, h, kd = q.shape
    s_len = k.shape[1]
    scores = np.zeros((b, h, t, s_len))
    ctx = np.zeros((b, t, h, v.shape[-1]))
    for i in range(b):
        for j in range(h):
            s = (q[i, :, j] / np.sqrt(kd)) @ k[i, :, j].T
            if mask is not None:
                s = s + (1.0 - mask[i % mask.shape[0]]) * -1e9
            p = _softmax(s)
            scores[i, j] = p
            ctx[i, :, j] = p @ v[i, :, j]
    out = np.tensordot(ctx, wo, axes=([2, 3], [0, 1])) + bo
    return out, scores


def _random_weights(layer, rng):
    layer.set_weights([rng.uniform(-0.5, 0.5, size=w.shape).astype(np.float32) for w in layer.get_weights()])
    return layer.get_weights()


def _causal(t, s):
    return np.tril(np.ones((t, s), bool))[None]


def _rand_mask(rng, b, t, s):
    m = rng.random((b, t, s)) > 0.4
    m[..., 0] = True            # every query attends somewhere
    return m


@pytest.mark.parametrize("case", ["self", "cross", "value_dim_output_shape", "no_bias"])
@pytest.mark.parametrize("masking", ["none", "attention_mask", "causal", "both"])
def test_mha_matches_numpy(case, masking, rng):
    b, t, s = 2, 4, 5 if case == "cross" else 4
    kwargs = {"num_heads": 2, "key_dim": 3}
    if case == "value_dim_output_shape":
        kwargs.update(value_dim=4, output_shape=(6,))
    if case == "no_bias":
        kwargs.update(use_bias=False)
    layer = MultiHeadAttention(**kwargs)
    q = rng.standard_normal((b, t, 5)).astype(np.float32)
    v = q if case != "cross" else rng.standard_normal((b, s, 7)).astype(np.float32)
    k = None if case != "cross" else rng.standard_normal((b, s, 3)).astype(np.float32)
    layer(q, v, key=k)
    weights = _random_weights(layer, rng)
    if case == "no_bias":   # the reference takes biases: zeros
        weights = [weights[0], np.zeros((2, 3)), weights[1], np.zeros((2, 3)), weights[2], np.zeros((2, 3)),
                   weights[3], np.zeros(5)]
    mask = None
    call = {}
    if masking in ("attention_mask", "both"):
        mask = _rand_mask(rng, b, t, s)
        call["attention_mask"] = mask
    if masking in ("causal", "both"):
        call["use_causal_mask"] = True
        mask = _causal(t, s) if mask is None else mask & _causal(t, s)
    out, scores = layer(q, v, key=k, return_attention_scores=True, **call)
    want, want_scores = ref_mha(q, v, v if k is None else k, weights, mask)
    np.testing.assert_allclose(_np(out), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_np(scores), want_scores, rtol=1e-5, atol=1e-6)
    assert _np(layer(q, v, key=k, **call)).shape == want.shape
    if case == "value_dim_output_shape":
        assert [w.shape.as_list() for w in layer.weights] == [[5, 2, 3], [2, 3], [5, 2, 3], [2, 3], [5, 2, 4],
                                                               [2, 4], [2, 4, 6], [6]]


def test_mha_masks_carried_by_inputs(rng):
    """Masks from Embedding(mask_zero=True): query mask [B, T, 1] & value mask [B, 1, S]."""
    ids_q = np.array([[1, 2, 3, 0], [4, 5, 0, 0]], np.int32)
    ids_v = np.array([[1, 2, 0, 0, 0], [3, 4, 5, 6, 0]], np.int32)
    emb = Embedding(10, 4, mask_zero=True)
    q, v = emb(ids_q), emb(ids_v)
    layer = MultiHeadAttention(num_heads=2, key_dim=2)
    out = layer(q, v)
    mask = (ids_q != 0)[:, :, None] & (ids_v != 0)[:, None, :]
    explicit = MultiHeadAttention(num_heads=2, key_dim=2)
    explicit(_np(q), _np(v))
    explicit.set_weights(layer.get_weights())
    want = _np(explicit(_np(q), _np(v), attention_mask=mask))
    np.testing.assert_allclose(_np(out), want, rtol=1e-6, atol=1e-6)
    assert _np(out._keras_mask).tolist() == (ids_q != 0).tolist()   # the query's mask rides on
    ref, _ = ref_mha(_np(q), _np(v), _np(v), layer.get_weights(), mask)
    keep = ids_q != 0        # fully masked query rows are uniform in Keras too; compare the real ones
    np.testing.assert_allclose(_np(out)[keep], ref[keep], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("axes", [(1, 2), (2,)])
def test_mha_attention_axes(axes, rng):
    b, a1, a2, d = 2, 2, 3, 4
    x = rng.standard_normal((b, a1, a2, d)).astype(np.float32)
    layer = MultiHeadAttention(num_heads=2, key_dim=2, attention_axes=axes)
    out, scores = layer(x, x, return_attention_scores=True)
    w = layer.get_weights()
    if axes == (1, 2):   # attention over all positions of the 2-D grid: a flattened sequence
        flat = x.reshape(b, a1 * a2, d)
        want, want_s = ref_mha(flat, flat, flat, w)
        want, want_s = want.reshape(b, a1, a2, d), want_s.reshape(b, 2, a1, a2, a1, a2)
    else:                # axis 1 is another batch axis
        rows = x.reshape(b * a1, a2, d)
        want, want_s = ref_mha(rows, rows, rows, w)
        want, want_s = want.reshape(b, a1, a2, d), want_s.reshape(b, a1, 2, a2, a2)
    np.testing.assert_allclose(_np(out), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_np(scores), want_s, rtol=1e-5, atol=1e-6)
    cfg = json.loads(json.dumps(layer.get_config()))
    assert cfg["attention_axes"] == list(axes)


def test_mha_functional_function_and_dropout(rng):
    q = rng.standard_normal((2, 4, 5)).astype(np.float32)
    v = rng.standard_normal((2, 6, 3)).astype(np.float32)
    layer = MultiHeadAttention(num_heads=2, key_dim=3, dropout=0.5, seed=3)
    qi, vi = keras.Input((4, 5)), keras.Input((6, 3))
    model = keras.Model([qi, vi], layer(qi, vi, use_causal_mask=True))
    eager = _np(layer(q, v, use_causal_mask=True))
    np.testing.assert_allclose(_np(model([q, v])), eager, rtol=1e-6, atol=1e-6)
    fn = tw.function(lambda a, b: layer(a, b, use_causal_mask=True))
    np.testing.assert_allclose(_np(fn(tw.constant(q), tw.constant(v))), eager, rtol=1e-6, atol=1e-6)
    assert not np.allclose(_np(layer(q, v, training=True)), _np(layer(q, v)))
    with tw.GradientTape() as tape:
        y = tw.reduce_sum(layer(q, v, training=True) ** 2)
    assert all(g is not None for g in tape.gradient(y, layer.trainable_weights))
    with pytest.raises(TypeError, match="value"):
        layer(q)


class SelfAttention(MultiHeadAttention):
    """Self-attention with one input, for the single-input layer harness."""

    def __call__(self, x, *args, **kwargs):
        return super().__call__(x, x, *args, **kwargs)


def test_mha_harness():
    layer_test(SelfAttention, {"num_heads": 2, "key_dim": 3}, (2, 4, 5), expected_output_shape=(2, 4, 5),
               expected_num_trainable_weights=8, supports_masking=True)
    layer_test(SelfAttention, {"num_heads": 1, "key_dim": 2, "output_shape": 3, "use_bias": False}, (2, 3, 4),
               expected_output_shape=(2, 3, 3), expected_num_trainable_weights=4,
               call_kwargs={"use_causal_mask": True})


# ---- Attention -----------------------------------------------------------------------------------------
def ref_attention(q, v, k, q_mask=None, v_mask=None, causal=False, scale=1.0, concat=None):
    if concat is None:
        s = scale * (q @ np.swapaxes(k, -1, -2))
    else:
        s = concat * np.tanh(scale * (q[:, :, None] + k[:, None])).sum(-1)
    m = np.ones(s.shape, bool)
    if v_mask is not None:
        m &= v_mask[:, None, :]
    if causal:
        m &= np.tril(np.ones(s.shape[-2:], bool))
    s = s - 1e9 * (~m)
    p = _softmax(s)
    out = p @ v
    if q_mask is not None:
        out = out * q_mask[..., None]
    return out, p


@pytest.mark.parametrize("score_mode", ["dot", "concat"])
@pytest.mark.parametrize("use_scale", [False, True])
def test_attention_matches_numpy(score_mode, use_scale, rng):
    q = rng.standard_normal((2, 3, 4)).astype(np.float32)
    v = rng.standard_normal((2, 5, 4)).astype(np.float32)
    k = rng.standard_normal((2, 5, 4)).astype(np.float32)
    layer = Attention(use_scale=use_scale, score_mode=score_mode)
    layer([q, v, k])
    if layer.weights:
        layer.set_weights([np.asarray(0.7, np.float32) for _ in layer.weights])
    scale = 0.7 if use_scale else 1.0
    concat = 0.7 if score_mode == "concat" else None
    q_mask = np.array([[1, 1, 0], [1, 0, 1]], bool)
    v_mask = np.array([[1, 1, 1, 0, 0], [1, 0, 1, 1, 1]], bool)
    for kw, ref_kw in [({}, {}), ({"mask": [q_mask, v_mask]}, {"q_mask": q_mask, "v_mask": v_mask}),
                       ({"use_causal_mask": True}, {"causal": True}),
                       ({"mask": [None, v_mask], "use_causal_mask": True}, {"v_mask": v_mask, "causal": True})]:
        out, scores = layer([q, v, k], return_attention_scores=True, **kw)
        want, want_p = ref_attention(q.astype(np.float64), v, k, scale=scale, concat=concat, **ref_kw)
        np.testing.assert_allclose(_np(out), want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(_np(scores), want_p, rtol=1e-5, atol=1e-6)


def test_attention_harness_and_masks_from_inputs(rng):
    layer_test(Attention, {"use_scale": True}, [(2, 3, 4), (2, 5, 4)], expected_output_shape=(2, 3, 4),
               expected_num_trainable_weights=1)
    ids_q = np.array([[1, 2, 0], [3, 0, 0]], np.int32)
    ids_v = np.array([[1, 2, 3, 0], [4, 5, 0, 0]], np.int32)
    emb = Embedding(8, 4, mask_zero=True)
    q, v = emb(ids_q), emb(ids_v)
    out = Attention()([q, v])
    want, _ = ref_attention(_np(q).astype(np.float64), _np(v), _np(v), ids_q != 0, ids_v != 0)
    np.testing.assert_allclose(_np(out), want, rtol=1e-5, atol=1e-5)
    assert _np(out._keras_mask).tolist() == (ids_q != 0).tolist()
    with pytest.raises(ValueError, match="list of inputs"):
        Attention()(_np(q))


# ---- PyTorch parity ---------------------------------------------------------------------------------------
def test_mha_matches_torch(rng):
    torch = pytest.importorskip("torch")
    b, t, e, h = 2, 5, 6, 3
    x = rng.standard_normal((b, t, e)).astype(np.float32)
    layer = MultiHeadAttention(num_heads=h, key_dim=e // h)
    layer(x, x)
    wq, bq, wk, bk, wv, bv, wo, bo = _random_weights(layer, rng)
    t_mha = torch.nn.MultiheadAttention(e, h, batch_first=True)
    with torch.no_grad():
        t_mha.in_proj_weight.copy_(torch.tensor(np.concatenate([w.reshape(e, e).T for w in (wq, wk, wv)])))
        t_mha.in_proj_bias.copy_(torch.tensor(np.concatenate([bq.ravel(), bk.ravel(), bv.ravel()])))
        t_mha.out_proj.weight.copy_(torch.tensor(wo.reshape(e, e).T))
        t_mha.out_proj.bias.copy_(torch.tensor(bo))
        xt = torch.tensor(x)
        t_out, t_w = t_mha(xt, xt, xt, attn_mask=torch.tensor(~np.tril(np.ones((t, t), bool))),
                           average_attn_weights=False)
    out, scores = layer(x, x, use_causal_mask=True, return_attention_scores=True)
    np.testing.assert_allclose(_np(out), t_out.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_np(scores), t_w.numpy(), rtol=1e-5, atol=1e-6)
