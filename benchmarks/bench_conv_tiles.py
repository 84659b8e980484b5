"""Same-process A/B of the convolutions' tile GEMMs (issue 18, conv18): a training step of a
``bench_models`` workload with ``conv_tiles.ENABLED`` on (a tile per core, each tile's GEMM on
one thread, library per shape class by measurement) and off (the earlier tiling), alternating
step by step (the order swapped every round), process CPU and wall per step. On a shared
machine this compares better than two processes: both sides see the same load.

    PYTHONPATH=$PWD python benchmarks/bench_conv_tiles.py --workload resnet --rounds 16

``--compare balance`` alternates instead session 12's finer work split (4 convolution tiles per
core, 8-image Winograd filter-gradient groups, 8192-row batch-norm passes, Winograd or im2col by
measurement) against session 11's (one tile per core, 16-image groups, 16384 rows, Winograd
wherever it applies); both sides run the same transforms.

``--compare pair`` alternates a convolution's input and filter gradients side by side, one per
core (``FusedConv2DBackprop``, ``conv_pair_kernels.ENABLED``), against one after the other, each
split over the cores (session 13). ``--compare blocks`` alternates two copies of the model whose
plans were built with and without session 13's fusions (``remapping.CONV_BLOCKS``: the two
gradients side by side, batch norm with its ReLU both ways). ``--compare planes`` alternates the
few-channel layers (the first convolution) by planes (``conv_planes``, ``TW_CONV_PLANES=1``)
against im2col (``=0``), session 16; ``--compare planes-ops`` the same per kernel (forward, input
and filter gradient of the resnet's and the cnn's first layers), call by call. ``--compare transforms``
times each compiled Winograd transform against its NumPy twin on one 8-image tile of the resnet's
three 3x3 stride-1 layer shapes, call by call on this thread's CPU clock (session 17). ``--compare
noalias`` alternates the step with the batch-norm loops and col2im as built (``noalias``, session 18)
against the same sources compiled without the flag.
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_models  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", default="resnet")
    p.add_argument("--rounds", type=int, default=16)
    p.add_argument("--compare", choices=("tiles", "balance", "pair", "blocks", "planes", "planes-ops",
                                                 "transforms", "noalias"), default="tiles")
    args = p.parse_args(argv)
    if args.compare == "planes-ops":
        return first_layers(args.rounds)
    if args.compare == "transforms":
        return winograd_transforms(args.rounds)
    from tensorweave.kernels.cpu import batch_norm_kernels, conv_choice, conv_pair_kernels, conv_tiles, winograd
    data = bench_models.synthetic_batch(args.workload)
    from tensorweave.runtime.passes import remapping
    steps = {}
    for flag in (False, True):      # (for "blocks": the plans are built with the flag as set here)
        remapping.CONV_BLOCKS = flag or args.compare != "blocks"
        steps[flag], _, _ = bench_models.make_tensorweave(args.workload, data, None)
        steps[flag]()
        if args.compare != "blocks":
            steps[False] = steps[True] = steps[flag]
            break
    knobs = [(conv_tiles, "ENABLED", True, False)]
    if args.compare == "balance":
        knobs = [(conv_tiles, "TILES_PER_CORE", 4, 1), (winograd, "GROUP_IMAGES", 8, 16),
                 (batch_norm_kernels, "PASS_ROWS", 8192, 16384), (conv_choice, "MODE", "auto", "1")]
    elif args.compare == "pair":
        knobs = [(conv_pair_kernels, "ENABLED", True, False)]
    elif args.compare == "blocks":
        knobs = []
    elif args.compare == "planes":
        knobs = [(conv_choice, "PLANES_MODE", "1", "0")]
    elif args.compare == "noalias":
        knobs = _without_noalias()

    def side(flag):
        for mod, attr, new, old in knobs:
            setattr(mod, attr, new if flag else old)
    from tensorweave.kernels.cpu import jit
    for flag in (True, False, True, False):      # warm both paths (and their shape classes' timings)
        side(flag)
        steps[flag]()
        jit.wait_for_compiles()
    cpu, wall = {True: [], False: []}, {True: [], False: []}
    for r in range(args.rounds):
        for flag in (True, False) if r % 2 == 0 else (False, True):
            side(flag)
            c0, w0 = time.process_time(), time.perf_counter()
            steps[flag]()
            cpu[flag].append(time.process_time() - c0)
            wall[flag].append(time.perf_counter() - w0)
    tags = {"balance": ("session 12 split", "session 11 split"), "pair": ("gradients side by side", "one after the other"),
            "blocks": ("session 13 fusions", "without them"),
            "tiles": ("one-thread tiles", "old tiling"),
            "planes": ("first layer by planes", "by im2col"),
            "noalias": ("loops with noalias", "without")}[args.compare]
    for flag, tag in ((True, tags[0]), (False, tags[1])):
        print(f"{args.workload} {tag}: CPU ms/step median {np.median(cpu[flag]) * 1e3:.1f} "
              f"(min {np.min(cpu[flag]) * 1e3:.1f}), wall median {np.median(wall[flag]) * 1e3:.1f} "
              f"(min {np.min(wall[flag]) * 1e3:.1f})")
    print("load average", os.getloadavg())


def _without_noalias():
    """Knobs swapping each ``noalias`` batch-norm loop and col2im for the same source compiled
    without the flag, by the JIT as before (the modules' attributes are what the kernels call;
    ``jit.njit`` would attach the ahead-of-time loops, built with the flag)."""
    import numba

    from tensorweave.kernels.cpu import batch_norm_loops, nn_loops
    knobs = []
    for mod in (batch_norm_loops, nn_loops):
        for name, kernel in vars(mod).items():
            if getattr(getattr(kernel, "py_func", None), "tw_noalias", False):
                plain = numba.njit(kernel.py_func, nogil=True, cache=False, error_model="numpy")
                knobs.append((mod, name, kernel, plain))
    return knobs


def first_layers(rounds):
    """Per kernel: planes against im2col on the resnet's and the cnn's first layers, alternating
    call by call (order swapped every round), process CPU ms per call (median)."""
    from tensorweave.kernels.cpu import conv_kernels as ck, conv_planes as cp
    from tensorweave.kernels.cpu.nn_util import geometry
    rng = np.random.default_rng(0)
    for name, xs, fs, padding in (("resnet", (64, 32, 32, 3), (3, 3, 3, 16), "SAME"),
                                  ("cnn", (128, 28, 28, 1), (3, 3, 1, 32), "VALID")):
        x, f = rng.standard_normal(xs, np.float32), rng.standard_normal(fs, np.float32)
        out, pads = geometry(xs[1:3], fs[:2], (1, 1), (1, 1), padding)
        dy = rng.standard_normal((xs[0],) + out + (fs[-1],), np.float32)
        g = (out, pads, (1, 1), (1, 1))
        kinds = {"forward": (lambda: cp.forward(x, f, *g), lambda: ck._dense_forward(x, f, *g)),
                 "input": (lambda: cp.backprop_input(xs, f, dy, *g), lambda: ck._dense_backprop_input(xs, f, dy, *g)),
                 "filter": (lambda: cp.backprop_filter(x, fs, dy, *g),
                            lambda: ck._dense_backprop_filter(x, fs, dy, *g))}
        for kind, pair in kinds.items():
            times = _alternate(pair, rounds, time.process_time)
            print(f"{name} first layer {kind}: planes {np.median(times[0]) * 1e3:.2f}, "
                  f"im2col {np.median(times[1]) * 1e3:.2f} CPU ms")
    print("load average", os.getloadavg())


def _alternate(pair, rounds, clock):
    """Seconds of ``clock`` of each of ``pair``'s calls, alternating, the order swapped every
    round (round 0 warms both)."""
    times = ([], [])
    for r in range(rounds + 1):
        for i in (0, 1) if r % 2 == 0 else (1, 0):
            c0 = clock()
            pair[i]()
            if r:
                times[i].append(clock() - c0)
    return times


def winograd_transforms(rounds):
    """Per transform: the compiled loop against its NumPy twin on one tile of 8 images (the
    Winograd tiles' size at 1 MiB) of the resnet's 3x3 stride-1 layers, SAME padding; this
    thread's CPU ms per call, median (fastest)."""
    from tensorweave.kernels.cpu import jit, winograd as wg
    rng = np.random.default_rng(0)
    n = 8
    for side, c in ((32, 16), (16, 32), (8, 64)):
        blk = wg._Blocks((n, side, side, c), ((1, 1), (1, 1)))
        p = n * blk.per_image()
        xp = np.zeros((n, blk.hp, blk.wp, c), np.float32)
        xp[:, 1:side + 1, 1:side + 1] = rng.standard_normal((n, side, side, c))
        planes, dy = rng.standard_normal((36, p, c)).astype(np.float32), rng.standard_normal((n, side, side, c))
        dy, bias = dy.astype(np.float32), np.zeros(c, np.float32)
        y, out = np.empty((n, side, side, c), np.float32), np.empty((36, p, c), np.float32)
        calls = {"input": (wg._input_transform, (xp, 0, n, blk.th, blk.tw, out)),
                 "output (+bias, ReLU)": (wg._output_transform, (planes, 0, n, blk.th, blk.tw, y, bias, True, True)),
                 "output gradient": (wg._output_grad_transform, (dy, 0, n, blk.th, blk.tw, out)),
                 "input gradient": (wg._input_grad_transform, (planes, 0, n, blk.th, blk.tw, 1, 1, np.zeros_like(y)))}
        for name, (kernel, args) in calls.items():
            loop = jit.compile_now(kernel, *args)
            times = _alternate((lambda: loop(*args), lambda: kernel.twin(*args)), rounds, time.thread_time)
            print(f"{side}x{side}x{c} {name}: loop {np.median(times[0]) * 1e3:.3f} ({np.min(times[0]) * 1e3:.3f}), "
                  f"twin {np.median(times[1]) * 1e3:.3f} ({np.min(times[1]) * 1e3:.3f}) ms per tile")
    print("load average", os.getloadavg())


if __name__ == "__main__":
    main()
