"""``benchmarks/bench_op_profile.py``'s per-family accounting (issue 18, session 15, net19): the
convolutions' FLOP count, and the two gradients of a ``FusedConv2DBackprop`` each timed on the
thread that runs it, without changing their results."""
import collections
import io
import os
import sys
import threading
from contextlib import redirect_stdout

import numpy as np

from tensorweave.kernels.cpu import conv_kernels, conv_pair_kernels

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
import bench_op_profile  # noqa: E402

RNG = np.random.default_rng(1916)


def test_conv_flops_counts_two_per_multiply_add():
    # 2 images of 3x5 outputs, 3x3 windows over 4 channels, 6 filters
    assert bench_op_profile.conv_flops((3, 3, 4, 6), (2, 3, 5, 6)) == 2 * 2 * 3 * 5 * 3 * 3 * 4 * 6


def test_the_pair_kernels_two_gradients_are_timed_apart_with_their_flops(monkeypatch):
    for name in ("backprop_input_runner", "backprop_filter_runner"):
        monkeypatch.setattr(conv_kernels, name, getattr(conv_kernels, name))   # restored afterwards
    x = RNG.standard_normal((4, 6, 7, 3)).astype(np.float32)
    f = RNG.standard_normal((3, 3, 3, 5)).astype(np.float32)
    dy = RNG.standard_normal((4, 3, 4, 5)).astype(np.float32)
    args = ([4, 6, 7, 3], f, x, [3, 3, 3, 5], dy, [2, 2], [1, 1], "SAME", "NHWC")
    want = conv_pair_kernels.conv_backprop_pair(*args)
    fam, on = collections.defaultdict(lambda: [0.0, 0.0]), [True]
    bench_op_profile.wrap_conv_gradients(fam, threading.Lock(), on)
    got = conv_pair_kernels.conv_backprop_pair(*args)
    for a, b in zip(got, want):
        assert a.tobytes() == b.tobytes()
    flops = 2.0 * 4 * 3 * 4 * 3 * 3 * 3 * 5
    assert sorted(fam) == ["conv filter-gradient", "conv input-gradient"]
    assert fam["conv input-gradient"][1] == flops and fam["conv filter-gradient"][1] == flops
    assert all(sec >= 0 for sec, _ in fam.values())
    on[0] = False                                   # recording off: nothing added
    conv_pair_kernels.conv_backprop_pair(*args)
    assert fam["conv input-gradient"][1] == flops


def test_family_table_splits_the_pair_and_sets_convolutions_against_the_bound():
    by_type = {"FusedConv2DBackprop": [0.0, 0.010, 0.0], "Conv2D": [0.0, 0.004, 0.0],
               "FusedBatchNormTrainingRelu": [0.0, 0.002, 0.0], "Shape": [0.0, 0.001, 0.0]}
    fam = {"conv input-gradient": [0.006, 2e9], "conv filter-gradient": [0.004, 2e9]}   # over 2 steps
    out = io.StringIO()
    with redirect_stdout(out):
        bench_op_profile.print_families(by_type, fam, 4e9, 2, 100.0, 0.02)
    rows = {line.split(" | ")[0].strip("| "): line for line in out.getvalue().splitlines() if line.startswith("| ")}
    assert "FusedConv2DBackprop" not in out.getvalue()        # its CPU is in the two gradient rows
    assert rows["conv forward"].startswith("| conv forward | 4.00 |")
    assert "| 2.000 | 20.00 | 0.20x |" in rows["conv forward"]            # 2 GFLOP/step at 100 GFLOP/s
    assert rows["conv input-gradient"].startswith("| conv input-gradient | 3.00 |")
    assert "| 1.000 | 10.00 | 0.30x |" in rows["conv input-gradient"]
    assert rows["batch norm fwd (+relu)"].startswith("| batch norm fwd (+relu) | 2.00 |")
    assert rows["other"].startswith("| other | 1.00 |")
