"""TF1's ``tf.saved_model``: ``builder.SavedModelBuilder``, ``loader.load``, ``simple_save`` and the
signature helpers, for graphs and sessions (TF2's object SavedModel is ``tw.saved_model``).

An export directory holds ``saved_model_v1.json`` (per meta graph: its tags, signature defs, main
op and meta graph file), one meta graph file per tag set (``v1_meta_graph.py``'s safe format)
and ``variables/variables``, a ``tf.train.Saver`` checkpoint. Nothing in it is code.

>>> import os, tempfile
>>> import tensorweave.compat.v1 as tf
>>> export_dir = os.path.join(tempfile.mkdtemp(), "model")
>>> with tf.Graph().as_default(), tf.Session() as sess:
...     x = tf.placeholder(tf.float32, [None], name="x")
...     w = tf.Variable(3.0, name="w")
...     sess.run(tf.global_variables_initializer())
...     tf.saved_model.simple_save(sess, export_dir, inputs={"x": x}, outputs={"y": x * w})
>>> with tf.Graph().as_default(), tf.Session() as sess:
...     meta = tf.saved_model.loader.load(sess, [tf.saved_model.tag_constants.SERVING], export_dir)
...     sig = meta.signature_def["serving_default"]
...     sess.run(sig.outputs["y"].name, {sig.inputs["x"].name: [1.0, 2.0]}).tolist()
[3.0, 6.0]
"""
import json
import os
import types

from tensorweave.compat import v1_meta_graph as _mg
from tensorweave.core import dtypes as _dt
from tensorweave.core.graph import Operation, get_default_graph
from tensorweave.core.shape import TensorShape
from tensorweave.saving import tensor_file
from tensorweave.saving import validation as V
from tensorweave.saving.validation import fail

FORMAT = "tensorweave.saved_model_v1"
VERSION = 1
INDEX = "saved_model_v1.json"
VARIABLES = os.path.join("variables", "variables")

__all__ = ["SavedModelBuilder", "Builder", "load", "simple_save", "contains_saved_model",
           "maybe_saved_model_directory", "build_tensor_info", "build_signature_def", "predict_signature_def",
           "classification_signature_def", "regression_signature_def", "is_valid_signature",
           "get_tensor_from_tensor_info", "TensorInfo", "SignatureDef"]


# ---- signatures ----------------------------------------------------------------------------------------
class TensorInfo:
    """A tensor of a signature: its graph ``name`` (``"x:0"``), ``dtype`` and ``tensor_shape``."""

    def __init__(self, name, dtype, tensor_shape):
        self.name, self.dtype, self.tensor_shape = name, dtype, tensor_shape

    def _encode(self):
        return {"name": self.name, "dtype": self.dtype.name,
                "shape": None if self.tensor_shape.rank is None else list(self.tensor_shape.as_tuple())}

    def __repr__(self):
        return f"TensorInfo(name={self.name!r}, dtype={self.dtype.name}, tensor_shape={self.tensor_shape})"


class SignatureDef:
    """``inputs`` and ``outputs`` (dicts of :class:`TensorInfo`) and a ``method_name``."""

    def __init__(self, inputs=None, outputs=None, method_name=""):
        self.inputs, self.outputs, self.method_name = dict(inputs or {}), dict(outputs or {}), method_name or ""

    def _encode(self):
        return {"inputs": {k: v._encode() for k, v in self.inputs.items()},
                "outputs": {k: v._encode() for k, v in self.outputs.items()}, "method_name": self.method_name}


def build_tensor_info(tensor):
    """The :class:`TensorInfo` of a graph tensor."""
    if not hasattr(tensor, "op") or not hasattr(tensor, "name"):
        raise TypeError(f"build_tensor_info: expected a graph tensor, got {type(tensor).__name__}. Hint: build the "
                        "signature inside the graph (a tf.placeholder or an op's output)")
    return TensorInfo(tensor.name, tensor.dtype, tensor.shape)


def get_tensor_from_tensor_info(tensor_info, graph=None, import_scope=None):
    """The tensor ``tensor_info`` names in ``graph`` (default: the default graph), under ``import_scope``."""
    graph = graph or get_default_graph()
    name = (import_scope.rstrip("/") + "/" if import_scope else "") + tensor_info.name
    return graph.get_tensor_by_name(name)


def build_signature_def(inputs=None, outputs=None, method_name=None, defaults=None):
    return SignatureDef(inputs, outputs, method_name)


def predict_signature_def(inputs, outputs):
    """A ``tensorflow/serving/predict`` signature of ``{name: tensor}`` inputs and outputs."""
    if not inputs or not outputs:
        raise ValueError("predict_signature_def: inputs and outputs must be non-empty dicts of tensors")
    return SignatureDef({k: build_tensor_info(t) for k, t in inputs.items()},
                        {k: build_tensor_info(t) for k, t in outputs.items()}, PREDICT_METHOD_NAME)


def classification_signature_def(examples, classes, scores):
    """A ``tensorflow/serving/classify`` signature (serialized ``examples`` in, ``classes``/``scores`` out)."""
    if examples is None:
        raise ValueError("classification_signature_def: examples must be a tensor")
    if classes is None and scores is None:
        raise ValueError("classification_signature_def: classes and scores can not both be None")
    outputs = {}
    if classes is not None:
        outputs[CLASSIFY_OUTPUT_CLASSES] = build_tensor_info(classes)
    if scores is not None:
        outputs[CLASSIFY_OUTPUT_SCORES] = build_tensor_info(scores)
    return SignatureDef({CLASSIFY_INPUTS: build_tensor_info(examples)}, outputs, CLASSIFY_METHOD_NAME)


def regression_signature_def(examples, predictions):
    """A ``tensorflow/serving/regress`` signature."""
    if examples is None or predictions is None:
        raise ValueError("regression_signature_def: examples and predictions must be tensors")
    return SignatureDef({REGRESS_INPUTS: build_tensor_info(examples)},
                        {REGRESS_OUTPUTS: build_tensor_info(predictions)}, REGRESS_METHOD_NAME)


def is_valid_signature(signature_def):
    """Whether ``signature_def`` is one TF Serving can run (TF's rules): predict with inputs and
    outputs; classify/regress with one string ``inputs`` tensor and TF's output keys and dtypes."""
    if not isinstance(signature_def, SignatureDef):
        return False
    ins, outs, method = signature_def.inputs, signature_def.outputs, signature_def.method_name
    if method == PREDICT_METHOD_NAME:
        return bool(ins) and bool(outs)
    string_input = set(ins) == {"inputs"} and ins["inputs"].dtype == _dt.string
    if method == CLASSIFY_METHOD_NAME:
        wanted = {CLASSIFY_OUTPUT_CLASSES: _dt.string, CLASSIFY_OUTPUT_SCORES: _dt.float32}
        return string_input and bool(outs) and all(k in wanted and v.dtype == wanted[k] for k, v in outs.items())
    if method == REGRESS_METHOD_NAME:
        return string_input and set(outs) == {REGRESS_OUTPUTS} and outs[REGRESS_OUTPUTS].dtype == _dt.float32
    return False


PREDICT_METHOD_NAME = "tensorflow/serving/predict"
CLASSIFY_METHOD_NAME = "tensorflow/serving/classify"
REGRESS_METHOD_NAME = "tensorflow/serving/regress"
CLASSIFY_INPUTS, CLASSIFY_OUTPUT_CLASSES, CLASSIFY_OUTPUT_SCORES = "inputs", "classes", "scores"
REGRESS_INPUTS, REGRESS_OUTPUTS = "inputs", "outputs"
PREDICT_INPUTS, PREDICT_OUTPUTS = "inputs", "outputs"
DEFAULT_SERVING_SIGNATURE_DEF_KEY = "serving_default"
SERVING, TRAINING, EVAL, GPU, TPU = "serve", "train", "eval", "gpu", "tpu"


# ---- saving --------------------------------------------------------------------------------------------
def _op_name(op):
    if op is None:
        return None
    if not isinstance(op, Operation):
        op = getattr(op, "op", None)
        if not isinstance(op, Operation):
            raise TypeError(f"SavedModelBuilder: main_op/legacy_init_op must be an operation, got {type(op).__name__}")
    return op.name


class SavedModelBuilder:
    """Collects meta graphs (one per tag set) and the variables of the first, then ``save()``s them."""

    def __init__(self, export_dir):
        self._dir = os.fspath(export_dir)
        if os.path.exists(self._dir) and os.listdir(self._dir):
            raise AssertionError(f"Export directory already exists, and isn't empty. Please choose a different "
                                 f"export directory, or delete all the contents of the specified directory: "
                                 f"{self._dir}")
        self._entries, self._files = [], {}
        self._saved_variables = False

    def _add(self, sess_graph, tags, signature_def_map, main_op, saver, clear_devices):
        tags = [tags] if isinstance(tags, str) else list(tags)
        if not tags or not all(isinstance(t, str) for t in tags):
            raise ValueError(f"SavedModelBuilder: tags must be a non-empty list of strings, got {tags!r}")
        if any(set(e["tags"]) == set(tags) for e in self._entries):
            raise AssertionError(f"SavedModelBuilder: a meta graph with tags {sorted(tags)} was already added")
        sigs = {}
        for key, sig in (signature_def_map or {}).items():
            if not isinstance(sig, SignatureDef):
                raise TypeError(f"SavedModelBuilder: signature_def_map[{key!r}] must be a SignatureDef (from "
                                f"tf.saved_model.signature_def_utils), got {type(sig).__name__}")
            sigs[key] = sig._encode()
        name = f"meta_graph_{len(self._entries)}.meta"
        meta = _mg.export_meta_graph(graph=sess_graph, saver_def=saver.as_saver_def() if saver else None,
                                     clear_devices=clear_devices)
        self._files[name] = meta.encode()
        self._entries.append({"tags": tags, "file": name, "signature_def": sigs, "main_op": _op_name(main_op)})

    def add_meta_graph_and_variables(self, sess, tags, signature_def_map=None, assets_collection=None,
                                     legacy_init_op=None, clear_devices=False, main_op=None,
                                     strip_default_attrs=False, saver=None, train_op=None):
        """Adds ``sess``'s graph under ``tags`` and saves its variables' current values."""
        from tensorweave.compat.v1_saver import Saver
        if self._saved_variables:
            raise AssertionError("SavedModelBuilder: add_meta_graph_and_variables may be called once; use "
                                 "add_meta_graph for more tag sets")
        with sess.graph.as_default():
            saver = saver or Saver(allow_empty=True, write_version=2)
        os.makedirs(os.path.join(self._dir, "variables"), exist_ok=True)
        saver.save(sess, os.path.join(self._dir, VARIABLES), write_meta_graph=False, write_state=False)
        self._saved_variables = True
        self._saver = saver
        self._add(sess.graph, tags, signature_def_map, main_op or legacy_init_op, saver, clear_devices)

    def add_meta_graph(self, tags, signature_def_map=None, assets_collection=None, legacy_init_op=None,
                       clear_devices=False, main_op=None, strip_default_attrs=False, saver=None):
        """Adds the default graph under ``tags`` (its variables are those already saved)."""
        if not self._saved_variables:
            raise AssertionError("SavedModelBuilder: call add_meta_graph_and_variables before add_meta_graph")
        self._add(get_default_graph(), tags, signature_def_map, main_op or legacy_init_op,
                  saver or self._saver, clear_devices)

    def save(self, as_text=False):
        """Writes the meta graphs and the index; returns the export directory (bytes, as TF)."""
        os.makedirs(self._dir, exist_ok=True)
        for name, data in self._files.items():
            tensor_file.write_bytes_atomic(os.path.join(self._dir, name), data)
        index = {"format": FORMAT, "version": VERSION, "meta_graphs": self._entries}
        tensor_file.write_bytes_atomic(os.path.join(self._dir, INDEX), json.dumps(index, indent=1).encode("utf-8"))
        return self._dir.encode()


Builder = SavedModelBuilder


def simple_save(session, export_dir, inputs, outputs, legacy_init_op=None):
    """Saves ``session``'s graph and variables for serving: tag ``serve``, one ``serving_default``
    predict signature of ``inputs`` and ``outputs``."""
    builder = SavedModelBuilder(export_dir)
    builder.add_meta_graph_and_variables(session, [SERVING],
                                         {DEFAULT_SERVING_SIGNATURE_DEF_KEY: predict_signature_def(inputs, outputs)},
                                         main_op=legacy_init_op)
    builder.save()


# ---- loading -------------------------------------------------------------------------------------------
class MetaGraphInfo:
    """What ``loader.load`` returns: ``signature_def`` (name -> :class:`SignatureDef`) and
    ``meta_info_def.tags``."""

    def __init__(self, tags, signature_def):
        self.signature_def = signature_def
        self.meta_info_def = types.SimpleNamespace(tags=list(tags))


def _read_index(export_dir):
    path = os.path.join(os.fspath(export_dir), INDEX)
    if not os.path.isfile(path):
        raise OSError(f"SavedModel file does not exist at: {export_dir}/{INDEX}. Hint: tensorweave reads the "
                      "SavedModels its SavedModelBuilder wrote (TF's saved_model.pb is a protocol buffer)")
    doc = V.read_json_file(path)
    V.check_keys(doc, path, ("format", "version", "meta_graphs"))
    if doc["format"] != FORMAT or doc["version"] != VERSION:
        fail(path, f"not a version-{VERSION} tensorweave TF1 SavedModel")
    for i, e in enumerate(V.check_list(doc["meta_graphs"], path, "meta_graphs")):
        w = f"{path} meta graph #{i}"
        V.check_keys(e, w, ("tags", "file", "signature_def", "main_op"))
        for t in V.check_list(e["tags"], w, "tags"):
            V.check_string(t, w, "tag")
        V.check_safe_filename(e["file"], w)
        V.expect(e["main_op"], (str, type(None)), w, "main_op")
        for key, sig in V.expect(e["signature_def"], dict, w, "signature_def").items():
            ws = f"{w} signature {key!r:.40}"
            V.check_keys(sig, ws, ("inputs", "outputs", "method_name"))
            V.check_string(sig["method_name"], ws, "method_name")
            for part in ("inputs", "outputs"):
                for k, info in V.expect(sig[part], dict, ws, part).items():
                    V.check_keys(info, f"{ws} {part} {k!r:.40}", ("name", "dtype", "shape"))
                    V.check_string(info["name"], ws, "tensor name")
                    V.check_dtype(info["dtype"], ws)
                    V.check_shape(info["shape"], ws)
    return doc


def _signatures(raw):
    def info(d):
        return TensorInfo(d["name"], _dt.as_dtype(d["dtype"]), TensorShape(d["shape"]))
    return {key: SignatureDef({k: info(v) for k, v in s["inputs"].items()},
                              {k: info(v) for k, v in s["outputs"].items()}, s["method_name"])
            for key, s in raw.items()}


def contains_saved_model(export_dir):
    """Whether ``export_dir`` holds a SavedModel this module wrote."""
    return os.path.isfile(os.path.join(os.fspath(export_dir), INDEX))


maybe_saved_model_directory = contains_saved_model


def load(sess, tags, export_dir, import_scope=None, **saver_kwargs):
    """Builds the meta graph saved under exactly ``tags`` into ``sess.graph``, restores its variables
    into ``sess`` and runs its main op; returns its :class:`MetaGraphInfo`."""
    doc = _read_index(export_dir)
    tags = [tags] if isinstance(tags, str) else list(tags)
    found = [e for e in doc["meta_graphs"] if set(e["tags"]) == set(tags)]
    if not found:
        raise RuntimeError(f"MetaGraphDef associated with tags {str(tags).strip('[]')} could not be found in "
                           f"SavedModel, with available tags '{[set(e['tags']) for e in doc['meta_graphs']]}'. "
                           "Hint: pass the tags the model was saved with")
    entry = found[0]
    with sess.graph.as_default():
        saver = _mg.import_meta_graph(os.path.join(os.fspath(export_dir), entry["file"]), import_scope=import_scope,
                                      **saver_kwargs)
        if saver is not None:
            saver.restore(sess, os.path.join(os.fspath(export_dir), VARIABLES))
        if entry["main_op"] is not None:
            scope = import_scope.rstrip("/") + "/" if import_scope else ""
            sess.run(sess.graph.get_operation_by_name(scope + entry["main_op"]))
    return MetaGraphInfo(entry["tags"], _signatures(entry["signature_def"]))


# ---- the tf.saved_model namespaces ---------------------------------------------------------------------
def _ns(name, **members):
    module = types.ModuleType(f"tensorweave.compat.v1.saved_model.{name}")
    module.__dict__.update(members)
    return module


builder = _ns("builder", SavedModelBuilder=SavedModelBuilder)
loader = _ns("loader", load=load, maybe_saved_model_directory=maybe_saved_model_directory)
utils = _ns("utils", build_tensor_info=build_tensor_info, get_tensor_from_tensor_info=get_tensor_from_tensor_info)
signature_def_utils = _ns("signature_def_utils", build_signature_def=build_signature_def,
                          predict_signature_def=predict_signature_def,
                          classification_signature_def=classification_signature_def,
                          regression_signature_def=regression_signature_def, is_valid_signature=is_valid_signature)
tag_constants = _ns("tag_constants", SERVING=SERVING, TRAINING=TRAINING, EVAL=EVAL, GPU=GPU, TPU=TPU)
signature_constants = _ns("signature_constants", **{k: v for k, v in dict(globals()).items() if k.endswith((
    "_METHOD_NAME", "_INPUTS", "_OUTPUTS", "_OUTPUT_CLASSES", "_OUTPUT_SCORES", "_SIGNATURE_DEF_KEY"))})
# TF2's object SavedModel under its compat.v1 names
from tensorweave.saved_model import Asset, SaveOptions, load as load_v2, save  # noqa: E402,F401
