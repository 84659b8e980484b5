"""StringLookup, IntegerLookup and TextVectorization: values recorded from Keras 3.15.1 (TF
backend) for adapt's ordering, the index layout and every output mode; the layer harness; a text
model trained end to end and saved."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave import keras
from tensorweave.keras.saving import load_model

from keras_tests.layer_harness import layer_test

L = keras.layers
DOCS = np.array(["The cat sat.", "the dog, the CAT!", "a bird"])


def test_text_vectorization_matches_keras():
    tv = L.TextVectorization()
    tv.adapt(DOCS)
    assert tv.get_vocabulary() == ["", "[UNK]", "the", "cat", "sat", "dog", "bird", "a"]
    assert tv(DOCS).numpy().tolist() == [[2, 3, 4, 0], [2, 5, 2, 3], [7, 6, 0, 0]]
    assert tv(np.array(["cat zebra"])).numpy().tolist() == [[3, 1]]
    tv = L.TextVectorization(max_tokens=5, output_sequence_length=4)
    tv.adapt(DOCS)
    assert tv.get_vocabulary() == ["", "[UNK]", "the", "cat", "sat"]
    assert tv(DOCS).numpy().tolist() == [[2, 3, 4, 0], [2, 1, 2, 3], [1, 1, 0, 0]]
    tv = L.TextVectorization(output_mode="multi_hot")
    tv.adapt(DOCS)
    assert tv.get_vocabulary() == ["[UNK]", "the", "cat", "sat", "dog", "bird", "a"]
    out = tv(DOCS)
    assert out.dtype == tw.int64
    assert out.numpy().tolist() == [[0, 1, 1, 1, 0, 0, 0], [0, 1, 1, 0, 1, 0, 0], [0, 0, 0, 0, 0, 1, 1]]
    tv = L.TextVectorization(output_mode="count", max_tokens=4)
    tv.adapt(DOCS)
    assert tv(DOCS).numpy().tolist() == [[0, 1, 1, 1], [1, 2, 1, 0], [2, 0, 0, 0]]
    tv = L.TextVectorization(output_mode="tf_idf")
    tv.adapt(DOCS)
    np.testing.assert_allclose(tv(DOCS).numpy(), [[0, 0.69315, 0.69315, 0.91629, 0, 0, 0],
                                                  [0, 1.38629, 0.69315, 0, 0.91629, 0, 0],
                                                  [0, 0, 0, 0, 0, 0.91629, 0.91629]], atol=1e-5)
    tv = L.TextVectorization(ngrams=2)
    tv.adapt(np.array(["a b c", "b c"]))
    assert tv.get_vocabulary() == ["", "[UNK]", "c", "b c", "b", "a b", "a"]
    assert tv(np.array(["a b c d"])).numpy().tolist() == [[6, 4, 2, 1, 5, 3, 1]]
    tv = L.TextVectorization(output_mode="multi_hot", pad_to_max_tokens=True, max_tokens=8)
    tv.adapt(np.array(["a b c", "b c"]))
    assert tv(np.array(["a b"])).numpy().tolist() == [[0, 0, 1, 1, 0, 0, 0, 0]]
    tv = L.TextVectorization(split="character", output_sequence_length=5)
    tv.adapt(np.array(["ab", "bc"]))
    assert tv.get_vocabulary() == ["", "[UNK]", "b", "c", "a"]
    assert tv(np.array(["abd"])).numpy().tolist() == [[4, 2, 1, 0, 0]]


def test_string_and_integer_lookup_match_keras():
    sl = L.StringLookup()
    sl.adapt(np.array(["b", "a", "b", "c", "a", "b"]))
    assert sl.get_vocabulary() == ["[UNK]", "b", "a", "c"]
    assert sl(np.array([["a", "z"], ["b", "c"]])).numpy().tolist() == [[2, 0], [1, 3]]
    assert L.StringLookup(vocabulary=["x", "y"], output_mode="one_hot")(np.array(["x", "q"])).numpy().tolist() == \
        [[0, 1, 0], [1, 0, 0]]
    assert L.StringLookup(vocabulary=["x", "y"], invert=True)(np.array([0, 1, 2])).numpy().tolist() == \
        ["[UNK]", "x", "y"]
    masked = L.StringLookup(vocabulary=["x", "y"], mask_token="", output_mode="multi_hot")
    assert masked.get_vocabulary() == ["[UNK]", "x", "y"]
    assert masked(np.array([["x", ""]])).numpy().tolist() == [[0, 1, 0]]
    tfidf = L.StringLookup(vocabulary=["x", "y"], output_mode="tf_idf", idf_weights=[1.0, 2.0])
    assert tfidf(np.array([["x", "q", "q"]])).numpy().tolist() == [[3.0, 1.0, 0.0]]   # OOV: the mean idf
    il = L.IntegerLookup()
    il.adapt(np.array([5, 7, 5, 9, 9, 9]))
    assert il.get_vocabulary() == [-1, 9, 5, 7]
    assert il(np.array([5, 9, 7, 100])).numpy().tolist() == [2, 1, 3, 0]
    assert L.IntegerLookup(vocabulary=[12, 36], output_mode="multi_hot")(np.array([[12, 1000]])).numpy().tolist() \
        == [[1, 1, 0]]
    with pytest.raises(ValueError, match="num_oov_indices=2 needs FarmHash"):
        L.StringLookup(num_oov_indices=2)


def test_lookup_layers_in_the_harness():
    words = np.array([["a", "b"], ["c", "zz"], ["b", "b"]], dtype=object)
    layer_test(L.StringLookup, {"vocabulary": ["a", "b", "c"]}, (3, 2), input_dtype="string", input_data=[words],
               expected_output_dtype="int64", check_gradients=False)
    layer_test(L.StringLookup, {"vocabulary": ["a", "b", "c"], "output_mode": "count"}, (3, 2), input_dtype="string",
               input_data=[words], expected_output_dtype="int64", check_gradients=False)
    layer_test(L.IntegerLookup, {"vocabulary": [3, 1, 4]}, (3, 2), input_dtype="int64", int_range=(0, 6),
               expected_output_dtype="int64", check_gradients=False)
    texts = np.array(["the cat sat", "a dog", "the end of it"], dtype=object)
    layer_test(L.TextVectorization, {"vocabulary": ["the", "cat", "dog"], "output_sequence_length": 5}, (3,),
               input_dtype="string", input_data=[texts], expected_output_dtype="int64", check_gradients=False)


def test_text_classifier_trains_and_saves(tmp_path):
    rng = np.random.default_rng(0)
    good, bad = ["great", "good", "fine", "nice"], ["awful", "bad", "poor", "sad"]
    texts, labels = [], []
    for i in range(64):
        words = good if i % 2 else bad
        texts.append(" ".join(rng.choice(words + ["the", "a", "movie"], size=5)))
        labels.append(i % 2)
    texts, labels = np.array(texts), np.array(labels, "float32")
    tv = L.TextVectorization(max_tokens=20, output_sequence_length=6)
    tv.adapt(texts)
    ids = tv(texts).numpy()
    model = keras.Sequential([keras.Input((6,), dtype="int64"), L.Embedding(20, 8), L.GlobalAveragePooling1D(),
                              L.Dense(1, activation="sigmoid")])
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss="binary_crossentropy", metrics=["accuracy"])
    hist = model.fit(ids, labels, epochs=8, batch_size=16, verbose=0)
    assert hist.history["accuracy"][-1] > 0.9
    # functional: a Sequential config does not keep its Input's dtype yet (engine, not these layers)
    text_in = keras.Input((), dtype="string")
    end_to_end = keras.Model(text_in, model(tv(text_in)))
    np.testing.assert_allclose(end_to_end.predict(texts[:4], verbose=0), model.predict(ids[:4], verbose=0),
                               rtol=1e-6)
    path = str(tmp_path / "text.keras")
    end_to_end.save(path)
    loaded = load_model(path)
    assert loaded.layers[1].get_vocabulary() == tv.get_vocabulary()
    np.testing.assert_allclose(loaded.predict(texts[:4], verbose=0), end_to_end.predict(texts[:4], verbose=0),
                               rtol=1e-6)


def test_text_vectorization_in_a_dataset_pipeline():
    tv = L.TextVectorization(output_sequence_length=3)
    tv.adapt(DOCS)
    ds = tw.data.Dataset.from_tensor_slices(DOCS).batch(2).map(tv)
    batches = [b.numpy().tolist() for b in ds]
    assert batches == [[[2, 3, 4], [2, 5, 2]], [[7, 6, 0]]]


def test_hashing_matches_keras():
    # bucket numbers recorded from Keras 3.15.1 on TensorFlow
    assert L.Hashing(10)(np.array(["a", "b", "hello world"])).numpy().tolist() == [9, 2, 1]
    assert L.Hashing(10)(np.array([1, 2, 300])).numpy().tolist() == [9, 9, 5]
    assert L.Hashing(10, salt=7)(np.array(["a", "b"])).numpy().tolist() == [6, 3]
    assert L.Hashing(10, salt=[3, 5])(np.array(["a", "b"])).numpy().tolist() == [1, 3]
    assert L.Hashing(10, mask_value="")(np.array(["a", ""])).numpy().tolist() == [4, 0]
    assert L.Hashing(10, mask_value=0)(np.array([0, 1, 2])).numpy().tolist() == [0, 1, 5]
    np.testing.assert_array_equal(L.Hashing(3, output_mode="one_hot")(np.array(["a", "b"])).numpy(),
                                  [[1, 0, 0], [0, 1, 0]])
    counts = L.Hashing(10, output_mode="count")(np.array([["a", "b"], ["c", "c"]])).numpy()
    np.testing.assert_array_equal(counts[1], [0, 0, 2, 0, 0, 0, 0, 0, 0, 0])
    assert counts[0, 2] == 1 and counts[0, 9] == 1
    long_text = "tensorweave " * 20   # over 64 bytes: FarmHash's long-input path
    assert L.Hashing(1000)(np.array([long_text])).numpy().tolist() == [665]
    layer_test(L.Hashing, {"num_bins": 7, "salt": 3}, (3, 2), input_dtype="int32", int_range=(0, 50),
               expected_output_dtype="int64", check_gradients=False)
    with pytest.raises(TypeError, match="hashes strings or integers, got float32"):
        L.Hashing(4)(np.array([1.5], "float32"))
