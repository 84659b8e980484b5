"""``MaxPool``'s forward pass where its windows tile a small channels-last input (2x2 windows with
stride 2 on even sizes, no padding: the cnn's pooling), on the calling thread (issue 18, pred23).

Why: the general loop (``nn_loops.max_windows``) keeps each window's winning position beside its
value (what the gradient needs) and walks padding checks per tap; a forward pass needs the value
only. At batch 1 (the cnn's 1x24x24x64) ``MaxPool`` took 74 µs of thread CPU (load 7), 29 of them
in that loop and the rest in the wrapper around it. Here one compiled pass takes each window's
taps in raster order with the same rule: a tap wins when greater than the best so far, or a NaN
where the best is not (the first maximum, a NaN counting as the maximum), so the values are the
general loop's bit for bit. Larger inputs run it over tiles of the batch on the intra-op threads, as
the general loop's (``pool_kernels._max_tiled``): the cnn's training batch, 128x24x24x64, took 4.8-5.3 ms
of CPU per ``MaxPool`` in the general loop, whose winners' int64 positions halve the vector lanes, and
3.3-3.6 ms here (AMD EPYC, load 4-5; issue 18, vec27). The pass writes ``out`` and returns nothing,
as the loops built ahead of time do (``aot_kernels``): returning ``out``, it was not built and every
cold cnn process compiled it (0.7-1.0 s of the compile thread's CPU, load 0.5-3; issue 18, cold28).

>>> import numpy as np
>>> x = np.arange(16.0, dtype=np.float32).reshape(1, 4, 4, 1)
>>> out = np.empty((1, 2, 2, 1), np.float32)
>>> max_tiled.twin(x, 2, 2, out); out[0, :, :, 0].tolist()
[[5.0, 7.0], [13.0, 15.0]]
"""
import numpy as np

from tensorweave.kernels.cpu.jit import njit_twin

#: dtypes of the compiled pass
DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _max_tiled_twin(x, kh, kw, out):
    """:func:`max_tiled` in NumPy (while it compiles): the taps in raster order, the same rule."""
    n, oh, ow, c = out.shape
    out[...] = x[:, 0:oh * kh:kh, 0:ow * kw:kw, :]
    for a in range(kh):
        for e in range(kw):
            if a or e:
                v = x[:, a:oh * kh:kh, e:ow * kw:kw, :]
                take = (v > out) | ((v != v) & (out == out))
                np.copyto(out, v, where=take)


@njit_twin(_max_tiled_twin)
def max_tiled(x, kh, kw, out):
    """``out[b, i, j, c]`` = the maximum of ``x[b, i*kh:(i+1)*kh, j*kw:(j+1)*kw, c]`` (channels-last,
    ``out`` ``[N, H // kh, W // kw, C]``), taps in raster order: the first maximum, a NaN winning."""
    n, oh_, ow_, c_ = out.shape
    for b in range(n):
        for i in range(oh_):
            for j in range(ow_):
                for c in range(c_):
                    out[b, i, j, c] = x[b, i * kh, j * kw, c]
                for a in range(kh):
                    for e in range(kw):
                        if a == 0 and e == 0:
                            continue
                        for c in range(c_):         # branch-free: the channel loop vectorizes
                            v = x[b, i * kh + a, j * kw + e, c]
                            best = out[b, i, j, c]
                            take = (v > best) | ((v != v) & (best == best))
                            out[b, i, j, c] = v if take else best
