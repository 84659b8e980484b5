"""A checkpointed generator-backed iterator is restored by replaying the generator; the count
comes from the file, so it is bounded: by the dataset's cardinality where known, by
``MAX_GENERATOR_REPLAY`` otherwise, with a clear error and without replaying."""
import numpy as np
import pytest

import tensorweave as tw
import tensorweave.data
from tensorweave.data import iterators


def _iterator(calls):
    def gen():
        i = 0
        while True:
            calls.append(i)
            yield np.float32(i)
            i += 1
    ds = tw.data.Dataset.from_generator(gen, output_signature=tw.TensorSpec([], tw.float32))
    return iter(ds)


def _state(count):
    calls = []
    it = _iterator(calls)
    for _ in range(3):
        next(it)
    state, arrays = it._checkpoint_state()
    state["iterator"]["fields"]["_count"] = count
    return state, arrays


def test_a_crafted_replay_count_is_refused_without_replaying():
    state, arrays = _state(10 ** 16)
    calls = []
    it = _iterator(calls)
    with pytest.raises(ValueError, match="replay the Python generator for 10000000000000000 elements, more than the "
                                         "limit of 10000000"):
        it._restore_checkpoint_state(state, arrays)
    assert calls == []


def test_the_limit_can_be_raised_and_honest_counts_replay(monkeypatch):
    state, arrays = _state(5)
    monkeypatch.setattr(iterators, "MAX_GENERATOR_REPLAY", 4)
    with pytest.raises(ValueError, match="limit of 4"):
        _iterator([])._restore_checkpoint_state(state, arrays)
    monkeypatch.setattr(iterators, "MAX_GENERATOR_REPLAY", 5)
    it = _iterator([])
    it._restore_checkpoint_state(state, arrays)
    assert float(next(it)) == 5.0


def test_a_count_past_a_known_cardinality(monkeypatch):
    state, arrays = _state(50)
    it = _iterator([])
    monkeypatch.setattr(type(it._impl._ds), "_cardinality", lambda self: 10, raising=False)
    with pytest.raises(ValueError, match="saved position 50 is past the end of the generator's 10 elements"):
        it._restore_checkpoint_state(state, arrays)
