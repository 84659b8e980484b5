"""Same answers as TensorFlow: every case of ``tests/tfdiff/cases.py`` run in tensorweave and
compared with TensorFlow's recorded result (``tests/tfdiff/tf_results.json``; TensorFlow itself
is not needed). Regenerate the record with ``make tf-oracle`` after adding or editing cases.

A case passes when it agrees (both raise, or equal dtypes, shapes and values), or when it is a
deliberate difference listed with its reason in ``tests/tfdiff/differences.py``.
"""
import functools

import pytest

from tfdiff import cases, compare
from tfdiff.differences import DELIBERATE

# TF names not implemented yet; each is an xfail so that adding the name makes it pass.
KNOWN_GAPS = {}


@functools.lru_cache(maxsize=None)
def _results():
    """Every case's outcome, all run in the table's order once per process on first use — not at
    collection, where each xdist worker ran them all, also one that runs none of these tests."""
    return compare.outcomes()


@pytest.mark.parametrize("case_id", [c[0] for c in cases.all_cases()])
def test_case_agrees_with_tensorflow(case_id):
    kind, ours, theirs = _results()[case_id]
    if case_id in KNOWN_GAPS and kind != "agree":
        pytest.xfail(KNOWN_GAPS[case_id])
    assert kind != "stale", f"{case_id}: the case changed since TF's results were recorded; run `make tf-oracle`"
    assert kind in ("agree", "deliberate"), f"{case_id} ({kind}):\n  tensorflow: {theirs}\n  tensorweave: {ours}"


@pytest.mark.parametrize("case_id", sorted(DELIBERATE))
def test_deliberate_differences_really_differ(case_id):
    # An entry that agrees again (or was renamed) must leave the list, and with it the docs page.
    assert case_id in _results(), f"{case_id} is not a case"
    assert _results()[case_id][0] == "deliberate", f"{case_id} agrees with TensorFlow now: drop it from DELIBERATE"


def test_agreement_figure_covers_every_case():
    counts = compare.summary(_results())
    assert sum(counts.values()) == len(cases.all_cases()) >= 800
    assert counts.get("differ", 0) == 0 and counts.get("stale", 0) == 0
