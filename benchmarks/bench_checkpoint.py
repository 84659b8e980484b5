"""Checkpoint throughput: ``tw.train.Checkpoint`` save/restore of a 100 MB model against
``numpy.save``/``numpy.load`` of the same arrays, in the same run, on the same disk.

Prints one JSON object per line:

* ``machine``: CPU, core count, Python/NumPy versions, the directory used and its file system;
* ``checkpoint_write``: ``Checkpoint.write`` (object graph, CRC-32 per tensor, one tensor file
  written by the safetensors library from the arrays' buffers to a temporary name, fsynced,
  renamed, directory fsynced), MB/s;
* ``checkpoint_restore``: ``Checkpoint.read`` (header and schema validation, CRC-32 checks,
  assignment into the variables), MB/s;
* ``numpy_save`` / ``numpy_load``: one ``.npy`` file per array (no fsync, no checksum), MB/s;
* ``numpy_save_fsync``: the same with each file fsynced, for a like-for-like durable write;
* ``ratios``: checkpoint / numpy for each direction;
Each figure is the median of ``--repeat`` runs (the page cache is warm after the first: this
measures the library's overhead over the file system, not the disk). Usage:
``python benchmarks/bench_checkpoint.py [--variables 25] [--size 1000000] [--repeat 5] [--dir DIR]``.
Timings are never asserted in tests.
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np


def emit(row):
    print(json.dumps(row), flush=True)


def median_time(fn, repeat, setup=None):
    times = []
    for _ in range(repeat):
        if setup is not None:
            setup()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variables", type=int, default=25)
    ap.add_argument("--size", type=int, default=1_000_000, help="float32 elements per variable")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", default=None, help="where to write (default: a temporary directory)")
    args = ap.parse_args(argv)

    import tensorweave as tw
    from tensorweave.train import Checkpoint

    base = tempfile.mkdtemp(dir=args.dir, prefix="bench-ckpt-")
    try:
        rng = np.random.default_rng(0)
        arrays = [rng.standard_normal(args.size, dtype=np.float32) for _ in range(args.variables)]
        mb = sum(a.nbytes for a in arrays) / 1e6
        variables = [tw.Variable(a) for a in arrays]
        ckpt = Checkpoint(weights=variables)
        prefix = os.path.join(base, "ckpt")
        emit({"row": "machine", "python": platform.python_version(), "numpy": np.__version__,
              "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(), "dir": base,
              "model_mb": round(mb, 1), "variables": args.variables})

        t_write, best_write = median_time(lambda: ckpt.write(prefix), args.repeat)
        targets = [tw.Variable(np.zeros(args.size, np.float32)) for _ in range(args.variables)]
        reader = Checkpoint(weights=targets)
        t_read, best_read = median_time(lambda: reader.read(prefix).assert_consumed(), args.repeat)
        assert all(np.array_equal(t.numpy(), a) for t, a in zip(targets, arrays))

        npdir = os.path.join(base, "npy")
        os.makedirs(npdir)
        paths = [os.path.join(npdir, f"w{i}.npy") for i in range(len(arrays))]

        def np_save():
            for p, a in zip(paths, arrays):
                np.save(p, a)

        def np_save_fsync():
            for p, a in zip(paths, arrays):
                with open(p, "wb") as f:
                    np.save(f, a)
                    f.flush()
                    os.fsync(f.fileno())

        loaded = []

        def np_load():
            loaded[:] = [np.load(p) for p in paths]

        t_np_save, best_np_save = median_time(np_save, args.repeat)
        t_np_load, best_np_load = median_time(np_load, args.repeat)
        t_np_fsync, best_np_fsync = median_time(np_save_fsync, args.repeat)

        def row(name, t, best):
            emit({"row": name, "seconds": round(t, 4), "MB_per_s": round(mb / t, 1),
                  "best_MB_per_s": round(mb / best, 1)})
        row("checkpoint_write", t_write, best_write)
        row("checkpoint_restore", t_read, best_read)
        row("numpy_save", t_np_save, best_np_save)
        row("numpy_save_fsync", t_np_fsync, best_np_fsync)
        row("numpy_load", t_np_load, best_np_load)
        emit({"row": "ratios", "write_vs_numpy_save": round(t_np_save / t_write, 3),
              "write_vs_numpy_save_fsync": round(t_np_fsync / t_write, 3),
              "restore_vs_numpy_load": round(t_np_load / t_read, 3)})
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
