"""TF1's meta graphs: ``tf.train.export_meta_graph`` / ``import_meta_graph`` in our safe graph format.

A ``.meta`` file is a tensor file (``saving/tensor_file.py``) whose metadata holds one JSON
document and whose tensors are the graph's larger constants::

    {"format": "tensorweave.meta_graph", "version": 1,
     "graph": {"nodes": [...]},                       # saving/graph_io.py's node list
     "variables": [{"name", "dtype", "shape", "trainable", "initializer", "snapshot", "initial_value"}],
     "collections": {"train_op": [{"op": "GradientDescent"}], "variables": [{"variable": 0}], ...},
     "saver": {"max_to_keep", "keep_checkpoint_every_n_hours", "variables": {ckpt name: var index},
               "restore": {ckpt name: [placeholder tensor, assign op]}} or null,
     "dropped": [names of the nodes left out]}

No code and no pickles: nodes are op types and typed attrs, checked one by one on load by
``graph_io.GraphBuilder`` (registered op, attr kinds, inputs made earlier, the op's shape rule).
Nodes that run Python (``tw.py_function``/``numpy_function``: summaries, dataset iterators,
queues) cannot be stored; they and every node that depends on them are left out and listed
in ``dropped``, and asking the imported graph for one names it there. Collections keep their
tensors, operations, variables and plain values (strings come back as bytes, as in TF);
other Python objects (queue runners, savers) are left out, as TF leaves out what it cannot
serialize.

Importing creates, in the default graph (under ``import_scope`` if given), the nodes, one
uninitialized variable per saved variable (its initializer, ``initial_value`` and read nodes are
the imported ones), the collections, and a ``Saver`` whose restore nodes are the saved ones, so
the TF1 pattern works in a fresh process:

>>> import os, tempfile
>>> import tensorweave.compat.v1 as tf
>>> d = tempfile.mkdtemp()
>>> with tf.Graph().as_default():
...     x = tf.placeholder(tf.float32, [None], name="x")
...     w = tf.Variable(3.0, name="w")
...     y = tf.identity(x * w, name="y")
...     tf.add_to_collection("outputs", y)
...     saver = tf.train.Saver()
...     with tf.Session() as sess:
...         sess.run(tf.global_variables_initializer())
...         prefix = saver.save(sess, os.path.join(d, "model"))
>>> with tf.Graph().as_default() as g:
...     restorer = tf.train.import_meta_graph(prefix + ".meta")
...     with tf.Session() as sess:
...         restorer.restore(sess, prefix)
...         out = sess.run(tf.get_collection("outputs")[0], {g.get_tensor_by_name("x:0"): [1.0, 2.0]})
>>> out.tolist()
[3.0, 6.0]
"""
import json
import os

import numpy as np

from tensorweave.core.graph import Operation, SymbolicTensor, get_default_graph
from tensorweave.core.shape import TensorShape
from tensorweave.saving import graph_io, tensor_file
from tensorweave.saving import validation as V
from tensorweave.saving.validation import LoadError, fail

FORMAT = "tensorweave.meta_graph"
VERSION = 1

__all__ = ["MetaGraphDef", "export_meta_graph", "import_meta_graph"]


class MetaGraphDef:
    """What ``export_meta_graph`` returns and ``import_meta_graph`` accepts: the JSON document
    (``.doc``) and the constants it refers to (``.tensors``). ``graph_def``, ``collection_def`` and
    ``saver_def`` give the parts under TF's names."""

    def __init__(self, doc, tensors):
        self.doc, self.tensors = doc, tensors

    @property
    def graph_def(self):
        return self.doc["graph"]

    @property
    def collection_def(self):
        return self.doc["collections"]

    @property
    def saver_def(self):
        return self.doc["saver"]

    def encode(self):
        """The bytes of a ``.meta`` file (a tensor file)."""
        meta = {"format": FORMAT, "version": str(VERSION), "meta_graph": json.dumps(self.doc, separators=(",", ":"))}
        return tensor_file.encode(self.tensors, meta)


# ---- export ------------------------------------------------------------------------------------------
def _kept_ops(graph, export_scope):
    """(ops to save in creation order, names of the ops left out because they run Python)."""
    prefix = export_scope.rstrip("/") + "/" if export_scope else ""
    scratch = graph_io.SaveContext()
    kept, dropped, gone = [], [], set()
    for op in graph.get_operations():
        if prefix and not op.name.startswith(prefix):
            gone.add(id(op))
            continue
        bad = op.type in graph_io.UNSAVEABLE_OPS or any(id(t.op) in gone for t in op.inputs) \
            or any(id(c) in gone for c in op.control_inputs if c is not None)
        if not bad:
            try:
                for k, v in op.attrs.items():
                    if not k.startswith("_"):
                        graph_io.encode_value(v, scratch, op.name, (graph,))
            except graph_io.SaveError:
                bad = True
        if bad:
            gone.add(id(op))
            if not prefix or op.name.startswith(prefix):
                dropped.append(op.name)
        else:
            kept.append(op)
    for op in kept:
        outside = [t.name for t in op.inputs if id(t.op) in gone and not t.op.name.startswith(prefix)]
        if prefix and outside:
            raise ValueError(f"export_meta_graph: node '{op.name}' inside export_scope '{export_scope}' reads "
                             f"{outside[0]}, which is outside it")
    return kept, dropped


def _collection_item(item, names, var_index):
    if getattr(item, "_is_variable", False):
        i = var_index.get(id(item))
        return None if i is None else {"variable": i}
    if isinstance(item, Operation):
        return {"op": names[id(item)]} if id(item) in names else None
    if isinstance(item, SymbolicTensor):
        return {"tensor": f"{names[id(item.op)]}:{item.value_index}"} if id(item.op) in names else None
    if isinstance(item, bytes):
        try:
            return {"value": item.decode("utf-8")}
        except UnicodeDecodeError:
            return None
    if isinstance(item, (str, int, float)) and not isinstance(item, bool):
        return {"value": item} if not isinstance(item, float) or np.isfinite(item) else None
    return None


def export_meta_graph(filename=None, meta_info_def=None, graph_def=None, saver_def=None, collection_list=None,
                      as_text=False, graph=None, export_scope=None, clear_devices=False,
                      clear_extraneous_savers=False, strip_default_attrs=False, save_debug_info=False, **kwargs):
    """Writes the graph (default: the default graph), its variables, collections and ``saver_def``
    to ``filename`` (if given) and returns the :class:`MetaGraphDef`. ``export_scope`` keeps only the
    nodes under it, with the scope taken off their names; ``clear_devices`` drops device strings."""
    graph = graph or get_default_graph()
    prefix = export_scope.rstrip("/") + "/" if export_scope else ""
    ops, dropped = _kept_ops(graph, export_scope)
    sctx = graph_io.SaveContext()
    nodes, names = graph_io.encode_nodes(graph, ops, sctx, rename=(lambda n: n[len(prefix):]) if prefix else None)
    if clear_devices:
        for nd in nodes:
            nd["device"] = ""
    variables = []
    for var in sctx.variables:
        def name_of(x):
            if x is None:
                return None
            op = x if isinstance(x, Operation) else x.op
            if id(op) not in names:
                return None
            return names[id(op)] if isinstance(x, Operation) else f"{names[id(op)]}:{x.value_index}"
        handle = var._handles.get(graph)
        if handle is None or id(handle.op) not in names:
            raise graph_io.SaveError(f"export_meta_graph: variable {var.name} has no handle node in the graph")
        variables.append({"name": names[id(handle.op)], "dtype": var.dtype.name,
                          "shape": None if var.shape.rank is None else list(var.shape.as_tuple()),
                          "trainable": bool(var.trainable), "initializer": name_of(var._initializer_op),
                          "snapshot": name_of(var._graph_read), "initial_value": name_of(var._init_value_tensor)})
    var_index = {id(v): i for i, v in enumerate(sctx.variables)}
    collections = {}
    for key in (graph.get_all_collection_keys() if collection_list is None else collection_list):
        if not isinstance(key, str):
            continue
        items = [_collection_item(it, names, var_index) for it in graph.get_collection(key)]
        items = [it for it in items if it is not None]
        if items:
            collections[key] = items
    saver = None
    if saver_def is not None:
        saver = _encode_saver_def(saver_def, names, var_index)
    doc = {"format": FORMAT, "version": VERSION,
           "graph": {"nodes": nodes, "seed": graph.seed if isinstance(graph.seed, int) else None},
           "variables": variables, "collections": collections, "saver": saver, "dropped": dropped}
    meta = MetaGraphDef(doc, dict(sctx.tensors))
    if filename is not None:
        tensor_file.write_bytes_atomic(os.fspath(filename), meta.encode())
    return meta


def _encode_saver_def(saver_def, names, var_index):
    """The saver_def of ``Saver.as_saver_def()`` with objects replaced by saved names; a variable
    or restore node that was not saved leaves the Saver out (import builds a fresh one)."""
    out = {"max_to_keep": saver_def["max_to_keep"],
           "keep_checkpoint_every_n_hours": float(saver_def["keep_checkpoint_every_n_hours"]),
           "variables": {}, "restore": {}}
    for key, var in saver_def["variables"].items():
        if id(var) not in var_index:
            return None
        out["variables"][key] = var_index[id(var)]
    for key, (ph, op) in (saver_def.get("restore") or {}).items():
        if id(ph.op) not in names or id(op) not in names:
            return None
        out["restore"][key] = [f"{names[id(ph.op)]}:0", names[id(op)]]
    if out["restore"] and set(out["restore"]) != set(out["variables"]):
        return None
    return out


# ---- import ------------------------------------------------------------------------------------------
def read_meta_graph_file(filename):
    """The :class:`MetaGraphDef` of a ``.meta`` file, after its format checks."""
    path = os.fspath(filename)
    if not os.path.exists(path):
        raise OSError(f"File {path} does not exist.")
    try:
        meta = tensor_file.read_metadata(path)
    except tensor_file.TensorFileError as e:
        raise LoadError(f"{e} Hint: is it a .meta file written by TensorFlow (a protocol buffer)? Re-export "
                        "the graph with tensorweave") from None
    if meta.get("format") != FORMAT:
        raise LoadError(f"{path}: not a tensorweave meta graph (format {meta.get('format')!r:.60}). Hint: .meta "
                        "files written by TensorFlow are protocol buffers; re-export the graph with tensorweave")
    if meta.get("version") != str(VERSION):
        raise LoadError(f"{path}: meta graph version {meta.get('version')!r:.20} is not supported (this "
                        f"tensorweave reads version {VERSION})")
    doc = V.parse_json(meta.get("meta_graph", "").encode("utf-8"), path)
    return MetaGraphDef(doc, tensor_file.read_tensors(path))


def _check_doc(doc, where):
    V.check_keys(doc, where, ("format", "version", "graph", "variables", "collections", "saver", "dropped"))
    if doc["format"] != FORMAT or doc["version"] != VERSION:
        fail(where, f"not a version-{VERSION} meta graph")
    V.check_keys(doc["graph"], f"{where} graph", ("nodes",), ("seed",))
    for i, e in enumerate(V.check_list(doc["variables"], where, "variables")):
        w = f"{where} variable #{i}"
        V.check_keys(e, w, ("name", "dtype", "shape", "trainable", "initializer", "snapshot", "initial_value"))
        V.check_name(e["name"], w, "variable name")
        V.check_dtype(e["dtype"], w, "variable dtype", V.TENSOR_DTYPES)
        V.check_shape(e["shape"], w)
        V.expect(e["trainable"], bool, w, "trainable")
        for k in ("initializer", "snapshot", "initial_value"):
            V.expect(e[k], (str, type(None)), w, k)
    V.expect(doc["collections"], dict, where, "collections")
    for d in V.check_list(doc["dropped"], where, "dropped"):
        V.check_string(d, where, "dropped node name", V.MAX_NAME)


class _Importer:
    """Builds one meta graph into ``graph`` and resolves its saved names to the new objects."""

    def __init__(self, mg, graph, import_scope, clear_devices, input_map, where):
        from tensorweave.ops.variables import Variable
        self.mg, self.graph, self.where = mg, graph, where
        doc = mg.doc
        _check_doc(doc, where)
        self.variables = [Variable._for_import(graph, e["name"], V.TENSOR_DTYPES[e["dtype"]],
                                               TensorShape(e["shape"]), e["trainable"]) for e in doc["variables"]]
        lctx = graph_io.LoadContext(mg.tensors, self.variables, where=where)
        substitute = {}
        for name, t in (input_map or {}).items():
            key = name[:-2] if name.endswith(":0") else name
            if not isinstance(t, SymbolicTensor) or t.graph is not graph:
                raise ValueError(f"import_meta_graph: input_map['{name}'] must be a tensor of the graph being "
                                 "imported into")
            substitute[key] = t
        self.builder = graph_io.GraphBuilder(lctx, graph, where, substitute=substitute)
        spec = {"name": "meta_graph", "nodes": doc["graph"]["nodes"], "inputs": [], "outputs": [],
                "captures": [], "last_stateful": None}
        unused = set(substitute) - {nd.get("name") for nd in spec["nodes"] if isinstance(nd, dict)
                                    and nd.get("op") == "Placeholder"}
        if unused:
            raise ValueError(f"import_meta_graph: input_map names {sorted(unused)}, which are not placeholders of "
                             "the saved graph")
        scope = import_scope.rstrip("/") + "/" if import_scope else ""
        with graph.as_default(), graph.name_scope(graph.get_name_scope() + "/" + scope if graph.get_name_scope()
                                                  else scope):
            self.builder.build(spec)
        for nd in spec["nodes"]:
            op = self.builder.ops.get(nd["name"])
            if op is not None:
                op.device = None if clear_devices else (nd.get("device") or None)
        self.dropped = set(doc["dropped"])
        seed = doc["graph"].get("seed")
        if graph.seed is None and isinstance(seed, int) and not isinstance(seed, bool):
            graph.seed = seed
        self._wire_variables()

    def op(self, name, what):
        V.check_string(name, self.where, what, V.MAX_NAME)
        op = self.builder.ops.get(name)
        if op is None:
            fail(self.where, f"{what} names node {name!r}, which is not in the saved graph")
        return op

    def tensor(self, ref, what):
        V.check_string(ref, self.where, what, V.MAX_NAME + 12)
        return self.builder.tensor(ref, f"{self.where} {what}")

    def _wire_variables(self):
        for var, e in zip(self.variables, self.mg.doc["variables"]):
            handle = self.op(e["name"], "variable")
            if handle.type != "VarHandleOp" or handle.attrs.get("variable") is not var:
                fail(self.where, f"variable {e['name']!r} does not name its own VarHandleOp node")
            var._name = handle.name + ":0"
            handle.attrs["shared_name"] = handle.name
            if e["initializer"] is not None:
                var._initializer_op = self.op(e["initializer"], "initializer")
            if e["snapshot"] is not None:
                var._graph_read = self.tensor(e["snapshot"], "snapshot")
            if e["initial_value"] is not None:
                var._init_value_tensor = self.tensor(e["initial_value"], "initial_value")

    def collections(self):
        for key, items in self.mg.doc["collections"].items():
            V.check_string(key, self.where, "collection name", V.MAX_NAME)
            for item in V.check_list(items, self.where, f"collection {key!r}"):
                w = f"{self.where} collection {key!r}"
                if not isinstance(item, dict) or len(item) != 1:
                    fail(w, f"an item must be a one-key object, got {V._short(item)}")
                (tag, body), = item.items()
                if tag == "variable":
                    value = self.variables[V.check_int(body, w, "variable index", 0, len(self.variables) - 1)]
                elif tag == "op":
                    value = self.op(body, f"collection {key!r} op")
                elif tag == "tensor":
                    value = self.tensor(body, f"collection {key!r} tensor")
                elif tag == "value":
                    value = V.expect(body, (str, int, float), w, "value")
                    if isinstance(value, str):
                        value = value.encode("utf-8")
                else:
                    fail(w, f"unknown collection item tag {tag!r}")
                self.graph.add_to_collection(key, value)

    def saver(self):
        from tensorweave.compat.v1_saver import Saver
        sd = self.mg.doc["saver"]
        if sd is None:
            return Saver(allow_empty=False) if self.variables else None
        w = f"{self.where} saver"
        V.check_keys(sd, w, ("max_to_keep", "keep_checkpoint_every_n_hours", "variables", "restore"))
        V.expect(sd["max_to_keep"], (int, type(None)), w, "max_to_keep")
        V.expect(sd["keep_checkpoint_every_n_hours"], (int, float), w, "keep_checkpoint_every_n_hours")
        variables = {V.check_string(k, w, "checkpoint key", V.MAX_NAME):
                     self.variables[V.check_int(i, w, "variable index", 0, len(self.variables) - 1)]
                     for k, i in V.expect(sd["variables"], dict, w, "variables").items()}
        restore = {}
        for k, pair in V.expect(sd["restore"], dict, w, "restore").items():
            if k not in variables or not isinstance(pair, list) or len(pair) != 2:
                fail(w, f"restore entry {k!r} must be [placeholder, assign op] of a saved variable")
            ph, op = self.tensor(pair[0], "saver placeholder"), self.op(pair[1], "saver assign op")
            if ph.op.type != "Placeholder" or ph.dtype is not variables[k].dtype or \
                    not any(t is ph for t in op.inputs) or op.type != "AssignVariableOp" or \
                    op.inputs[0].op.attrs.get("variable") is not variables[k]:
                fail(w, f"restore entry {k!r} does not assign its placeholder to variable {k!r}")
            restore[k] = (ph, op)
        return Saver(saver_def={"max_to_keep": sd["max_to_keep"],
                                "keep_checkpoint_every_n_hours": sd["keep_checkpoint_every_n_hours"],
                                "variables": variables, "restore": restore or None})


def import_meta_graph(meta_graph_or_file, clear_devices=False, import_scope=None, input_map=None, **kwargs):
    """Builds a saved meta graph into the default graph; returns a ``Saver`` for its variables
    (None when it has none). ``import_scope`` prefixes every imported name; ``clear_devices``
    drops the saved device strings; ``input_map`` feeds existing tensors in place of saved
    placeholders (``{"x:0": tensor}``)."""
    if isinstance(meta_graph_or_file, MetaGraphDef):
        mg, where = meta_graph_or_file, "meta graph"
    else:
        mg, where = read_meta_graph_file(meta_graph_or_file), os.fspath(meta_graph_or_file)
    graph = get_default_graph()
    imp = _Importer(mg, graph, import_scope, clear_devices, input_map, where)
    imp.collections()
    scope = import_scope.rstrip("/") + "/" if import_scope else ""
    for d in imp.dropped:
        graph._left_out[scope + d] = (
            "it ran Python code (py_function/numpy_function: a summary, dataset iterator or queue), so "
            "export_meta_graph left it out of the .meta file; build it again after import_meta_graph")
    with graph.as_default():
        return imp.saver()

