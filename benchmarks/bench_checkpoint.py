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

``--sharded`` measures the sharded checkpoints of global variables instead (issue 20), on the
same bytes in the same run:

* ``sharded_save`` / ``sharded_restore`` per rank count ``--ranks 1 2 4``: ``Checkpoint.write``
  of variables laid out ``S(0)`` over that many in-process ranks (each rank's pieces written by
  its own thread, fsynced, index + commit marker, rename) and ``Checkpoint.read`` back into
  the same layout, GB/s;
* ``dcp_save`` / ``dcp_load``: PyTorch's ``torch.distributed.checkpoint`` (``no_dist`` mode, one
  process, ``FileSystemWriter(thread_count=ranks, sync_files=True)``) of the same pieces as a
  state dict of tensors, loaded in place;
* ``single_file``: our single-file path (one process, gathered) for reference;
* ``tensor_file_write``: one file of the model written and fsynced by ``tensor_file.write_tensors``
  vs the safetensors library's ``serialize_file`` (+ fsync), alternated;
* ``async_step``: an in-place SGD step over local variables, ms, without a save and while a
  ``CheckpointManager(async_save=True)`` save is in flight (the snapshot holds the variables'
  storage, so the first update of each copies it: copy-on-write).

``python benchmarks/bench_checkpoint.py --sharded [--mb 256] [--ranks 1 2 4] [--repeat 3]``.
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
    ap.add_argument("--sharded", action="store_true", help="sharded checkpoints of global variables vs torch DCP")
    ap.add_argument("--mb", type=int, default=256, help="--sharded: model size in MB")
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    args = ap.parse_args(argv)
    if args.sharded:
        return sharded_main(args)

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


def _machine_row(base, mb):
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        cpu = platform.processor() or platform.machine()
    from tensorweave.saving import checksum
    emit({"row": "machine", "cpu": cpu, "cores": os.cpu_count(), "load": os.getloadavg()[0], "crc32": checksum.BACKEND,
          "python": platform.python_version(), "numpy": np.__version__, "dir": base, "model_mb": round(mb, 1)})


def sharded_main(args):
    import tensorweave as tw
    from tensorweave.train import Checkpoint
    base = tempfile.mkdtemp(dir=args.dir, prefix="bench-sharded-")
    n_vars = 16
    rows = max(64, args.mb * (1 << 20) // (n_vars * 4 * 1024))
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((rows, 1024), dtype=np.float32) for _ in range(n_vars)]
    gb = sum(a.nbytes for a in arrays) / 1e9
    _machine_row(base, gb * 1e3)
    try:
        for n in args.ranks:
            placement = tw.placement("cpu", ranks=list(range(n)))
            variables = [tw.Variable(a, placement=placement, sbp=tw.sbp.split(0)) for a in arrays]
            prefix = os.path.join(base, f"tw{n}")
            t_save, best_save = median_time(lambda: Checkpoint(w=variables).write(prefix), args.repeat)
            targets = [tw.Variable(np.zeros_like(a), placement=placement, sbp=tw.sbp.split(0)) for a in arrays]
            t_load, best_load = median_time(lambda: Checkpoint(w=targets).read(prefix).assert_consumed(),
                                            args.repeat)
            assert all(np.array_equal(t.numpy(), a) for t, a in zip(targets, arrays))
            emit({"row": "sharded_save", "ranks": n, "GB_per_s": round(gb / t_save, 3),
                  "best_GB_per_s": round(gb / best_save, 3)})
            emit({"row": "sharded_restore", "ranks": n, "GB_per_s": round(gb / t_load, 3),
                  "best_GB_per_s": round(gb / best_load, 3)})
            del variables, targets
            shutil.rmtree(prefix + ".sharded", ignore_errors=True)
            dcp_row(base, arrays, n, gb, args.repeat)
        single = [tw.Variable(a) for a in arrays]
        prefix = os.path.join(base, "single")
        t_save, best_save = median_time(lambda: Checkpoint(w=single).write(prefix), args.repeat)
        t_load, best_load = median_time(lambda: Checkpoint(w=single).read(prefix), args.repeat)
        emit({"row": "single_file", "save_GB_per_s": round(gb / t_save, 3), "restore_GB_per_s": round(gb / t_load, 3)})
        os.remove(prefix + ".safetensors")
        async_step_row(base, arrays[:4], args.repeat)
        writer_row(base, arrays, gb, args.repeat)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


def writer_row(base, arrays, gb, repeat):
    """One tensor file of the model, fsynced: ``tensor_file.write_tensors`` (one ``write`` per
    tensor into the descriptor it fsyncs) against the safetensors library's ``serialize_file``
    (followed by an fsync of the file it made), alternated, GB/s."""
    import safetensors
    from tensorweave.saving import tensor_file
    tensors = {f"w{i}": a for i, a in enumerate(arrays)}
    path = os.path.join(base, "writer.safetensors")

    def ours():
        tensor_file.write_tensors(path, tensors)

    def library():
        specs, keep = tensor_file._specs(tensors)
        safetensors.serialize_file(specs, path)
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    times = {"ours": [], "library": []}
    for _ in range(repeat):
        for name, fn in (("ours", ours), ("library", library)):
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
            os.remove(path)
    emit({"row": "tensor_file_write", "ours_GB_per_s": round(gb / statistics.median(times["ours"]), 3),
          "library_serialize_file_GB_per_s": round(gb / statistics.median(times["library"]), 3),
          "load": os.getloadavg()[0]})


def dcp_row(base, arrays, n, gb, repeat):
    try:
        import torch
        import torch.distributed.checkpoint as dcp
    except ImportError:
        emit({"row": "dcp", "skipped": "torch not installed"})
        return
    from tensorweave.distribute.layout import Placement, split_to_pieces
    from tensorweave.core.sbp import S
    placement = Placement("cpu", list(range(n)))
    state = {f"w{i}.shard{r}": torch.from_numpy(p)
             for i, a in enumerate(arrays) for r, p in enumerate(split_to_pieces(a, placement, (S(0),)))}
    path = os.path.join(base, f"dcp{n}")

    def save():
        dcp.save(state, storage_writer=dcp.FileSystemWriter(path, thread_count=n, sync_files=True), no_dist=True)
    t_save, best_save = median_time(save, repeat)
    target = {k: torch.zeros_like(v) for k, v in state.items()}

    def load():
        dcp.load(target, storage_reader=dcp.FileSystemReader(path), no_dist=True)
    t_load, best_load = median_time(load, repeat)
    assert all(torch.equal(target[k], state[k]) for k in state)
    emit({"row": "dcp_save", "ranks": n, "GB_per_s": round(gb / t_save, 3), "best_GB_per_s": round(gb / best_save, 3)})
    emit({"row": "dcp_load", "ranks": n, "GB_per_s": round(gb / t_load, 3), "best_GB_per_s": round(gb / best_load, 3)})
    shutil.rmtree(path, ignore_errors=True)


def async_step_row(base, arrays, repeat):
    import tensorweave as tw
    from tensorweave import keras
    from tensorweave.train import Checkpoint, CheckpointManager
    variables = [tw.Variable(a) for a in arrays]
    grads = [tw.constant(np.full_like(a, 1e-6)) for a in arrays]
    opt = keras.optimizers.SGD(0.1)
    manager = CheckpointManager(Checkpoint(w=variables), os.path.join(base, "async"), max_to_keep=1,
                                async_save=True)

    def step():
        t0 = time.perf_counter()
        opt.apply_gradients(zip(grads, variables))
        return time.perf_counter() - t0
    for _ in range(3):
        step()
    plain, during, saves = [], [], []
    for _ in range(repeat):
        plain += [step() for _ in range(5)]
        t0 = time.perf_counter()
        manager.save()
        snap = time.perf_counter() - t0
        while manager._pending is not None and not manager._pending.done():
            during.append(step())
        manager.wait_until_finished()
        saves.append((snap, time.perf_counter() - t0))
    mb = sum(a.nbytes for a in arrays) / 1e6
    emit({"row": "async_step", "model_mb": round(mb, 1), "step_ms": round(1e3 * statistics.median(plain), 2),
          "step_ms_during_save": round(1e3 * statistics.median(during), 2) if during else None,
          "steps_during_saves": len(during), "save_call_ms": round(1e3 * statistics.median(s for s, _ in saves), 2),
          "save_total_ms": round(1e3 * statistics.median(t for _, t in saves), 1)})


if __name__ == "__main__":
    sys.exit(main())
