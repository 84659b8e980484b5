"""Batch-1 ``predict`` (issue 18, pred22): a thin class is timed once the model's thin weights have
all run (its weight comes round again), over copies that hold as many bytes as those weights, so
that each timed call is as far from its weight's last reading as in the model (two threads keep
their halves of the mlp's weights in L2 there, one thread cannot); a runtime helper thread is
recognised by the name its pool gives it. Scripted clocks (test_pred20_thin's ``rounds``): no
timing thresholds."""
import numpy as np
import pytest
from test_pred19_batch1 import _thin_operands, needs_openblas, needs_serial, thin  # noqa: F401
from test_pred20_thin import CLS, rounds  # noqa: F401

from tensorweave.kernels.cpu import gemm


@pytest.fixture
def waiting(rounds, monkeypatch):  # noqa: F811 - the imported fixture
    """``rounds`` with the default rule: an empty weight set of the default size; ``waiting.made``:
    the weights (``b`` and its copies) of each timing."""
    monkeypatch.setattr(gemm, "_thin_set", {})
    monkeypatch.setattr(gemm, "THIN_SET_MAX", 64)
    rounds.made = []
    real = gemm._rotating
    monkeypatch.setattr(gemm, "_rotating", lambda runners, a, bs, outs: (rounds.made.append(bs),
                                                                         real(runners, a, bs, outs))[1])
    return rounds


def _reference(a, b):
    return a.astype(np.float64) @ b


@needs_serial
@needs_openblas
def test_a_thin_class_is_timed_when_its_weight_comes_round_over_the_models_bytes(waiting, rng):
    waiting.plan = [{"mkl": 0.1}]
    a1, b1 = _thin_operands(rng)                              # 1x784 @ 784x512 (1.6 MB)
    a2, b2 = _thin_operands(rng, 512, 512)                    # 1x512 @ 512x512 (1 MB): the same class
    for a, b in ((a1, b1), (a2, b2)):                         # the first request: noted, not timed
        np.testing.assert_allclose(gemm.matmul(a, b), _reference(a, b), rtol=1e-4, atol=1e-3)
    assert waiting.rounds == 0 and CLS not in gemm.tuner().choices and not gemm._thin_chosen
    assert list(gemm._thin_set.values()) == [b1.nbytes, b2.nbytes]
    timed = gemm.matmul(a1, b1)                               # b1 came round: timed now
    assert waiting.rounds == 2 and gemm.tuner().choices[CLS]["backend"] == "mkl"
    # 2.65 MB of weights over a 1.6 MB weight: 2 of it (nearest), the copy apart from b1
    assert len(waiting.made) == 1 and len(waiting.made[0]) == 2 and waiting.made[0][0] is b1
    assert gemm._cycle_bytes(b2) == b2.nbytes and gemm._cycle_bytes(b1) == b1.nbytes + b2.nbytes
    assert not np.may_share_memory(waiting.made[0][1], b1) and np.array_equal(waiting.made[0][1], b1)
    np.testing.assert_allclose(timed, _reference(a1, b1), rtol=1e-4, atol=1e-3)
    waiting.clear()
    np.testing.assert_array_equal(gemm.matmul(a1, b1), timed)        # the class's choice, not timed again
    np.testing.assert_allclose(gemm.matmul(a2, b2), _reference(a2, b2), rtol=1e-4, atol=1e-3)
    assert waiting.rounds == 2 and not waiting


@needs_serial
@needs_openblas
@pytest.mark.parametrize("others,l2_per_weight,copies", [
    (0.0, 4, 1),            # the model's only thin weight: timed as it runs, read again at once
    (0.6, 4, 2),            # 1.6 of it: 2
    (1.4, 4, 2),            # 2.4: 2
    (10.0, 1, 4),           # more than every part's L2 twice over: capped there (2 x 2 x L2)
])
def test_the_copies_hold_the_weight_sets_bytes_at_most_every_parts_l2_twice(waiting, rng, monkeypatch, others,
                                                                           l2_per_weight, copies):
    waiting.plan = [{"one": 0.1}]
    a, b = _thin_operands(rng)
    monkeypatch.setattr(gemm, "_l2_bytes", lambda: int(b.nbytes * l2_per_weight))
    # a weight noted before b (a model run earlier) does not count
    gemm._thin_set.update({2: 50 * b.nbytes, b.__array_interface__["data"][0]: b.nbytes, 1: int(b.nbytes * others)})
    gemm.matmul(a, b)                                                     # came round: timed at once
    assert waiting.rounds == 2 and len(waiting.made[0]) == copies and waiting.made[0][0] is b


@needs_serial
@needs_openblas
def test_a_full_weight_set_times_at_once(waiting, rng, monkeypatch):
    waiting.plan = [{"cols": 0.1}]
    monkeypatch.setattr(gemm, "THIN_SET_MAX", 1)
    gemm._thin_set[1] = 123
    a, b = _thin_operands(rng)
    monkeypatch.setattr(gemm, "_l2_bytes", lambda: b.nbytes)
    np.testing.assert_allclose(gemm.matmul(a, b), _reference(a, b), rtol=1e-4, atol=1e-3)
    assert waiting.rounds == 2 and gemm.tuner().choices[CLS]["backend"] == "cols"
    assert len(waiting.made[0]) == 4                                       # b not noted: every part's L2 twice
    assert gemm._thin_set == {1: 123}                                      # nothing noted past the limit


@needs_serial
@needs_openblas
def test_a_busy_machine_notes_nothing_and_keeps_one_thread(waiting, rng, monkeypatch):
    from tensorweave.kernels.cpu import gemm_tuning
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: False)
    a, b = _thin_operands(rng)
    gemm.matmul(a, b)
    gemm.matmul(a, b)
    assert waiting.rounds == 0 and not gemm._thin_set and list(gemm._thin_chosen.values()) == ["one"]


@pytest.mark.skipif(gemm._openblas_threads() is None, reason="NumPy's BLAS is not an OpenBLAS")
def test_a_runtime_helper_thread_runs_its_products_on_one_thread():
    """The pool names its threads ``tw-<runtime>-intra_<n>``; before pred22 only a name ending in
    ``-intra`` counted, so a real helper thread read the process's share."""
    from tensorweave.core.context import current_runtime

    def on_helper():
        first = gemm.threads_here()
        return first, gemm._thread_share.helper, gemm.threads_here()
    assert current_runtime().intra_op_pool().submit(on_helper).result() == (1, True, 1)
    assert gemm._on_helper("tw-r0-intra_3") and gemm._on_helper("tw-default-intra")
    assert not gemm._on_helper("tw-rnn") and not gemm._on_helper("intra_0") and not gemm._on_helper("my_intra_1")
