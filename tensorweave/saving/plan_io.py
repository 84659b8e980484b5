"""Plan specs as JSON plus a tensor file, and back (validated): how a plan leaves its process.

A :class:`~tensorweave.runtime.plan_spec.PlanSpec` is written with the attr encoding of the
graph format (``graph_io.encode_value``: dtypes, shapes, small tensors inline, larger ones
in the tensor file) plus two tags of its own: ``{"plan": SPEC}`` (a nested spec: an ``If``
branch, a ``While`` body) and ``{"resource": i}`` (an entry of the resource table). The
resource table carries each variable's name, dtype and shape (its value goes to the tensor
file as ``variables/<i>``) and each random stream's seed key and position, so the receiving
rank continues the stream exactly where the sender left it.

Loading checks everything before binding: every op is registered and its kernel takes the
attrs given, devices parse, slots lie inside the slot range, a node waits only for earlier
nodes (no cycles), resource indices exist; derived data (buffer lifetimes, reader counts)
is recomputed rather than trusted. Nothing in the file can name Python code.

>>> import os, tempfile, numpy as np, tensorweave as tw
>>> from tensorweave.runtime import executor
>>> from tensorweave.runtime.runtime import Runtime
>>> g = tw.Graph()
>>> with g.as_default():
...     v = tw.Variable([1.0, 2.0], name="w")
...     x = tw.compat.v1.placeholder(tw.float32, [2])
...     y = v.assign_add(x)
>>> with tw.compat.v1.Session(graph=g) as sess:
...     sess.run(v.initializer)
>>> plan = executor.build_plan([y], [], [x])
>>> d = tempfile.mkdtemp(); save_plan(plan, d)
>>> rank = Runtime("rank1", rank=1)
>>> shipped = load_plan(d, rank)          # its own copy of "w", from the tensor file
>>> shipped([np.ones(2, np.float32)])[0].tolist(), v.numpy().tolist()
([2.0, 3.0], [1.0, 2.0])
"""
import os

import numpy as np

from tensorweave.core.errors import NotFoundError
from tensorweave.core.registry import _OPS, get_op
from tensorweave.core import devices
from tensorweave.runtime import executor
from tensorweave.runtime.plan_spec import COPY_OP, LocalValue, NodeSpec, PlanSpec, ResourceRef
from tensorweave.saving import tensor_file
from tensorweave.saving import validation as V
from tensorweave.saving.graph_io import (LoadContext, SaveContext, SaveError, _kernel_params, decode_value,
                                         encode_value)
from tensorweave.saving.validation import fail

PLAN_FORMAT = "tensorweave.plan"
PLAN_FORMAT_VERSION = 1
JSON_FILE, TENSOR_FILE = "plan.json", "plan.safetensors"


# ---- writing ------------------------------------------------------------------------------------
def plan_to_json(plan, variable_values=True):
    """``(document, tensors)`` for a bound plan: its spec, resources with their current state
    (``variable_values=False``: variables by name, dtype and shape only, for a receiver that
    holds them already, e.g. a Ray worker holding its shards)."""
    spec = plan.spec
    sctx = SaveContext()
    doc = {"format": PLAN_FORMAT, "version": PLAN_FORMAT_VERSION, "plan": _encode_spec(spec, sctx, 0)}
    resources = []
    for i, (desc, live) in enumerate(zip(spec.resources or [], plan.resources or [])):
        out = {"kind": desc["kind"], "name": desc["name"]}
        if desc["kind"] == "variable":
            key = None
            if variable_values:
                key = f"variables/{i}"
                sctx.tensors[key] = np.asarray(live._read())
            out.update(dtype=desc["dtype"].name, shape=None if desc["shape"].rank is None
                       else list(desc["shape"].as_tuple()), value=key)
        elif desc["kind"] == "random_stream":
            from tensorweave.ops.random_ops import stream_state
            out["state"] = stream_state(live)
        resources.append(out)      # a communicator: its name only (the receiving runtime has its own)
    doc["resources"] = resources
    doc["constants"] = sctx.constants
    return doc, sctx.tensors


def save_plan(plan, directory):
    """Writes ``plan.json`` and ``plan.safetensors`` into ``directory`` (made if missing)."""
    import json
    doc, tensors = plan_to_json(plan)
    os.makedirs(directory, exist_ok=True)
    tensor_file.write_tensors(os.path.join(directory, TENSOR_FILE), tensors, {"format": PLAN_FORMAT})
    tensor_file.write_bytes_atomic(os.path.join(directory, JSON_FILE), json.dumps(doc).encode("utf-8"))


def _encode_spec(spec, sctx, depth):
    if depth > V.MAX_FUNCTION_DEPTH:
        raise SaveError(f"plans nested deeper than {V.MAX_FUNCTION_DEPTH} levels cannot be saved")
    nodes = []
    for node in spec.nodes:
        where = f"plan node '{node.name}' ({node.op})"
        if node.kernel is not None:
            raise SaveError(f"{where} runs a kernel made in this process that no registry knows, so it "
                            "cannot leave it. Hint: register the kernel (tw.register_kernel) and make the node "
                            "an op of that type")
        attrs = {k: _encode_value(v, sctx, f"{where} attr '{k}'", depth) for k, v in node.attrs.items()}
        nodes.append({"name": node.name, "op": node.op, "device": node.device, "attrs": attrs,
                      "ins": list(node.ins), "outs": node.outs if node.single else list(node.outs),
                      "single": node.single, "heavy": bool(node.heavy), "opaque": bool(node.opaque),
                      "traceback": node.traceback, "fused": None if node.fused is None else list(node.fused),
                      "inplace": node.inplace})
    return {"label": spec.label, "n_slots": spec.n_slots, "feed_slots": list(spec.feed_slots),
            "fetch_slots": list(spec.fetch_slots), "parallel": bool(spec.parallel),
            "presets": [[s, _encode_value(v, sctx, f"plan preset of slot {s}", depth)] for s, v in spec.presets],
            "deps": [list(d) for d in spec.deps], "nodes": nodes}


def _encode_value(v, sctx, where, depth):
    if isinstance(v, PlanSpec):
        return {"plan": _encode_spec(v, sctx, depth + 1)}
    if isinstance(v, ResourceRef):
        return {"resource": v.index}
    if isinstance(v, LocalValue):
        raise SaveError(f"{where} holds Python code ({type(v.value).__name__}) and cannot leave this process")
    return encode_value(v, sctx, where, ())


# ---- reading ------------------------------------------------------------------------------------
def plan_from_json(doc, tensors, runtime=None, where=JSON_FILE, live=None):
    """A bound plan from :func:`plan_to_json`'s output, on ``runtime``: variables the runtime
    lacks are created from the tensors, random streams from their saved positions.
    ``live``: the objects of the resource table by index, when the receiver binds
    them itself (names are unique within one plan only)."""
    V.check_depth(doc, where)
    V.check_keys(doc, where, ("format", "version", "plan", "resources", "constants"))
    if doc["format"] != PLAN_FORMAT:
        fail(where, f"format must be {PLAN_FORMAT!r}, got {V._short(doc['format'])}")
    V.check_int(doc["version"], where, "version", 1, PLAN_FORMAT_VERSION)
    V.expect(doc["constants"], dict, where, "constants")
    lctx = LoadContext(tensors, [], doc["constants"], where)
    resources = V.check_list(doc["resources"], where, "resources", 1 << 20)
    descs = [_decode_resource(r, lctx, f"{where} resources[{i}]") for i, r in enumerate(resources)]
    spec = _decode_spec(doc["plan"], lctx, f"{where} plan", len(descs), 0)
    spec.resources = [{k: v for k, v in d.items() if k != "value"} for d in descs]
    rt = runtime or executor.default_runtime()
    if live is not None:
        if len(live) != len(descs):
            fail(where, f"{len(descs)} resources in the plan but {len(live)} given to bind it")
        return executor.bind(spec, rt, list(live))
    for d in descs:
        if d["kind"] == "variable" and ("variable", d["name"]) not in rt.resources:
            if d["value"] is None:
                raise NotFoundError(f"{where}: the plan's variable {d['name']!r} was written without its value and "
                                    f"runtime '{rt.name}' has none of that name")
            rt.add_variable(d["name"], d["value"])
    return executor.bind(spec, rt)


def load_plan(directory, runtime=None):
    """Reads what :func:`save_plan` wrote and binds it to ``runtime`` (see :func:`plan_from_json`)."""
    doc = V.read_json_file(os.path.join(directory, JSON_FILE))
    tensors = tensor_file.read_tensors(os.path.join(directory, TENSOR_FILE))
    return plan_from_json(doc, tensors, runtime, os.path.join(directory, JSON_FILE))


def _decode_resource(r, lctx, where):
    V.expect(r, dict, where, "resource")
    kind = r.get("kind")
    if kind == "variable":
        V.check_keys(r, where, ("kind", "name", "dtype", "shape", "value"))
        dt = V.check_dtype(r["dtype"], where, "dtype", V.TENSOR_DTYPES)
        shape = V.check_shape(r["shape"], where)
        if r["value"] is None:      # written without its value (plan_to_json(variable_values=False))
            from tensorweave.core.shape import TensorShape
            return {"kind": kind, "name": V.check_string(r["name"], where, "name", V.MAX_NAME), "dtype": dt,
                    "shape": TensorShape(shape), "value": None}
        V.check_string(r["value"], where, "value", V.MAX_NAME)
        value = lctx.tensors.get(r["value"]) if r["value"].startswith("variables/") else None
        if value is None:
            fail(where, f"variable value {r['value']!r} is not in the tensor file")
        if np.dtype(value.dtype) != np.dtype(dt.np_dtype):
            fail(where, f"variable value has dtype {value.dtype}, the resource says {dt.name}")
        if shape is not None and any(d is not None and d != s for d, s in zip(shape, value.shape)) \
                or shape is not None and len(shape) != value.ndim:
            fail(where, f"variable value has shape {list(value.shape)}, the resource says {shape}")
        from tensorweave.core.shape import TensorShape
        return {"kind": kind, "name": V.check_string(r["name"], where, "name", V.MAX_NAME), "dtype": dt,
                "shape": TensorShape(shape), "value": value}
    if kind == "random_stream":
        V.check_keys(r, where, ("kind", "name", "state"))
        from tensorweave.ops.random_ops import stream_from_state
        stream_from_state(r["state"], where)      # validates now, before anything is bound
        return {"kind": kind, "name": V.check_string(r["name"], where, "name", V.MAX_NAME), "state": r["state"]}
    if kind == "communicator":     # a rank's own (distribute/plan_ops.py): found on the runtime by name
        V.check_keys(r, where, ("kind", "name"))
        return {"kind": kind, "name": V.check_string(r["name"], where, "name", V.MAX_NAME)}
    fail(where, f"unknown resource kind {V._short(kind)}; expected 'variable', 'random_stream' or 'communicator'")


def _slot(v, n, where, what):
    return V.check_int(v, where, what, 0, n - 1)


def _decode_spec(d, lctx, where, n_resources, depth):
    if depth > V.MAX_FUNCTION_DEPTH:
        fail(where, f"plans nested deeper than {V.MAX_FUNCTION_DEPTH} levels")
    V.check_keys(d, where, ("label", "n_slots", "feed_slots", "fetch_slots", "parallel", "presets", "deps", "nodes"))
    n = V.check_int(d["n_slots"], where, "n_slots", 0, V.MAX_NODES * 64)
    feed = [_slot(s, n, where, "feed slot") for s in V.check_list(d["feed_slots"], where, "feed_slots")]
    fetch = [_slot(s, n, where, "fetch slot") for s in V.check_list(d["fetch_slots"], where, "fetch_slots")]
    raw_nodes = V.check_list(d["nodes"], where, "nodes", V.MAX_NODES)
    deps = V.check_list(d["deps"], where, "deps", V.MAX_NODES)
    if len(deps) != len(raw_nodes):
        fail(where, f"{len(deps)} dependency lists for {len(raw_nodes)} nodes")
    nodes, written = [], set()
    for i, nd in enumerate(raw_nodes):
        w = f"{where} node {i}"
        node = _decode_node(nd, lctx, w, n, n_resources, depth)
        for s in node.out_slots():
            if s in written or s in feed:
                fail(w, f"slot {s} is written twice")
            written.add(s)
        dl = V.check_list(deps[i], w, "deps")
        for j in dl:
            V.check_int(j, w, "dependency", 0, i - 1)     # only earlier nodes: no cycles
        nodes.append(node)
    presets = []
    for p in V.check_list(d["presets"], where, "presets"):
        V.check_list(p, where, "preset", 2)
        if len(p) != 2:
            fail(where, "a preset is [slot, value]")
        s = _slot(p[0], n, where, "preset slot")
        if s in written or s in feed:
            fail(where, f"slot {s} is written twice")
        written.add(s)
        presets.append((s, _decode_value(p[1], lctx, where, n_resources, depth)))
    spec = PlanSpec(nodes, n, feed, fetch, presets, [tuple(x) for x in deps],
                    V.check_string(d["label"], where, "label", V.MAX_NAME))
    executor.schedule(spec, V.expect(d["parallel"], bool, where, "parallel"))
    return spec


def _decode_node(nd, lctx, where, n, n_resources, depth):
    V.check_keys(nd, where, ("name", "op", "device", "attrs", "ins", "outs", "single", "heavy", "opaque",
                             "traceback", "fused", "inplace"))
    name = V.check_string(nd["name"], where, "name", V.MAX_NAME)
    op = V.check_string(nd["op"], where, "op", V.MAX_NAME)
    device = V.check_string(nd["device"], where, "device", V.MAX_NAME)
    try:
        dev_type = devices.device_type_of(device)
    except ValueError as e:
        fail(where, str(e))
    where = f"{where} ('{name}', {op})"
    V.expect(nd["attrs"], dict, where, "attrs")
    attrs = {V.check_string(k, where, "attr name", V.MAX_NAME): _decode_value(v, lctx, f"{where} attr '{k}'",
                                                                             n_resources, depth)
             for k, v in nd["attrs"].items()}
    if op == COPY_OP:
        if set(attrs) != {"src", "dst"} or not all(isinstance(attrs[k], str) for k in attrs):
            fail(where, "a copy node has string attrs 'src' and 'dst' only")
    else:
        try:
            opdef = get_op(op)      # loads the module of an op registered on first use (compat, keras)
        except NotFoundError:
            opdef = None
        if opdef is None:
            fail(where, f"op {op!r} is not registered")
        if dev_type not in opdef.kernels:
            fail(where, f"op {op!r} has no {dev_type} kernel here; registered: {sorted(opdef.kernels)}")
        params = _kernel_params(opdef)
        if params is not None and not set(attrs) <= params:
            fail(where, f"attrs {sorted(set(attrs) - params)} are not taken by the {op} kernel")
    single = V.expect(nd["single"], bool, where, "single")
    ins = tuple(_slot(s, n, where, "input slot") for s in V.check_list(nd["ins"], where, "ins"))
    outs = _slot(nd["outs"], n, where, "output slot") if single else \
        tuple(_slot(s, n, where, "output slot") for s in V.check_list(nd["outs"], where, "outs"))
    tb = nd["traceback"]
    if tb is not None:
        V.check_string(tb, where, "traceback")
    fused = nd["fused"]
    if fused is not None:
        fused = [V.check_string(x, where, "fused name", V.MAX_NAME) for x in V.check_list(fused, where, "fused")]
    inplace = nd["inplace"]
    if inplace is not None:
        V.check_int(inplace, where, "inplace input", 0, max(len(ins) - 1, 0))
        if op == COPY_OP or "inplace" not in _OPS[op].traits:
            fail(where, f"op {op!r} has no in-place form")
    return NodeSpec(name, op, device, attrs, ins, outs, single, V.expect(nd["heavy"], bool, where, "heavy"),
                    V.expect(nd["opaque"], bool, where, "opaque"), tb, fused, inplace=inplace)


def _decode_value(v, lctx, where, n_resources, depth):
    if isinstance(v, dict) and len(v) == 1:
        (tag, body), = v.items()
        if tag == "plan":
            return _decode_spec(body, lctx, where, n_resources, depth + 1)
        if tag == "resource":
            return ResourceRef(V.check_int(body, where, "resource index", 0, n_resources - 1))
        if tag in ("variable", "function"):
            fail(where, f"a plan refers to {tag}s through its resource table and nested plans, not {tag!r}")
    return decode_value(v, lctx, where, None)

