"""A thin product over a variable's weight may run on the weight's transpose (issue 18, pred23,
``kernels/cpu/thin_layout.py``): MKL's threads on the ``n x k`` layout are a candidate of the class
(``thinvar:``), chosen by timing as the others are, the transpose kept until the variable changes.
Scripted clocks (test_pred19_batch1's ``thin`` fixture): no timing thresholds."""
import numpy as np
import pytest
from test_pred19_batch1 import BACKENDS, KEY, _thin_operands, needs_openblas, needs_serial, thin  # noqa: F401

import tensorweave as tw
from tensorweave.core import derived
from tensorweave.kernels.cpu import gemm, gemm_route, gemm_tuning, thin_layout

CLS = "thinvar:float32:NN:1,10,10,p2"


@pytest.fixture
def flip(thin, tmp_path, monkeypatch):  # noqa: F811 - the imported fixture
    """``thin`` with a tuner that keeps ``mklT`` choices on disk too."""
    monkeypatch.setitem(gemm._tuning, "tuner", gemm_tuning.Tuner(str(tmp_path / "v.json"), KEY, BACKENDS + ("mklT",)))
    return thin


def _nt(a, b):
    """``a @ b`` by MKL's threaded NT call on ``b``'s transpose: the ``mklT`` bits."""
    out = np.empty((a.shape[0], b.shape[1]), a.dtype)
    m, k = a.shape
    gemm._gemm[a.dtype](gemm._NO_TRANS, gemm._TRANS, m, b.shape[1], k, a, k, np.ascontiguousarray(b.T), k, out,
                        b.shape[1])
    return out


@needs_serial
@needs_openblas
def test_a_variables_weight_takes_its_transpose_where_that_is_timed_faster(flip, rng):
    flip.seconds = {"mklT": 0.1}
    a, b = _thin_operands(rng)
    derived.track(b)                                       # as a variable tracks its storage
    first = gemm.matmul(a, b)
    entry = gemm.tuner().choices[CLS]
    assert entry["backend"] == "mklT" and entry["settled"] and "mklT_us" in entry and "mkl_us" in entry
    assert gemm_tuning.Tuner(gemm.tuner().path, KEY, BACKENDS + ("mklT",)).backend(CLS) == "mklT"   # on disk
    np.testing.assert_allclose(first, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(first, _nt(a, b))
    kept = thin_layout.transposed(b)
    flip.clear()
    np.testing.assert_array_equal(gemm.matmul(a, b), first)           # not timed again, the same bits
    assert not flip and thin_layout.transposed(b) is kept and not kept.flags.writeable
    assert gemm_route.decision(a, b) == (CLS, "mklT", True)
    b[0] += 1.0
    derived.modified(b)                                    # an update in place (Variable._storage_for_update)
    assert thin_layout.transposed(b) is not kept
    np.testing.assert_allclose(gemm.matmul(a, b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)


@needs_serial
@needs_openblas
@pytest.mark.parametrize("case", ["plain array", "transposed operand"])
def test_no_transposed_candidate_but_for_a_variables_k_by_n_weight(flip, rng, case):
    flip.seconds = {"mklT": 0.1}
    a, b = _thin_operands(rng)
    if case == "transposed operand":                       # a tracked n x k array read as its transpose
        b = np.ascontiguousarray(b.T)
        derived.track(b)
        b = b.T
    got = gemm.matmul(a, b)
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    assert "mklT" not in flip and CLS not in gemm.tuner().choices
    assert gemm.tuner().choices["thincold:float32:" + ("NT" if case != "plain array" else "NN") + ":1,10,10,p2"]
    assert "mklT" not in gemm._thin_chosen.values()


@needs_serial
@needs_openblas
def test_a_models_weights_updated_by_training_and_assignment_are_read_afresh(flip):
    flip.seconds = {"mklT": 0.1}
    keras = tw.keras
    keras.utils.set_random_seed(2)
    model = keras.Sequential([keras.Input((512,)), keras.layers.Dense(128, activation="relu"), keras.layers.Dense(3)])
    model.compile(optimizer="adam", loss="mse")
    x = np.random.default_rng(0).standard_normal((1, 512)).astype(np.float32)

    def reference():
        (k1, b1), (k2, b2) = [(layer.kernel.numpy(), layer.bias.numpy()) for layer in model.layers]
        return np.maximum(x.astype(np.float64) @ k1 + b1, 0) @ k2 + b2
    np.testing.assert_allclose(model.predict_on_batch(x), reference(), rtol=1e-4, atol=1e-4)
    # 512 x 128 (256 KiB): thin
    assert "mklT" in flip and gemm.tuner().choices["thinvar:float32:NN:1,8,10,p2"]["backend"] == "mklT"
    model.train_on_batch(np.ones((2, 512), np.float32), np.ones((2, 3), np.float32))   # Adam, in place
    np.testing.assert_allclose(model.predict_on_batch(x), reference(), rtol=1e-4, atol=1e-4)
    kernel = model.layers[0].kernel
    kernel.assign(kernel.numpy() * 0.5)                    # a new array stored
    np.testing.assert_allclose(model.predict_on_batch(x), reference(), rtol=1e-4, atol=1e-4)


@needs_serial
@needs_openblas
@pytest.mark.parametrize("tracked", [True, False])
def test_a_batch1_product_above_the_one_thread_size_may_take_the_transpose_too(flip, rng, monkeypatch, tracked):
    monkeypatch.setitem(gemm._serial_work, np.dtype(np.float32), 1)          # 1x784 @ 784x512: "threads"
    flip.seconds = {"mklT": 0.1}
    a, b = _thin_operands(rng)
    if tracked:
        derived.track(b)
    assert gemm.route(a.dtype, 1, 512, 784) == "threads"
    got = gemm.matmul(a, b)
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    cls = ("threadsvar:" if tracked else "threads:") + "float32:NN:1,10,10,p2"
    assert gemm.tuner().choices[cls]["backend"] == ("mklT" if tracked else "cols")
    assert ("mklT" in flip) is tracked
    assert gemm_route.decision(a, b)[:2] == (cls, "mklT" if tracked else "cols")
    if tracked:
        np.testing.assert_array_equal(got, _nt(a, b))
        flip.clear()
        np.testing.assert_array_equal(gemm.matmul(a, b), got)        # not timed again, the same bits
        assert not flip


@needs_serial
@needs_openblas
def test_the_layout_switched_off_leaves_the_classes_as_before(flip, rng, monkeypatch):
    monkeypatch.setattr(thin_layout, "ON", False)                          # TW_THIN_LAYOUT=0
    flip.seconds = {"mklT": 0.1}
    a, b = _thin_operands(rng)
    derived.track(b)
    np.testing.assert_allclose(gemm.matmul(a, b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    assert "mklT" not in flip and CLS not in gemm.tuner().choices
    assert "thincold:float32:NN:1,10,10,p2" in gemm.tuner().choices


@needs_serial
@needs_openblas
@pytest.mark.parametrize("route", ["thin", "threads"])
def test_a_transpose_timed_but_not_chosen_is_not_kept(flip, rng, monkeypatch, route):
    if route == "threads":
        monkeypatch.setitem(gemm._serial_work, np.dtype(np.float32), 1)
    flip.seconds = {"mkl": 0.1}
    a, b = _thin_operands(rng)
    derived.track(b)
    np.testing.assert_allclose(gemm.matmul(a, b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    assert "mklT" in flip and gemm_route.decision(a, b)[1] == "mkl"
    # nothing derived from b is kept (not the process-wide byte count: another test's arrays,
    # freed meanwhile, drop theirs)
    assert thin_layout.KEY not in derived._slots[id(b)].values
