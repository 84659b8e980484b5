"""``model.save`` / ``keras.models.load_model``: a whole, trainable Keras model in one file.

Two containers hold the same document:

* ``model.save("model.keras")``: a zip with ``metadata.json``, ``config.json`` (architecture
  from ``get_config``, build shape, compile config, optimizer state layout) and
  ``model.weights.safetensors`` (weights under their positional paths, optimizer variables);
* ``model.save("dir")`` (no ``.keras`` suffix): a SavedModel (:mod:`tensorweave.saving.saved_model`)
  whose ``serving_default`` runs without the model's code, with the same document under
  ``"keras"`` in its ``saved_model.json``.

``load_model`` rebuilds the architecture from the config (classes are looked up by name in
the layer registry and ``custom_objects``; nothing is imported), restores weights, compiles
with the saved optimizer/loss/metrics and puts the optimizer's slots and step counter back,
so ``fit`` continues exactly where it stopped. Everything read is validated first; layers
that hold Python functions (``Lambda``, the op layers that ``x + y`` on Keras tensors make)
load only with ``safe_mode=False``, which imports the functions by their module and name.

>>> import os, tempfile, numpy as np
>>> from tensorweave import keras
>>> model = keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(2)])
>>> model.compile(optimizer="adam", loss="mse")
>>> _ = model.fit(np.ones((4, 3)), np.zeros((4, 2)), epochs=1, verbose=0)
>>> path = os.path.join(tempfile.mkdtemp(), "m.keras")
>>> save_model(model, path)
>>> restored = load_model(path)
>>> bool(np.array_equal(restored.predict(np.ones((1, 3)), verbose=0), model.predict(np.ones((1, 3)), verbose=0)))
True
>>> int(restored.optimizer.iterations.numpy())
1
"""
import contextlib
import datetime
import json
import os
import tempfile
import warnings
import zipfile

import numpy as np

from tensorweave.core import nest
from tensorweave.saving import atomic
from tensorweave.saving import tensor_file
from tensorweave.saving import validation as V
from tensorweave.saving.validation import LoadError, fail

FORMAT = "tensorweave.keras"
VERSION = 1
_META, _CONFIG, _WEIGHTS = "metadata.json", "config.json", "model.weights.safetensors"
_MEMBERS = {_META: 1 << 20, _CONFIG: V.MAX_JSON_BYTES, _WEIGHTS: None}
# Layers whose behaviour is a Python function: refused unless safe_mode=False.
LAMBDA_LAYERS = ("Lambda", "OpLambda")
MAX_DEFLATE_RATIO = 200       # a member inflating more than this is a zip bomb (weights barely compress)


class KerasLoadError(LoadError):
    """A .keras file or a SavedModel's Keras document cannot be turned into a model."""


# ---- saving ------------------------------------------------------------------------------------------
from tensorweave.keras.utils.custom_objects import (CustomObjectScope, custom_object_scope,  # noqa: E402,F401
                                                    get_custom_objects, register_keras_serializable)

def build_input_shape(model):
    """The input shape a model was built for (batch dimension included), or None.

    Functional and Sequential models know it; a subclassed model built by a call is asked
    for the shape of that call (recorded by the layer, or seen by its compiled functions).
    """
    for attr in ("_build_input_shape", "_build_shapes_dict"):
        shape = getattr(model, attr, None)
        if shape is not None and not isinstance(shape, dict):
            return tuple(shape)
    inputs = getattr(model, "inputs", None)
    if inputs:
        return tuple(inputs[0].shape)
    for fn in (getattr(model, "_predict_fn", None), getattr(model, "_train_fn", None),
               getattr(model, "_test_fn", None)):
        for cf in list(getattr(fn, "_cache", {}).values()):
            if cf.inputs and cf.inputs[0].shape.rank is not None:
                return (None,) + tuple(cf.inputs[0].shape.as_list()[1:])
    return None


def _public_name(fn):
    """``("tensorweave.math", "add")`` when ``fn`` is a public tensorweave function (many are
    made by factories, so their own ``__qualname__`` cannot be imported)."""
    import tensorweave as tw
    for mod_name, mod in (("tensorweave", tw), ("tensorweave.math", tw.math), ("tensorweave.nn", tw.nn),
                          ("tensorweave.keras.activations", None)):
        if mod is None:
            from tensorweave.keras import activations as mod
        for attr in dir(mod):
            if not attr.startswith("_") and getattr(mod, attr, None) is fn:
                return mod_name, attr
    return None


def _function_descriptor(fn):
    """How a Lambda's function is named in the file: its module and qualified name (nothing
    of its code). Only ``safe_mode=False`` (or ``custom_objects``) turns it back into code."""
    public = _public_name(fn)
    if public is not None:
        return {"module": public[0], "qualname": public[1]}
    return {"module": str(getattr(fn, "__module__", None) or ""), "qualname": str(
        getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn))}


def _patch_lambda_configs(model, config):
    from tensorweave.keras.layers.core import Lambda, OpLambda
    fns = {}
    for layer in model._flat_layers():
        if isinstance(layer, Lambda):
            fns[layer.name] = _function_descriptor(layer.function)
        elif isinstance(layer, OpLambda):
            fns[layer.name] = _function_descriptor(layer.fn)
    if not fns:
        return config
    stack = [config]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            if v.get("class_name") in LAMBDA_LAYERS and isinstance(v.get("config"), dict):
                name = v["config"].get("name")
                if name in fns:
                    v["config"]["function"] = fns[name]
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return config


def _json_ready(x):
    """Tuples to lists and NumPy scalars to numbers, so the config is plain JSON."""
    if isinstance(x, dict):
        return {str(k): _json_ready(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_ready(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    if hasattr(x, "name") and type(x).__name__ == "DType":
        return x.name
    return x


def _serialize_compile(model):
    from tensorweave.keras import losses as L
    from tensorweave.keras import metrics as M
    from tensorweave.keras import optimizers as O
    if not getattr(model, "compiled", False):
        return None
    cc = dict(model._compile_config or {})
    out = {"optimizer": O.serialize(model.optimizer) if model.optimizer is not None else None,
           "loss": cc.get("loss"), "metrics": cc.get("metrics"), "loss_weights": cc.get("loss_weights")}
    if out["loss"] is None and model._compile_loss is not None:
        try:
            fns = [None if f is None else L.serialize(f) for f in model._compile_loss.fns]
            out["loss"] = fns[0] if len(fns) == 1 else fns
        except (ValueError, TypeError) as e:
            warnings.warn(f"The model's loss cannot be saved ({e}); it will load uncompiled.", stacklevel=3)
            return None
    if out["metrics"] is None and model._compile_metrics is not None and any(
            s is not None for s in model._compile_metrics.spec):
        def one(m):
            if isinstance(m, str):
                return m
            if isinstance(m, M.Metric):
                return M.serialize(m)
            return M._function_name(m)
        try:
            specs = [None if s is None else [one(m) for m in nest.flatten(s)] for s in model._compile_metrics.spec]
            out["metrics"] = specs[0] if len(specs) == 1 else specs
        except (ValueError, TypeError) as e:
            warnings.warn(f"The model's metrics cannot be saved ({e}); they are left out.", stacklevel=3)
    return _json_ready(out)


def _check_plain_json(x, path="config"):
    """Raises a ValueError naming the first value that JSON cannot hold (a Python object a
    layer put in its config), instead of json.dumps' bare TypeError."""
    import math
    stack = [(x, path)]
    while stack:
        v, p = stack.pop()
        if isinstance(v, dict):
            for k, item in v.items():
                if not isinstance(k, str):
                    raise ValueError(f"Cannot save the model: {p} has a non-string key {k!r}")
                stack.append((item, f"{p}.{k}"))
        elif isinstance(v, list):
            stack.extend((item, f"{p}[{i}]") for i, item in enumerate(v))
        elif isinstance(v, float) and not math.isfinite(v):
            raise ValueError(f"Cannot save the model: {p} is {v} (JSON has no NaN/Infinity)")
        elif not (v is None or isinstance(v, (bool, int, float, str))):
            raise ValueError(f"Cannot save the model: {p} is a {type(v).__name__} ({V._short(v)}), which a config "
                             "cannot hold. Hint: make get_config() return plain values (names, numbers, lists)")


def model_document_and_tensors(model, include_optimizer=True):
    """The model as plain data: its JSON document whose weights and optimizer variables refer by
    key to the arrays of the second result (``weights/<path>``, ``optimizer/<i>``)."""
    doc, keyed = model_document(model, include_optimizer)
    tensors = {f"weights/{k}": v.numpy() for k, v in keyed.items()}
    doc["weights"] = {k: f"weights/{k}" for k in keyed}
    if doc["optimizer_state"] is not None:
        refs = []
        for i, v in enumerate(doc["optimizer_state"]["variables"]):
            tensors[f"optimizer/{i}"] = v.numpy()
            refs.append(f"optimizer/{i}")
        doc["optimizer_state"]["variables"] = refs
    return doc, tensors


def model_document(model, include_optimizer=True):
    """The JSON document of a model (without the weight references, which the container adds)."""
    from tensorweave.keras.engine.weights_io import _keyed_weights
    from tensorweave.keras.layers import serialize
    config = _patch_lambda_configs(model, _json_ready(serialize(model)))
    _check_plain_json(config)
    shape = build_input_shape(model)
    doc = {"class_name": config["class_name"], "config": config["config"],
           "build_config": None if shape is None else {"input_shape": list(shape)},
           "compile_config": _serialize_compile(model), "optimizer_state": None}
    _check_plain_json(doc["compile_config"], "compile_config")
    keyed = _keyed_weights(model)
    opt = getattr(model, "optimizer", None)
    if include_optimizer and opt is not None and doc["compile_config"] is not None and opt.built:
        key_of = {id(v): k for k, v in keyed.items()}
        built_for = [key_of.get(id(v)) for v in opt._trainable_variables]
        if None in built_for:
            warnings.warn("The optimizer updates variables that are not the model's weights; its state is "
                          "not saved.", stacklevel=3)
        else:
            doc["optimizer_state"] = {"built_for": built_for, "variables": list(opt.variables)}
    if not include_optimizer and doc["compile_config"] is not None:
        doc["compile_config"]["optimizer"] = None
    return doc, keyed


def saved_model_metadata(model, sctx):
    """The ``"keras"`` entry of a SavedModel of ``model`` (variables referred to by index)."""
    doc, keyed = model_document(model)
    doc["weights"] = {k: sctx.variable_index(v) for k, v in keyed.items()}
    if doc["optimizer_state"] is not None:
        doc["optimizer_state"]["variables"] = [sctx.variable_index(v) for v in doc["optimizer_state"]["variables"]]
    return doc


def save_model(model, filepath, overwrite=True, include_optimizer=True, **kwargs):
    """Saves ``model``: a ``.keras`` zip, or a SavedModel directory for other paths."""
    filepath = os.fspath(filepath)
    if not overwrite and os.path.exists(filepath):
        raise FileExistsError(f"{filepath} exists and overwrite=False")
    if filepath.endswith((".h5", ".hdf5")):
        from tensorweave.keras import h5
        h5.save_model(model, filepath, include_optimizer)
        return
    from tensorweave.keras import sharded_saving
    if not filepath.endswith(".keras"):
        from tensorweave.saving import saved_model
        sources = None
        if sharded_saving.is_global_model(model):
            if kwargs.get("sharded", False) or getattr(kwargs.get("options"), "experimental_sharded", False):
                # variables as per-rank shards, nothing gathered
                model, sources = sharded_saving.structure_copy(model, include_optimizer)
            else:   # A SavedModel is for serving: a local copy, gathered, runs in one process.
                model = sharded_saving.gathered_copy(model, include_optimizer)

        def extra(obj, sctx):
            doc = saved_model_metadata(obj, sctx)
            if not include_optimizer:
                doc["optimizer_state"] = None
            return doc
        saved_model._save(model, filepath, kwargs.get("signatures"), kwargs.get("options"), extra, sources)
        return
    if kwargs.get("sharded", True) and sharded_saving.is_global_model(model):
        sharded_saving.save_model(model, filepath, overwrite, include_optimizer)
        return
    workers = sharded_saving.workers_holding(model) if kwargs.get("sharded", True) else None
    if workers is not None:      # trained on Ray workers: each writes its rows of one copy
        sharded_saving.save_model_on_workers(model, workers, filepath, overwrite, include_optimizer)
        return
    if os.path.isdir(filepath) and not os.path.islink(filepath):
        if not sharded_saving.is_sharded_save(filepath):
            raise IsADirectoryError(f"{filepath} is a directory (not a saved model); choose another path")
        from tensorweave.train._sharded import remove
        remove(filepath)        # (a sharded save of a global model was here; a zip replaces it)
    doc, tensors = model_document_and_tensors(model, include_optimizer)
    import tensorweave
    meta = {"format": FORMAT, "version": VERSION, "tensorweave_version": tensorweave.__version__,
            "date_saved": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    weights = tensor_file.encode(tensors, {"format": FORMAT + ".weights", "version": str(VERSION)})
    directory = os.path.dirname(os.path.abspath(filepath))
    os.makedirs(directory, exist_ok=True)
    prefix = ".tmp-" + os.path.basename(filepath) + "-"
    # Copies of the model that killed saves left behind (no live save holds them locked).
    atomic.remove_stale(directory, [prefix])
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=prefix)
    lock = atomic.lock_temporary(tmp)
    try:
        with os.fdopen(fd, "wb") as f:
            # Stored, not deflated: weights barely compress, and a stored member can be
            # checked against the archive's size before it is read.
            with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_STORED) as z:
                z.writestr(_META, json.dumps(meta, indent=1))
                z.writestr(_CONFIG, json.dumps(doc, allow_nan=False))
                z.writestr(_WEIGHTS, weights)
            f.flush()
            os.fsync(f.fileno())
        atomic.crash_point("keras_written")
        os.replace(tmp, filepath)
        tensor_file.fsync_dir(directory)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    finally:
        atomic.unlock(lock)


# ---- reading containers -------------------------------------------------------------------------------
def _open_zip(path, read_weights=True):
    """Validated members of a .keras zip: (metadata, config doc, {key: array} or None)."""
    where = os.fspath(path)
    try:
        fh = V.open_regular(path, where, KerasLoadError)     # (a FIFO would block the read forever)
    except OSError as e:
        raise KerasLoadError(f"{where}: cannot be read ({e.strerror or e})") from None
    with fh:
        return _read_zip(fh, where, read_weights)


def _read_zip(fh, where, read_weights):
    size = os.fstat(fh.fileno()).st_size
    if not zipfile.is_zipfile(fh):
        raise KerasLoadError(f"{where}: not a .keras file (not a zip archive) and not a SavedModel directory")
    try:
        z = zipfile.ZipFile(fh)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError) as e:
        raise KerasLoadError(f"{where}: not a valid .keras (zip) file ({e})") from None
    with z:
        infos = z.infolist()
        names = [i.filename for i in infos]
        if len(set(names)) != len(names):
            fail(where, "duplicate members in the archive")
        unknown = sorted(set(names) - set(_MEMBERS))
        if unknown:
            fail(where, f"unexpected member(s) {[V._short(n) for n in unknown[:5]]}; a .keras file holds only "
                        f"{sorted(_MEMBERS)}")
        missing = sorted(set(_MEMBERS) - set(names))
        if missing:
            fail(where, f"missing member(s) {missing}")
        for info in infos:
            w = f"{where}: member {info.filename}"
            if info.flag_bits & 0x1:
                fail(w, "is encrypted")
            if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                fail(w, f"uses an unsupported compression method ({info.compress_type})")
            if info.compress_size > size or info.header_offset + info.compress_size > size:
                fail(w, f"claims {info.compress_size} bytes beyond the archive's {size} (truncated or corrupt)")
            if info.compress_type == zipfile.ZIP_STORED and info.file_size != info.compress_size:
                fail(w, "stored member whose size does not match")
            if info.file_size > MAX_DEFLATE_RATIO * info.compress_size + (1 << 20):
                fail(w, f"would inflate to {info.file_size} bytes from {info.compress_size} (zip bomb?)")
            limit = _MEMBERS[info.filename]
            if limit is not None and info.file_size > limit:
                fail(w, f"is {info.file_size} bytes (limit {limit})")
        try:
            meta = V.parse_json(z.read(_META), f"{where}: {_META}", 1 << 20)
            V.check_keys(meta, f"{where}: {_META}", ("format", "version"), ("tensorweave_version", "date_saved"))
            if meta["format"] != FORMAT or meta["version"] != VERSION:
                fail(f"{where}: {_META}", f"format {V._short(meta['format'])} version {V._short(meta['version'])} "
                                          f"is not {FORMAT!r} version {VERSION}")
            doc = V.parse_json(z.read(_CONFIG), f"{where}: {_CONFIG}")
            tensors = _read_tensor_member(z, where) if read_weights else None
        except (zipfile.BadZipFile, EOFError, OSError, ValueError, NotImplementedError) as e:
            if isinstance(e, LoadError):
                raise
            raise KerasLoadError(f"{where}: corrupt archive ({type(e).__name__}: {e})") from None
    return meta, doc, tensors


def _read_tensor_member(z, where):
    """The tensors of the weights member, read into memory (its size was checked against the
    archive and ZipFile checks its CRC), validated by the tensor-file reader's own checks
    before any tensor is made."""
    return tensor_file.load_bytes(z.read(_WEIGHTS), f"{where}: {_WEIGHTS}")


def _check_document(doc, where, ref_type):
    V.check_keys(doc, where, ("class_name", "config", "build_config", "compile_config", "optimizer_state",
                              "weights"))
    V.check_name(doc["class_name"], where, "class_name")
    V.expect(doc["config"], dict, where, "config")
    if doc["build_config"] is not None:
        V.check_keys(doc["build_config"], where, ("input_shape",))
        V.check_shape(doc["build_config"]["input_shape"], where, "build_config input_shape", allow_unknown=True)
    if doc["compile_config"] is not None:
        V.check_keys(doc["compile_config"], where, ("optimizer", "loss", "metrics", "loss_weights"))
    weights = V.expect(doc["weights"], dict, where, "weights")
    for k, ref in weights.items():
        V.check_string(k, where, "weight key", V.MAX_NAME)
        V.expect(ref, ref_type, where, f"reference of weight {k!r}")
    state = doc["optimizer_state"]
    if state is not None:
        V.check_keys(state, where, ("built_for", "variables"))
        for k in V.check_list(state["built_for"], where, "optimizer_state built_for"):
            if k not in weights:
                fail(where, f"optimizer_state refers to unknown weight {V._short(k)}")
        for ref in V.check_list(state["variables"], where, "optimizer_state variables"):
            V.expect(ref, ref_type, where, "optimizer variable reference")


# ---- building ----------------------------------------------------------------------------------------
@contextlib.contextmanager
def _weight_budget(max_bytes, total_bytes, where):
    """While the model is rebuilt, refuses weights larger than anything the file holds: a
    config asking for a huge layer fails before the allocation, not in it. The limit is a
    per-load context (``layer.weight_guard``): layers built by other threads meanwhile are
    not affected."""
    from tensorweave.keras.engine.layer import weight_guard
    used = [0]

    def guard(layer, dims, dtype):
        if not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and 0 <= d <= V.MAX_DIM
                   for d in dims):
            fail(where, f"layer '{layer.name}' asks for a weight of invalid shape {dims}")
        nbytes = V.num_elements(dims) * dtype.size
        used[0] += nbytes
        if nbytes > max_bytes or used[0] > total_bytes:
            fail(where, f"layer '{layer.name}' ({type(layer).__name__}) asks for a weight of shape {list(dims)} "
                        f"({nbytes} bytes), more than the saved weights hold: the config does not match its "
                        "weights (corrupt or malicious file)")
        # Every weight is overwritten from the file, so skip the random initializer (most of
        # the rebuild time for a large model); zeros are allocated lazily by the OS.
        return "zeros"
    token = weight_guard.set(guard)
    try:
        yield
    finally:
        weight_guard.reset(token)


def _resolve_function(desc, layer_name, custom_objects, where):
    """The Python function a Lambda-like layer names (only reached with safe_mode=False)."""
    if not isinstance(desc, dict):
        fail(where, f"layer '{layer_name}' has no saved function; pass it in custom_objects={{'{layer_name}': fn}}")
    V.check_keys(desc, where, ("module", "qualname"))
    module = V.check_string(desc["module"], where, "module", V.MAX_NAME)
    qualname = V.check_string(desc["qualname"], where, "qualname", V.MAX_NAME)
    for key in (layer_name, qualname, qualname.rsplit(".", 1)[-1]):
        if key in (custom_objects or {}):
            return custom_objects[key]
    if "<" in qualname or not module:
        fail(where, f"layer '{layer_name}' wraps {qualname!r}, which cannot be imported by name; pass it in "
                    f"custom_objects={{'{layer_name}': fn}}")
    import importlib
    try:
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        fail(where, f"layer '{layer_name}': cannot import {module}.{qualname} ({e})")
    if not callable(obj):
        fail(where, f"layer '{layer_name}': {module}.{qualname} is not callable")
    return obj


def _spread(fn):
    """A functional config replays an op layer with its inputs as one list; the op layer's
    function takes them as separate arguments (as when ``x + y`` made it)."""
    def op(*xs):
        if len(xs) == 1 and isinstance(xs[0], (list, tuple)):
            return fn(*xs[0])
        return fn(*xs)
    op.__name__ = getattr(fn, "__name__", "op")
    return op


def _prepare_config(config, custom_objects, safe_mode, where):
    """Refuses Lambda-like layers in safe mode; otherwise resolves their functions."""
    found = []
    stack = [config]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            if v.get("class_name") in LAMBDA_LAYERS and isinstance(v.get("config"), dict):
                found.append(v)
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    extra = {}
    for entry in found:
        cfg = entry["config"]
        name = cfg.get("name") if isinstance(cfg.get("name"), str) else "?"
        if safe_mode:
            fail(where, f"layer '{name}' is a {entry['class_name']} layer: loading it would run Python code named "
                        "by the file. This is refused in safe mode. If you trust this file, call load_model(..., "
                        "safe_mode=False) (see SECURITY.md)")
        fn = _resolve_function(cfg.get("function"), name, custom_objects, where)
        if entry["class_name"] == "OpLambda":
            from tensorweave.keras.layers.core import OpLambda
            cfg.pop("function", None)
            cfg["fn"] = _spread(fn)
            extra["OpLambda"] = OpLambda
        else:
            cfg["function"] = fn
    return extra


def _deserialize_compile(cc, custom_objects, where):
    from tensorweave.keras import losses as L
    from tensorweave.keras import metrics as M
    from tensorweave.keras import optimizers as O

    def loss_of(x):
        if x is None or isinstance(x, str):
            return x
        if isinstance(x, dict) and "class_name" in x and "config" in x:
            return L.deserialize(x, custom_objects)
        if isinstance(x, dict):
            return {k: loss_of(v) for k, v in x.items()}
        if isinstance(x, list):
            return [loss_of(v) for v in x]
        fail(where, f"cannot interpret the saved loss {V._short(x)}")

    def metric_of(x):
        if x is None:
            return None
        if isinstance(x, str):
            if custom_objects and x in custom_objects:
                return custom_objects[x]
            return x
        if isinstance(x, dict) and "class_name" in x:
            return M.deserialize(x, custom_objects)
        if isinstance(x, list):
            return [metric_of(v) for v in x]
        if isinstance(x, dict):
            return {k: metric_of(v) for k, v in x.items()}
        fail(where, f"cannot interpret the saved metric {V._short(x)}")
    opt = cc["optimizer"]
    optimizer = O.deserialize(opt, custom_objects) if opt is not None else "rmsprop"
    lw = cc["loss_weights"]
    if lw is not None and not isinstance(lw, (int, float, list, dict)):
        fail(where, "loss_weights must be numbers")
    return {"optimizer": optimizer, "loss": loss_of(cc["loss"]), "metrics": metric_of(cc["metrics"]),
            "loss_weights": lw}


def restore_model(doc, fetch, where, custom_objects=None, compile=True, safe_mode=True, budget=None, assigner=None):
    """A model from a checked document; ``fetch(ref)`` gives the saved array of a reference
    (or ``assigner`` — ``keras.sharded_saving.Assigner`` — checks and assigns each reference
    in the variable's own layout)."""
    from tensorweave.keras.engine.weights_io import _keyed_weights
    from tensorweave.keras.layers import deserialize
    custom_objects = dict(custom_objects or {})
    extra = _prepare_config(doc["config"], custom_objects, safe_mode, where)
    max_bytes, total = budget
    with _weight_budget(max_bytes, total, where):
        model = deserialize({"class_name": doc["class_name"], "config": doc["config"]},
                            custom_objects={**extra, **custom_objects})
        if not hasattr(model, "fit"):
            fail(where, f"{doc['class_name']} is a layer, not a model")
        keyed = _keyed_weights(model)
        if len(keyed) < len(doc["weights"]) and doc["build_config"] is not None:
            _build(model, doc["build_config"]["input_shape"], where)
            keyed = _keyed_weights(model)
    missing = sorted(set(doc["weights"]) - set(keyed))
    unexpected = sorted(set(keyed) - set(doc["weights"]))
    if missing or unexpected:
        fail(where, f"the rebuilt model does not match the saved weights: saved but not in the model "
                    f"{missing[:5]}, in the model but not saved {unexpected[:5]}")
    for key, var in keyed.items():
        if assigner is not None:
            assigner.check(var, doc["weights"][key], f"weight {key}")
            assigner.prepare(var, doc["weights"][key])()
            continue
        value = fetch(doc["weights"][key])
        if tuple(var.shape.as_list()) != value.shape or value.dtype != var.dtype.np_dtype:
            fail(where, f"weight {key} ({var.name}) is {var.dtype.name} {tuple(var.shape.as_list())} in the model "
                        f"but {value.dtype} {value.shape} in the file")
        var.assign(value)
    if compile and doc["compile_config"] is not None:
        args = _deserialize_compile(doc["compile_config"], custom_objects, where)
        model.compile(**args)
        state = doc["optimizer_state"]
        if state is not None and model.optimizer is not None:
            opt = model.optimizer
            opt.build([keyed[k] for k in state["built_for"]])
            variables = opt.variables
            if len(variables) != len(state["variables"]):
                fail(where, f"optimizer {type(opt).__name__} has {len(variables)} variables, the file "
                            f"{len(state['variables'])}")
            if assigner is not None:
                for v, ref in zip(variables, state["variables"]):
                    assigner.check(v, ref, "optimizer variable")
                for commit in [assigner.prepare(v, ref) for v, ref in zip(variables, state["variables"])]:
                    commit()
                return model
            values = [fetch(r) for r in state["variables"]]
            for v, value in zip(variables, values):
                if tuple(v.shape.as_list()) != value.shape or value.dtype != v.dtype.np_dtype:
                    fail(where, f"optimizer variable {v.name} is {v.dtype.name} {tuple(v.shape.as_list())}, the "
                                f"file has {value.dtype} {value.shape}")
            for v, value in zip(variables, values):
                v.assign(value)
    return model


def _build(model, input_shape, where):
    from tensorweave.keras.engine.input_layer import Input
    from tensorweave.keras.engine.sequential import Sequential
    shape = tuple(input_shape)
    if isinstance(model, Sequential):
        model.build(shape)
        return
    try:
        model(Input(batch_shape=(None,) + shape[1:]))
    except LoadError:
        raise
    except Exception:  # noqa: BLE001 - some subclassed models only run on real values
        import tensorweave as tw
        if V.num_elements([1] + [d or 1 for d in shape[1:]]) > 1 << 24:
            fail(where, f"cannot build the model for input shape {shape}")
        model(tw.zeros([1] + [d or 1 for d in shape[1:]]))


def load_model(filepath, custom_objects=None, compile=True, safe_mode=True):
    """Loads a model saved by :func:`save_model` (a ``.keras`` file or a SavedModel directory).

    ``custom_objects``: ``{name: class or function}`` for your own layers, losses, metrics.
    ``compile``: compile with the saved configuration and restore the optimizer state.
    ``safe_mode``: refuse layers that would run Python code named by the file (Lambda); set
    it to False only for files you trust.
    """
    filepath = os.fspath(filepath)
    try:
        from tensorweave.keras.utils.custom_objects import merged
        return _load(filepath, merged(custom_objects), compile, safe_mode)
    except KerasLoadError:
        raise
    except (LoadError, tensor_file.TensorFileError) as e:
        raise KerasLoadError(str(e)) from None
    except RecursionError:
        raise KerasLoadError(f"{filepath}: the model config is nested too deeply") from None
    except Exception as e:  # noqa: BLE001 - a config that a layer's from_config rejects is a bad file
        raise KerasLoadError(f"{filepath}: cannot rebuild the model from its config: {type(e).__name__}: {e}") from e


def _load(filepath, custom_objects, compile, safe_mode):
    import tensorweave.keras  # noqa: F401 - the layer registry
    from tensorweave.keras import sharded_saving
    from tensorweave.saving import saved_model
    if sharded_saving.is_sharded_save(filepath):
        return sharded_saving.load_model(filepath, custom_objects, compile, safe_mode)
    if os.path.isdir(saved_model.resolve_export_dir(filepath)):
        return saved_model.read_consistently(
            filepath, lambda d: _load_saved_model(d, custom_objects, compile, safe_mode))
    return _load_keras_file(filepath, custom_objects, compile, safe_mode)


def _load_saved_model(filepath, custom_objects, compile, safe_mode):
    from tensorweave.saving import saved_model
    doc = saved_model.read_document(filepath)
    kdoc = doc.get("keras")
    if kdoc is None:
        raise KerasLoadError(f"{filepath}: this SavedModel was not saved from a Keras model; load it with "
                             "tw.saved_model.load")
    where = f"{filepath}: {saved_model.JSON_NAME} keras"
    _check_document(kdoc, where, int)
    n = len(doc["variables"])
    for ref in list(kdoc["weights"].values()) + list((kdoc["optimizer_state"] or {}).get("variables", [])):
        V.check_int(ref, where, "variable index", 0, n - 1)
    tensors = saved_model._read_tensors(filepath, doc)
    by_index = [tensors[e["key"]] for e in doc["variables"]]
    sizes = [a.nbytes for a in by_index] or [0]
    return restore_model(kdoc, lambda i: by_index[i], where, custom_objects, compile, safe_mode,
                         (max(sizes), sum(sizes)))


def _load_keras_file(filepath, custom_objects, compile, safe_mode):
    if not os.path.lexists(filepath):
        raise KerasLoadError(f"{filepath}: no such file or directory")
    from tensorweave.keras import h5
    if h5.is_hdf5_file(filepath):
        return h5.load_model(filepath, custom_objects, compile, safe_mode)
    _, doc, tensors = _open_zip(filepath)
    where = f"{filepath}: {_CONFIG}"
    _check_document(doc, where, str)
    refs = list(doc["weights"].values()) + list((doc["optimizer_state"] or {}).get("variables", []))
    for ref in refs:
        if ref not in tensors:
            fail(where, f"weight reference {V._short(ref)} is not in {_WEIGHTS}")
    unused = sorted(set(tensors) - set(refs))
    if unused:
        fail(where, f"{_WEIGHTS} holds tensors the config does not use: {unused[:5]}")
    sizes = [a.nbytes for a in tensors.values()] or [0]
    return restore_model(doc, lambda r: tensors[r], where, custom_objects, compile, safe_mode,
                         (max(sizes), sum(sizes)))
