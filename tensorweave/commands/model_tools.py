"""``tensorweave inspect PATH`` and ``tensorweave run PATH --input name=file.npy``.

``inspect`` reads a SavedModel directory or a ``.keras`` file without running or building
anything: signatures (input/output names, shapes, dtypes), op counts by type, variables
with shapes and sizes, and the fingerprint (checked against the files). ``run`` loads the
model and feeds ``.npy`` inputs (read with ``allow_pickle=False``) to a signature, printing
each output's shape, dtype and a summary of its values.

>>> import io, os, tempfile, numpy as np, tensorweave as tw
>>> import tensorweave.saved_model
>>> @tw.function(input_signature=[tw.TensorSpec([None], tw.float32, name="x")])
... def square(x):
...     return {"y": x * x}
>>> d = tempfile.mkdtemp()
>>> tw.saved_model.save(square, os.path.join(d, "sq"))
>>> np.save(os.path.join(d, "x.npy"), np.array([1.0, 3.0], np.float32))
>>> out = io.StringIO()
>>> run_model(os.path.join(d, "sq"), [f"x={os.path.join(d, 'x.npy')}"], out=out)
0
>>> print(out.getvalue().strip())
y: shape (2,) float32
  [1. 9.]
  min 1  max 9  mean 5
"""
import hashlib
import os
import sys


def _fmt_shape(shape):
    if shape is None:
        return "<unknown rank>"
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _fmt_bytes(n):
    if n is None:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024.0


def _table(rows, out, indent="  "):
    if not rows:
        return
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        out.write(indent + "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() + "\n")


def _is_saved_model(path):
    # Any directory is taken as a SavedModel, so a broken one gets the SavedModel reader's
    # precise error (a missing or non-regular saved_model.json ...).
    from tensorweave.saving.saved_model import resolve_export_dir
    return os.path.isdir(resolve_export_dir(path))


# ---- inspect -----------------------------------------------------------------------------------------
def inspect_saved_model(path, out):
    from tensorweave.saving.saved_model import read_info
    info = read_info(path)
    producer = info["producer"].get("version", "?")
    out.write(f"SavedModel: {path}\n")
    out.write(f"  format {info['format']} version {info['version']}, written by tensorweave {producer}\n")
    status = "verified" if info["fingerprint_ok"] else ("MISMATCH: files changed after saving"
                                                        if info["fingerprint"] else "no fingerprint file")
    out.write(f"  fingerprint sha256:{info['fingerprint'] or '-'} ({status})\n")
    if info["keras"]:
        out.write("  Keras model: yes (tw.keras.models.load_model restores it trainable)\n")
    out.write(f"\nSignatures ({len(info['signatures'])}):\n")
    for name, sig in info["signatures"].items():
        out.write(f"  {name}:\n    inputs:\n")
        _table([(e["name"], e["dtype"], _fmt_shape(e["shape"])) for e in sig["inputs"]], out, "      ")
        out.write("    outputs:\n")
        _table([(e["name"], e["dtype"], _fmt_shape(e["shape"])) for e in sig["outputs"]], out, "      ")
    attrs = [a for a in info["attributes"]]
    if attrs:
        out.write(f"\nFunctions: {', '.join(attrs)}\n")
    counts = info["op_counts"]
    out.write(f"\nOps ({sum(counts.values())} nodes, {len(counts)} types):\n")
    _table([(op, n) for op, n in counts.items()], out)
    vs = info["variables"]
    out.write(f"\nVariables ({len(vs)}, {_fmt_bytes(info['total_bytes'])}):\n")
    _table([(v["name"], v["dtype"], _fmt_shape(v["shape"]), _fmt_bytes(v["bytes"]),
             "trainable" if v["trainable"] else "") for v in vs], out)
    out.write(f"  total: {info['total_bytes']} bytes ({_fmt_bytes(info['total_bytes'])})\n")
    if info["assets"]:
        out.write(f"\nAssets: {', '.join(sorted(info['assets'].values()))}\n")


def _keras_weights_header(fh, path):
    """Entries of a .keras file's tensor file, read from the archive without extracting it."""
    import zipfile
    from tensorweave.keras.saving import _WEIGHTS
    from tensorweave.saving import tensor_file
    with zipfile.ZipFile(fh) as z:
        info = z.getinfo(_WEIGHTS)
        with z.open(info) as f:
            header, start = tensor_file._header(f"{path}:{_WEIGHTS}", f, info.file_size)
            tensor_file._validate(f"{path}:{_WEIGHTS}", header, info.file_size - start)
    return header


def inspect_keras_file(path, out):
    from tensorweave.keras.saving import _CONFIG, KerasLoadError, _check_document, _read_zip
    from tensorweave.saving import tensor_file
    from tensorweave.saving.validation import open_regular
    # One descriptor for every read, of a regular file only (a FIFO would block forever).
    with open_regular(path, path, KerasLoadError) as fh:
        meta, doc, _ = _read_zip(fh, path, read_weights=False)
        _check_document(doc, f"{path}: {_CONFIG}", str)
        header = _keras_weights_header(fh, path)
        fh.seek(0)
        h = hashlib.sha256()
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            h.update(chunk)
    out.write(f"Keras model file: {path}\n")
    out.write(f"  format {meta['format']} version {meta['version']}, written by tensorweave "
              f"{meta.get('tensorweave_version', '?')} on {meta.get('date_saved', '?')}\n")
    out.write(f"  fingerprint sha256:{h.hexdigest()} (of the file)\n")
    cfg = doc["config"]
    out.write(f"\nModel: {doc['class_name']} \"{cfg.get('name', '?')}\"\n")
    layers = cfg.get("layers") if isinstance(cfg.get("layers"), list) else []
    counts = {}
    for lc in layers:
        if isinstance(lc, dict) and isinstance(lc.get("class_name"), str):
            counts[lc["class_name"]] = counts.get(lc["class_name"], 0) + 1
    if counts:
        out.write(f"\nLayers ({len(layers)}):\n")
        _table(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])), out)
    if doc["build_config"]:
        out.write(f"\nInput shape: {_fmt_shape(doc['build_config']['input_shape'])}\n")
    cc = doc["compile_config"]
    if cc:
        opt = cc.get("optimizer") or {}
        out.write(f"\nCompiled: optimizer {opt.get('class_name', '-') if isinstance(opt, dict) else opt}, "
                  f"loss {cc.get('loss')!r}, metrics {cc.get('metrics')!r}\n")
    rows, total = [], 0
    for key, ref in doc["weights"].items():
        e = header.get(ref)
        if not isinstance(e, dict):
            continue
        n = e["data_offsets"][1] - e["data_offsets"][0]
        total += n
        rows.append((key, tensor_file._DTYPES[e["dtype"]].name, _fmt_shape(e["shape"]), _fmt_bytes(n)))
    out.write(f"\nWeights ({len(rows)}, {_fmt_bytes(total)}):\n")
    _table(rows, out)
    out.write(f"  total: {total} bytes ({_fmt_bytes(total)})\n")
    state = doc["optimizer_state"]
    if state:
        n = sum(header[r]["data_offsets"][1] - header[r]["data_offsets"][0] for r in state["variables"]
                if isinstance(header.get(r), dict))
        out.write(f"\nOptimizer state: {len(state['variables'])} variables, {_fmt_bytes(n)}\n")


def inspect_model(path, out=None):
    """Prints what ``path`` (SavedModel directory or .keras file) holds; returns the exit status."""
    out = out or sys.stdout
    if _is_saved_model(path):
        inspect_saved_model(path, out)
    elif os.path.lexists(path):
        inspect_keras_file(path, out)
    else:
        raise ValueError(f"{path}: not a SavedModel directory or a .keras file")
    return 0


# ---- run ---------------------------------------------------------------------------------------------
def _parse_inputs(items):
    import numpy as np
    values = {}
    for item in items or []:
        name, sep, file = item.partition("=")
        if not sep or not name or not file:
            raise ValueError(f"--input {item!r}: expected NAME=FILE.npy")
        if name in values:
            raise ValueError(f"--input {name!r} given twice")
        values[name] = _read_npy(name, file)
    return values


def _read_npy(name, file):
    """An ``.npy`` array: a regular file only, its header checked against the file's size
    before the array is allocated, never unpickled."""
    import numpy as np
    from numpy.lib import format as npy
    from tensorweave.saving.validation import open_regular
    where = f"--input {name}: {file}"
    try:
        with open_regular(file, where, ValueError) as f:
            size = os.fstat(f.fileno()).st_size
            try:
                version = npy.read_magic(f)
                shape, fortran, dtype = (npy.read_array_header_1_0(f) if version == (1, 0)
                                         else npy.read_array_header_2_0(f))
            except (ValueError, OSError, SyntaxError, TypeError) as e:
                raise ValueError(f"{where}: not a .npy array ({e})") from None
            if dtype.hasobject:
                raise ValueError(f"{where}: Object arrays cannot be loaded when allow_pickle=False (Python objects are never "
                                 "unpickled)")
            if len(shape) > 64 or any(not isinstance(d, int) or d < 0 for d in shape):
                raise ValueError(f"{where}: invalid shape {shape}")
            nbytes = dtype.itemsize
            for d in shape:
                nbytes *= d
            if nbytes > size - f.tell():
                raise ValueError(f"{where}: the header declares {shape} {dtype} ({nbytes} bytes) but the file "
                                 f"holds {size - f.tell()} bytes after it (truncated or crafted)")
            f.seek(0)
            # allow_pickle=False: an .npy holding Python objects is refused, not unpickled.
            return np.load(f, allow_pickle=False)
    except OSError as e:
        raise ValueError(f"{where}: cannot read it as a .npy array ({e.strerror or e})") from None


def _summary(a, max_values):
    import numpy as np
    a = np.asarray(a)
    text = np.array2string(a, threshold=max_values, edgeitems=3, max_line_width=100)
    lines = ["  " + ln for ln in text.splitlines()]
    if a.size > 1 and a.dtype.kind in "fiu":
        f = a.astype(np.float64)
        lines.append(f"  min {f.min():.6g}  max {f.max():.6g}  mean {f.mean():.6g}")
    return "\n".join(lines)


def run_model(path, inputs, signature=None, out=None, max_values=20):
    """Runs ``path`` on ``.npy`` inputs (``["name=file.npy", ...]``) and prints the outputs."""
    import numpy as np
    out = out or sys.stdout
    values = _parse_inputs(inputs)
    if _is_saved_model(path):
        from tensorweave.saving.saved_model import DEFAULT_SIGNATURE, load
        loaded = load(path)
        name = signature or DEFAULT_SIGNATURE
        if name not in loaded.signatures:
            raise ValueError(f"{path} has no signature {name!r}; it has {sorted(loaded.signatures)}")
        fn = loaded.signatures[name]
        unknown = sorted(set(values) - set(fn.input_names))
        missing = [n for n in fn.input_names if n not in values]
        if unknown or missing:
            raise ValueError(f"signature {name!r} takes inputs {fn.input_names}: "
                             + (f"missing {missing} " if missing else "") + (f"unknown {unknown}" if unknown else ""))
        for n in fn.input_names:
            # np.save writes float64/int64 by default: narrow within the same kind only, so
            # floats never become ints silently (the signature then reports the mismatch).
            want = fn.inputs[n].dtype.np_dtype
            if want is not None and values[n].dtype != want and values[n].dtype.kind == want.kind:
                values[n] = values[n].astype(want)
        outputs = {k: v.numpy() for k, v in fn(**values).items()}
    elif os.path.lexists(path):
        if signature:
            raise ValueError("--signature applies to SavedModels; a .keras file has one call")
        from tensorweave.keras.saving import load_model
        model = load_model(path, compile=False)
        names = list(getattr(model, "input_names", None) or [])
        if names and set(values) <= set(names) and len(values) == len(names):
            args = [values[n] for n in names]
        elif len(values) == 1:
            args = list(values.values())
        else:
            raise ValueError(f"the model takes inputs {names or ['one input']}; got {sorted(values)}")
        args = [a.astype(np.float32) if a.dtype == np.float64 else a for a in args]
        result = model(args[0] if len(args) == 1 else args, training=False)
        from tensorweave.core import nest
        flat = nest.flatten(result)
        onames = list(getattr(model, "output_names", None) or ([model.layers[-1].name] if model.layers else []))
        if len(onames) != len(flat):
            onames = [f"output_{i}" for i in range(len(flat))]
        outputs = {n: np.asarray(v) for n, v in zip(onames, flat)}
    else:
        raise ValueError(f"{path}: not a SavedModel directory or a .keras file")
    for n, a in outputs.items():
        out.write(f"{n}: shape {tuple(a.shape)} {a.dtype}\n{_summary(a, max_values)}\n")
    return 0


# ---- argparse glue -------------------------------------------------------------------------------------
def configure_inspect(parser):
    parser.add_argument("path", help="a SavedModel directory or a .keras file")


def configure_run(parser):
    parser.add_argument("path", help="a SavedModel directory or a .keras file")
    parser.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                        help="an input tensor from a .npy file (repeat for several inputs)")
    parser.add_argument("--signature", default=None, help="signature to run (default: serving_default)")
    parser.add_argument("--max-values", type=int, default=20, help="print at most this many values per output")


def _guarded(fn):
    try:
        return fn()
    except (ValueError, OSError, TypeError) as e:
        sys.stderr.write(f"tensorweave: error: {e}\n")
        return 2
    except (OverflowError, MemoryError, RecursionError) as e:
        # (the loaders turn these into their own errors; this covers running the model)
        sys.stderr.write(f"tensorweave: error: {type(e).__name__} while running the model: {e}\n")
        return 2


def run_inspect(args):
    return _guarded(lambda: inspect_model(args.path))


def run_run(args):
    return _guarded(lambda: run_model(args.path, args.input, args.signature, max_values=args.max_values))
