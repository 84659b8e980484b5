"""The fused grouped Adam update's other variables (kernels/cpu/fused_kernels.py, issue 18
session 16): their checks and updates run inside the tasks the product shares out, on whichever
thread takes them, none on the calling thread before the hand-off; the bits stay the stock
kernel's and the plan without fusion's, and their errors still surface."""
import threading

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core import errors
from tensorweave.kernels.cpu import fused_kernels, gemm, training_kernels
from tensorweave.runtime import overlap
from test_graph_passes import options
from test_mlp18_fused_update import _data, _mlp, _plan_types, split_by  # noqa: F401 - a fixture

ADAM = dict(beta_1=0.9, beta_2=0.999, epsilon=1e-7, amsgrad=False)
SHAPES = [(96, 64), (300, 256), (7,), (64, 10)]      # the product's, a large one, two small ones
needs_split = pytest.mark.skipif(not gemm._gemm_serial or gemm._openblas_threads() is None,
                                 reason="needs MKL with a per-thread setting and NumPy's OpenBLAS")


def _group(rng, grads=None):
    """Handles, gradients (the first one's product inputs last) of a 4-variable Adam group."""
    init = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    x, dz = rng.standard_normal((40, 96)).astype(np.float32), rng.standard_normal((40, 64)).astype(np.float32)
    grads = grads or [rng.standard_normal(s).astype(np.float32) for s in SHAPES[1:]]
    handles = []
    for w in init:
        handles += [tw.Variable(w), tw.Variable(np.full(w.shape, 0.5, np.float32)),
                    tw.Variable(np.full(w.shape, 0.25, np.float32))]
    return handles, grads, x, dz


def _fused(handles, grads, x, dz):
    fused_kernels.matmul_group_apply_adam(*handles, np.float32(0.01), np.int64(3), *grads, x, dz,
                                          num_variables=len(SHAPES), index=0, transpose_a=True,
                                          transpose_b=False, **ADAM)


@needs_split
@pytest.mark.parametrize("backend", ["rows", "one thread"])
def test_no_other_variable_is_checked_or_updated_before_the_hand_off(monkeypatch, rng, split_by, backend):
    split_by("rows")
    if backend == "one thread":
        monkeypatch.setattr(gemm, "split_parts", lambda: 1)
    seen = {"dense": 0, "hand-offs": []}
    real_dense, real_share = training_kernels._dense, gemm.share_tasks

    def dense(*args):
        seen["dense"] += 1
        return real_dense(*args)

    def share(tasks, parts):
        seen["hand-offs"].append((seen["dense"], len(tasks)))
        return real_share(tasks, parts)
    monkeypatch.setattr(training_kernels, "_dense", dense)
    monkeypatch.setattr(gemm, "share_tasks", share)
    handles, grads, x, dz = _group(rng)
    _fused(handles, grads, x, dz)
    blocks = 2 if backend == "rows" else 1
    # (the last hand-off: the earlier ones are the fixture's timings of the product's class)
    # none checked before it; its tasks: the blocks, the large one's slices, one for both small ones
    assert seen["hand-offs"][-1] == (0, blocks + -(-300 * 256 // fused_kernels.ADAM_TASK) + 1)
    assert seen["dense"] == 3                               # each other variable checked once


@needs_split
@pytest.mark.parametrize("backend", ["rows", "cols", "one thread"])
def test_the_bits_are_the_stock_kernels(monkeypatch, rng, split_by, backend):
    split_by("rows" if backend == "one thread" else backend)
    if backend == "one thread":
        monkeypatch.setattr(gemm, "split_parts", lambda: 1)
    out = []
    for fused in (False, True):
        handles, grads, x, dz = _group(np.random.default_rng(5))
        if fused:
            _fused(handles, grads, x, dz)
        else:
            for i, g in enumerate([gemm.matmul(x.T, dz)] + grads):
                training_kernels._apply_adam(*handles[3 * i:3 * i + 3], np.float32(0.01), np.int64(3), g, **ADAM)
        out.append([np.array(h.numpy()) for h in handles])
    for a, b in zip(*out):
        np.testing.assert_array_equal(b, a)


@needs_split
@pytest.mark.parametrize("bad", [1, 2])                      # the large variable's gradient, a small one's
@pytest.mark.parametrize("backend", ["rows", "one thread"])
def test_an_other_variables_error_surfaces_from_the_shared_tasks(monkeypatch, rng, split_by, bad, backend):
    split_by("rows")
    if backend == "one thread":
        monkeypatch.setattr(gemm, "split_parts", lambda: 1)
    handles, grads, x, dz = _group(rng)
    grads[bad - 1] = np.ones((3, 3), np.float32)
    with pytest.raises(errors.InvalidArgumentError, match=r"Adam update of .*gradient shape \(3, 3\) does not "
                                                          r"match the variable's"):
        _fused(handles, grads, x, dz)


def test_prepared_is_made_once_and_its_error_raised_by_every_task():
    made = []
    p = fused_kernels._Prepared(lambda: made.append(1) or ["value"])
    threads = [threading.Thread(target=p.get) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert p.get() == ["value"] and made == [1]
    bad = fused_kernels._Prepared(lambda: made.append(2) or 1 / 0)
    for _ in range(2):
        with pytest.raises(ZeroDivisionError):
            bad.get()
    assert made == [1, 2]


def _train(steps, eager=False, **opts):
    x, y = _data()
    with options(**opts):
        model = _mlp()
        model.run_eagerly = eager
        losses = [float(model.train_on_batch(x, y)) for _ in range(steps)]
        types = None if eager else _plan_types(model)
    return losses, [np.array(w) for w in model.get_weights()], types


@needs_split
def test_keras_weights_after_steps_match_the_serial_path_and_eager(monkeypatch, split_by):
    """Fused, overlapped and shared update == the plan without remapping or overlap == eager."""
    split_by("rows")
    on = _train(4)
    monkeypatch.setitem(overlap.ENABLED, "on", False)
    serial = _train(4, remapping=False)
    eager = _train(4, eager=True)
    assert "FusedMatMulGroupApplyAdam" in on[2] and "FusedMatMulGroupApplyAdam" not in serial[2]
    for other in (serial, eager):
        assert other[0] == on[0]
        for a, b in zip(other[1], on[1]):
            np.testing.assert_array_equal(b, a)


@pytest.mark.parametrize("n", [fused_kernels.ADAM_TASK + 1, 2 * fused_kernels.ADAM_TASK])
def test_slice_tasks_cover_every_element(rng, n):
    """One element past a whole slice still gets its update (the stock kernel's bits)."""
    g = rng.standard_normal(n).astype(np.float32)
    out = []
    for tasks in (False, True):
        handle = [tw.Variable(np.full(n, 1.0, np.float32)) for _ in range(3)]
        if tasks:
            for task in fused_kernels._adam_tasks(handle, np.float32(0.01), np.int64(2), g, ADAM):
                task()
        else:
            training_kernels._apply_adam(*handle, np.float32(0.01), np.int64(2), g, **ADAM)
        out.append([np.array(h.numpy()) for h in handle])
    for a, b in zip(*out):
        np.testing.assert_array_equal(b, a)
