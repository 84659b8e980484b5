"""TF1's ``GraphDef`` life cycle: ``graph.as_graph_def()``, ``tf.import_graph_def``,
``tf.graph_util`` (``convert_variables_to_constants``, ``extract_sub_graph`` ...) and
``tf.train.write_graph``, in tensorweave's safe graph format.

A :class:`GraphDef` is the node list of ``saving/graph_io.py`` with its variables table (as in a
meta graph, ``v1_meta_graph.py``) and its larger constants; ``SerializeToString()`` gives the
bytes of a tensor file (no protocol buffer, no code, no pickle) and ``ParseFromString`` checks
them, node by node when imported. The TF1 freeze-and-serve pattern works unchanged:

>>> import tensorweave.compat.v1 as tf
>>> with tf.Graph().as_default() as g:
...     x = tf.placeholder(tf.float32, [None], name="x")
...     w = tf.Variable(3.0, name="w")
...     y = tf.identity(x * w + 1.0, name="y")
...     with tf.Session() as sess:
...         sess.run(tf.global_variables_initializer())
...         frozen = tf.graph_util.convert_variables_to_constants(sess, g.as_graph_def(), ["y"])
>>> data = frozen.SerializeToString()
>>> graph_def = tf.GraphDef()
>>> graph_def.ParseFromString(data)
>>> sorted(n.op for n in graph_def.node)
['AddV2', 'Const', 'Const', 'Identity', 'Mul', 'Placeholder']
>>> with tf.Graph().as_default() as g2:
...     out, = tf.import_graph_def(graph_def, return_elements=["y:0"], name="")
...     with tf.Session() as sess:
...         sess.run(out, {"x:0": [1.0, 2.0]}).tolist()
[4.0, 7.0]
"""
import json
import os

from tensorweave.compat import v1_meta_graph as _mg
from tensorweave.core import graph as _graph_module
from tensorweave.core.graph import Operation, get_default_graph
from tensorweave.saving import graph_io, tensor_file
from tensorweave.saving import validation as V
from tensorweave.saving.validation import LoadError

FORMAT = "tensorweave.graph_def"
VERSION = 1

__all__ = ["GraphDef", "NodeDef", "import_graph_def", "convert_variables_to_constants", "extract_sub_graph",
           "remove_training_nodes", "tensor_shape_from_node_def_name", "must_run_on_cpu", "write_graph"]


class NodeDef:
    """One node of a :class:`GraphDef` under TF's field names (``name``, ``op``, ``input`` with
    ``^name`` for control inputs, ``device``, ``attr``); a read-only view."""

    def __init__(self, nd):
        self._nd = nd

    name = property(lambda self: self._nd["name"])
    op = property(lambda self: self._nd["op"])
    device = property(lambda self: self._nd.get("device", ""))
    attr = property(lambda self: dict(self._nd.get("attrs", {})))

    @property
    def input(self):
        return [_node_input(r) for r in self._nd["inputs"]] + ["^" + c for c in self._nd["control_inputs"]]

    def __repr__(self):
        return f"NodeDef(name={self.name!r}, op={self.op!r}, input={self.input!r})"


def _node_input(ref):
    return ref[:-2] if ref.endswith(":0") else ref    # TF writes output 0 as the bare node name


class GraphDef:
    """TF1's ``tf.GraphDef``: the nodes and variables of a graph and its larger constants."""

    def __init__(self, doc=None, tensors=None):
        self._doc = doc if doc is not None else {"graph": {"nodes": []}, "variables": [], "dropped": []}
        self._tensors = dict(tensors or {})

    @property
    def node(self):
        return [NodeDef(nd) for nd in self._doc["graph"]["nodes"]]

    def ByteSize(self):  # noqa: N802 - protocol buffer name
        return len(self.SerializeToString())

    def SerializeToString(self):  # noqa: N802
        meta = {"format": FORMAT, "version": str(VERSION), "graph_def": json.dumps(self._doc, separators=(",", ":"))}
        return tensor_file.encode(self._tensors, meta)

    def ParseFromString(self, data, where="GraphDef"):  # noqa: N802
        """Replaces this GraphDef with the one ``SerializeToString`` wrote (format checks first)."""
        data = bytes(data)
        if data[:1] == b"{":
            raise LoadError(f"{where}: this is the text form of a graph (write_graph(as_text=True)), which is for "
                            "reading only. Hint: write it with as_text=False (or SerializeToString) to load it")
        try:
            tensors, meta = tensor_file.load_bytes(data, where), tensor_file.metadata_of_bytes(data, where)
        except tensor_file.TensorFileError as e:
            raise LoadError(f"{e} Hint: a GraphDef written by TensorFlow is a protocol buffer; tensorweave reads "
                            "the graphs it wrote (export the graph again with tensorweave)") from None
        if meta.get("format") != FORMAT or meta.get("version") != str(VERSION):
            raise LoadError(f"{where}: not a version-{VERSION} tensorweave GraphDef (format "
                            f"{meta.get('format')!r:.60}, version {meta.get('version')!r:.20})")
        doc = V.parse_json(meta.get("graph_def", "").encode("utf-8"), where)
        _mg._check_doc(_as_meta_doc(doc), where)
        self._doc, self._tensors = doc, tensors

    MergeFromString = ParseFromString

    @classmethod
    def FromString(cls, data):  # noqa: N802
        out = cls()
        out.ParseFromString(data)
        return out

    def CopyFrom(self, other):  # noqa: N802
        self._doc, self._tensors = json.loads(json.dumps(other._doc)), dict(other._tensors)

    def __repr__(self):
        return f"<GraphDef: {len(self._doc['graph']['nodes'])} nodes>"


def _as_meta_doc(doc):
    if not isinstance(doc, dict) or set(doc) != {"graph", "variables", "dropped"}:
        raise LoadError(f"GraphDef: expected the keys graph, variables, dropped; got {sorted(doc)[:8]}"
                        if isinstance(doc, dict) else "GraphDef: the document must be a JSON object")
    return {"format": _mg.FORMAT, "version": _mg.VERSION, "collections": {}, "saver": None, **doc}


def graph_def_of(graph):
    """``graph.as_graph_def()``: every node (those running Python are left out and listed)."""
    mg = _mg.export_meta_graph(graph=graph, collection_list=[])
    return GraphDef({k: mg.doc[k] for k in ("graph", "variables", "dropped")}, mg.tensors)


_graph_module.graph_def_writer[0] = graph_def_of


# ---- import ------------------------------------------------------------------------------------------
def import_graph_def(graph_def, input_map=None, return_elements=None, name=None, op_dict=None,
                     producer_op_list=None):
    """Builds ``graph_def``'s nodes into the default graph, their names prefixed by ``name``
    (default ``"import"``; ``""`` for none). ``input_map`` feeds existing tensors in place of its
    placeholders; returns the tensors (``"y:0"``) and operations (``"y"``) named in ``return_elements``."""
    if not isinstance(graph_def, GraphDef):
        raise TypeError(f"import_graph_def: graph_def must be a tf.GraphDef, got {type(graph_def).__name__}. "
                        "Hint: read a file with tf.GraphDef().ParseFromString(data)")
    scope = "import" if name is None else name
    graph = get_default_graph()
    mg = _mg.MetaGraphDef(_as_meta_doc(graph_def._doc), graph_def._tensors)
    imp = _mg._Importer(mg, graph, scope or None, False, dict(input_map or {}), "import_graph_def")
    prefix = scope.rstrip("/") + "/" if scope else ""
    for d in imp.dropped:
        graph._left_out[prefix + d] = "it ran Python code, so as_graph_def left it out of the GraphDef"
    if return_elements is None:
        return None
    out = []
    for ref in return_elements:
        if not isinstance(ref, str):
            raise TypeError(f"import_graph_def: return_elements must be names, got {ref!r}")
        out.append(imp.tensor(ref, "return_elements") if ":" in ref else imp.op(ref, "return_elements"))
    return out


# ---- graph_util --------------------------------------------------------------------------------------
def _nodes_by_name(graph_def):
    return {nd["name"]: nd for nd in graph_def._doc["graph"]["nodes"]}


def _ancestors(nodes, dest_nodes, what):
    missing = [d for d in dest_nodes if d not in nodes]
    if missing:
        raise ValueError(f"{what}: {missing[0]!r} is not in the graph. Hint: give node names (\"y\", not \"y:0\")")
    keep, stack = set(), list(dest_nodes)
    while stack:
        n = stack.pop()
        if n in keep:
            continue
        keep.add(n)
        nd = nodes[n]
        stack.extend(r.rsplit(":", 1)[0] for r in nd["inputs"])
        stack.extend(nd["control_inputs"])
    return keep


def _subset(graph_def, keep, replaced=None):
    """A GraphDef of the nodes in ``keep`` (creation order), ``replaced`` nodes swapped in, and only
    the variables and constants they still use."""
    replaced = replaced or {}
    nodes = [replaced.get(nd["name"], nd) for nd in graph_def._doc["graph"]["nodes"] if nd["name"] in keep]
    old_vars = graph_def._doc["variables"]
    renumber = {}
    for nd in nodes:
        if nd["op"] == "VarHandleOp":
            renumber[nd["attrs"]["variable"]["variable"]] = len(renumber)
    variables = []
    for old, new in sorted(renumber.items(), key=lambda kv: kv[1]):
        e = dict(old_vars[old])
        for k in ("initializer", "snapshot", "initial_value"):
            if e[k] is not None and e[k].rsplit(":", 1)[0] not in keep:
                e[k] = None
        variables.append(e)
    out_nodes, used = [], set()
    for nd in nodes:
        attrs = dict(nd["attrs"])
        if nd["op"] == "VarHandleOp":
            attrs["variable"] = {"variable": renumber[attrs["variable"]["variable"]]}
        for v in attrs.values():
            if isinstance(v, dict) and "tensor_ref" in v:
                used.add(v["tensor_ref"])
        out_nodes.append({**nd, "attrs": attrs})
    graph = {**graph_def._doc["graph"], "nodes": out_nodes}
    doc = {"graph": graph, "variables": variables, "dropped": list(graph_def._doc["dropped"])}
    return GraphDef(doc, {k: v for k, v in graph_def._tensors.items() if k in used})


def extract_sub_graph(graph_def, dest_nodes):
    """The part of ``graph_def`` that ``dest_nodes`` (node names) need, through data and control inputs."""
    if isinstance(dest_nodes, str):
        raise TypeError("extract_sub_graph: dest_nodes must be a list of node names, got a string")
    return _subset(graph_def, _ancestors(_nodes_by_name(graph_def), list(dest_nodes), "extract_sub_graph"))


def convert_variables_to_constants(sess, input_graph_def, output_node_names, variable_names_whitelist=None,
                                   variable_names_blacklist=None):
    """``extract_sub_graph(input_graph_def, output_node_names)`` with every read of a variable
    (all, or those in ``variable_names_whitelist`` and not in ``variable_names_blacklist``)
    replaced by a constant holding its value in ``sess``: the frozen graph needs no checkpoint."""
    nodes = _nodes_by_name(input_graph_def)
    keep = _ancestors(nodes, list(output_node_names), "convert_variables_to_constants")
    handles = {nd["name"] for nd in nodes.values() if nd["op"] == "VarHandleOp" and nd["name"] in keep
               and (variable_names_whitelist is None or nd["name"] in variable_names_whitelist)
               and (variable_names_blacklist is None or nd["name"] not in variable_names_blacklist)}
    reads = [nd for nd in nodes.values() if nd["name"] in keep and nd["op"] == "ReadVariableOp"
             and nd["inputs"][0].rsplit(":", 1)[0] in handles]
    for nd in nodes.values():
        if nd["name"] in keep and nd["op"] != "ReadVariableOp" and \
                any(r.rsplit(":", 1)[0] in handles for r in nd["inputs"]):
            raise ValueError(f"convert_variables_to_constants: node {nd['name']!r} ({nd['op']}) uses variable "
                             f"{nd['inputs'][0].rsplit(':', 1)[0]!r} other than by reading it, so it cannot be "
                             "frozen. Hint: leave it out with variable_names_blacklist")
    values = sess.run([sess.graph.get_tensor_by_name(nd["name"] + ":0") for nd in reads]) if reads else []
    sctx = graph_io.SaveContext()
    replaced = {}
    for nd, value in zip(reads, values):
        tensor = graph_io.encode_tensor(value, sctx, f"convert_variables_to_constants: {nd['name']}")
        if "tensor_ref" in tensor:
            key = "frozen/" + nd["name"]
            sctx.tensors[key] = sctx.tensors.pop(tensor["tensor_ref"])
            tensor = {"tensor_ref": key}
        replaced[nd["name"]] = {"name": nd["name"], "op": "Const", "inputs": [], "control_inputs": [],
                                "device": nd.get("device", ""), "attrs": {"value": tensor,
                                                                           "dtype": nd["attrs"]["dtype"]}}
    with_consts = GraphDef(input_graph_def._doc, {**input_graph_def._tensors, **sctx.tensors})
    frozen = {**nodes, **replaced}
    keep = _ancestors(frozen, list(output_node_names), "convert_variables_to_constants")
    return _subset(with_consts, keep, replaced)


_TRAINING_ONLY = ("Identity", "CheckNumerics", "StopGradient")


def remove_training_nodes(input_graph, protected_nodes=None):
    """``input_graph`` without the ``Identity``/``CheckNumerics``/``StopGradient`` nodes that only
    matter to training: their readers read their input instead (nodes in ``protected_nodes`` and
    those named by control inputs stay)."""
    protected = set(protected_nodes or ())
    nodes = input_graph._doc["graph"]["nodes"]
    controlled = {c for nd in nodes for c in nd["control_inputs"]}
    skip = {nd["name"]: nd["inputs"][0] for nd in nodes
            if nd["op"] in _TRAINING_ONLY and nd["name"] not in protected and nd["name"] not in controlled
            and len(nd["inputs"]) == 1}

    def through(ref):
        seen = 0
        while ref.rsplit(":", 1)[0] in skip and ref.endswith(":0") and seen < len(skip):
            ref, seen = skip[ref.rsplit(":", 1)[0]], seen + 1
        return ref
    kept = [{**nd, "inputs": [through(r) for r in nd["inputs"]]} for nd in nodes if nd["name"] not in skip]
    return _subset(GraphDef({**input_graph._doc, "graph": {**input_graph._doc["graph"], "nodes": kept}},
                            input_graph._tensors), {nd["name"] for nd in kept})


def tensor_shape_from_node_def_name(graph, input_name):
    """The static shape of output 0 of node ``input_name`` (or of tensor ``"name:i"``) in ``graph``."""
    return graph.get_tensor_by_name(input_name if ":" in input_name else input_name + ":0").shape


def must_run_on_cpu(node, pin_variables_on_cpu=False):
    """Whether TF pins ``node`` to the CPU: string-valued and summary-style nodes, and (when asked)
    variables."""
    if isinstance(node, Operation):
        kind, strings = node.type, any(t.dtype.name == "string" for t in node.outputs)
    elif isinstance(node, NodeDef):
        kind, strings = node.op, node.attr.get("dtype") == {"dtype": "string"}
    else:
        raise TypeError(f"must_run_on_cpu: expected an Operation or NodeDef, got {type(node).__name__}")
    if pin_variables_on_cpu and kind in ("VarHandleOp", "VariableV2", "Variable"):
        return True
    if kind in ("Const", "Placeholder", "Identity"):
        return strings
    return kind.endswith("Summary") or kind in ("PyFunc", "EagerPyFunc")


def write_graph(graph_or_graph_def, logdir, name, as_text=True):
    """Writes the graph to ``logdir/name`` and returns that path. ``as_text=False`` writes the
    bytes ``tf.GraphDef().ParseFromString`` reads back; ``as_text=True`` (TF's default) writes the
    node list as indented JSON, for people to read (constants stored outside it are named only)."""
    gd = graph_or_graph_def if isinstance(graph_or_graph_def, GraphDef) else graph_or_graph_def.as_graph_def()
    path = os.path.join(os.fspath(logdir), name)
    os.makedirs(os.fspath(logdir), exist_ok=True)
    payload = (json.dumps(gd._doc, indent=1).encode("utf-8") if as_text else gd.SerializeToString())
    tensor_file.write_bytes_atomic(path, payload)
    return path
