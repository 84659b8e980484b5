"""Per-call routing of small products and convolutions (issue 18 session 17, route21): the
affinity core count read once per thread and read again after what can change it; the route and
its split parts read once per product with the same answers; products BLAS does not take go
straight to NumPy; convolution class strings built once per geometry. Counts of calls, no timings."""
import os
import threading

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.kernels import threads
from tensorweave.kernels.cpu import conv_choice, gemm

F32 = np.dtype(np.float32)


@pytest.fixture
def affinity(monkeypatch):
    """``os.sched_getaffinity`` scripted: ``affinity.mask`` is what it answers, ``affinity.reads``
    how often it was asked; every thread's kept count forgotten before and after."""
    class Script:
        mask, reads = {0, 1, 2}, 0

    def read(pid):
        Script.reads += 1
        return set(Script.mask)
    monkeypatch.setattr(os, "sched_getaffinity", read)
    threads.affinity_changed()
    yield Script
    monkeypatch.undo()
    threads.affinity_changed()


def test_the_core_count_is_read_once_per_thread(affinity):
    assert [threads.cores() for _ in range(3)] == [3, 3, 3] and affinity.reads == 1
    affinity.mask = {0}                                  # changed without telling: the kept count
    assert threads.cores() == 3 and affinity.reads == 1
    seen = []
    helper = threading.Thread(target=lambda: seen.append((threads.cores(), threads.cores())))
    helper.start()
    helper.join()
    assert seen == [(1, 1)] and affinity.reads == 2      # a new thread reads its own mask once
    assert threads.cores() == 3


def test_affinity_changed_and_the_thread_settings_make_every_thread_read_again(affinity):
    assert threads.cores() == 3
    affinity.mask = {0, 1}
    threads.affinity_changed()                           # after os.sched_setaffinity
    assert threads.cores() == 2 and affinity.reads == 2
    affinity.mask = {0}
    before = tw.config.threading.get_inter_op_parallelism_threads()
    try:
        tw.config.threading.set_inter_op_parallelism_threads(0)
        assert threads.cores() == 1 and affinity.reads == 3
    finally:
        tw.config.threading.set_inter_op_parallelism_threads(before)
    affinity.mask = {0, 1, 2, 3}
    intra = threads.intra_op_threads()
    import numba
    numba_before = numba.get_num_threads()
    try:
        threads.set_intra_op_threads(intra)             # what tw.config.threading's intra setter calls
        assert threads.cores() == 4
    finally:
        numba.set_num_threads(numba_before)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_forked_child_reads_its_mask_again(affinity):
    assert threads.cores() == 3
    affinity.mask = {0}                                  # the child's mask differs (taskset on fork)
    pid = os.fork()
    if pid == 0:                                         # the child: its count, as its exit status
        os._exit(threads.cores())
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 1
    assert threads.cores() == 3                          # the parent's kept count


# ---- the route, read once -------------------------------------------------------------------------
def _old_route(dtype, m, n, k, one_thread=False):
    """The route as it was decided before session 17 (every share read where it was asked)."""
    limit = gemm._serial_work.get(dtype)
    small = m * n * k < (gemm.serial_work(dtype) if limit is None else limit)
    if (one_thread or small or gemm._share() == 1) and dtype in gemm._gemm_serial:
        if small and not one_thread and m < gemm.MIN_PART and k * n * dtype.itemsize >= gemm.THIN_BYTES \
                and gemm._split["on"] and not gemm.inside_blocks_here() and gemm.split_parts() > 1:
            return "thin"
        return "one"
    if gemm._tuning["on"]:
        return "tuned"
    return "threads" if gemm.split_parts() > 1 else "mkl"


SHAPES = [(1, 512, 784), (8, 8, 8), (1, 64, 64), (256, 256, 256), (2048, 1024, 512)]


@pytest.mark.parametrize("split", [True, False])
@pytest.mark.parametrize("share", ["free", "cap1", "blocks2", "one_thread"])
def test_the_route_and_its_parts_are_the_old_ones(monkeypatch, split, share):
    monkeypatch.setitem(gemm._split, "on", split)
    monkeypatch.setitem(gemm._serial_work, F32, 1 << 20)
    before = gemm.limit_split_here(1 if share == "cap1" else None)
    try:
        ctx = gemm.blocks_here(2) if share == "blocks2" else _nothing()
        with ctx:
            for m, n, k in SHAPES:
                one = share == "one_thread"
                way, parts = gemm._way(F32, m, n, k, one)
                assert way == gemm.route(F32, m, n, k, one) == _old_route(F32, m, n, k, one), (m, n, k)
                assert parts == (gemm.split_parts() if way in ("thin", "threads") else None)
    finally:
        gemm.limit_split_here(before)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_a_thin_product_reads_its_share_once_and_keeps_its_bits(monkeypatch):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((1, 784)).astype(np.float32), rng.standard_normal((784, 512)).astype(np.float32)
    first = gemm.matmul(a, b)
    way = gemm.route(F32, 1, 512, 784)     # (read before counting: what an earlier test left decides it)
    real, asked = gemm.split_parts, []
    monkeypatch.setattr(gemm, "split_parts", lambda: (asked.append(1), real())[1])
    again = gemm.matmul(a, b)
    np.testing.assert_array_equal(again, first)
    np.testing.assert_allclose(again, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    assert len(asked) == (1 if way in ("thin", "threads") else len(asked)) and len(asked) <= 1


@pytest.mark.parametrize("case", ["small", "int", "mixed", "strided"])
def test_products_blas_does_not_take_go_to_numpy_with_its_bits(case, monkeypatch):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((8, 16)), rng.standard_normal((16, 8))
    a, b = {"small": (a.astype(np.float32), b.astype(np.float32)),
            "int": ((a * 10).astype(np.int64), (b * 10).astype(np.int64)),
            "mixed": (a.astype(np.float32), b),
            "strided": (rng.standard_normal((64, 128)).astype(np.float32)[:, ::2],   # no BLAS stride
                        rng.standard_normal((64, 64)).astype(np.float32))}[case]
    monkeypatch.setattr(gemm, "_geometry", {})
    checked = []
    real = gemm._matmul_checked
    monkeypatch.setattr(gemm, "_matmul_checked", lambda *args: (checked.append(1), real(*args))[1])
    for _ in range(2):
        got = gemm.matmul(a, b)
        np.testing.assert_array_equal(got, np.matmul(a, b))
        assert got.dtype == np.matmul(a, b).dtype
    assert checked == []
    assert (case == "int") == (not gemm._geometry)      # no MKL for the dtype: nothing remembered


# ---- convolution class strings ------------------------------------------------------------------------
def test_class_strings_are_built_once_and_are_the_old_ones(monkeypatch):
    monkeypatch.setattr(conv_choice, "_class_strings", {})
    pads = ((1, 1), (1, 1))
    got = conv_choice.shape_class("forward", 64, 32, 32, 16, 16, pads)
    assert got == "forward:n4,h6,w6,c5,o5,p1111"
    assert conv_choice.shape_class("forward", 64, 32, 32, 16, 16, pads) is got
    assert conv_choice.shape_class("input", 64, 32, 32, 16, 16, pads) == "input:n4,h6,w6,c5,o5,p1111"
    planes = conv_choice.planes_class("filter", 64, (32, 32), 3, 16, (3, 3), pads, (1, 1), (1, 1))
    assert planes == "planes-filter:n4,s6x6,c3,o5,k3x3,st1x1,d1x1,p1111"
    assert conv_choice.planes_class("filter", 64, (32, 32), 3, 16, (3, 3), pads, (1, 1), (1, 1)) is planes
    assert len(conv_choice._class_strings) == 3
    listed = conv_choice.planes_class("filter", 64, [32, 32], 3, 16, [3, 3], [[1, 1], [1, 1]], [1, 1], [1, 1])
    assert listed == planes and len(conv_choice._class_strings) == 3     # unhashable: built, not kept


def test_class_strings_stop_being_kept_at_the_limit(monkeypatch):
    monkeypatch.setattr(conv_choice, "_class_strings", {})
    monkeypatch.setattr(conv_choice, "CLASS_KEYS", 2)
    got = [conv_choice.shape_class("forward", n, 8, 8, 4, 4, ((0, 0), (0, 0))) for n in (1, 2, 4, 1)]
    assert got == [f"forward:n{b},h4,w4,c3,o3,p0000" for b in (1, 2, 3, 1)]
    assert len(conv_choice._class_strings) == 2
