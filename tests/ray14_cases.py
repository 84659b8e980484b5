"""Shared cases of tests/test_ray14_*.py: large collectives with uneven pieces, and a process's
bytes in fresh memory mappings (glibc's ``mallinfo2().hblkhd``)."""
import ctypes

import numpy as np

from tensorweave.distribute.collective import SMALL_BYTES


def large_collectives(comm, i):
    """Every collective on values above SMALL_BYTES (the large paths), sizes no member count divides."""
    rng = np.random.default_rng(i)
    x = rng.standard_normal(SMALL_BYTES // 8 + 7)
    return {"sum": comm.all_reduce(x), "max": comm.all_reduce(x.reshape(-1, 1), "max"),
            "prod": comm.all_reduce(1.0 + x.astype(np.float32) / 8, "prod"),
            "int": comm.all_reduce(rng.integers(-9, 9, (3, SMALL_BYTES // 8 + 1)), "min"),
            "a2a": comm.all_to_all([np.full((j + i, 2), 10.0 * i + j) for j in range(comm.size)], axis=0),
            "a2a_list": comm.all_to_all([np.full(j, i, np.int8) for j in range(comm.size)]),
            "rs": comm.reduce_scatter(x * 3), "ag": comm.all_gather(x[: i * 1000])}


def assert_same(got, want, writeable=True):
    """Same keys, dtypes, shapes and bits (and results the caller may write to, unless they came back
    from a Ray worker: Ray gives read-only arrays)."""
    for a, b in zip(got, want):
        assert a.keys() == b.keys()
        for k in b:
            if isinstance(b[k], list):
                assert [v.dtype for v in a[k]] == [v.dtype for v in b[k]], k
                for u, v in zip(a[k], b[k]):
                    np.testing.assert_array_equal(u, v, err_msg=k)
            else:
                assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
                np.testing.assert_array_equal(a[k], b[k], err_msg=k)
                assert a[k].flags.writeable or not writeable, k


def mapped_bytes_of_a_new_array(nbytes):
    """How many bytes of fresh mappings an array of ``nbytes`` adds in this process (None: no
    glibc >= 2.33 here)."""
    class MallInfo2(ctypes.Structure):     # made here: a ctypes class does not travel to Ray workers
        _fields_ = [(f, ctypes.c_size_t) for f in
                    "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
    try:
        info = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return None
    info.restype = MallInfo2
    before = info().hblkhd
    a = np.ones(nbytes // 4, np.float32)
    after = info().hblkhd
    del a
    return after - before


def sgd_step(placement, x, y, inits, steps=1):
    """The benchmark MLP's shape of SGD step (``relu(x @ w1 + b1) @ w2``, squared error; each ``0.1 * g``
    computed between the updates, so the planner makes one bucket per gradient) on ``placement``, ``x``
    and ``y`` split on rows, the weights ``inits`` replicated: ``(step, x, y, params)`` after ``steps`` calls."""
    import tensorweave as tw
    x, y = (tw.constant(v).to_global(placement=placement, sbp=tw.sbp.split(0)) for v in (x, y))
    params = [tw.Variable(v, placement=placement, sbp=tw.sbp.broadcast) for v in inits]

    @tw.function
    def step(x, y):
        with tw.GradientTape() as tape:
            h = tw.nn.relu(tw.matmul(x, params[0]) + params[1])
            loss = tw.reduce_mean(tw.square(tw.matmul(h, params[2]) - y))
        for p, g in zip(params, tape.gradient(loss, params)):
            p.assign_sub(0.1 * g)
        return loss
    for _ in range(steps):
        step(x, y)
    return step, x, y, params
