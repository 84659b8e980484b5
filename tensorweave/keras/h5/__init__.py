"""Keras' HDF5 files (``.h5``) through h5py, both ways: files written by Keras 3 or tf-keras load
here, and ours load there, with the same predictions.

* ``model.save("m.h5")`` / ``keras.models.load_model("m.h5")``: the legacy whole-model file:
  root attributes ``model_config`` (the architecture as JSON) and ``training_config``, weights
  in the ``model_weights`` group (:mod:`.layouts`). The optimizer's state is not written or
  read (a loaded model compiles with a fresh optimizer of the saved configuration).
* ``model.save_weights("w.weights.h5")`` writes Keras 3's tree layout; any other ``.h5`` name
  the legacy layout; ``load_weights`` reads either (it looks at the file, not the name).

Loading runs no code from the file: configs are JSON translated by :mod:`.keras_config`; a
``Lambda`` layer (whose function tf-keras stores as marshalled bytecode) is refused, or takes
its function from ``custom_objects`` with ``safe_mode=False``. Every dataset and attribute is
checked by :mod:`.h5_reader` (types, sizes, no links to other files) before it is read.

>>> import importlib.util, os, tempfile, numpy as np
>>> from tensorweave import keras
>>> model = keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(2)])
>>> x = np.ones((1, 3), np.float32)
>>> path = os.path.join(tempfile.mkdtemp(), "m.h5")
>>> if importlib.util.find_spec("h5py"):           # the optional h5 extra
...     model.save(path)
...     restored = keras.models.load_model(path)
...     assert np.array_equal(restored.predict(x, verbose=0), model.predict(x, verbose=0))
"""
import json
import os
import tempfile
import warnings

from tensorweave.keras.h5 import keras_config, layouts
from tensorweave.keras.h5.h5_reader import H5File, h5py_module
from tensorweave.saving import tensor_file
from tensorweave.saving.validation import fail

H5_SUFFIXES = (".h5", ".hdf5", ".keras.h5")
HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"


def is_h5_path(filepath):
    return os.fspath(filepath).endswith(H5_SUFFIXES)


def is_hdf5_file(filepath):
    """Whether the file starts with HDF5's signature (what ``load_weights`` goes by)."""
    from tensorweave.saving.validation import LoadError, open_regular
    try:
        # (a FIFO or device is not sniffed — the open would block — the real loader refuses it)
        with open_regular(filepath) as f:
            return f.read(len(HDF5_MAGIC)) == HDF5_MAGIC
    except (OSError, LoadError):
        return False


def _write_atomic(filepath, write):
    """Writes through ``write(h5py.File)`` into a temporary file renamed over ``filepath``."""
    h5py = h5py_module()
    filepath = os.fspath(filepath)
    directory = os.path.dirname(os.path.abspath(filepath))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-" + os.path.basename(filepath) + "-")
    os.close(fd)
    try:
        with h5py.File(tmp, "w") as f:
            write(f)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, filepath)
        tensor_file.fsync_dir(directory)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


# ---- weights only --------------------------------------------------------------------------------------
def save_weights(model, filepath):
    """``.weights.h5``: Keras 3's tree layout; other ``.h5`` names: the legacy layout."""
    if os.fspath(filepath).endswith(".weights.h5"):
        _write_atomic(filepath, lambda f: layouts.write_tree(f, model))
    else:
        _write_atomic(filepath, lambda f: layouts.write_legacy(f, model))


def load_weights(model, filepath, skip_mismatch=False):
    """Loads either layout (a whole-model ``.h5`` too: its ``model_weights``); returns a status."""
    from tensorweave.keras.engine.weights_io import LoadStatus
    with H5File(filepath, ValueError) as reader:
        missing, unused = [], []
        if "model_weights" in reader.file:
            skipped = layouts.read_legacy(reader, reader.group("model_weights"), model, skip_mismatch)
        elif "layer_names" in reader.file.attrs:
            skipped = layouts.read_legacy(reader, reader.file, model, skip_mismatch)
        else:
            missing, skipped, unused = layouts.read_tree(reader, model, skip_mismatch)
    return LoadStatus(os.fspath(filepath), missing + skipped, unused)


# ---- whole models --------------------------------------------------------------------------------------
def _training_config(model):
    from tensorweave.keras.saving import _serialize_compile
    cc = _serialize_compile(model)
    if cc is None:
        return None
    opt = cc.get("optimizer")
    return {"loss": cc.get("loss"), "loss_weights": cc.get("loss_weights"), "metrics": cc.get("metrics"),
            "weighted_metrics": None, "optimizer_config": keras_config.export_optimizer(opt)}


def save_model(model, filepath, include_optimizer=True):
    from tensorweave.keras.layers import serialize
    from tensorweave.keras.saving import _check_plain_json, _json_ready, _patch_lambda_configs
    config = _patch_lambda_configs(model, _json_ready(serialize(model)))
    _check_plain_json(config)
    if config["class_name"] not in ("Functional", "Sequential"):
        raise NotImplementedError(
            f"Saving a subclassed model ('{model.name}', {type(model).__name__}) to HDF5 is not supported (as in "
            "Keras: its architecture is Python code). Save it to a '.keras' file, or save its weights with "
            "save_weights('w.weights.h5').")
    model_config = json.dumps(keras_config.export_layer(config), allow_nan=False)
    # (the optimizer's slots are never written, so include_optimizer changes nothing here)
    training = _training_config(model)

    def write(f):
        f.attrs["backend"] = layouts.BACKEND.encode("utf-8")
        f.attrs["keras_version"] = layouts.KERAS_VERSION.encode("utf-8")
        f.attrs["model_config"] = model_config.encode("utf-8")
        if training is not None:
            f.attrs["training_config"] = json.dumps(training, allow_nan=False).encode("utf-8")
        layouts.write_legacy(f.create_group("model_weights"), model)
    _write_atomic(filepath, write)


def _metric_names(m):
    """tf-keras writes compiled metrics as MeanMetricWrapper configs; their ``fn`` is the name."""
    if isinstance(m, list):
        return [_metric_names(v) for v in m]
    if isinstance(m, dict) and m.get("class_name") == "MeanMetricWrapper":
        fn = m.get("config", {}).get("fn")
        return fn if isinstance(fn, str) else m
    if isinstance(m, dict) and "class_name" not in m:
        return {k: _metric_names(v) for k, v in m.items()}
    return m


def _compile_from(model, training, custom_objects, where):
    from tensorweave.keras.saving import _deserialize_compile
    tc = keras_config._strip(training)
    metrics = _metric_names(tc.get("metrics"))
    if isinstance(metrics, list) and len(metrics) == 1 and isinstance(metrics[0], list) and len(model.outputs) == 1:
        metrics = metrics[0]
    opt = tc.get("optimizer_config")
    if isinstance(opt, dict) and isinstance(opt.get("config"), dict):
        # tf-keras' own settings, not optimizer hyper-parameters
        opt = {"class_name": opt["class_name"], "config": {k: v for k, v in opt["config"].items()
                                                             if k not in ("jit_compile", "is_legacy_optimizer")}}
    try:
        args = _deserialize_compile({"optimizer": opt, "loss": tc.get("loss"), "metrics": metrics,
                                     "loss_weights": tc.get("loss_weights")}, custom_objects, where)
        model.compile(**args)
    except (ValueError, TypeError, KeyError) as e:
        warnings.warn(f"{where}: the saved training configuration cannot be used ({e}); the model is loaded "
                      "uncompiled. Call compile() yourself.", stacklevel=4)


def _refuse_bytecode(config, custom_objects, safe_mode, where):
    """tf-keras stores a Lambda's function as marshalled bytecode: never loaded. With
    safe_mode=False its function may come from ``custom_objects`` (by layer name)."""
    stack = [config]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            if v.get("class_name") == "Lambda" and isinstance(v.get("config"), dict):
                cfg = v["config"]
                name = cfg.get("name")
                if not isinstance(cfg.get("function"), dict) or "module" not in cfg["function"]:
                    if safe_mode or name not in (custom_objects or {}):
                        fail(where, f"layer '{name}' is a Lambda layer whose function the file stores as Python "
                                    "bytecode; tensorweave never runs code from a file. Pass the function as "
                                    f"load_model(..., custom_objects={{'{name}': fn}}, safe_mode=False)")
                    cfg["function"] = {"module": "", "qualname": name}
                    for k in ("function_type", "module", "output_shape_type", "output_shape_module", "arguments"):
                        cfg.pop(k, None)
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)


def load_model(filepath, custom_objects=None, compile=True, safe_mode=True):
    from tensorweave.keras.layers import deserialize
    from tensorweave.keras.saving import KerasLoadError, _prepare_config, _weight_budget
    filepath = os.fspath(filepath)
    with H5File(filepath, KerasLoadError) as reader:
        raw = reader.json_attr(reader.file, "model_config")
        if raw is None:
            raise KerasLoadError(f"{filepath}: has no model_config attribute: it holds weights only; build the "
                                 "model in code and call model.load_weights()")
        where = f"{filepath}: model_config"
        _refuse_bytecode(raw, custom_objects, safe_mode, where)
        config = keras_config.import_model(raw, where, custom_objects)
        extra = _prepare_config(config, custom_objects, safe_mode, where)
        weights = reader.group("model_weights")
        if weights is None:
            raise KerasLoadError(f"{filepath}: has no model_weights group")
        biggest, total = reader.dataset_bytes(weights)
        with _weight_budget(biggest, total, where):
            model = deserialize(config, custom_objects={**extra, **(custom_objects or {})})
        if not hasattr(model, "fit"):
            fail(where, f"{config['class_name']} is a layer, not a model")
        try:
            layouts.read_legacy(reader, weights, model)
        except ValueError as e:
            raise KerasLoadError(str(e)) from None
        training = reader.json_attr(reader.file, "training_config")
    if compile and training is not None:
        _compile_from(model, training, custom_objects, f"{filepath}: training_config")
    return model
