"""Pipeline throughput on in-process ranks: the benchmark MLP (784-512-512-10, SGD, batch
``--batch``) as a 2-stage 1F1B pipeline (layer 1 on rank 0, layers 2-3 on rank 1, ``--micro-batches``
micro-batches), one BLAS thread per call, against the same MLP on one device; prints one JSON
object per line.

Rows: ``one_device``; ``pipelined_sequential`` (``concurrent=False``: one controller runs the
actions one after the other, so only the pipeline's overhead shows); ``pipelined_concurrent``
(one controller thread per stage, ranks locked per rank: stage 0's forward of micro-batch
``k + 1`` overlaps stage 1's work on ``k``). The ideal ratio of a balanced 2-stage pipeline is
``2 (1 - bubble)`` (1.6x at 4 micro-batches) before micro-batching's smaller GEMMs and the
per-op hand-offs of eager global tensors. The models and steps are ``bench_distribute.py``'s.

``--hidden H`` widens the two hidden layers (784-H-H-10) so each stage's GEMMs outweigh the
per-op hand-offs.

``--ray``: the same pipeline across 2 Ray worker processes (``tw.distribute.connect(num_workers=2)``,
stage 0 on worker 0, stage 1 on worker 1, each worker 1 Ray CPU and 1 BLAS thread) for each of
``--schedules`` against one device in this process (one thread) and the in-process 1F1B pipeline
(rank threads, ``workers: 0``); rows also give the mean step
time, the schedule's bubble fraction and the share of the last step each worker spent waiting
for hand-offs (``pipe._ray.last_step``), with the CPU model and load.

Usage: ``python benchmarks/bench_pipeline.py [--batch 256] [--micro-batches 4] [--steps 10] [--rounds 3]
[--hidden 512] [--ray [--schedules 1f1b,gpipe] [--tensor-parallel]]``.

``--tensor-parallel`` (with ``--ray``; 3 workers): two more rows with stage 1 on workers 1 and 2,
its first kernel ``S(1)`` and bias ``S(0)``, its second kernel ``S(0)`` (Megatron's pair):
``ray_1f1b_tp`` (the stage's planned functions run by its workers in the step's one call per
worker, ``distribute/ray/pipeline_tp.py``) and ``ray_1f1b_tp_walked`` (the same pipeline with the
driver walking the schedule op by op, each op one call per worker of the stage: the path before
session 14, forced with ``pipe.walked_because``), interleaved in the same rounds. Every row also
gives the driver's process CPU per step (``driver_cpu_ms``) and the load.
"""
import argparse
import json
import os
import sys
import warnings

from threadpoolctl import threadpool_limits

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_distribute  # noqa: E402
from bench_distribute import make, make_pipeline, steps_per_s  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--micro-batches", type=int, default=4)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--ray", action="store_true", help="stages on 2 Ray worker processes")
    ap.add_argument("--schedules", default="1f1b,gpipe")
    ap.add_argument("--tensor-parallel", action="store_true",
                    help="with --ray: also 1F1B with stage 1 split over workers 1 and 2 (3 workers)")
    args = ap.parse_args()
    bench_distribute.SIZES = (784, args.hidden, args.hidden, 10)     # make/make_pipeline read it
    warnings.simplefilter("ignore")
    if args.ray:
        return main_ray(args)
    with threadpool_limits(1):
        local = make(None, args.batch)
        pipe, piped = make_pipeline(args.batch, args.micro_batches)
        best = {"one_device": 0.0, "pipelined_sequential": 0.0, "pipelined_concurrent": 0.0}
        for _ in range(args.rounds):          # alternate, best of rounds
            best["one_device"] = max(best["one_device"], steps_per_s(local, args.steps))
            pipe.concurrent = False
            best["pipelined_sequential"] = max(best["pipelined_sequential"], steps_per_s(piped, args.steps))
            pipe.concurrent = True
            best["pipelined_concurrent"] = max(best["pipelined_concurrent"], steps_per_s(piped, args.steps))
    one = best["one_device"]
    for row, value in best.items():
        print(json.dumps({"row": row, "batch": args.batch, "hidden": args.hidden, "stages": 2,
                          "micro_batches": args.micro_batches, "schedule": "1f1b", "bubble_fraction": round(pipe.bubble_fraction, 3),
                          "steps_s": round(value, 2), "vs_one_device": round(value / one, 2),
                          "load": round(os.getloadavg()[0], 1)}), flush=True)


def _pipeline_with(batch, micro_batches, schedule):
    """``make_pipeline``'s stages, data and SGD under ``schedule``: ``(pipe, step)``."""
    import numpy as np

    import tensorweave as tw
    made, _ = make_pipeline(batch, micro_batches)
    pipe = tw.distribute.pipeline(list(zip(made.stages, made.placements)), micro_batches=micro_batches,
                                  schedule=schedule, loss=made.loss)
    x, y = _batch(batch), _labels(batch)
    opt = tw.keras.optimizers.SGD(0.01)
    return pipe, lambda: pipe.train_step(x, y, opt)


def _batch(batch):
    import numpy as np
    return np.random.default_rng(0).standard_normal((batch, bench_distribute.SIZES[0])).astype(np.float32)


def _labels(batch):
    import numpy as np       # make_pipeline's batch: the same generator, drawn after the inputs
    rng = np.random.default_rng(0)
    rng.standard_normal((batch, bench_distribute.SIZES[0]))
    return rng.integers(0, bench_distribute.SIZES[-1], batch).astype(np.int32)


def _tensor_parallel(batch, micro_batches, walked=False):
    """``make_pipeline``'s stages with stage 1 on workers 1 and 2, its layers split (Megatron's
    column then row split): ``(pipe, step)``; ``walked``: the driver walks the schedule op by op."""
    import tensorweave as tw
    made, _ = make_pipeline(batch, micro_batches)
    p1 = tw.placement("cpu", ranks=[1, 2])
    stage1 = made.stages[1]
    (w2, b2), (w3, b3) = stage1.params
    layout = {id(w2): tw.sbp.split(1), id(b2): tw.sbp.split(0), id(w3): tw.sbp.split(0)}
    stage1.to_global(p1, lambda v: layout.get(id(v), tw.sbp.broadcast))
    pipe = tw.distribute.pipeline([(made.stages[0], made.placements[0]), (stage1, p1)], micro_batches=micro_batches,
                                  schedule="1f1b", loss=made.loss)
    if walked:
        pipe.walked_because = "benchmark: the driver-walked path"
    x, y = _batch(batch), _labels(batch)
    opt = tw.keras.optimizers.SGD(0.01)
    return pipe, lambda: pipe.train_step(x, y, opt)


def main_ray(args):
    """One device in this process vs the pipeline's stages on 2 Ray workers, per schedule."""
    import time

    from bench_ray_collectives import _cpu_model   # this directory's sibling benchmark
    import tensorweave as tw
    machine = {"cpu": _cpu_model(), "cores": os.cpu_count()}
    with threadpool_limits(1):
        local = make(None, args.batch)
        cluster = tw.distribute.connect(num_workers=3 if args.tensor_parallel else 2)
        try:
            pipes = {name: _pipeline_with(args.batch, args.micro_batches, name) for name in args.schedules.split(",")}
            if args.tensor_parallel:
                pipes["1f1b_tp"] = _tensor_parallel(args.batch, args.micro_batches)
                pipes["1f1b_tp_walked"] = _tensor_parallel(args.batch, args.micro_batches, walked=True)
            # the same 1F1B pipeline with the update sent from the driver (forward_backward, then the
            # optimizer's eager ops on the global variables), as before the update ran in the step call
            pipe_d, _ = _pipeline_with(args.batch, args.micro_batches, "1f1b")
            x, y, opt_d = _batch(args.batch), _labels(args.batch), tw.keras.optimizers.SGD(0.01)
            pipes["1f1b_driver_update"] = (pipe_d, lambda: opt_d.apply_gradients(
                [(g, v) for g, v in zip(*pipe_d.forward_backward(x, y)[1:]) if g is not None]))
            with tw.distribute.in_process():      # the same pipeline on in-process ranks (threads)
                in_process = _pipeline_with(args.batch, args.micro_batches, "1f1b")[1]
            best = {"one_device": 0.0, "in_process_1f1b": 0.0, **{f"ray_{name}": 0.0 for name in pipes}}
            cpu = {}
            waits = {}

            def measure(row, step):
                c0 = time.process_time()
                rate = steps_per_s(step, args.steps)
                ms = (time.process_time() - c0) * 1000 / (args.steps + 1)     # steps_per_s runs one more
                if rate > best[row]:
                    best[row], cpu[row] = rate, ms
            for _ in range(args.rounds):      # alternate, best of rounds
                measure("one_device", local)
                with tw.distribute.in_process():
                    measure("in_process_1f1b", in_process)
                for name, (pipe, step) in pipes.items():
                    measure(f"ray_{name}", step)
                    last = pipe.last_step
                    waits[name] = {r: round(w["wait_s"] / last["seconds"], 2)
                                   for r, w in last.get("workers", {}).items()}
        finally:
            transport = cluster.transport
            tw.distribute.shutdown()
    one = best["one_device"]
    for row, value in best.items():
        name = row[4:] if row.startswith("ray_") else None
        print(json.dumps({"row": row, "batch": args.batch, "hidden": args.hidden,
                          "workers": (3 if name.startswith("1f1b_tp") else 2) if name else 0,
                          "micro_batches": args.micro_batches, "schedule": name,
                          "bubble_fraction": round(pipes[name][0].bubble_fraction, 3) if name else None,
                          "transport": transport if name else None, "steps_s": round(value, 2),
                          "step_ms": round(1000 / value, 1), "driver_cpu_ms": round(cpu.get(row, 0.0), 1),
                          "vs_one_device": round(value / one, 2),
                          "last_step_wait_share": waits.get(name), **machine,
                          "load": round(os.getloadavg()[0], 1), "utc": time.strftime("%H:%M")}), flush=True)


if __name__ == "__main__":
    main()
