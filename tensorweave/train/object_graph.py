"""The object graph of a checkpoint: which objects a root reaches, under which names.

A checkpoint does not key values by variable names (those change with creation order) but by
the *path* of attributes and positions that leads to each object from the root, as
TensorFlow's object-based checkpoints do. The graph has one node per object and one named
edge per reference, so an object reachable two ways (``ckpt.optimizer`` and
``ckpt.model.optimizer``) is one node with two incoming edges; restoring walks the saved
edges and the live ones side by side from the roots.

Edges, by kind of object:

* **object** (``Checkpoint``, Keras layers and models, metrics): public attributes that hold
  trackable values; then the sublayers in ``_layers`` not reached by an attribute, as
  ``layer-<i>`` (``i`` counts the non-input layers, so a ``Sequential`` model's numbering
  does not depend on whether its ``InputLayer`` exists yet); then the object's own weights
  not reached by an attribute, under their Keras names (``kernel``) or ``variable-<i>``.
* **list** / **dict**: plain Python containers holding trackables, by index or string key.
* **optimizer**: ``iterations``, ``learning_rate`` (when a variable), other non-slot variables
  as ``variable-<i>``; slot variables are listed beside the graph with the node of the
  variable they belong to (TF's ``.OPTIMIZER_SLOT``), so they follow the model's variables
  wherever those are reached from.
* leaves: **variable** (a tensor), and objects with JSON state: **iterator** (``tw.data``
  iterator position), **dataset** (shuffle seeds and epochs), **generator**
  (``tw.random.Generator``), **rng** (:class:`~tensorweave.train.RNGState`).

>>> import tensorweave as tw
>>> from tensorweave.train import Checkpoint
>>> step = tw.Variable(0, dtype=tw.int64)
>>> nodes = build_graph(Checkpoint(step=step, extra=[tw.Variable(1.0)]))
>>> [(n.path, n.kind) for n in nodes]
[('', 'object'), ('step', 'variable'), ('extra', 'list'), ('extra/0', 'variable')]
"""
import sys

import numpy as np

from tensorweave.core import dtypes as _dt

FORMAT = "tensorweave.checkpoint"
VERSION = 1
STATE_KINDS = ("iterator", "dataset", "generator", "rng")
KINDS = ("object", "list", "dict", "optimizer", "variable") + STATE_KINDS
MAX_NODES = 10_000_000
_MAX_CONTAINER_SCAN = 100_000     # a huge list of plain numbers is not searched for trackables


# ---- what kind of object is this -----------------------------------------------------------------
def _cls(module, name):
    # Only a class whose module is loaded can have instances, so nothing heavy is imported here.
    mod = sys.modules.get(module)
    return getattr(mod, name, None) if mod is not None else None


def kind_of(obj):
    """The node kind of ``obj``, or None when it is not trackable."""
    if obj is None or isinstance(obj, (str, bytes, int, float, bool, np.ndarray, np.generic)):
        return None
    if getattr(obj, "_is_variable", False):
        return "variable"
    if getattr(obj, "_tw_checkpoint_root", False):
        return "object"
    state_kind = getattr(obj, "_tw_checkpoint_kind", None)     # RNGState
    if state_kind is not None:
        return state_kind
    for module, name, kind in (("tensorweave.keras.engine.layer", "Layer", "object"),
                               ("tensorweave.keras.metrics.metric", "Metric", "object"),
                               ("tensorweave.keras.optimizers.optimizer", "Optimizer", "optimizer"),
                               ("tensorweave.data.iterators", "Iterator", "iterator"),
                               ("tensorweave.data.dataset", "Dataset", "dataset"),
                               ("tensorweave.ops.random_ops", "Generator", "generator")):
        cls = _cls(module, name)
        if cls is not None and isinstance(obj, cls):
            return kind
    if isinstance(obj, (list, tuple)):
        return "list" if _holds_trackables(obj) else None
    if isinstance(obj, dict):
        return "dict" if _holds_trackables(obj) else None
    return None


def _holds_trackables(container, seen=None):
    seen = set() if seen is None else seen
    if id(container) in seen:
        return False
    seen.add(id(container))
    items = container.values() if isinstance(container, dict) else container
    if len(items) > _MAX_CONTAINER_SCAN:
        return False
    for v in items:
        if isinstance(v, (list, tuple, dict)):
            if _holds_trackables(v, seen):
                return True
        elif kind_of(v) is not None:
            return True
    return False


def check_trackable(value, what):
    """Raises ``TypeError`` unless ``value`` can be put in a checkpoint."""
    if kind_of(value) is None:
        raise TypeError(f"{what}: a Checkpoint tracks tw.Variables, Keras layers/models/optimizers/metrics, "
                        "tw.data iterators and datasets, tw.random.Generators, tw.train.RNGState, other "
                        f"Checkpoints and lists/dicts of them; got {type(value).__name__} {value!r:.80}")


# ---- edges ---------------------------------------------------------------------------------------------
def _weight_name(v):
    name = getattr(v, "_keras_name", None)
    if name is None:
        name = v.name.split(":")[0].rsplit("/", 1)[-1]
    return name


def children(obj, kind=None):
    """The named edges of ``obj`` as a list of ``(name, child)`` in a fixed order."""
    kind = kind or kind_of(obj)
    if kind == "list":
        return [(str(i), v) for i, v in enumerate(obj) if kind_of(v) is not None]
    if kind == "dict":
        out = []
        for k, v in obj.items():
            if kind_of(v) is None:
                continue
            if not isinstance(k, str):
                raise TypeError(f"a dict tracked by a Checkpoint must have string keys; got {k!r} for {v!r:.60}")
            out.append((k, v))
        return out
    if kind == "optimizer":
        return _optimizer_children(obj)
    if kind != "object":
        return []
    if getattr(obj, "_tw_checkpoint_root", False):
        return obj._checkpoint_children()
    out, names, ids = [], set(), set()

    def add(name, value):
        if name in names:
            i = 1
            while f"{name}_{i}" in names:
                i += 1
            name = f"{name}_{i}"
        names.add(name)
        _note_ids(value, ids)
        out.append((name, value))

    for name, value in list(vars(obj).items()):
        if name.startswith("_") or kind_of(value) is None:
            continue
        add(name, value)
    sub = [l for l in obj.__dict__.get("_layers", ()) if type(l).__name__ != "InputLayer"]
    for i, layer in enumerate(sub):
        if id(layer) not in ids:
            add(f"layer-{i}", layer)
    own = list(obj.__dict__.get("_own_trainable", ())) + list(obj.__dict__.get("_own_non_trainable", ()))
    metric = _cls("tensorweave.keras.metrics.metric", "Metric")
    if metric is not None and isinstance(obj, metric):
        own += list(obj._variables)
    for i, v in enumerate(own):
        if getattr(v, "_is_variable", False) and id(v) not in ids:
            add(_weight_name(v) or f"variable-{i}", v)
    return out


def _note_ids(value, ids, depth=0):
    # Sublayers and weights already reached through an attribute (also inside a list or dict
    # attribute) get no second, positional edge from the same object.
    ids.add(id(value))
    if depth < 32 and isinstance(value, (list, tuple, dict)):
        for v in (value.values() if isinstance(value, dict) else value):
            if isinstance(v, (list, tuple, dict)) or kind_of(v) is not None:
                _note_ids(v, ids, depth + 1)


def _optimizer_state(opt):
    # iterations and the learning-rate variable are made on first use; a checkpoint made before
    # the first step must still hold them (and restoring must find them), so make them now,
    # except while a graph is being built (a TF1 graph makes its own).
    from tensorweave.core.context import building_graph
    if building_graph() is None:
        opt._ensure_state()


def slot_table(opt):
    """``[(reference variable, slot name, slot variable)]`` of an optimizer, in creation order."""
    by_id = {id(v): v for v in opt._trainable_variables}
    return [(by_id[rid], name, slot) for (rid, name), slot in opt._slots.items() if rid in by_id]


def _optimizer_children(opt):
    _optimizer_state(opt)
    out = []
    if opt._iterations is not None:
        out.append(("iterations", opt._iterations))
    lr = opt._learning_rate
    if getattr(lr, "_is_variable", False):
        out.append(("learning_rate", lr))
    slots = {id(s) for _, _, s in slot_table(opt)}
    taken = {id(v) for _, v in out} | slots
    others = [v for v in opt._variables if id(v) not in taken]
    out.extend((f"variable-{i}", v) for i, v in enumerate(others))
    return out


# ---- the graph ------------------------------------------------------------------------------------------
class Node:
    """One object of the graph: ``kind``, primary ``path`` (the first by breadth-first search),
    ``children`` (``{edge name: node id}``) and, for optimizers, ``slots``
    (``[(variable node id or None, index or None, slot name, slot node id)]``)."""

    __slots__ = ("obj", "kind", "path", "children", "slots")

    def __init__(self, obj, kind, path):
        self.obj, self.kind, self.path = obj, kind, path
        self.children = {}
        self.slots = []

    def __repr__(self):
        return f"<Node {self.kind} {self.path!r}>"


def join(path, name):
    return f"{path}/{name}" if path else name


def build_graph(root):
    """All objects reachable from ``root``, breadth first (node 0 is the root)."""
    nodes = [Node(root, kind_of(root) or "object", "")]
    index = {id(root): 0}
    queue = [0]
    while queue:
        nid = queue.pop(0)
        node = nodes[nid]
        for name, child in children(node.obj, node.kind):
            cid = index.get(id(child))
            if cid is None:
                cid = index[id(child)] = len(nodes)
                nodes.append(Node(child, kind_of(child), join(node.path, name)))
                queue.append(cid)
            node.children[name] = cid
    # Slots last: they hang off the variables they belong to, wherever those were reached.
    for nid in range(len(nodes)):
        node = nodes[nid]
        if node.kind != "optimizer":
            continue
        refs = {id(v): i for i, v in enumerate(node.obj._trainable_variables)}
        for ref, slot_name, slot in slot_table(node.obj):
            vid = index.get(id(ref))
            sid = index.get(id(slot))
            if sid is None:
                if vid is not None:
                    path = join(nodes[vid].path, f".OPTIMIZER_SLOT/{node.path or 'optimizer'}/{slot_name}")
                else:
                    path = join(node.path, f".slots/{refs[id(ref)]}/{slot_name}")
                sid = index[id(slot)] = len(nodes)
                nodes.append(Node(slot, "variable", path))
            node.slots.append((vid, None if vid is not None else refs[id(ref)], slot_name, sid))
    return nodes


# ---- validating a saved graph ----------------------------------------------------------------------------
def _is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


class GraphError(ValueError):
    pass


_NODE_KEYS = {
    "object": {"kind", "path", "class", "children"},
    "list": {"kind", "path", "children"},
    "dict": {"kind", "path", "children"},
    "optimizer": {"kind", "path", "class", "children", "slots"},
    "variable": {"kind", "path", "tensor", "dtype", "shape"},
}
_STATE_KEYS = {"kind", "path", "state", "tensors"}
_DTYPES = {d.name for d in (_dt.bool_, _dt.int8, _dt.int16, _dt.int32, _dt.int64, _dt.uint8, _dt.uint16,
                            _dt.uint32, _dt.uint64, _dt.float16, _dt.bfloat16, _dt.float32, _dt.float64)}


def validate(graph, where):
    """Checks the types and references of a saved object graph (JSON already parsed); returns
    its nodes. Any problem raises :class:`GraphError` (a ``ValueError``) naming ``where``."""
    def bad(msg):
        return GraphError(f"{where}: invalid checkpoint object graph: {msg}")

    if not isinstance(graph, dict) or set(graph) != {"format", "version", "nodes", "crc32"}:
        raise bad("the top level must be an object with format, version, nodes and crc32")
    if graph["format"] != FORMAT:
        raise bad(f"format is {graph['format']!r:.60}, expected {FORMAT!r}")
    if not _is_int(graph["version"]) or graph["version"] != VERSION:
        raise bad(f"version {graph['version']!r:.20} is not supported (this tensorweave reads version {VERSION})")
    nodes, crcs = graph["nodes"], graph["crc32"]
    if not isinstance(nodes, list) or not 1 <= len(nodes) <= MAX_NODES:
        raise bad("nodes must be a non-empty list")
    if not isinstance(crcs, dict) or not all(isinstance(k, str) and _is_int(v) and 0 <= v < 2**32
                                             for k, v in crcs.items()):
        raise bad("crc32 must map tensor names to unsigned 32-bit ints")
    n = len(nodes)
    tensors = set()
    for i, node in enumerate(nodes):
        if not isinstance(node, dict) or not isinstance(node.get("kind"), str) or node["kind"] not in KINDS:
            raise bad(f"node {i} has no known kind")
        kind = node["kind"]
        keys = _STATE_KEYS if kind in STATE_KINDS else _NODE_KEYS[kind]
        if set(node) != keys:
            raise bad(f"node {i} ({kind}) must have exactly the keys {sorted(keys)}")
        if not isinstance(node["path"], str):
            raise bad(f"node {i}: path must be a string")
        if "class" in node and not isinstance(node["class"], str):
            raise bad(f"node {i}: class must be a string")
        if "children" in node:
            ch = node["children"]
            if not isinstance(ch, dict) or not all(isinstance(k, str) and _is_int(v) and 0 <= v < n
                                                   for k, v in ch.items()):
                raise bad(f"node {i}: children must map names to node ids in [0, {n})")
        if kind == "variable":
            if not isinstance(node["tensor"], str) or node["tensor"] not in crcs:
                raise bad(f"node {i}: tensor must name a tensor listed in crc32")
            if node["tensor"] in tensors:
                raise bad(f"node {i}: tensor {node['tensor']!r:.60} is used twice")
            tensors.add(node["tensor"])
            if not isinstance(node["dtype"], str) or node["dtype"] not in _DTYPES:
                raise bad(f"node {i}: unknown dtype {node['dtype']!r:.40}")
            if not isinstance(node["shape"], list) or len(node["shape"]) > 64 or \
                    not all(_is_int(d) and d >= 0 for d in node["shape"]):
                raise bad(f"node {i}: shape must be a list of non-negative ints")
        if kind in STATE_KINDS:
            ts = node["tensors"]
            if not isinstance(ts, list) or not all(isinstance(t, str) and t in crcs for t in ts):
                raise bad(f"node {i}: tensors must be a list of tensor names listed in crc32")
            if tensors.intersection(ts) or len(set(ts)) != len(ts):
                raise bad(f"node {i}: a tensor is used twice")
            tensors.update(ts)
        if kind == "optimizer":
            slots = node["slots"]
            if not isinstance(slots, list):
                raise bad(f"node {i}: slots must be a list")
            for s in slots:
                ok = isinstance(s, dict) and set(s) == {"variable", "index", "slot", "node"} and \
                    isinstance(s["slot"], str) and _is_int(s["node"]) and 0 < s["node"] < n and \
                    ((_is_int(s["variable"]) and 0 < s["variable"] < n and s["index"] is None) or
                     (s["variable"] is None and _is_int(s["index"]) and s["index"] >= 0))
                if not ok:
                    raise bad(f"node {i}: each slot needs slot (a name), node, and either variable (a node id) "
                              "or index")
                if not isinstance(nodes[s["node"]], dict) or nodes[s["node"]].get("kind") != "variable" or \
                        (s["variable"] is not None and (not isinstance(nodes[s["variable"]], dict) or
                                                        nodes[s["variable"]].get("kind") != "variable")):
                    raise bad(f"node {i}: a slot must refer to variable nodes")
    if nodes[0]["kind"] != "object":
        raise bad("node 0 (the root) must be an object")
    if tensors != set(crcs):
        raise bad("crc32 lists tensors that no node uses")
    return nodes
