"""GroupQueryAttention against Keras 3.15 with the same weights (keras_gqa_reference.py, recorded by
keras_gqa_cases.py): grouped heads, causal + sliding-window masks, gates, explicit masks."""
import numpy as np
import pytest

from tensorweave import keras

from keras_tests.keras_gqa_cases import CASES, QUERY, run
from keras_tests.keras_gqa_reference import REFERENCE


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_equals_keras(case):
    out, scores = run(keras, case)
    want_out, want_scores = REFERENCE[case[0]]
    np.testing.assert_allclose(scores, want_scores, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out, want_out, rtol=1e-4, atol=1e-4)


def test_weights_config_training_and_errors():
    layer = keras.layers.GroupQueryAttention(head_dim=3, num_query_heads=4, num_key_value_heads=2, use_gate=True)
    layer(QUERY, QUERY)
    assert [w.name.split("/")[-2] for w in layer.weights[::2]] == ["query", "key", "gate", "value", "attention_output"]
    again = keras.layers.GroupQueryAttention.from_config(layer.get_config())
    assert again.get_config() == layer.get_config() and keras.layers.GroupedQueryAttention is type(layer)
    inp = keras.Input((5, 6))
    out = keras.layers.GlobalAveragePooling1D()(keras.layers.GroupQueryAttention(2, 2, 1)(inp, inp,
                                                                                      use_causal_mask=True))
    model = keras.Model(inp, keras.layers.Dense(1)(out))
    model.compile("adam", "mse")
    history = model.fit(QUERY, np.ones((2, 1), "float32"), epochs=5, verbose=0).history
    assert history["loss"][-1] < history["loss"][0]
    with pytest.raises(ValueError, match="`num_query_heads` must be divisible by `num_key_value_heads`"):
        keras.layers.GroupQueryAttention(2, 3, 2)
    with pytest.raises(ValueError, match="`sliding_window` must be `None` or a positive integer"):
        keras.layers.GroupQueryAttention(2, 2, 1, sliding_window=0)
