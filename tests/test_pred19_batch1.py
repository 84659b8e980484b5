"""Batch-1 inference (issue 18, pred19): ``predict_on_batch`` gives the bits of ``model(x)`` and of
the traced graph, retraces for a new input signature; a thin product's (batch-1 layer's) choice of
threads (``gemm._thin_choice``) and a one-thread timing made before MKL's stub is compiled (held for
the process only). Scripted clocks: no timing thresholds."""
import json

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.kernels.cpu import gemm, gemm_tuning

KEY = {"cpu": "Test CPU 9000", "cores": 2, "versions": {"mkl": "m1", "numpy": "n1"}}
BACKENDS = gemm.WAYS
needs_serial = pytest.mark.skipif(not gemm._gemm_serial, reason="MKL with a per-thread setting is not loaded")
needs_openblas = pytest.mark.skipif(gemm._openblas_threads() is None, reason="NumPy's BLAS is not an OpenBLAS")
F32 = np.dtype(np.float32)


def _mlp(width=64):
    keras = tw.keras
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((40,)), keras.layers.Dense(width, activation="relu"),
                             keras.layers.Dense(width, activation="relu"), keras.layers.Dense(3)])


def _reference(model, x):
    """The model's forward pass in float64 NumPy."""
    h = x.astype(np.float64)
    for i, layer in enumerate(model.layers):
        h = h @ layer.kernel.numpy().astype(np.float64) + layer.bias.numpy()
        h = np.maximum(h, 0) if i < 2 else h
    return h


# ---- predict_on_batch == model(x) == the graph --------------------------------------------------------
def test_batch1_predict_gives_the_bits_of_the_call_and_of_the_graph():
    model = _mlp()
    x = np.random.default_rng(0).standard_normal((1, 40)).astype(np.float32)
    got = model.predict_on_batch(x)
    assert type(got) is np.ndarray and got.shape == (1, 3) and got.dtype == np.float32
    np.testing.assert_allclose(got, _reference(model, x), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got, model(x).numpy())
    np.testing.assert_array_equal(got, tw.function(lambda t: model(t, training=False))(tw.constant(x)).numpy())
    for _ in range(3):                                   # the steady state: the repeated-call path
        np.testing.assert_array_equal(model.predict_on_batch(x), got)
    np.testing.assert_array_equal(model.predict(x, verbose=0), got)


def test_a_new_input_signature_retraces_and_the_old_one_still_answers():
    model = _mlp()
    rng = np.random.default_rng(1)
    one, three = (rng.standard_normal((n, 40)).astype(np.float32) for n in (1, 3))
    first = model.predict_on_batch(one)
    fn = model.make_predict_function()
    traced = len(fn._fast)
    batch = model.predict_on_batch(three)
    assert batch.shape == (3, 3) and len(fn._fast) == traced + 1          # a second concrete function
    np.testing.assert_allclose(batch, _reference(model, three), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(model.predict_on_batch(one), first)     # the first one kept
    wide = model.predict_on_batch(one.astype(np.float64))                 # float64 request: converted
    assert wide.dtype == np.float32
    np.testing.assert_allclose(wide, first, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="40|shape|expect"):
        model.predict_on_batch(np.zeros((1, 41), np.float32))


# ---- the thin product's threads ---------------------------------------------------------------------
@pytest.fixture
def thin(monkeypatch, tmp_path):
    """A fresh tuner on a temporary file, nothing chosen, two parts, a quiet machine, one-thread
    products up to any size, a thin class timed at its first product; returns the log of the backends each timed call ran."""
    monkeypatch.setitem(gemm._tuning, "tuner", gemm_tuning.Tuner(str(tmp_path / "t.json"), KEY, BACKENDS))
    monkeypatch.setitem(gemm._tuning, "on", False)
    monkeypatch.setitem(gemm._split, "on", True)
    for name in ("_thin_chosen", "_serial_chosen", "_split_chosen"):
        monkeypatch.setattr(gemm, name, {})
    monkeypatch.setattr(gemm, "_thin_pending", set())
    # a full weight set: a class is timed at its first product (waiting for its weight to come
    # round, the default, is test_pred22_thin_set's)
    monkeypatch.setattr(gemm, "_thin_set", {})
    monkeypatch.setattr(gemm, "THIN_SET_MAX", 0)
    monkeypatch.setitem(gemm._serial_work, F32, 1 << 40)
    monkeypatch.setattr(gemm, "split_parts", lambda: 2)
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: True)
    from tensorweave.kernels.cpu import thin_gemm                  # no parallel loop to wait for
    monkeypatch.setattr(thin_gemm, "ready", lambda args: False)
    monkeypatch.setattr(thin_gemm, "possible", lambda: False)
    log = _Log()

    def timed(backend, run):
        run()
        log.append(backend)
        return log.seconds.get(backend, 1.0)
    monkeypatch.setattr(gemm_tuning, "_time_call", timed)
    return log


class _Log(list):
    """The timed calls' backends; ``seconds[backend]``: what each timed call of it 'takes' (1 s
    unless given)."""

    def __init__(self):
        super().__init__()
        self.seconds = {}


def _thin_operands(rng, n=512, k=784, m=1):
    return rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)


@needs_serial
@needs_openblas
@pytest.mark.parametrize("faster", ["one", "mkl", "cols"])
def test_a_thin_class_runs_its_measured_backend_and_keeps_its_bits(thin, rng, monkeypatch, faster):
    thin.seconds = {faster: 0.1}
    runs = []
    real_split = gemm._run_split
    monkeypatch.setattr(gemm, "_run_split", lambda axis, *args: (runs.append(axis), real_split(axis, *args)))
    a, b = _thin_operands(rng)
    first = gemm.matmul(a, b)                                             # timed here
    np.testing.assert_allclose(first, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    cls = "thincold:float32:NN:1,10,10,p2"
    entry = gemm.tuner().choices[cls]
    assert entry["backend"] == faster and entry["settled"] and {"one_us", "mkl_us", "cols_us"} <= set(entry)
    assert thin.count("one") >= gemm_tuning.MIN_CALLS and thin.count("cols") == thin.count("mkl")
    with open(gemm.tuner().path, encoding="utf-8") as f:
        assert json.load(f)["choices"][cls]["backend"] == faster
    thin.clear()
    runs.clear()
    again = gemm.matmul(a, b)
    assert not [x for x in thin if x in ("one", "mkl", "cols")]           # not timed again
    assert runs == (["cols"] if faster == "cols" else [])
    np.testing.assert_array_equal(first, again)                           # the first call: the choice's bits


@needs_serial
@needs_openblas
def test_one_thread_is_the_incumbent_of_a_tie(thin, rng):
    a, b = _thin_operands(rng)
    gemm.matmul(a, b)                                                     # every candidate 'takes' 1 s
    assert gemm.tuner().backend("thincold:float32:NN:1,10,10,p2") == "one"


@needs_serial
@needs_openblas
@pytest.mark.parametrize("n,split", [(32, True), (31, False)])
def test_the_column_split_is_a_candidate_from_two_min_parts(thin, rng, n, split):
    a, b = _thin_operands(rng, n, 2 * gemm.THIN_BYTES // (4 * n))
    np.testing.assert_allclose(gemm.matmul(a, b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    assert ("cols" in thin) is split and "mkl" in thin


@needs_serial
@needs_openblas
def test_a_busy_machine_keeps_one_thread_untimed_for_the_process(thin, rng, monkeypatch):
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: False)
    thin.seconds = {"mkl": 0.01, "cols": 0.01}
    a, b = _thin_operands(rng)
    np.testing.assert_allclose(gemm.matmul(a, b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    assert not [x for x in thin if x in ("one", "mkl", "cols")]
    assert list(gemm._thin_chosen.values()) == ["one"]
    assert not any(c.startswith("thincold:") for c in gemm.tuner().choices)


@needs_serial
@needs_openblas
@pytest.mark.parametrize("case", ["one part", "blocks here", "no split", "small operand", "rows", "one_thread"])
def test_no_thin_choice_where_no_second_thread_or_not_thin(thin, rng, monkeypatch, case):
    thin.seconds = {"mkl": 0.01, "cols": 0.01}
    a, b = _thin_operands(rng)
    one_thread = False
    if case == "one part":
        monkeypatch.setattr(gemm, "split_parts", lambda: 1)
    elif case == "no split":
        monkeypatch.setitem(gemm._split, "on", False)
    elif case == "small operand":                                          # 255 x 256 floats: under THIN_BYTES
        a, b = _thin_operands(rng, 256, 255, m=2)
    elif case == "rows":                                                   # MIN_PART rows: not thin
        a = rng.standard_normal((gemm.MIN_PART, b.shape[0])).astype(np.float32)
    elif case == "one_thread":
        one_thread = True
    if case == "blocks here":
        with gemm.blocks_here(2):
            got = gemm.matmul(a, b, one_thread=one_thread)
    else:
        got = gemm.matmul(a, b, one_thread=one_thread)
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    assert not [x for x in thin if x in ("one", "mkl", "cols")]
    assert not any(c.startswith("thincold:") for c in gemm.tuner().choices)
    assert set(gemm._thin_chosen.values()) <= {"one"}


@needs_serial
@needs_openblas
def test_the_thin_threshold_is_at_thin_bytes(thin, rng):
    thin.seconds = {"mkl": 0.01}
    k = gemm.THIN_BYTES // (4 * 128)
    a, b = _thin_operands(rng, 128, k, m=2)                                # exactly THIN_BYTES
    gemm.matmul(a, b)
    assert "mkl" in thin
    thin.clear()
    a, b = _thin_operands(rng, 127, k, m=2)                                # one column less
    gemm.matmul(a, b)
    assert "mkl" not in thin


# ---- a one-thread timing made before MKL's stub is compiled ------------------------------------------
@needs_serial
@needs_openblas
@pytest.mark.parametrize("compiled", [True, False])
def test_a_one_thread_timing_settles_only_with_the_stub_compiled(thin, rng, monkeypatch, compiled):
    monkeypatch.setattr(gemm, "_stub_compiled", lambda a, b, out: compiled)
    thin.seconds = {"numpy1": 0.1}
    a, b = rng.standard_normal((64, 64)).astype(np.float32), rng.standard_normal((64, 32)).astype(np.float32)
    np.testing.assert_allclose(gemm.matmul(a, b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    cls = "serial:float32:NN:7,6,7"
    assert gemm.tuner().choices[cls]["backend"] == "numpy1"
    assert gemm.tuner().choices[cls]["settled"] is compiled
    on_disk = gemm_tuning.Tuner(gemm.tuner().path, KEY, BACKENDS).backend(cls)
    assert on_disk == ("numpy1" if compiled else None)


@needs_serial
def test_the_stub_check_reads_the_operands_types():
    """``_stub_compiled`` asks about the types a call would have: compiled for C-ordered float32
    operands, and for no integer output."""
    from tensorweave.kernels.cpu import jit
    a, b, out = np.ones((2, 3), np.float32), np.ones((3, 4), np.float32), np.empty((2, 4), np.float32)
    f = gemm._gemm_serial[F32]
    jit.compile_now(gemm._call_threads, *f.args, gemm._NO_TRANS, gemm._NO_TRANS, 2, 4, 3, a, 3, b, 4, out, 4)
    assert gemm._stub_compiled(a, b, out)
    assert not gemm._stub_compiled(a, b, out.astype(np.int32))             # no such signature


@needs_openblas
def test_numpy_serial_holds_one_thread_and_restores_the_count():
    get, put = gemm._openblas_threads()
    before = get()
    put(2)                                                                # a count the hold must give back
    try:
        seen = []
        a, b, out = np.ones((2, 3), np.float32), np.ones((3, 2), np.float32), np.empty((2, 2), np.float32)
        gemm._numpy_serial(a, b, out)
        seen.append(get())
        with gemm._openblas_one_thread():                                 # nested holders: one count
            seen.append(get())
            gemm._numpy_serial(a, b, out)
            seen.append(get())
        seen.append(get())
    finally:
        put(before)
    assert seen == [2, 1, 1, 2]
    np.testing.assert_array_equal(out, a @ b)
