"""ParameterServerStrategy throughput: the DeepFM example (``examples/ps_recommendation.py``)
with a ``--rows`` x 32 embedding table (default 1,000,000) over ``--ps`` servers, trained
asynchronously with 1, 2 and 4 workers (``--workers``); one JSON object per line with the
examples/s (after a warm-up step per worker), the loss of the first and last steps and what
each server holds. The CPU model, core count and load average are printed first and last:
on a shared machine the figures mean little without them.

Usage: ``python benchmarks/bench_ps.py [--workers 1 2 4] [--rows 1000000] [--steps 40] [--batch 512]``.
"""
import argparse
import json
import os
import pathlib
import sys

from bench_ray_collectives import _cpu_model   # this directory's sibling benchmark


def _machine():
    return {"cpu": _cpu_model(), "cores": os.cpu_count(), "load_avg": [round(x, 2) for x in os.getloadavg()]}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--ps", type=int, default=2)
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--sync", action="store_true")
    a = p.parse_args()
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))
    import ray
    import ps_recommendation as ex
    ray.cloudpickle.register_pickle_by_value(ex)       # the workers get the model class by value
    print(json.dumps({"machine": _machine()}), flush=True)
    for n in a.workers:
        losses, rate, shapes = ex.train(workers=n, ps=a.ps, rows=a.rows, steps=a.steps, batch=a.batch, sync=a.sync,
                                        verbose=False)
        k = max(1, len(losses) // 5)
        print(json.dumps({"workers": n, "ps": a.ps, "rows": a.rows, "batch_per_worker": a.batch,
                          "mode": "sync" if a.sync else "async", "steps": a.steps,
                          "examples_per_s": round(rate, 1), "loss_first": round(sum(losses[:k]) / k, 4),
                          "loss_last": round(sum(losses[-k:]) / k, 4),
                          "table_shards": [sorted(v for key, v in s.items() if "/embedding/" in key) for s in shapes],
                          "load_avg": [round(x, 2) for x in os.getloadavg()]}), flush=True)
    print(json.dumps({"machine_after": _machine()}), flush=True)


if __name__ == "__main__":
    main()
