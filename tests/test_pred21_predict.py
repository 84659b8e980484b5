"""Batch-1 ``predict`` overhead (issue 18, pred21): the calling thread's share of the cores is read
without an exception per product (``gemm._thread_share`` has class defaults), and a thin class's
timing settles through the shared rule ``gemm_tuning.agree``. Scripted clocks (the ``rounds``
fixture of test_pred20_thin): no timing thresholds."""
import threading

import numpy as np
import pytest
from test_pred19_batch1 import _mlp, _thin_operands, needs_openblas, needs_serial, thin  # noqa: F401
from test_pred20_thin import CLS, rounds  # noqa: F401

from tensorweave.kernels.cpu import gemm, gemm_tuning


def _in_thread(fn):
    """``fn()`` on a new thread; its result (or its exception, raised here)."""
    out = []
    t = threading.Thread(target=lambda: out.append(_call(fn)))
    t.start()
    t.join()
    if isinstance(out[0], BaseException):
        raise out[0]
    return out[0]


def _call(fn):
    try:
        return fn()
    except BaseException as e:  # noqa: BLE001 - handed back to the test's thread
        return e


def test_a_fresh_thread_reads_no_cap_and_no_blocks_from_the_class_defaults():
    def fresh():
        share = gemm._thread_share
        own = dict(share.__dict__)                     # nothing set on this thread yet
        return own, share.here, share.parts, gemm.inside_blocks_here()
    assert _in_thread(fresh) == ({}, None, None, False)


def test_a_threads_cap_and_blocks_stay_its_own():
    before = gemm.limit_split_here(1)
    try:
        with gemm.blocks_here(3):
            assert gemm.split_parts() == 3 and gemm.inside_blocks_here()
            other = _in_thread(lambda: (gemm._thread_share.here, gemm._thread_share.parts,
                                        gemm.inside_blocks_here(), gemm.split_parts() == (gemm.threads_here() or 1)
                                        if gemm._split["on"] else True))
            assert other == (None, None, False, True)
        assert not gemm.inside_blocks_here() and gemm._thread_share.here is None
        assert gemm._thread_share.parts == 1
        if gemm._split["on"] and gemm.threads_here() is not None:
            assert gemm.split_parts() == 1                                # the cap holds on this thread
    finally:
        gemm.limit_split_here(before)
    assert gemm._thread_share.parts is before


@needs_serial
@needs_openblas
@pytest.mark.parametrize("plan,calls", [
    ([{"mkl": 0.1}], [(("mkl", True), ("mkl", True))]),
    ([{"mkl": 0.1}, {"cols": 0.1}, {"cols": 0.1}], [(("mkl", True), ("cols", True)),
                                                    (("cols", True), ("cols", True))]),
])
def test_a_thin_timing_settles_through_gemm_tuning_agree(rounds, rng, monkeypatch, plan, calls):  # noqa: F811
    rounds.plan = plan
    seen = []
    real = gemm_tuning.agree

    def agree(first, second, default, *args):
        seen.append((first, second))
        assert default == "one"                     # the incumbent where two picks disagree
        return real(first, second, default, *args)
    monkeypatch.setattr(gemm_tuning, "agree", agree)
    a, b = _thin_operands(rng)
    got = gemm.matmul(a, b)
    assert seen == calls and gemm.tuner().choices[CLS]["rounds"] == len(calls) + 1
    assert gemm.tuner().choices[CLS]["backend"] == calls[-1][1][0]
    np.testing.assert_array_equal(gemm.matmul(a, b), got)                  # the choice's bits again


@needs_serial
@needs_openblas
def test_agree_saying_no_keeps_one_thread_for_the_process(rounds, rng, monkeypatch):  # noqa: F811
    rounds.plan = [{"mkl": 0.1}]
    monkeypatch.setattr(gemm_tuning, "agree", lambda first, second, default, *args: (default, False))
    a, b = _thin_operands(rng)
    gemm.matmul(a, b)
    entry = gemm.tuner().choices[CLS]
    assert entry["backend"] == "one" and entry["settled"] is False and entry["rounds"] == gemm.THIN_ROUNDS
    assert list(gemm._thin_chosen.values()) == ["one"]


def test_batch1_predict_keeps_its_bits_on_another_thread():
    """The repeated-call path on a thread that never set a share gives the calling thread's bits."""
    model = _mlp()
    x = np.random.default_rng(2).standard_normal((1, 40)).astype(np.float32)
    here = model.predict_on_batch(x)
    np.testing.assert_array_equal(_in_thread(lambda: model.predict_on_batch(x)), here)
    np.testing.assert_array_equal(model(x).numpy(), here)
