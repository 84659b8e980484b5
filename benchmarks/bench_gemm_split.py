"""Same-process A/B of the threaded products' split (issue 18, mlp18): a training step of a
``bench_models`` workload with ``gemm.split_parts`` on (each product above the one-thread size
timed per shape class: one-thread blocks of rows or columns on the intra-op threads, or the
library's own threads) against another setting, alternating in rounds of ``--steps`` steps (the
order swapped every round); process CPU and wall per step, the load average, and each class's
choice with its timings. Both sides see the same load, which on a shared machine compares better
than two processes.

``--other``: ``nosplit`` (``TW_GEMM_SPLIT=0``: the library's threads), ``one`` (every product on
one thread), ``static`` (the split as before session 13: one block per part, the calling thread
computing the first and waiting for the helpers' blocks however late they start), or
``chunks<N>`` (``N`` blocks per part taken from a shared counter; the A side has ``--chunks``), or
``adamomp`` (the fused update's other large variables by the stock kernel, on numba's OpenMP
pool, as before session 13, instead of tasks shared with the product's blocks), or ``nooverlap``
(``TW_OVERLAP_PRODUCTS=0``: no product started early on the helper thread, ``runtime/overlap.py``; session 14), or ``noshare``
(``TW_GEMM_SHARE=0``: where the calling thread's share is one thread, products above the one-thread
size on MKL's threaded call as before session 14, not on the class's one-thread library; with
``--threads 1`` or ``--rank``), or ``tune`` (``TW_BLAS_TUNE=1``'s per-class MKL-or-OpenBLAS choice of
threaded products, in this process, against the default), or ``spin`` (``TW_SPIN_SHARE=1``: split products' blocks on
``spin_share``'s spinning helper, not on the Python pool; issue 18 mlp28), or ``caller`` (the fused update's
epilogue, after a product not split by rows, on the calling thread, not shared: ``gemm.after_way``; issue 18
mlp29), or ``pairthreads`` (``TW_GEMM_PAIR_THREADS=1``: an ``"mkl"`` class beside another thread's product on
MKL's threads, as before issue 18 mlp30, not its one-thread call: ``gemm._in_pair``).

``--threads N``: the step on N intra-op threads (``tw.config.threading``); ``--rank``: the step
run on a thread with an in-process rank's share of one core (``rank_threads.use(1)``).

    PYTHONPATH=$PWD python benchmarks/bench_gemm_split.py --workload mlp --rounds 12 --other static
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_models  # noqa: E402


def static_share(tasks, parts):
    """The split before session 13 (for the A/B only): the first task on this thread, the others
    on the helper threads, each waited for however late it starts."""
    from tensorweave.core.context import current_runtime
    if len(tasks) == 1 or parts < 2:
        for task in tasks:
            task()
        return
    pool = current_runtime().intra_op_pool()
    helpers = [pool.submit(task) for task in tasks[1:]]
    try:
        tasks[0]()
    finally:
        for h in helpers:
            h.result()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", default="mlp")
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--steps", type=int, default=10, help="steps per side and round")
    p.add_argument("--other", default="nosplit",
                   help="the B side: nosplit, one, static, adamomp, nooverlap, noshare, tune, spin, caller, pairthreads or "
                   "chunks<N> "
                   "(see the module docstring)")
    p.add_argument("--chunks", type=int, default=None, help="blocks per part on the A side (default: gemm's)")
    p.add_argument("--threads", type=int, default=None, help="intra-op threads (default: one per core)")
    p.add_argument("--rank", action="store_true", help="run the steps on a thread with a rank's share of one core")
    args = p.parse_args(argv)
    import numpy as np_
    from tensorweave.kernels.cpu import gemm
    data = bench_models.synthetic_batch(args.workload)
    step, _, _ = bench_models.make_tensorweave(args.workload, data, args.threads,
                                               blas_threads=args.threads)
    if args.rank:
        step = _on_rank_thread(step)
    f32 = np_.dtype(np_.float32)
    limit = gemm.serial_work(f32)
    share, chunks_a = gemm.share_tasks, args.chunks or gemm.CHUNKS["per_part"]
    from tensorweave.kernels.cpu import fused_kernels, training_kernels
    from tensorweave.runtime import overlap
    adam_tasks = fused_kernels._adam_tasks
    after_way = gemm.after_way

    def stock_adam(handle, lr, step, g, adam):
        training_kernels._apply_adam(*handle, lr, step, g, **adam)
        return []

    def set_side(flag):
        gemm._serial_work[f32] = limit
        gemm._split["on"] = True
        gemm.share_tasks = share
        gemm.CHUNKS["per_part"] = chunks_a
        fused_kernels._adam_tasks = adam_tasks
        overlap.ENABLED["on"] = True
        gemm._split["share"] = True
        gemm._tuning["on"] = False
        os.environ["TW_SPIN_SHARE"] = "0"
        gemm.after_way = after_way
        gemm._split["pair"] = True
        if flag:
            return
        if args.other == "one":      # everything under the one-thread size: one thread, its library
            gemm._serial_work[f32] = 1 << 62
        elif args.other == "nosplit":
            gemm._split["on"] = False
        elif args.other == "static":
            gemm.share_tasks, gemm.CHUNKS["per_part"] = static_share, 1
        elif args.other == "adamomp":
            fused_kernels._adam_tasks = stock_adam
        elif args.other == "nooverlap":
            overlap.ENABLED["on"] = False
        elif args.other == "noshare":
            gemm._split["share"] = False
        elif args.other == "tune":
            gemm._tuning["on"] = True
        elif args.other == "spin":
            os.environ["TW_SPIN_SHARE"] = "1"
        elif args.other == "caller":
            gemm.after_way = lambda *args: "caller"
        elif args.other == "pairthreads":
            gemm._split["pair"] = False
        elif args.other.startswith("chunks"):
            gemm.CHUNKS["per_part"] = int(args.other[6:])
        else:
            raise SystemExit(f"--other {args.other!r}: expected nosplit, one, static, adamomp, nooverlap, noshare, tune, "
                             "spin, caller, pairthreads or chunks<N>")
    from tensorweave.kernels.cpu import jit
    for flag in (True, False, True, False):      # warm both paths (and their shape classes' timings)
        set_side(flag)
        step()
        jit.wait_for_compiles()
    cpu, wall = {True: [], False: []}, {True: [], False: []}
    load = [os.getloadavg()[0]]
    for r in range(args.rounds):
        for flag in (True, False) if r % 2 == 0 else (False, True):
            set_side(flag)
            c0, w0 = time.process_time(), time.perf_counter()
            for _ in range(args.steps):
                step()
            cpu[flag].append((time.process_time() - c0) / args.steps)
            wall[flag].append((time.perf_counter() - w0) / args.steps)
    set_side(True)
    load.append(os.getloadavg()[0])
    print(f"cpu {gemm_cpu()}, load {load[0]:.1f} -> {load[1]:.1f}, {args.rounds} rounds x {args.steps} steps, "
          f"threads {args.threads or 'default'}{', on a rank thread' if args.rank else ''}")
    for flag, tag in ((True, f"split, {chunks_a} blocks per part"), (False, args.other)):
        print(f"{args.workload} {tag}: CPU ms/step median {np.median(cpu[flag]) * 1e3:.2f} "
              f"(fastest {min(cpu[flag]) * 1e3:.2f}), wall median {np.median(wall[flag]) * 1e3:.2f} "
              f"(fastest {min(wall[flag]) * 1e3:.2f})")
    wins = sum(a < b for a, b in zip(wall[True], wall[False]))
    print(f"rounds where the A side's wall was lower: {wins}/{args.rounds}")
    for cls, entry in sorted(gemm.tuner().choices.items()):
        if cls.startswith(("threads:", "serial:")) or not entry.get("settled", True):
            print(f"  {cls}: {entry}")


def _on_rank_thread(step):
    """``step`` run on one long-lived thread holding an in-process rank's share of one core."""
    import queue
    import threading
    from tensorweave.distribute import rank_threads
    jobs, answers = queue.Queue(), queue.Queue()

    def serve():
        rank_threads.use(1)
        while True:
            jobs.get()
            try:
                answers.put((step(), None))
            except BaseException as e:  # noqa: BLE001 - raised on the caller's thread
                answers.put((None, e))
    threading.Thread(target=serve, name="bench-rank", daemon=True).start()

    def on_rank():
        jobs.put(1)
        got, error = answers.get()
        if error is not None:
            raise error
        return got
    return on_rank


def gemm_cpu():
    from tensorweave.kernels.cpu import gemm_tuning
    return gemm_tuning.cpu_model()


if __name__ == "__main__":
    main()
