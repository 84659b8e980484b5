"""A 2-D Einsum product that ``gemm.route`` sends to one thread for its size, split by rows over the
intra-op threads where its class measured the split faster (``einsum_matmul.one_or_rows``, issue 18
session 23, enc27), and ``FusedEinsum``'s bias and ReLU over each row block after its product
(``einsum_matmul.contract_then``): every way equals np.einsum (float64), the epilogue in blocks
gives the bits of the pass after the product, the class is timed on a quiet machine only, a cached
choice is used as it is, inside ``gemm.blocks_here`` the blocks stay on this thread, and the
products that are not one 2-D product in the output's order keep their route."""
import functools
import threading

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.kernels.cpu import einsum_bias_kernels, einsum_matmul, gemm, gemm_tuning, nn_loops
from scripted_tuner import ScriptedTuner

pytestmark = pytest.mark.skipif(not gemm._gemm_serial, reason="needs MKL's one-thread GEMM (gemm._gemm_serial)")
RNG = np.random.default_rng(27)
#: (equation, shapes): a Dense on a sequence, the Q/K/V group's stacked weights, the weight
#: gradient (left operand transposed), the input gradient (right operand transposed)
CASES = [("abc,cd->abd", ((1, 64, 32), (32, 40))),
         ("abc,cfde->abfde", ((1, 64, 32), (32, 3, 2, 8))),
         ("abc,abd->cd", ((2, 40, 48), (2, 40, 36))),
         ("abd,cd->abc", ((2, 20, 36), (48, 36)))]


#: the ``einsum-rows:`` classes scripted: ``_Tuner(cached=None, pick="one")``
_Tuner = functools.partial(ScriptedTuner, "einsum-rows:")


@pytest.fixture
def rows(monkeypatch):
    """``setup(tuner, quiet=True, serial=True)``: two split parts, every product under
    ``gemm.serial_work`` where ``serial`` (else none is), the choices emptied; records the split
    products (``gemm._run_split``'s calls) and the threads their blocks ran on."""
    calls, threads = [], set()

    def setup(tuner, quiet=True, serial=True):
        monkeypatch.setattr(einsum_matmul, "_rows_chosen", {})
        monkeypatch.setattr(gemm, "split_parts", lambda: 2)
        monkeypatch.setattr(gemm, "tuner", lambda: tuner)
        monkeypatch.setattr(gemm_tuning, "quiet", lambda: quiet)
        limit = (1 << 40) if serial else 1
        monkeypatch.setattr(gemm, "_serial_work", {np.dtype(np.float32): limit, np.dtype(np.float64): limit})
        real_split, real_share = gemm._run_split, gemm.share_tasks

        def split(*args, **kwargs):
            calls.append(args[0])
            return real_split(*args, **kwargs)

        def share(tasks, parts):
            def on(task):
                return lambda: threads.add(threading.get_ident()) or task()
            return real_share([on(t) for t in tasks], parts)
        monkeypatch.setattr(gemm, "_run_split", split)
        monkeypatch.setattr(gemm, "share_tasks", share)
        return calls, threads
    return setup


def _ways():
    """The ways this process's geometries took (``einsum_matmul._rows_chosen``)."""
    return [way for way, _ in einsum_matmul._rows_chosen.values()]


def _contract(eq, shapes, dtype=np.float64):
    a, b = (RNG.standard_normal(s).astype(dtype) for s in shapes)
    lhs, so = eq.split("->")
    return einsum_matmul.contract(a, b, *lhs.split(","), so), np.einsum(eq, a.astype(np.float64), b.astype(np.float64))


@pytest.mark.parametrize("way", ["one", "rows"])
@pytest.mark.parametrize("eq,shapes", CASES)
def test_each_way_equals_numpy(rows, way, eq, shapes):
    calls, _ = rows(_Tuner(cached=way))
    got, want = _contract(eq, shapes)
    assert got.shape == want.shape and got.flags.c_contiguous
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert calls == (["rows"] if way == "rows" else [])
    got32, want32 = _contract(eq, shapes, np.float32)
    assert got32.dtype == np.float32
    np.testing.assert_allclose(got32, want32, rtol=2e-5, atol=2e-5)


def test_timed_on_a_quiet_machine_and_the_choice_kept(rows):
    tuner = _Tuner(pick="rows")
    calls, _ = rows(tuner)
    got, want = _contract(*CASES[0])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert tuner.timed == [("einsum-rows:float64:NN:7,6,6,p2", ["one", "rows"], "one")]
    assert calls == ["rows", "rows"]          # (the timing's split, then the product returned)
    assert _ways() == ["rows"]
    _contract(*CASES[0])
    assert len(tuner.timed) == 1 and calls == ["rows"] * 3


def test_the_transposed_operands_name_their_class(rows):
    tuner = _Tuner(pick="one")
    rows(tuner)
    _contract(*CASES[2])
    _contract(*CASES[3])
    assert [c[0] for c in tuner.timed] == ["einsum-rows:float64:TN:6,6,7,p2", "einsum-rows:float64:NT:6,6,6,p2"]


def test_no_timing_under_load_one_thread_kept(rows):
    tuner = _Tuner(pick="rows")
    calls, _ = rows(tuner, quiet=False)
    _contract(*CASES[0])
    assert tuner.timed == [] and calls == [] and _ways() == ["one"]


@pytest.mark.parametrize("why", ["above the threshold", "few rows", "one part", "batch", "order", "vector"])
def test_other_products_keep_their_route(rows, monkeypatch, why):
    tuner = _Tuner(cached="rows")
    calls, _ = rows(tuner, serial=why != "above the threshold")
    eq, shapes = CASES[0]
    if why == "few rows":
        shapes = ((1, 31, 64), (64, 40))
    elif why == "one part":
        monkeypatch.setattr(gemm, "split_parts", lambda: 1)
    elif why == "batch":       # a stack of products (attention's heads): the stack's own ways
        eq, shapes = "abc,acd->abd", ((2, 64, 32), (2, 32, 40))
    elif why == "vector":      # no free letter in the right operand: a matrix-vector product
        eq, shapes = "abc,c->ab", ((1, 64, 2048), (2048,))
    elif why == "order":       # the right operand's letters first in the output: _product's swap
        eq = "abc,cd->dab"
        monkeypatch.setattr(einsum_matmul, "_min_split", {np.dtype(np.float64): 1 << 40})
    got, want = _contract(eq, shapes)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert tuner.timed == [] and (calls == [] or why == "above the threshold")   # (there: gemm's own split)
    assert _ways() == ([] if why in ("one part", "batch", "order", "vector") else ["route"])


def test_inside_blocks_here_the_blocks_stay_on_this_thread_with_the_same_bits(rows):
    calls, threads = rows(_Tuner(cached="rows"))
    a, b = (RNG.standard_normal(s) for s in CASES[0][1])
    outside = einsum_matmul.contract(a, b, "abc", "cd", "abd")
    threads.clear()
    with gemm.blocks_here(2):
        inside = einsum_matmul.contract(a, b, "abc", "cd", "abd")
    assert threads == {threading.get_ident()} and calls == ["rows", "rows"]
    np.testing.assert_array_equal(inside, outside)


@pytest.mark.parametrize("way", ["one", "rows"])
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("eq,shapes,bias_shape", [("abc,cd->abd", CASES[0][1], (40,)),
                                                  ("abc,cfde->abfde", CASES[1][1], (3, 2, 8)),
                                                  ("abc,cfde->abfde", CASES[1][1], (8,))])
def test_bias_and_relu_in_the_blocks_give_the_pass_after_the_product(rows, way, relu, eq, shapes, bias_shape):
    calls, _ = rows(_Tuner(cached=way))
    for dtype in (np.float64, np.float32):
        a, b = (RNG.standard_normal(s).astype(dtype) for s in shapes)
        bias = RNG.standard_normal(bias_shape).astype(dtype)
        got = einsum_bias_kernels.fused_einsum(a, b, bias, eq, relu)
        lhs, so = eq.split("->")
        want = einsum_matmul.contract(a, b, *lhs.split(","), so)
        nn_loops.bias_act(want.reshape(-1, bias.size), bias.reshape(-1), relu)
        np.testing.assert_array_equal(got, want)
        ref = np.einsum(eq, a.astype(np.float64), b.astype(np.float64)) + bias
        np.testing.assert_allclose(got, np.maximum(ref, 0) if relu else ref, rtol=2e-5, atol=2e-5)
    assert calls == (["rows"] * 4 if way == "rows" else [])


@pytest.mark.parametrize("way", ["one", "rows"])
@pytest.mark.parametrize("eq,shapes,bias_shape", [("abc,cd->abd", CASES[0][1], (40,)),
                                                  ("abc,cfde->abfde", CASES[1][1], (3, 2, 8))])
def test_the_bias_runs_once_per_block_of_rows(rows, monkeypatch, way, eq, shapes, bias_shape):
    """Split: one pass per block of 32 rows, each after its block's product; one thread: one pass
    over the 64 rows (the epilogue inside ``contract_then``, not after the whole product)."""
    rows(_Tuner(cached=way))
    passes, real = [], nn_loops.bias_act
    monkeypatch.setattr(nn_loops, "bias_act", lambda y, b, relu: passes.append(y.size // b.size) or real(y, b, relu))
    monkeypatch.setattr(einsum_matmul, "contract", None)      # (the product's own path only)
    a, b = (RNG.standard_normal(s) for s in shapes)
    einsum_bias_kernels.fused_einsum(a, b, RNG.standard_normal(bias_shape), eq, False)
    per_row = int(np.prod(shapes[1][1:])) // int(np.prod(bias_shape))
    assert passes == ([32 * per_row] * 2 if way == "rows" else [64 * per_row])


def test_a_bias_over_a_left_axis_takes_the_pass_after_the_product(rows):
    calls, _ = rows(_Tuner(cached="rows"))
    a, b = RNG.standard_normal((1, 64, 32)), RNG.standard_normal((32, 40))
    bias = RNG.standard_normal((64, 40))          # [T, D]: the rows' axis too, not a whole number per row
    got = einsum_bias_kernels.fused_einsum(a, b, bias, "abc,cd->abd", False)
    np.testing.assert_allclose(got, np.einsum("abc,cd->abd", a, b) + bias, rtol=1e-12, atol=1e-12)
    assert calls == ["rows"]                      # (the product still split; the bias as one pass after)


@pytest.mark.parametrize("bias", [np.zeros(41), np.zeros(40, np.float32), np.zeros((2, 40))])
def test_a_wrong_bias_is_still_named(rows, bias):
    rows(_Tuner(cached="rows"))
    a, b = RNG.standard_normal((1, 64, 32)), RNG.standard_normal((32, 40))
    with pytest.raises(ValueError, match=r"FusedEinsum \(abc,cd->abd\): bias .* trailing axes and dtype"):
        einsum_bias_kernels.fused_einsum(a, b, bias, "abc,cd->abd", False)


@pytest.mark.parametrize("way", ["one", "rows"])
def test_gradients_through_split_products_match_finite_differences(rows, way):
    """A Dense on a sequence (forward and both gradients are in-order 2-D products) in float64."""
    rows(_Tuner(cached=way))
    rng = np.random.default_rng(5)          # (its own: the draws do not depend on the tests run before)
    x0, w0 = rng.standard_normal((1, 64, 32)), rng.standard_normal((32, 40))

    def loss(x, w):
        return tw.reduce_sum(tw.einsum("abc,cd->abd", x, w) ** 2)
    x, w = tw.Variable(x0), tw.Variable(w0)
    with tw.GradientTape() as tape:
        value = loss(x, w)
    gx, gw = (g.numpy() for g in tape.gradient(value, [x, w]))

    def numeric(arr, i, eps=1e-3):          # (a quadratic loss: central differences exact but for rounding)
        up, down = arr.copy(), arr.copy()
        up.flat[i] += eps
        down.flat[i] -= eps
        args = lambda v: (v, w0) if arr is x0 else (x0, v)   # noqa: E731
        f = lambda v: float(np.sum(np.einsum("abc,cd->abd", *args(v)) ** 2))   # noqa: E731
        return (f(up) - f(down)) / (2 * eps)
    for arr, g in ((x0, gx), (w0, gw)):
        for i in rng.choice(arr.size, 6, replace=False):
            assert g.flat[i] == pytest.approx(numeric(arr, i), rel=1e-8, abs=1e-8)


def test_a_plan_of_a_dense_on_a_sequence_gives_numpy_s_values_split(rows):
    """The ``FusedEinsum`` plan node (``runtime/passes/einsum_bias.py``) on the split way, its
    blocks shared with the runtime's helper thread."""
    calls, _ = rows(_Tuner(cached="rows"))
    w0, b0 = RNG.standard_normal((32, 40)), RNG.standard_normal(40)
    w, b = tw.Variable(w0), tw.Variable(b0)
    f = tw.function(lambda x: tw.nn.relu(tw.einsum("abc,cd->abd", x, w) + b))
    x0 = RNG.standard_normal((1, 64, 32))
    got = f(tw.constant(x0)).numpy()
    np.testing.assert_allclose(got, np.maximum(np.einsum("abc,cd->abd", x0, w0) + b0, 0), rtol=1e-12, atol=1e-12)
    from tensorweave.runtime.passes import plan_stats
    assert plan_stats(f).get("remapping") and "rows" in calls      # (the bias and ReLU fused into the Einsum)
