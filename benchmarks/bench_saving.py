"""Save/load throughput of a ~100 MB model against numpy.save/numpy.load, in the same run.

The model is a Keras MLP (2048 -> 4096 -> 4096 -> 1024, float32: 29.4 M parameters, 118 MB of
weights) compiled with SGD (so there are no optimizer slots and every format moves the same
bytes). Rows (one JSON object per line):

* ``numpy``: ``np.save`` of each weight into a directory, ``np.load(allow_pickle=False)`` back;
* ``keras_file``: ``model.save("m.keras")`` / ``load_model`` (zip + validated tensor file, rebuild
  from config, assign, compile);
* ``saved_model``: ``tw.saved_model.save(model, dir)`` / ``tw.saved_model.load`` (JSON graph,
  validated tensor file, restored variables, runnable signature);
* ``weights_file``: the tensor file alone (``tensor_file.write_tensors`` / ``read_tensors``: the
  safetensors library's I/O plus our validation, atomic rename and fsyncs);
* ``safetensors_library``: ``safetensors.numpy.save_file`` / ``load_file`` of the same tensors (no
  validation of ours, no fsync): what our wrapper costs over the library.

MB/s = weight bytes / seconds (best of ``--repeat`` runs, files in a fresh temporary directory,
page cache warm, as a reload right after a save sees it). Each save ends with fsync, as
``np.save`` does not: ``numpy_fsync`` adds an fsync to the NumPy row for a like-for-like write.

Usage: ``python benchmarks/bench_saving.py [--repeat N] [--quick]``.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np


def emit(row):
    print(json.dumps(row), flush=True)


def best(fn, repeat, setup=None):
    times = []
    for _ in range(repeat):
        if setup is not None:
            setup()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="a 10x smaller model")
    args = parser.parse_args(argv)
    import tensorweave as tw
    import tensorweave.saved_model as sm
    from tensorweave import keras
    from tensorweave.keras.saving import load_model
    from tensorweave.saving import tensor_file

    sizes = [2048, 4096, 4096, 1024] if not args.quick else [512, 1024, 1024, 512]
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input(shape=(sizes[0],))] + [keras.layers.Dense(n) for n in sizes[1:]])
    model.compile(optimizer="sgd", loss="mse")
    weights = model.get_weights()
    nbytes = sum(w.nbytes for w in weights)
    mb = nbytes / 1e6
    emit({"row": "model", "parameters": int(sum(w.size for w in weights)), "megabytes": round(mb, 1),
          "python": sys.version.split()[0], "numpy": np.__version__, "tensorweave": tw.__version__})
    root = tempfile.mkdtemp(prefix="tw-bench-saving-")
    x = np.ones((2, sizes[0]), np.float32)
    try:
        def fresh(name):
            p = os.path.join(root, name)
            if os.path.isdir(p):
                shutil.rmtree(p)
            elif os.path.exists(p):
                os.remove(p)
            return p

        # --- numpy
        npdir = os.path.join(root, "np")

        def np_save(sync=False):
            os.makedirs(npdir, exist_ok=True)
            for i, w in enumerate(weights):
                path = os.path.join(npdir, f"w{i}.npy")
                with open(path, "wb") as f:
                    np.save(f, w)
                    if sync:
                        f.flush()
                        os.fsync(f.fileno())

        def np_load():
            return [np.load(os.path.join(npdir, f"w{i}.npy"), allow_pickle=False) for i in range(len(weights))]
        s = best(np_save, args.repeat, lambda: fresh("np"))
        s_sync = best(lambda: np_save(True), args.repeat, lambda: fresh("np"))
        loaded = np_load()
        t = best(np_load, args.repeat)
        assert all(np.array_equal(a, b) for a, b in zip(loaded, weights))
        emit({"row": "numpy", "save_s": round(s, 4), "load_s": round(t, 4), "save_MBps": round(mb / s),
              "load_MBps": round(mb / t), "save_fsync_s": round(s_sync, 4), "save_fsync_MBps": round(mb / s_sync)})
        numpy_rates = (mb / s_sync, mb / t)

        def row(name, save, load, check):
            s = best(save, args.repeat)
            out = load()
            check(out)
            t = best(load, args.repeat)
            emit({"row": name, "save_s": round(s, 4), "load_s": round(t, 4), "save_MBps": round(mb / s),
                  "load_MBps": round(mb / t), "save_vs_numpy_fsync": round((mb / s) / numpy_rates[0], 2),
                  "load_vs_numpy": round((mb / t) / numpy_rates[1], 2)})

        wpath = os.path.join(root, "w.safetensors")
        tensors = {f"w{i}": w for i, w in enumerate(weights)}
        row("weights_file", lambda: tensor_file.write_tensors(wpath, tensors), lambda: tensor_file.read_tensors(wpath),
            lambda out: all(np.array_equal(out[k], v) for k, v in tensors.items()) or sys.exit("mismatch"))

        import safetensors.numpy as stn
        lpath = os.path.join(root, "lib.safetensors")
        row("safetensors_library", lambda: stn.save_file(tensors, lpath), lambda: stn.load_file(lpath),
            lambda out: all(np.array_equal(out[k], v) for k, v in tensors.items()) or sys.exit("mismatch"))

        kpath = os.path.join(root, "m.keras")
        ref = model.predict(x, verbose=0)
        row("keras_file", lambda: model.save(kpath), lambda: load_model(kpath),
            lambda m: np.array_equal(m.predict(x, verbose=0), ref) or sys.exit("keras mismatch"))

        spath = os.path.join(root, "sm")
        row("saved_model", lambda: sm.save(model, spath), lambda: sm.load(spath),
            lambda o: np.array_equal(list(o.signatures["serving_default"](x).values())[0].numpy(), ref)
            or sys.exit("saved_model mismatch"))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
