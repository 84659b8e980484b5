"""The remapping pass's ``FusedMatMulGroupApplyAdam`` (runtime/passes/remapping.py,
kernels/cpu/fused_kernels.py): a grouped Adam update whose last weight gradient is a product
applies it block by block as the GEMM writes it; the variables end bit for bit as in the unfused
plan, whichever way the product runs (whole, split by rows with the update on each block's
thread, split by columns, MKL's threads)."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.kernels.cpu import gemm, gemm_tuning
from test_graph_passes import options

keras = tw.keras


def _mlp(seed=0):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((48,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(32, activation="relu"), keras.layers.Dense(10)])
    model.compile(optimizer=keras.optimizers.Adam(1e-2),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _data():
    rng = np.random.default_rng(18)
    return rng.standard_normal((40, 48)).astype(np.float32), rng.integers(0, 10, (40,)).astype(np.int32)


def _train(steps=3, **opts):
    x, y = _data()
    with options(**opts):
        model = _mlp()
        losses = [float(model.train_on_batch(x, y)) for _ in range(steps)]
        types = _plan_types(model)
    return losses, [np.array(w) for w in model.get_weights()], types


def _plan_types(model):
    fn = model.make_train_function()
    plan = list(fn._cache.values())[-1]._plan
    return [st.op.type for st in plan.steps if st.op is not None]


def _same(off, on):
    assert off[0] == on[0]
    for a, b in zip(off[1], on[1]):
        np.testing.assert_array_equal(b, a)


def test_the_keras_step_fuses_the_first_layers_update_with_its_gradient_product():
    off = _train(remapping=False)
    on = _train()
    assert "FusedMatMulGroupApplyAdam" in on[2] and "ResourceGroupApplyAdam" not in on[2]
    # 3 forward products fused, dW1, and the two input gradients with their ReLU's (mlp23)
    assert on[2].count("MatMul") == off[2].count("MatMul") - 3 - 1 - 2
    assert {"FusedMatMul", "FusedMatMulReluGradBiasAddGrad", "FusedSparseSoftmaxCrossEntropy"} <= set(on[2])
    _same(off, on)


@pytest.fixture
def split_by(monkeypatch, tmp_path):
    """Products above a tiny one-thread size on two parts, each class run the way asked."""
    def force(backend):
        monkeypatch.setitem(gemm._tuning, "tuner", gemm_tuning.Tuner(
            str(tmp_path / "t.json"), {"cpu": "x"}, gemm.WAYS))
        monkeypatch.setitem(gemm._tuning, "on", False)
        monkeypatch.setitem(gemm._split, "on", True)
        monkeypatch.setattr(gemm, "_split_chosen", {})
        monkeypatch.setitem(gemm._serial_work, np.dtype(np.float32), 1)
        monkeypatch.setattr(gemm, "split_parts", lambda: 2)
        monkeypatch.setattr(gemm_tuning, "quiet", lambda: True)
        monkeypatch.setattr(gemm_tuning, "_time_call",
                            lambda name, run: (run(), 0.1 if name in (backend, "numpy1") else 1.0)[1])
    return force


@pytest.mark.skipif(not gemm._gemm_serial or gemm._openblas_threads() is None,
                    reason="needs MKL with a per-thread setting and NumPy's OpenBLAS")
@pytest.mark.parametrize("backend", ["rows", "cols", "mkl"])
def test_same_bits_whichever_way_the_product_runs(monkeypatch, split_by, backend):
    blocks = []
    real = gemm._run_split
    # (called with an epilogue: 9 arguments after the axis)
    monkeypatch.setattr(gemm, "_run_split", lambda axis, *args: (blocks.append(axis) if len(args) > 8 else None,
                                                                 real(axis, *args))[1])
    split_by(backend)
    off = _train(remapping=False)
    on = _train()
    assert "FusedMatMulGroupApplyAdam" in on[2]
    _same(off, on)
    assert (blocks != []) == (backend == "rows")          # the update ran on the row blocks


def test_gradient_products_read_elsewhere_or_amsgrad_are_not_fused():
    x, y = _data()
    model = _mlp()
    model.compile(optimizer=keras.optimizers.Adam(1e-2, amsgrad=True),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.train_on_batch(x, y)
    types = _plan_types(model)
    assert "FusedMatMulGroupApplyAdam" not in types and "ResourceGroupApplyAdam" in types


def test_the_kernel_falls_back_to_the_stock_update_for_other_shapes(rng):
    """A gradient product whose shape is not the variable's gets the stock kernel's error."""
    from tensorweave.core import errors
    from tensorweave.kernels.cpu import fused_kernels
    v = [tw.Variable(np.zeros((3, 4), np.float32)) for _ in range(3)]
    a, b = np.ones((5, 3), np.float32), np.ones((5, 5), np.float32)
    with pytest.raises(errors.InvalidArgumentError, match="does not match the variable's"):
        fused_kernels.matmul_group_apply_adam(*v, np.float32(0.1), np.int64(1), a, b,
                                              num_variables=1, index=0, transpose_a=True, transpose_b=False,
                                              beta_1=0.9, beta_2=0.999, epsilon=1e-7, amsgrad=False)


def test_the_kernel_updates_like_the_stock_one(rng):
    from tensorweave.kernels.cpu import fused_kernels, training_kernels
    shapes = [(6, 4), (4,), (4, 3)]
    init = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    x, dz = rng.standard_normal((5, 6)).astype(np.float32), rng.standard_normal((5, 4)).astype(np.float32)
    grads = [x.T @ dz, rng.standard_normal(4).astype(np.float32), rng.standard_normal((4, 3)).astype(np.float32)]

    def fresh():
        return [tw.Variable(w.copy()) for w in init for _ in range(1)], \
            [tw.Variable(np.full(s, 0.5, np.float32)) for s in shapes for _ in range(2)]
    adam = dict(beta_1=0.9, beta_2=0.999, epsilon=1e-7, amsgrad=False)
    out = []
    for fused in (False, True):
        ws, slots = fresh()
        handles = []
        for i, w in enumerate(ws):
            handles += [w, slots[2 * i], slots[2 * i + 1]]
        lr, step = np.float32(0.01), np.int64(3)
        if fused:
            fused_kernels.matmul_group_apply_adam(*handles, lr, step, grads[1], grads[2], x, dz, num_variables=3,
                                                  index=0, transpose_a=True, transpose_b=False, **adam)
        else:
            for i in range(3):
                training_kernels._apply_adam(*handles[3 * i:3 * i + 3], lr, step, grads[i], **adam)
        out.append([np.array(t.numpy()) for t in ws + slots])
    for a, b in zip(*out):
        np.testing.assert_array_equal(b, a)


def _custom_step(read_elsewhere):
    """Adam over two variables whose gradients are a product and a rank-2 non-product; the
    product also returned when ``read_elsewhere``."""
    rng = np.random.default_rng(3)
    x = tw.constant(rng.standard_normal((8, 6)).astype(np.float32))
    dz = tw.constant(rng.standard_normal((8, 5)).astype(np.float32))
    w1 = tw.Variable(rng.standard_normal((6, 5)).astype(np.float32))
    w2 = tw.Variable(rng.standard_normal((4, 3)).astype(np.float32))
    opt = keras.optimizers.Adam(0.1)

    @tw.function
    def step(x, dz):                                      # (arguments: constants would be folded)
        g1 = tw.matmul(x, dz, transpose_a=True)
        g2 = tw.square(w2) * 2.0                         # rank 2, not a product
        opt.apply_gradients([(g1, w1), (g2, w2)])
        return g1 if read_elsewhere else tw.constant(0.0)
    for _ in range(2):
        step(x, dz)
    plan = list(step._cache.values())[-1]._plan
    return [w1.numpy(), w2.numpy()], [st.op.type for st in plan.steps if st.op is not None]


@pytest.mark.parametrize("read_elsewhere", [False, True])
def test_only_a_product_read_by_the_update_alone_is_fused(read_elsewhere):
    with options(remapping=False):
        off, off_types = _custom_step(read_elsewhere)
    on, types = _custom_step(read_elsewhere)
    assert "ResourceGroupApplyAdam" in off_types
    assert ("FusedMatMulGroupApplyAdam" in types) == (not read_elsewhere)
    for a, b in zip(off, on):
        np.testing.assert_array_equal(b, a)


@pytest.mark.skipif(not gemm._gemm_serial or gemm._openblas_threads() is None,
                    reason="needs MKL with a per-thread setting and NumPy's OpenBLAS")
@pytest.mark.parametrize("backend", ["rows", "cols", "mkl", "one thread"])
def test_large_other_variables_update_as_shared_tasks_like_the_stock_kernel(monkeypatch, rng, split_by, backend):
    """A large other variable (over PARALLEL_MIN elements, not a multiple of ADAM_TASK) is
    updated by tasks shared with the product's blocks, never by numba's OpenMP pool, to the stock
    kernel's bits; a small one and the product's own variable as before."""
    from tensorweave.kernels.cpu import fused_kernels, training_kernels
    split_by("rows" if backend == "one thread" else backend)
    if backend == "one thread":
        monkeypatch.setattr(gemm, "split_parts", lambda: 1)
    shapes = [(96, 64), (300, 256), (7,)]
    assert shapes[1][0] * shapes[1][1] > training_kernels.PARALLEL_MIN
    assert (shapes[1][0] * shapes[1][1]) % fused_kernels.ADAM_TASK
    init = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    x, dz = rng.standard_normal((40, 96)).astype(np.float32), rng.standard_normal((40, 64)).astype(np.float32)
    # (the product as the unfused plan's MatMul computes it, split the same way)
    grads = [gemm.matmul(x.T, dz), rng.standard_normal(shapes[1]).astype(np.float32),
             rng.standard_normal(7).astype(np.float32)]
    np.testing.assert_allclose(grads[0], x.T.astype(np.float64) @ dz, rtol=1e-4, atol=1e-4)
    adam = dict(beta_1=0.9, beta_2=0.999, epsilon=1e-7, amsgrad=False)
    tasks = []
    real_tasks = fused_kernels._adam_tasks
    out = []
    for fused in (False, True):
        ws = [tw.Variable(w.copy()) for w in init]
        slots = [tw.Variable(np.full(s, 0.5, np.float32)) for s in shapes for _ in range(2)]
        handles = []
        for i, w in enumerate(ws):
            handles += [w, slots[2 * i], slots[2 * i + 1]]
        lr, step = np.float32(0.01), np.int64(3)
        if fused:
            monkeypatch.setattr(training_kernels, "_adam_chunks", lambda *a: pytest.fail("OpenMP pool used"))
            monkeypatch.setattr(fused_kernels, "_adam_tasks", lambda *a: tasks.append(real_tasks(*a)) or tasks[-1])
            fused_kernels.matmul_group_apply_adam(*handles, lr, step, grads[1], grads[2], x, dz, num_variables=3,
                                                  index=0, transpose_a=True, transpose_b=False, **adam)
        else:
            for i in range(3):
                training_kernels._apply_adam(*handles[3 * i:3 * i + 3], lr, step, grads[i], **adam)
        out.append([np.array(t.numpy()) for t in ws + slots])
    assert [len(t) for t in tasks] == [-(-300 * 256 // fused_kernels.ADAM_TASK)]
    for a, b in zip(*out):
        np.testing.assert_array_equal(b, a)


def test_the_fallback_still_updates_the_large_other_variables(rng):
    """The product's variable takes the stock path (its dtype is not the product's): the other
    variables' tasks run too, to the stock kernel's bits."""
    from tensorweave.kernels.cpu import fused_kernels, training_kernels
    x, dz = rng.standard_normal((6, 8)).astype(np.float32), rng.standard_normal((6, 5)).astype(np.float32)
    init = [rng.standard_normal((8, 5)), rng.standard_normal((300, 256)).astype(np.float32)]
    g_big = rng.standard_normal((300, 256)).astype(np.float32)
    adam = dict(beta_1=0.9, beta_2=0.999, epsilon=1e-7, amsgrad=False)
    out = []
    for fused in (False, True):
        ws = [tw.Variable(w.copy()) for w in init]
        handles = []
        for w in ws:
            handles += [w, tw.Variable(np.full(w.shape, 0.5, w.dtype.as_numpy_dtype)),
                        tw.Variable(np.full(w.shape, 0.5, w.dtype.as_numpy_dtype))]
        lr, step = np.float32(0.01), np.int64(2)
        if fused:
            fused_kernels.matmul_group_apply_adam(*handles, lr, step, g_big, x, dz, num_variables=2, index=0,
                                                  transpose_a=True, transpose_b=False, **adam)
        else:
            training_kernels._apply_adam(*handles[:3], lr, step, gemm.matmul(x.T, dz), **adam)
            training_kernels._apply_adam(*handles[3:], lr, step, g_big, **adam)
        out.append([np.array(h.numpy()) for h in handles])
    for a, b in zip(*out):
        np.testing.assert_array_equal(b, a)
