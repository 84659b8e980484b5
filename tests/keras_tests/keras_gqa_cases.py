"""GroupQueryAttention with fixed weights, written against any ``keras`` module; run under
TensorFlow 2.21 / Keras 3.15 it prints test_group_query_attention.py's reference table:

    ~/.cache/tensorweave/bench-tf-venv/bin/python tests/keras_tests/keras_gqa_cases.py \\
        > tests/keras_tests/keras_gqa_reference.py
"""
import numpy as np

RNG = np.random.default_rng(11)
QUERY = RNG.normal(size=(2, 5, 6)).astype("float32")
VALUE = RNG.normal(size=(2, 4, 6)).astype("float32")
CASES = [
    ("plain", {"head_dim": 3, "num_query_heads": 4, "num_key_value_heads": 2}, "cross", {}),
    ("causal_window", {"head_dim": 2, "num_query_heads": 4, "num_key_value_heads": 1, "sliding_window": 2},
     "self", {"use_causal_mask": True}),
    ("gate_nobias_mask", {"head_dim": 3, "num_query_heads": 2, "num_key_value_heads": 2, "use_gate": True,
                          "use_bias": False}, "cross", {"attention_mask": RNG.random((2, 5, 4)) > 0.3}),
]


def run(keras, case):
    _, kwargs, kind, call_kwargs = case
    layer = keras.layers.GroupQueryAttention(**kwargs)
    value = QUERY if kind == "self" else VALUE
    layer(QUERY, value)
    rng = np.random.default_rng(0)
    layer.set_weights([rng.normal(size=w.shape).astype("float32") * 0.5 for w in layer.get_weights()])
    out, scores = layer(QUERY, value, return_attention_scores=True, **call_kwargs)
    return np.asarray(out), np.asarray(scores)


if __name__ == "__main__":
    import os
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    print('"""GroupQueryAttention outputs of keras_gqa_cases.py as Keras %s computes them."""' % keras.__version__)
    print("import numpy as np\n\nREFERENCE = {")
    for case in CASES:
        out, scores = run(keras, case)
        print(f"    {case[0]!r}: (np.array({out.round(6).tolist()!r}), np.array({scores.round(6).tolist()!r})),")
    print("}")
