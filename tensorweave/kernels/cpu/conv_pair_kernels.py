"""``FusedConv{1,2,3}DBackprop``: a convolution's input gradient and filter gradient side by side.

The two gradients of one convolution read the same output gradient and are independent. Run one
after the other, each cuts its batch into tiles shared by the calling thread and one helper
(``tiles.over_tiles``), and the helper, starting late, left the calling thread 57-64 % of the
convolutions' CPU time (BENCHMARKS.md, issue 18, session 12): the second core idled for part of
every convolution. Here the filter gradient goes to a helper thread as a whole and the input
gradient runs on the calling thread, each with its tiles on its own thread and BLAS on one
thread, so both cores have a whole op's work from the start.

Same bits as the two separate kernels: each gradient runs the same code with the same tiles (the
cut depends on the cores, not the threads) and its tiles' GEMMs were one-threaded already
(``conv_tiles.split``). A batch of one image, one core, or intra-op threads limited to one runs
the two one after the other, as the separate kernels would. The algorithm choices (a first call
of a shape class may time Winograd against im2col, ``conv_choice``) are made before, one after
the other, so that no timing runs beside the other gradient. ``TW_CONV_PAIR=0`` runs them one
after the other always (for comparisons: then each splits its own tiles over the cores, as the
separate kernels do).

>>> import numpy as np
>>> x, f = np.ones((2, 4, 4, 3), np.float32), np.ones((3, 3, 3, 5), np.float32)
>>> dy = np.ones((2, 4, 4, 5), np.float32)
>>> dx, df = conv_backprop_pair([2, 4, 4, 3], f, x, [3, 3, 3, 5], dy, [1, 1], [1, 1], "SAME", "NHWC")
>>> dx.shape, df.shape, float(dx[0, 1, 1, 0]), float(df[1, 1, 0, 0])
((2, 4, 4, 3), (3, 3, 3, 5), 45.0, 32.0)
"""
import os

from tensorweave.core.context import current_runtime
from tensorweave.core.registry import register_kernel
from tensorweave.kernels import threads
from tensorweave.kernels.cpu import conv_kernels
from tensorweave.kernels.cpu.tiles import on_this_thread
from tensorweave.ops import fused_conv_ops  # noqa: F401 - the op, registered with tensorweave (kernels are)

ENABLED = os.environ.get("TW_CONV_PAIR", "1") != "0"


def side_by_side(n):
    """Whether a batch of ``n`` images has its two gradients run on two threads."""
    return ENABLED and n >= 2 and threads.cores() >= 2 and threads.intra_op_threads() >= 2


def conv_backprop_pair(input_sizes, f, x, filter_sizes, dy, strides, dilations, padding, data_format,
                       filter_first=False):
    """``(Conv{n}DBackpropInput(input_sizes, f, dy), Conv{n}DBackpropFilter(x, filter_sizes, dy))``,
    in the other order with ``filter_first`` (the node then stands where the filter gradient stood)."""
    run_dx = conv_kernels.backprop_input_runner(input_sizes, f, dy, strides, dilations, padding, data_format)
    run_df = conv_kernels.backprop_filter_runner(x, filter_sizes, dy, strides, dilations, padding, data_format)
    if not side_by_side(x.shape[0]):
        dx, df = run_dx(), run_df()
        return (df, dx) if filter_first else (dx, df)
    def alone(run):
        with on_this_thread():
            return run()
    with threads.single_threaded_blas():
        helper = current_runtime().intra_op_pool().submit(alone, run_df)
        try:
            dx = alone(run_dx)
        finally:
            df = helper.result()      # (waited for even when run_dx raised: it reads dy)
    return (df, dx) if filter_first else (dx, df)


for _nd in (1, 2, 3):
    register_kernel(f"FusedConv{_nd}DBackprop", "CPU")(conv_backprop_pair)
