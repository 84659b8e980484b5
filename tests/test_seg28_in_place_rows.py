"""A nogil segment's ReLU gradient rows written into their input's buffer (issue 13, session 24 seg28).

``nogil_segments`` writes an elementwise row into its first input's buffer where that value dies there;
``nogil_ops.run_program`` then ran ``RELU_GRAD`` as ``nn_loops.relu_grad(g, y, out=g)``, whose runtime
overlap check fails: scalar code, the select a branch on random signs (383 µs for 65,536 float32; the
extra CPU of the products started early inside segments, which made the backward ReLU gradient's input
a buffer of the segment). Such a row now takes a one-array loop (``nogil_ops.relu_mask``): the same
bits, vector code. (``RELU`` in place keeps its two views: its scalar select has no branch, and a
one-array form measured slower.)"""
import os
import subprocess
import sys

import numpy as np
import pytest

from tensorweave.kernels.cpu import jit, nn_loops, nogil_ops as N
from tensorweave.runtime import nogil_segments
from test_nogil24_segments import _run, one_thread, switch  # noqa: F401 - fixtures
from mlp_step import plans, same
from test_seg27_rank_segments import _train
from test_vec27_select_loops import _avx2_host, _pair, _vectorised


@pytest.fixture(autouse=True)
def keep_early(monkeypatch):
    """Products started early kept in segments (``TW_NOGIL_EARLY_PRODUCTS``)."""
    monkeypatch.setitem(nogil_segments._keep_early, "on", True)


@pytest.mark.parametrize("shape", [(37, 19), (3, 130), (1, 1), (256, 512)])
def test_in_place_rows_give_the_bits_of_the_rows_into_another_buffer(shape):
    g, y = _pair(shape, np.float32) if shape[0] * shape[1] > 100 else (np.float32([[-0.0]]), np.float32([[2.0]]))
    n = g.size
    relu_out, grad_out, relu_in, grad_in = np.empty_like(y), np.empty_like(g), y.copy(), g.copy()
    _run([[N.RELU, 0, -1, 1, n], [N.RELU_GRAD, 2, 3, 4, n], [N.RELU, 5, -1, 5, n], [N.RELU_GRAD, 6, 3, 6, n]],
         [y, relu_out, g, y, grad_out, relu_in, grad_in])
    assert same(relu_out, np.maximum(y, np.float32(0))) and same(relu_in, relu_out)
    ref = np.empty_like(g)
    nn_loops.relu_grad(g.reshape(-1), y.reshape(-1), ref.reshape(-1))
    assert same(grad_out, ref) and same(grad_in, ref) and same(ref, np.where(y > 0, g, np.float32(0)))


def test_the_in_place_loop_called_alone():
    g, y = _pair((9, 23), np.float32)
    m = g.reshape(-1).copy()
    jit.compile_now(N.relu_mask, m, y.reshape(-1))(m, y.reshape(-1))
    assert same(m, np.where(y > 0, g, np.float32(0)).reshape(-1))


@pytest.mark.skipif(not _avx2_host(), reason="LLVM's vector code is checked on x86-64 CPUs with AVX2")
def test_the_in_place_loop_is_vectorised():
    g, y = (a.reshape(-1) for a in _pair((64, 40), np.float32))
    assert _vectorised(N.relu_mask, g, y)


@pytest.mark.parametrize("ranks", [None, 2])
def test_segments_write_relu_rows_in_place_with_the_bits_of_segments_off(one_thread, switch, ranks):  # noqa: F811
    off = _train(switch, False, ranks)
    on = _train(switch, True, ranks)
    assert same(on[0], off[0]) and same(on[1], off[1])
    in_place = set()
    for plan in plans(on[2]):
        for seg in (d for d in plan.runner.__defaults__ or () if hasattr(d, "program")):
            assert seg.runs["compiled"] >= 2
            in_place |= {int(row[0]) for row in seg.program if row[0] in (N.RELU, N.RELU_GRAD) and row[1] == row[3]}
    # (the one-device step is one segment: both ReLUs and both gradients die in place; a rank's backward
    # segment holds the gradient of the layer whose products it starts early)
    assert in_place == ({N.RELU, N.RELU_GRAD} if ranks is None else {N.RELU_GRAD})


@pytest.mark.parametrize("value, on", [(None, True), ("0", False)])
def test_products_started_early_are_kept_unless_switched_off(value, on):
    env = {k: v for k, v in os.environ.items() if k != "TW_NOGIL_EARLY_PRODUCTS"}
    if value is not None:
        env["TW_NOGIL_EARLY_PRODUCTS"] = value
    got = subprocess.run([sys.executable, "-c", "from tensorweave.runtime import nogil_segments as s; "
                          "print(s._keep_early['on'])"], env=env, capture_output=True, text=True, check=True)
    assert got.stdout.split()[-1] == str(on)
