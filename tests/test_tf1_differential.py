"""``tensorweave.compat.v1`` gives TensorFlow's ``tf.compat.v1`` answers: every case of
``tests/tfdiff/v1_cases.py`` run here and compared with TensorFlow 2.21's recorded result
(``tests/tfdiff/tf1_results.json``; regenerate with ``make tf-oracle`` after editing cases)."""
import functools

import pytest

from tfdiff import compare, v1_cases


@functools.lru_cache(maxsize=None)
def _results():
    """Every case's outcome, all run in the table's order once per process on first use — not at
    collection, where each xdist worker ran them all, also one that runs none of these tests."""
    return compare.outcomes("v1")


@pytest.mark.parametrize("case_id", [c[0] for c in v1_cases.all_cases()])
def test_v1_case_agrees_with_tensorflow(case_id):
    kind, ours, theirs = _results()[case_id]
    assert kind != "stale", f"{case_id}: the case changed since TF's results were recorded; run `make tf-oracle`"
    assert kind in ("agree", "deliberate"), f"{case_id} ({kind}):\n  tensorflow: {theirs}\n  tensorweave: {ours}"
    if "error" in theirs:      # TF1 programs catch these by class (tf.errors.InvalidArgumentError, ValueError...)
        assert ours["error"] == theirs["error"], f"{case_id}: raises {ours} where TensorFlow raises {theirs}"
