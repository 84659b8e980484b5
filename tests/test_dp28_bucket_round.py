"""Issue 13 session 24 (dp28): a bucket's round prepared by its first member (``collective.InProcessGroup
._prepare``: the sums' arrays, the chunk list, the counters, for the sums the last round of that layout
kept), the last member only checking, asking for the targets and handing it out (``_publish``); the
controller's BLAS libraries and their count readers kept (``rank_threads._blas_readers``) and another
OpenBLAS read through its own getter (``rank_threads._openblas_getter``)."""
import ctypes
import types

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from tensorweave.distribute import collective, rank_threads
from tensorweave.kernels import threads
from test_dp13_fused_sgd import _Apply, _ordered_sum


def _buckets(rng, members, rows=3):
    return [[rng.standard_normal(5).astype(np.float32), rng.standard_normal((rows, 2)).astype(np.float32)]
            for _ in range(members)]


@pytest.mark.parametrize("members", [2, 3])
def test_the_first_member_prepares_the_round_and_the_last_hands_it_out(monkeypatch, members):
    monkeypatch.setattr(collective, "REDUCE_CHUNK", 4)       # several chunks per array
    rng = np.random.default_rng(28 + members)
    group = collective.InProcessGroup(range(members), timeout=30)
    prepared = []
    real = collective.InProcessGroup._prepare
    monkeypatch.setattr(collective.InProcessGroup, "_prepare",
                        lambda self, rnd, arrays, kept: (prepared.append(kept), real(self, rnd, arrays, kept))[1])
    w = rng.standard_normal(6).astype(np.float32)
    lr = np.float32(0.5)
    for step, order in enumerate((list(range(members)), list(range(members))[::-1], list(range(members)))):
        buckets = _buckets(rng, members)
        want_w = w - _ordered_sum([b[1] for b in buckets]).reshape(-1) * lr
        calls = len(prepared)
        spec, handles = _Apply(w, lr), [None] * members
        for n, i in enumerate(order):       # started from this thread (a start does not wait), then waited for
            handles[i] = group.reduce_start(i, buckets[i], apply=spec)
            if n == 0:          # prepared by the first member, handed out only by the last
                assert len(prepared) == calls + 1 and handles[i].rnd.chunks is None
        got = [h.wait() for h in handles]
        # the first round learns which sums are kept (prepared again by the last member); later
        # rounds of the layout are prepared right by their first member, whichever it is
        assert prepared[calls:] == ([None, (True, False)] if step == 0 else [(True, False)]), step
        np.testing.assert_array_equal(w, want_w)
        for res in got:
            assert res[1] is None
            np.testing.assert_array_equal(res[0], _ordered_sum([b[0] for b in buckets]))


def test_a_layout_another_member_differs_from_is_named_by_the_last():
    group = collective.InProcessGroup([0, 1, 2], timeout=5)
    arrays = [[np.zeros(3, np.float32)], [np.zeros(4, np.float32)], [np.zeros(3, np.float32)]]
    group.reduce_start(2, arrays[2])
    group.reduce_start(1, arrays[1])                # differs from the first member's: noted, not raised
    with pytest.raises(Exception, match=r"rank 1 gave \[\(\[4\], 'float32'\)\] but rank 0 gave \[\(\[3\]"):
        group.reduce_start(0, arrays[0])
    with pytest.raises(collective.CollectiveAbortedError):
        group.reduce_start(0, arrays[0])


def test_a_bucket_of_empty_arrays_is_done_when_handed_out():
    group = collective.InProcessGroup([0, 1], timeout=5)
    handles = [group.reduce_start(i, [np.zeros((0, 2), np.float32)]) for i in (1, 0)]
    assert all(h.rnd.done for h in handles) and [h.wait()[0].shape for h in handles] == [(0, 2), (0, 2)]


# ---- the controller's count readers ---------------------------------------------------------------

def test_the_blas_libraries_and_their_readers_are_kept(monkeypatch):
    libs, readers = rank_threads._blas_readers()
    again = rank_threads._blas_readers()
    assert again[0] is libs and again[1] is readers and len(readers) == len(libs) == len(threads._blas())
    assert all(read is rank_threads._reader(lib) for lib, read in zip(libs, readers))
    fake = [types.SimpleNamespace(internal_api="blis", num_threads=3)]
    monkeypatch.setattr(threads, "_blas", lambda: fake)        # another source of libraries: read again
    got = rank_threads._blas_readers()
    assert got[0] is fake and [read() for read in got[1]] == [3]
    fake[0].num_threads = 5
    assert rank_threads.controller_counts(1) == (5, [])      # read live through the kept reader
    rank_threads._readers.pop(id(fake[0]), None)


def test_another_openblas_on_its_own_threads_is_read_through_its_getter():
    lib = types.SimpleNamespace(internal_api="openblas", threading_layer="pthreads")
    for name in ("scipy_openblas_get_num_threads64_", "openblas_get_num_threads_64", "openblas_get_num_threads"):
        lib.dynlib = types.SimpleNamespace(**{name: name})      # the name its build exports
        assert rank_threads._openblas_getter(lib) == name
    lib.threading_layer = "openmp"          # its count is OpenMP's: threadpoolctl reads that
    assert rank_threads._openblas_getter(lib) is None
    lib.threading_layer, lib.dynlib = "pthreads", types.SimpleNamespace()
    assert rank_threads._openblas_getter(lib) is None


def test_scipys_openblas_reads_what_threadpoolctl_reads_holding_the_gil():
    others = [lib for lib in threads._blas() if lib.internal_api == "openblas"
              and rank_threads._numpy_openblas_getter(lib) is None and lib.threading_layer != "openmp"]
    if not others:
        pytest.skip("no second OpenBLAS on its own threads in this process")
    for lib in others:
        fn = rank_threads._reader(lib)
        want = rank_threads._openblas_getter(lib)
        assert ctypes.cast(fn, ctypes.c_void_p).value == ctypes.cast(want, ctypes.c_void_p).value
        assert type(fn)._flags_ & ctypes._FUNCFLAG_PYTHONAPI        # called holding the GIL
        for limit in (1, 2, 1):
            with threadpool_limits(limits={lib.prefix: limit}):
                assert fn() == lib.num_threads == limit
