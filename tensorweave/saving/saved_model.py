"""SavedModel: functions as versioned JSON graphs, variables in a tensor file, loadable without
the model's Python code.

Layout of an export directory::

    saved_model.json                     format, version, functions (graphs), signatures,
                                         variables (name, shape, dtype), assets, Keras metadata
    variables/variables.safetensors      variable values and large constants (safetensors layout)
    assets/                              files the model needs (vocabularies ...), copied
    fingerprint.json                     sha256 of each file above and of them all together

``save`` writes everything into a temporary directory beside ``export_dir``, fsyncs it and
swaps it into place in one step (:mod:`tensorweave.saving.atomic`), so a reader sees the old
SavedModel or the new one, never half of one and never nothing; a load that spans a
replacement reads again. Nothing inside an export may be a symbolic link, and every file is
read only if it is a regular file. ``load`` validates the JSON, the tensor file and every node before it builds anything
and returns an object whose ``signatures`` and attribute functions run the saved graphs on
restored ``tw.Variable`` objects. Nothing on the load path unpickles, evaluates or imports
anything named by the file.

>>> import os, tempfile, numpy as np, tensorweave as tw
>>> class Scaler:
...     def __init__(self):
...         self.w = tw.Variable(2.0, name="w")
...     @tw.function(input_signature=[tw.TensorSpec([None], tw.float32, name="x")])
...     def __call__(self, x):
...         return {"y": x * self.w}
>>> path = os.path.join(tempfile.mkdtemp(), "scaler")
>>> save(Scaler(), path)
>>> sorted(os.listdir(path))
['assets', 'fingerprint.json', 'saved_model.json', 'variables']
>>> loaded = load(path)
>>> loaded.signatures["serving_default"](x=np.array([1.0, 2.0], np.float32))["y"].numpy().tolist()
[2.0, 4.0]
>>> loaded(tw.constant([3.0]))["y"].numpy().tolist(), [v.name for v in loaded.variables]
([6.0], ['w:0'])
"""
import hashlib
import inspect
import json
import os
import re
import shutil
import sys
import tempfile
import warnings

import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core import nest
from tensorweave.core.context import init_scope
from tensorweave.core.graph import SymbolicTensor
from tensorweave.core.shape import TensorShape, fmt
from tensorweave.core.tensor import Tensor
from tensorweave.core.tensor_spec import TensorSpec
from tensorweave.saving import atomic
from tensorweave.saving import graph_io
from tensorweave.saving import tensor_file
from tensorweave.saving import validation as V
from tensorweave.saving.graph_io import SaveError
from tensorweave.saving.validation import LoadError, fail

FORMAT = "tensorweave.saved_model"
VERSION = 1
JSON_NAME = "saved_model.json"
VARIABLES_FILE = os.path.join("variables", "variables.safetensors")
SHARDED_DIR = os.path.join("variables", "sharded")    # a global model's variables, per rank (optional)
ASSETS_DIR = "assets"
FINGERPRINT_NAME = "fingerprint.json"
DEFAULT_SIGNATURE = "serving_default"

__all__ = ["save", "load", "Asset", "SaveOptions", "LoadError", "SaveError", "fingerprint_of", "read_info"]

_RESERVED_ATTRS = {"signatures", "variables", "trainable_variables", "assets", "fingerprint", "metadata",
                   "tensorweave_version", "keras_metadata", "export_dir"}


class Asset:
    """A file a model needs at run time (a vocabulary ...); saved into ``assets/``.

    Set it as an attribute of the saved object; the loaded object has an ``Asset`` of the same
    name whose ``asset_path`` points into the export directory.
    """

    def __init__(self, path):
        self.asset_path = os.fspath(path)

    def __repr__(self):
        return f"Asset({self.asset_path!r})"


class SaveOptions:
    """Options of :func:`save` (TensorFlow's name). ``inline_constants``: constants up to this
    many elements are written into the JSON, larger ones into the tensor file.
    ``experimental_sharded``: a Keras model with global weights is exported with its variables
    as per-rank shards (``variables/sharded/``, nothing gathered) instead of a gathered copy."""

    def __init__(self, inline_constants=graph_io.INLINE_ELEMENTS, experimental_sharded=False):
        self.inline_constants = int(inline_constants)
        self.experimental_sharded = bool(experimental_sharded)


# ---- saving ------------------------------------------------------------------------------------------
def _function_types():
    from tensorweave.runtime.function import ConcreteFunction, Function
    return ConcreteFunction, Function


def _keras_model_class():
    # Only a Keras model if Keras is loaded at all: saving a plain function stays light.
    mod = sys.modules.get("tensorweave.keras.engine.model")
    return getattr(mod, "Model", None)


def _concretes_of(fn, what):
    """The traced ConcreteFunctions of a tw.function (tracing it once if it has a signature)."""
    ConcreteFunction, Function = _function_types()
    if isinstance(fn, ConcreteFunction):
        return [fn]
    cfs = list(fn._cache.values())
    if not cfs and fn._input_signature is not None:
        cfs = [fn.get_concrete_function()]
    if not cfs:
        warnings.warn(f"{what}: the tw.function was never called and has no input_signature, so there is "
                      "no graph to save; it is left out.", stacklevel=4)
    return cfs


def _input_names(cf, python_function):
    """Signature input names: a TensorSpec's name, else the Python parameter's, else the node's."""
    params = []
    if python_function is not None:
        try:
            params = [p.name for p in inspect.signature(python_function).parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        except (TypeError, ValueError):
            params = []
    names = []
    for i, p in enumerate(cf.inputs):
        n = p.op.name
        if re.fullmatch(r"input(_\d+)?", n) and len(params) == len(cf.inputs):
            n = params[i]
        names.append(n)
    seen = set()
    out = []
    for n in names:
        base, k = n, 1
        while n in seen:
            n = f"{base}_{k}"
            k += 1
        seen.add(n)
        out.append(n)
    return out


def _output_names(cf):
    s = cf.structured_outputs
    flat = nest.flatten(s)
    if isinstance(s, dict) and all(isinstance(k, str) for k in s) and len(flat) == len(s) \
            and all(isinstance(v, SymbolicTensor) for v in s.values()):
        return [k for k in sorted(s)]          # nest.flatten's order
    return [f"output_{i}" for i in range(len(cf.outputs))]


def _spec_json(t, name):
    return {"name": name, "dtype": t.dtype.name, "shape": None if t.shape.rank is None else t.shape.as_list()}


def _keras_serving_function(model):
    """``model(inputs, training=False)`` traced for the model's input shapes, outputs named."""
    import tensorweave as tw
    inputs = getattr(model, "inputs", None)
    if inputs:
        specs = [TensorSpec(t.shape, t.dtype, name=getattr(t.node.layer, "name", None) if t.node else None)
                 for t in inputs]
    else:
        from tensorweave.keras.saving import build_input_shape
        shape = build_input_shape(model)
        if shape is None:
            raise SaveError(f"Model '{model.name}' has no known input shape (a subclassed model that was never "
                            "called). Hint: call it on data once, or pass signatures=")
        specs = [TensorSpec((None,) + tuple(shape)[1:], tw.float32, name="input")]
    names = list(getattr(model, "output_names", None) or [model.layers[-1].name if model.layers else "output"])

    def serve(*xs):
        out = model(xs[0] if len(xs) == 1 else list(xs), training=False)
        flat = nest.flatten(out)
        keys = names if len(names) == len(flat) else [f"output_{i}" for i in range(len(flat))]
        result = {}
        for k, v in zip(keys, flat):
            base, j = k, 1
            while k in result:
                k = f"{base}_{j}"
                j += 1
            result[k] = v
        return result
    serve.__name__ = f"{model.name}_serving"

    def call(*xs):
        return model(xs[0] if len(xs) == 1 else list(xs), training=False)
    call.__name__ = f"{model.name}_call"
    # the object is called like the model (its output structure, as TF's restored Keras model);
    # the serving signature returns named outputs
    return (tw.function(call, input_signature=specs).get_concrete_function(),
            tw.function(serve, input_signature=specs).get_concrete_function())


def _collect(obj, signatures):
    """(functions [(cf, python fn)], signatures {name: index}, attributes {name: [indices]},
    variable attributes {name: Variable}, assets {name: Asset}) of the object being saved."""
    ConcreteFunction, Function = _function_types()
    functions, index = [], {}

    def add(cf, pyfn):
        i = index.get(id(cf))
        if i is None:
            i = index[id(cf)] = len(functions)
            functions.append((cf, pyfn))
        return i

    attributes, var_attrs, assets = {}, {}, {}
    Model = _keras_model_class()
    default = None
    if isinstance(obj, ConcreteFunction):
        attributes["__call__"] = [add(obj, None)]
        default = obj
    elif isinstance(obj, Function):
        cfs = _concretes_of(obj, "save")
        attributes["__call__"] = [add(cf, obj.python_function) for cf in cfs]
        if len(cfs) == 1:
            default = cfs[0]
    elif Model is not None and isinstance(obj, Model):
        call_cf, default = _keras_serving_function(obj)
        attributes["__call__"] = [add(call_cf, None)]
    else:
        names = {}
        for klass in reversed(type(obj).__mro__):
            names.update({k: v for k, v in vars(klass).items()})
        names.update(getattr(obj, "__dict__", {}))
        for name in sorted(names):
            raw = names[name]
            if name.startswith("__") and name != "__call__":
                continue
            if isinstance(raw, (Function, ConcreteFunction)):
                value = getattr(obj, name)      # a method: the Function bound to obj
                cfs = _concretes_of(value, f"attribute '{name}'")
                if cfs:
                    attributes[name] = [add(cf, getattr(value, "python_function", None)) for cf in cfs]
            elif getattr(raw, "_is_variable", False):
                var_attrs[name] = raw
            elif isinstance(raw, Asset):
                assets[name] = raw
        if "__call__" in attributes and len(attributes["__call__"]) == 1:
            default = functions[attributes["__call__"][0]][0]
        elif not attributes:
            raise SaveError(f"Cannot save {type(obj).__name__}: it is not a tw.function, a ConcreteFunction or a "
                            "Keras model, and has no traced tw.function attributes")
    sigs = {}
    if signatures is None:
        if default is not None:
            sigs[DEFAULT_SIGNATURE] = add(default, None if not isinstance(obj, Function) else obj.python_function)
    else:
        if isinstance(signatures, (ConcreteFunction, Function)):
            signatures = {DEFAULT_SIGNATURE: signatures}
        if not isinstance(signatures, dict):
            raise TypeError("signatures must be a dict {name: ConcreteFunction or tw.function with an "
                            "input_signature}, or one function")
        for name, fn in signatures.items():
            if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.\-]*", name):
                raise ValueError(f"Invalid signature name {name!r}")
            if isinstance(fn, Function):
                if fn._input_signature is None:
                    raise ValueError(f"Signature '{name}': a tw.function needs an input_signature (or pass "
                                     "fn.get_concrete_function(...))")
                sigs[name] = add(fn.get_concrete_function(), fn.python_function)
            elif isinstance(fn, ConcreteFunction):
                sigs[name] = add(fn, None)
            else:
                raise TypeError(f"Signature '{name}' must be a ConcreteFunction or tw.function, got {fn!r}")
    return functions, sigs, attributes, var_attrs, assets


def _hash_file(path):
    h = hashlib.sha256()
    with V.open_regular(path) as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def _combined(files):
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(f"{name}\0{files[name]}\n".encode())
    return h.hexdigest()


def _fsync_tree(root):
    for dirpath, _, filenames in os.walk(root):
        for n in filenames:
            fd = os.open(os.path.join(dirpath, n), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        tensor_file.fsync_dir(dirpath)


def _prepare_target(export_dir):
    """Refuses to replace a directory that is not an (earlier) SavedModel."""
    if os.path.lexists(export_dir):
        if not os.path.isdir(export_dir) or os.path.islink(export_dir):
            raise FileExistsError(f"{export_dir} exists and is not a directory")
        entries = os.listdir(export_dir)
        if entries and JSON_NAME not in entries:
            raise FileExistsError(f"{export_dir} is a non-empty directory that is not a SavedModel; refusing to "
                                  "replace it")


def save(obj, export_dir, signatures=None, options=None):
    """Saves ``obj`` (a tw.function, a ConcreteFunction, a Keras model, or an object with
    tw.function attributes) to ``export_dir`` (see the module docstring).

    ``signatures``: ``{name: ConcreteFunction or tw.function with input_signature}``; default
    ``{"serving_default": ...}`` when the object has one obvious function (its only traced
    function, its ``__call__``, a Keras model's call for its input shapes).
    """
    extra = None
    Model = _keras_model_class()
    if Model is not None and isinstance(obj, Model):
        from tensorweave.keras import sharded_saving
        from tensorweave.keras.saving import saved_model_metadata
        extra = saved_model_metadata
        if sharded_saving.is_global_model(obj):
            if options is not None and options.experimental_sharded:
                obj, sources = sharded_saving.structure_copy(obj)    # variables written per rank
                return _save(obj, export_dir, signatures, options, extra, sources)
            obj = sharded_saving.gathered_copy(obj)     # serving: a local copy, gathered
    _save(obj, export_dir, signatures, options, extra)


def _save(obj, export_dir, signatures=None, options=None, extra=None, sources=None):
    """(``sources``: ``{id(variable of obj): variable}`` whose values to write instead — a
    global one as its per-rank shards in ``variables/sharded/``.)"""
    export_dir = os.path.abspath(os.fspath(export_dir))
    options = options or SaveOptions()
    _prepare_target(export_dir)
    functions, sigs, attributes, var_attrs, assets = _collect(obj, signatures)
    sctx = graph_io.SaveContext(options.inline_constants)
    fn_specs = []
    for i, (cf, _) in enumerate(functions):
        fn_specs.append(graph_io.serialize_function(cf, sctx, name=f"{cf.graph.name}_{i}"))
    sig_json = {}
    for name, i in sigs.items():
        cf, pyfn = functions[i]
        sig_json[name] = {"function": i,
                          "inputs": [_spec_json(p, n) for p, n in zip(cf.inputs, _input_names(cf, pyfn))],
                          "outputs": [_spec_json(t, n) for t, n in zip(cf.outputs, _output_names(cf))]}
    var_attr_json = {name: sctx.variable_index(v) for name, v in var_attrs.items()}
    extra_json = extra(obj, sctx) if extra is not None else None
    tensors = dict(sctx.tensors)
    var_json, shards = [], {}
    for i, v in enumerate(sctx.variables):
        key = f"variables/{i}"
        source = (sources or {}).get(id(v), v)
        if getattr(source, "is_global", False):
            from tensorweave.train._sharded import global_value
            shards[key] = global_value(source)
        else:
            tensors[key] = source.numpy()
        var_json.append({"name": v.name, "key": key, "dtype": v.dtype.name,
                         "shape": None if v.shape.rank is None else v.shape.as_list(),
                         "trainable": bool(v.trainable)})
    asset_json, used = {}, set()
    for name, a in assets.items():
        fname = os.path.basename(a.asset_path) or "asset"
        base, k = fname, 1
        while fname in used:
            fname = f"{k}_{base}"
            k += 1
        used.add(fname)
        asset_json[name] = fname
    import tensorweave
    doc = {"format": FORMAT, "version": VERSION, "producer": {"name": "tensorweave",
                                                              "version": tensorweave.__version__},
           "graph_format_version": graph_io.GRAPH_FORMAT_VERSION,
           "variables": var_json, "constants": sctx.constants, "functions": fn_specs,
           "signatures": sig_json, "attributes": attributes, "variable_attributes": var_attr_json,
           "assets": asset_json}
    if extra_json is not None:
        doc["keras"] = extra_json
    if shards:
        doc["sharded_variables"] = sorted(shards)
    payload = json.dumps(doc, separators=(",", ":"), allow_nan=False).encode()
    weights = tensor_file.encode(tensors, {"format": FORMAT + ".variables", "version": str(VERSION)})

    parent = os.path.dirname(export_dir)
    os.makedirs(parent, exist_ok=True)
    _clean_leftovers(export_dir)
    tmp = tempfile.mkdtemp(prefix=_tmp_prefix(export_dir), dir=parent)
    lock = atomic.lock_temporary(tmp)     # (the next save's clean-up leaves a live save's directory alone)
    try:
        os.makedirs(os.path.join(tmp, "variables"))
        os.makedirs(os.path.join(tmp, ASSETS_DIR))
        files = {}
        tensor_file.write_bytes_atomic(os.path.join(tmp, VARIABLES_FILE), weights)
        files[VARIABLES_FILE.replace(os.sep, "/")] = hashlib.sha256(weights).hexdigest()
        del weights
        if shards:
            from tensorweave.train._sharded import save_values
            save_values(os.path.join(tmp, SHARDED_DIR), shards, {"format": FORMAT + ".variables"})
            for fname in sorted(os.listdir(os.path.join(tmp, SHARDED_DIR))):
                files[f"{SHARDED_DIR.replace(os.sep, '/')}/{fname}"] = _hash_file(os.path.join(tmp, SHARDED_DIR, fname))
        for name, a in assets.items():
            dst = os.path.join(tmp, ASSETS_DIR, asset_json[name])
            shutil.copyfile(a.asset_path, dst)
            files[f"{ASSETS_DIR}/{asset_json[name]}"] = _hash_file(dst)
        tensor_file.write_bytes_atomic(os.path.join(tmp, JSON_NAME), payload)
        files[JSON_NAME] = hashlib.sha256(payload).hexdigest()
        fp = {"format": FORMAT + ".fingerprint", "version": 1, "sha256": _combined(files), "files": files}
        tensor_file.write_bytes_atomic(os.path.join(tmp, FINGERPRINT_NAME),
                                       json.dumps(fp, indent=1, sort_keys=True).encode())
        _fsync_tree(tmp)
        atomic.crash_point("saved_model_written")
        # One atomic step where the system has it (the path always holds a whole export);
        # see atomic.replace_dir for the fallback and its recovery.
        atomic.replace_dir(tmp, export_dir, "saved_model_")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        atomic.unlock(lock)


def _tmp_prefix(export_dir):
    return f".{os.path.basename(export_dir)}.tmp-"


def _is_complete(path):
    return os.path.isfile(os.path.join(path, JSON_NAME)) and not os.path.islink(os.path.join(path, JSON_NAME))


def _clean_leftovers(export_dir):
    """What killed saves of ``export_dir`` left beside it: an export renamed aside goes back
    when the path is empty (fallback path of ``atomic.replace_dir``), and temporary
    directories that no running save holds are removed."""
    atomic.recover_dir(export_dir, _is_complete)
    atomic.remove_stale(os.path.dirname(export_dir), [_tmp_prefix(export_dir)])


# ---- loading -----------------------------------------------------------------------------------------
class SignatureFunction:
    """A saved signature: called with keyword arguments (its input names), returns a dict of
    named output tensors. Positional arguments are taken in the order of ``input_names``."""

    def __init__(self, name, cf, inputs, outputs):
        self.name = name
        self._cf = cf
        self.input_names = [i["name"] for i in inputs]
        self.output_names = [o["name"] for o in outputs]
        self.inputs = {i["name"]: TensorSpec(TensorShape(i["shape"]), i["dtype"], i["name"]) for i in inputs}
        self.structured_outputs = {o["name"]: TensorSpec(TensorShape(o["shape"]), o["dtype"], o["name"])
                                   for o in outputs}

    @property
    def concrete_function(self):
        return self._cf

    @property
    def variables(self):
        return self._cf.variables

    def __call__(self, *args, **kwargs):
        if len(args) > len(self.input_names):
            raise TypeError(f"Signature '{self.name}' takes {len(self.input_names)} inputs "
                            f"({', '.join(self.input_names)}), got {len(args)} positional arguments")
        values = dict(zip(self.input_names, args))
        for k, v in kwargs.items():
            if k not in self.inputs:
                raise TypeError(f"Signature '{self.name}' has no input named {k!r}; its inputs are "
                                f"{self.input_names}")
            if k in values:
                raise TypeError(f"Signature '{self.name}': input {k!r} given twice")
            values[k] = v
        missing = [n for n in self.input_names if n not in values]
        if missing:
            raise TypeError(f"Signature '{self.name}' is missing input(s) {missing}; expects "
                            + ", ".join(f"{n}: {self.inputs[n]}" for n in self.input_names))
        out = self._cf._call_flat([values[n] for n in self.input_names])
        flat = [o for o in nest.flatten(out) if isinstance(o, Tensor)]
        return dict(zip(self.output_names, flat))

    def __repr__(self):
        ins = ", ".join(f"{n}: {self.inputs[n]}" for n in self.input_names)
        outs = ", ".join(f"{n}: {s}" for n, s in self.structured_outputs.items())
        return f"<SignatureFunction {self.name}({ins}) -> {{{outs}}}>"


class SignatureMap(dict):
    """``{name: SignatureFunction}`` (read-only in spirit; a plain dict for convenience)."""


def _dtype_of(x):
    if isinstance(x, Tensor):
        return x.dtype
    try:
        return _dt.as_dtype(np.asarray(x).dtype)
    except TypeError:
        return None


class RestoredFunction:
    """A saved tw.function: one or more traced graphs; a call picks the one its inputs fit."""

    def __init__(self, name, concrete_functions):
        self.name = name
        self.concrete_functions = list(concrete_functions)

    def __call__(self, *args, **kwargs):
        flat = [x for x in nest.flatten((args, kwargs)) if isinstance(x, (Tensor, np.ndarray, np.generic))
                or isinstance(x, (int, float, list)) and not isinstance(x, bool)]
        exact, loose = None, None
        for cf in self.concrete_functions:
            if len(cf.inputs) != len(flat):
                continue
            shapes_ok = all(p.shape.is_compatible_with(np.shape(x) if not isinstance(x, Tensor) else x.shape)
                            for p, x in zip(cf.inputs, flat))
            if not shapes_ok:
                continue
            if all(_dtype_of(x) is p.dtype for p, x in zip(cf.inputs, flat)):
                exact = cf
                break
            loose = loose or cf
        cf = exact or loose
        if cf is None:
            sigs = "; ".join("(" + ", ".join(f"{fmt(p.shape)} {p.dtype.name}" for p in c.inputs) + ")"
                             for c in self.concrete_functions)
            got = ", ".join(f"{fmt(np.shape(x) if not isinstance(x, Tensor) else x.shape)}" for x in flat)
            raise ValueError(f"Loaded function '{self.name}' has no saved graph for inputs ({got}). Saved "
                             f"signatures: {sigs}. Hint: a SavedModel holds only the traces made before saving")
        return cf._call_flat(flat)

    def get_concrete_function(self, *specs):
        for cf in self.concrete_functions:
            if len(specs) == len(cf.inputs) and all(
                    s.dtype is p.dtype and p.shape.is_compatible_with(s.shape) for s, p in zip(specs, cf.inputs)):
                return cf
        if not specs and len(self.concrete_functions) == 1:
            return self.concrete_functions[0]
        raise ValueError(f"No saved graph of '{self.name}' matches {specs}")

    def __repr__(self):
        return f"<RestoredFunction {self.name} ({len(self.concrete_functions)} graph(s))>"


class LoadedObject:
    """What :func:`load` returns: ``signatures``, ``variables``, restored attribute functions and
    variables (as attributes), ``assets`` and the ``fingerprint``."""

    def __init__(self, export_dir, signatures, attributes, variables, assets, fingerprint, doc):
        self.export_dir = export_dir
        self.signatures = signatures
        self._attributes = attributes
        self.variables = variables
        self.trainable_variables = [v for v in variables if v.trainable]
        self.assets = assets
        self.fingerprint = fingerprint
        self.tensorweave_version = doc.get("producer", {}).get("version")
        self.keras_metadata = doc.get("keras")

    def __getattr__(self, name):
        attrs = self.__dict__.get("_attributes", {})
        if name in attrs:
            return attrs[name]
        raise AttributeError(f"Loaded SavedModel has no attribute {name!r}; saved attributes: "
                             f"{sorted(a for a in attrs if a != '__call__')}")

    def __call__(self, *args, **kwargs):
        fn = self._attributes.get("__call__")
        if fn is None:
            raise TypeError("This SavedModel's object was not callable when saved; use .signatures[...]")
        return fn(*args, **kwargs)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._attributes))

    def __repr__(self):
        return f"<tw.saved_model loaded from {self.export_dir!r}: signatures {sorted(self.signatures)}>"


def _check_tensor_decl(entry, where, need_key):
    fields = ("name", "key", "dtype", "shape", "trainable") if need_key else ("dtype", "shape")
    V.check_keys(entry, where, fields)
    dt = V.check_dtype(entry["dtype"], where, "dtype", V.TENSOR_DTYPES)
    if dt is _dt.string:
        fail(where, "string variables are not supported")
    return dt, V.check_shape(entry["shape"], where, allow_unknown=need_key)


def _entry(export_dir, *parts):
    """The path of ``parts`` inside ``export_dir``, refusing symbolic links on the way: a
    link could make a loader (or the fingerprint) read anything on the machine."""
    path = export_dir
    for i, part in enumerate(parts):
        path = os.path.join(path, part)
        if os.path.islink(path):
            link = "/".join(parts[:i + 1])
            raise LoadError(f"{export_dir}: {link} is a symbolic link"
                            + (f" (reading {'/'.join(parts)})" if i + 1 < len(parts) else "")
                            + "; the files of a SavedModel must be inside its directory")
    return path


def resolve_export_dir(export_dir):
    """``export_dir``, or, when it is missing because a save was killed half-way through
    replacing it (the fallback path of ``atomic.replace_dir``), the previous export that
    save renamed aside."""
    export_dir = os.fspath(export_dir)
    if os.path.lexists(export_dir):
        return export_dir
    for p in atomic.aside_copies(export_dir):
        if _is_complete(p):
            return p
    return export_dir


def read_document(export_dir):
    """Reads and structurally validates ``saved_model.json`` (no tensors are read)."""
    export_dir = os.fspath(export_dir)
    if not os.path.isdir(export_dir):
        raise LoadError(f"{export_dir}: not a SavedModel directory (it does not exist or is not a directory)")
    path = _entry(export_dir, JSON_NAME)
    if not os.path.lexists(path):
        raise LoadError(f"{export_dir}: not a SavedModel ({JSON_NAME} is missing)")
    where = JSON_NAME
    doc = V.read_json_file(path, where)
    V.check_keys(doc, where, ("format", "version", "variables", "functions", "signatures"),
                 ("producer", "graph_format_version", "constants", "attributes", "variable_attributes", "assets",
                  "keras", "sharded_variables"))
    if doc["format"] != FORMAT:
        fail(where, f"format is {V._short(doc['format'])}, expected {FORMAT!r}")
    if doc["version"] != VERSION:
        fail(where, f"version {V._short(doc['version'])} is not supported (this tensorweave reads version "
                    f"{VERSION}); a newer tensorweave wrote it?")
    if doc.get("graph_format_version", 1) != graph_io.GRAPH_FORMAT_VERSION:
        fail(where, f"graph format version {V._short(doc.get('graph_format_version'))} is not supported")
    producer = doc.get("producer", {})
    V.check_keys(producer, f"{where} producer", (), ("name", "version"))
    for k, v in producer.items():
        V.check_string(v, f"{where} producer", k, V.MAX_NAME)
    for i, entry in enumerate(V.check_list(doc["variables"], where, "variables")):
        w = f"{where} variables[{i}]"
        _check_tensor_decl(entry, w, True)
        V.check_string(entry["name"], w, "name", V.MAX_NAME)
        V.check_string(entry["key"], w, "key", V.MAX_NAME)
        if entry["key"] != f"variables/{i}":
            fail(w, f"key must be 'variables/{i}'")
        V.expect(entry["trainable"], bool, w, "trainable")
    keys = {e["key"] for e in doc["variables"]}
    for key in V.check_list(doc.get("sharded_variables", []), where, "sharded_variables"):
        if key not in keys:
            fail(where, f"sharded variable {V._short(key)} is not a declared variable key")
    constants = V.expect(doc.get("constants", {}), dict, where, "constants")
    for key, entry in constants.items():
        if not re.fullmatch(r"constants/\d{1,9}", key):
            fail(f"{where} constants", f"invalid key {V._short(key)}")
        _check_tensor_decl(entry, f"{where} constants[{key!r}]", False)
    fns = V.check_list(doc["functions"], where, "functions")
    n_fn = len(fns)
    sigs = V.expect(doc["signatures"], dict, where, "signatures")
    for name, s in sigs.items():
        w = f"{where} signature {V._short(name)}"
        V.check_name(name, w, "signature name")
        V.check_keys(s, w, ("function", "inputs", "outputs"))
        V.check_int(s["function"], w, "function index", 0, n_fn - 1)
        for kind in ("inputs", "outputs"):
            names = set()
            for e in V.check_list(s[kind], w, kind):
                V.check_keys(e, w, ("name", "dtype", "shape"))
                V.check_string(e["name"], w, f"{kind[:-1]} name", V.MAX_NAME)
                if e["name"] in names:
                    fail(w, f"duplicate {kind[:-1]} name {e['name']!r}")
                names.add(e["name"])
                V.check_dtype(e["dtype"], w)
                V.check_shape(e["shape"], w)
    attrs = V.expect(doc.get("attributes", {}), dict, where, "attributes")
    for name, idx in attrs.items():
        w = f"{where} attribute {V._short(name)}"
        if not (name == "__call__" or (name.isidentifier() and not name.startswith("__"))) or name in _RESERVED_ATTRS:
            fail(w, "attribute names must be identifiers (not reserved, not dunder except __call__)")
        for i in V.check_list(idx, w, "function indices"):
            V.check_int(i, w, "function index", 0, n_fn - 1)
    n_var = len(doc["variables"])
    for name, i in V.expect(doc.get("variable_attributes", {}), dict, where, "variable_attributes").items():
        w = f"{where} variable attribute {V._short(name)}"
        if not name.isidentifier() or name.startswith("__") or name in _RESERVED_ATTRS or name in attrs:
            fail(w, "must be an identifier that is not reserved or already a function")
        V.check_int(i, w, "variable index", 0, n_var - 1)
    for name, fname in V.expect(doc.get("assets", {}), dict, where, "assets").items():
        w = f"{where} asset {V._short(name)}"
        if not name.isidentifier() or name.startswith("__") or name in _RESERVED_ATTRS or name in attrs:
            fail(w, "asset attribute names must be identifiers")
        V.check_safe_filename(fname, w, "asset file name")
    return doc


def _read_tensors(export_dir, doc):
    """Reads the tensor file and checks it holds exactly the declared variables and constants."""
    path = _entry(export_dir, *VARIABLES_FILE.split(os.sep))
    sharded_keys = set(doc.get("sharded_variables", []))
    declared = {e["key"]: (e["dtype"], e["shape"], True) for e in doc["variables"] if e["key"] not in sharded_keys}
    declared.update({k: (e["dtype"], e["shape"], False) for k, e in doc.get("constants", {}).items()})
    if not declared and not sharded_keys and not os.path.lexists(path):
        return {}
    if not os.path.lexists(path):
        raise LoadError(f"{export_dir}: {VARIABLES_FILE} is missing")
    tensors = tensor_file.read_tensors(path)
    if sharded_keys:
        shards = _read_sharded(export_dir, doc, sharded_keys)
        clash = sorted(set(shards) & set(tensors))
        if clash:
            raise LoadError(f"{VARIABLES_FILE}: tensors {clash[:5]} are also in {SHARDED_DIR}")
        tensors.update(shards)
        declared.update({e["key"]: (e["dtype"], e["shape"], True) for e in doc["variables"] if e["key"] in sharded_keys})
    extra = sorted(set(tensors) - set(declared))
    if extra:
        raise LoadError(f"{VARIABLES_FILE}: tensors {extra[:5]} are not declared in {JSON_NAME}")
    for key, (dtype, shape, is_var) in declared.items():
        a = tensors.get(key)
        if a is None:
            raise LoadError(f"{VARIABLES_FILE}: no tensor {key!r} (declared in {JSON_NAME})")
        if _dt.as_dtype(a.dtype).name != dtype:
            raise LoadError(f"{VARIABLES_FILE}: tensor {key!r} has dtype {a.dtype}, {JSON_NAME} says {dtype}")
        if not TensorShape(shape).is_compatible_with(a.shape) or (not is_var and list(a.shape) != shape):
            raise LoadError(f"{VARIABLES_FILE}: tensor {key!r} has shape {list(a.shape)}, {JSON_NAME} says {shape}")
    return tensors


def _read_sharded(export_dir, doc, keys):
    """The logical values of the variables stored per rank (a one-process load: whole values)."""
    from tensorweave.saving import sharded
    directory = _entry(export_dir, *SHARDED_DIR.split(os.sep))
    index = sharded.read_index(directory)
    if set(index["variables"]) != keys:
        raise LoadError(f"{SHARDED_DIR}: holds {sorted(set(index['variables']) ^ keys)[:5]} differently from "
                        f"{JSON_NAME}'s sharded_variables")
    try:
        return {k: sharded.read_region(directory, k, tuple(slice(0, d) for d in index["variables"][k]["shape"]),
                                       index) for k in sorted(keys)}
    except FileNotFoundError as e:
        raise LoadError(f"{export_dir}: {SHARDED_DIR}/{os.path.basename(e.filename or '?')} is missing") from None


def _restore_variables(doc, tensors):
    from tensorweave.ops.variables import Variable
    out = []
    with init_scope():
        for e in doc["variables"]:
            value = tensors[e["key"]]
            base = e["name"][:-2] if e["name"].endswith(":0") else e["name"]
            base = re.sub(r"[^A-Za-z0-9_.\-/>]", "_", base) or "Variable"
            out.append(Variable(value, trainable=e["trainable"], name=base, dtype=e["dtype"],
                                shape=TensorShape(e["shape"]), validate_shape=e["shape"] is not None))
    return out


def fingerprint_of(export_dir):
    """``(stored, recomputed)`` combined sha256 of a SavedModel's files (stored: None if absent)."""
    export_dir = os.fspath(export_dir)
    stored = None
    path = _entry(export_dir, FINGERPRINT_NAME)
    files = {}
    if os.path.lexists(path):
        fp = V.read_json_file(path, FINGERPRINT_NAME, 1 << 20)
        if isinstance(fp, dict) and isinstance(fp.get("sha256"), str):
            stored = fp["sha256"]
        listed = fp.get("files") if isinstance(fp, dict) else None
        if isinstance(listed, dict):
            files = {k: None for k in listed}
    files.setdefault(JSON_NAME, None)
    if os.path.lexists(os.path.join(export_dir, VARIABLES_FILE)):
        files.setdefault(VARIABLES_FILE.replace(os.sep, "/"), None)
    recomputed = {}
    for name in files:
        if not isinstance(name, str) or ".." in name.split("/") or name.startswith("/"):
            continue
        # Never through a link (a linked directory could lead to /proc/kcore), regular files only.
        p = _entry(export_dir, *name.split("/"))
        if os.path.lexists(p):
            recomputed[name] = _hash_file(p)
    return stored, _combined(recomputed)


def load(export_dir, tags=None, options=None, verify_fingerprint=False):
    """Loads a SavedModel written by :func:`save` (in any process, without the model's code).

    Everything is validated first: a malformed, truncated or inconsistent export raises
    :class:`LoadError` (a ``ValueError``); ``verify_fingerprint=True`` also checks the files'
    sha256 against ``fingerprint.json``. ``tags`` and ``options`` are accepted for TensorFlow
    compatibility and ignored.
    """
    export_dir = os.path.abspath(os.fspath(export_dir))
    try:
        return read_consistently(export_dir, lambda d: _load(d, verify_fingerprint))
    except (LoadError, tensor_file.TensorFileError):
        raise
    except RecursionError:
        raise LoadError(f"{export_dir}: the saved graphs are nested too deeply") from None
    except MemoryError:
        raise LoadError(f"{export_dir}: out of memory while loading (the model is too large for this "
                        "machine)") from None
    except OverflowError as e:
        raise LoadError(f"{export_dir}: a number in the SavedModel is out of range ({e})") from None


def _identity(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_ctime_ns


def read_consistently(export_dir, read, attempts=3):
    """``read(directory)`` of one version of ``export_dir``: a save that replaces the
    directory while it is being read (the reader would mix files of two versions) makes it
    read again; so does a failure while the directory was replaced."""
    for attempt in range(attempts):
        directory = resolve_export_dir(export_dir)
        before = _identity(directory)
        try:
            result = read(directory)
        except (ValueError, OSError):
            if attempt + 1 < attempts and _identity(directory) != before:
                continue
            raise
        if _identity(directory) == before:
            return result
    raise LoadError(f"{export_dir}: replaced by other saves while it was being read ({attempts} times); "
                    "try again")


def register_all_ops():
    """Imports every module of ``tensorweave.ops`` (some are otherwise imported only by Keras
    layers), so a fresh process knows every op a saved graph may use. The module names come
    from the installed package, never from the file being loaded."""
    import importlib
    import pkgutil
    import tensorweave  # noqa: F401 - the core ops and kernels
    import tensorweave.ops as ops_pkg
    for m in pkgutil.iter_modules(ops_pkg.__path__):
        importlib.import_module(f"tensorweave.ops.{m.name}")
    from tensorweave.keras.optimizers import sparse_ops  # noqa: F401 - optimizer ops


def _load(export_dir, verify_fingerprint):
    register_all_ops()
    doc = read_document(export_dir)
    stored_fp = None
    if verify_fingerprint:
        stored_fp, actual = fingerprint_of(export_dir)
        if stored_fp != actual:
            raise LoadError(f"{export_dir}: fingerprint mismatch (stored {stored_fp}, files give {actual}); the "
                            "files were changed after saving")
    tensors = _read_tensors(export_dir, doc)
    variables = _restore_variables(doc, tensors)
    lctx = graph_io.LoadContext(tensors, variables, doc.get("constants", {}), JSON_NAME)
    cfs = []
    for i, spec in enumerate(doc["functions"]):
        cfs.append(graph_io.build_function(spec, lctx, f"{JSON_NAME} functions[{i}]"))
    sigs = SignatureMap()
    for name, s in doc["signatures"].items():
        cf = cfs[s["function"]]
        w = f"{JSON_NAME} signature '{name}'"
        if len(s["inputs"]) != len(cf.inputs) or len(s["outputs"]) != len(cf.outputs):
            fail(w, f"declares {len(s['inputs'])} inputs/{len(s['outputs'])} outputs but its function has "
                    f"{len(cf.inputs)}/{len(cf.outputs)}")
        for e, t in list(zip(s["inputs"], cf.inputs)) + list(zip(s["outputs"], cf.outputs)):
            if e["dtype"] != t.dtype.name or not TensorShape(e["shape"]).is_compatible_with(t.shape):
                fail(w, f"{e['name']!r} is declared {e['dtype']} {e['shape']} but the graph has "
                        f"{t.dtype.name} {fmt(t.shape)}")
        sigs[name] = SignatureFunction(name, cf, s["inputs"], s["outputs"])
    attributes = {}
    for name, idx in doc.get("attributes", {}).items():
        attributes[name] = RestoredFunction(name, [cfs[i] for i in idx])
    for name, i in doc.get("variable_attributes", {}).items():
        attributes[name] = variables[i]
    assets = {}
    for name, fname in doc.get("assets", {}).items():
        p = _entry(export_dir, ASSETS_DIR, fname)
        if not os.path.isfile(p):
            raise LoadError(f"{export_dir}: asset {fname!r} is missing from {ASSETS_DIR}/ (or is not a regular file)")
        assets[name] = attributes[name] = Asset(p)
    if stored_fp is None:
        fp_path = _entry(export_dir, FINGERPRINT_NAME)
        if os.path.lexists(fp_path):
            fp = V.read_json_file(fp_path, FINGERPRINT_NAME, 1 << 20)
            stored_fp = fp.get("sha256") if isinstance(fp, dict) and isinstance(fp.get("sha256"), str) else None
    return LoadedObject(export_dir, sigs, attributes, variables, assets, stored_fp, doc)


# ---- inspection --------------------------------------------------------------------------------------
def read_info(export_dir):
    """What ``tensorweave inspect`` shows, from the JSON and the tensor file's header only:
    ``{"signatures", "op_counts", "variables", "total_bytes", "fingerprint", "fingerprint_ok", ...}``."""
    return read_consistently(os.fspath(export_dir), _read_info)


def _read_info(export_dir):
    doc = read_document(export_dir)
    path = _entry(export_dir, *VARIABLES_FILE.split(os.sep))
    if os.path.lexists(path):
        tensor_file.read_metadata(path)      # validates the header (offsets, sizes, dtypes)
    counts = {}
    for i, spec in enumerate(doc["functions"]):
        w = f"{JSON_NAME} functions[{i}]"
        graph_io.op_counts(V.expect(spec, dict, w, "function").get("graph"), counts, f"{w} graph")
    variables = []
    for e in doc["variables"]:
        itemsize = V.TENSOR_DTYPES[e["dtype"]].np_dtype.itemsize
        n = V.num_elements(e["shape"]) if e["shape"] is not None and None not in e["shape"] else None
        variables.append({"name": e["name"], "shape": e["shape"], "dtype": e["dtype"], "trainable": e["trainable"],
                          "bytes": None if n is None else n * itemsize})
    stored, actual = fingerprint_of(export_dir)
    return {"format": doc["format"], "version": doc["version"], "producer": doc.get("producer", {}),
            "signatures": doc["signatures"], "attributes": sorted(doc.get("attributes", {})),
            "op_counts": dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))),
            "variables": variables, "total_bytes": sum(v["bytes"] or 0 for v in variables),
            "assets": doc.get("assets", {}), "fingerprint": stored, "fingerprint_ok": stored == actual,
            "keras": doc.get("keras") is not None}
