"""Graphs as versioned JSON: nodes, typed attrs, nested function bodies; and back, validated.

A graph is a list of nodes in creation order (so every input refers to an earlier node and
a cycle cannot be written down)::

    {"name": "Mul", "op": "Mul", "inputs": ["x:0", "Const:0"], "control_inputs": [],
     "device": "", "attrs": {...}}

Attr values are JSON where JSON has the type (null, true/false, integers, finite floats,
strings, lists); every other type is an object with exactly one tag key:
``{"tuple": [...]}``, ``{"dtype": "float32"}``, ``{"shape": [null, 3]}``, ``{"float": "nan"}``,
``{"scalar": {"dtype", "value"}}`` (a NumPy scalar), ``{"tensor": {"dtype", "shape", "values"}}``
(a small constant, inline), ``{"tensor_ref": "constants/0"}`` (a larger one, stored in the
tensor file), ``{"slice": [start, stop, step]}``, ``{"ellipsis": null}``, ``{"dict": {...}}``,
``{"variable": 3}`` (the saved variable a ``VarHandleOp`` stands for) and ``{"function": GRAPH}``
(the body of an ``If``/``While``). Attrs whose value is Python code (the branch functions
kept for gradients, a ``py_function``'s callable) are not saved: loading a graph can never
bring code back to life. Gradients through loaded ``If``/``While`` are rebuilt from the saved
bodies instead.

Loading checks each node before creating it: its op is registered, its attrs have the
types the op takes (by attr name, and the names its kernel accepts), its inputs name
earlier nodes and existing outputs, then the op's own shape rule runs on them.

>>> import numpy as np, tensorweave as tw
>>> @tw.function(input_signature=[tw.TensorSpec([None], tw.float32)])
... def f(x):
...     return tw.cond(tw.reduce_sum(x) > 0, lambda: x * 2.0, lambda: -x)
>>> cf = f.get_concrete_function()
>>> sctx = SaveContext()
>>> spec = serialize_function(cf, sctx)
>>> [n["op"] for n in spec["graph"]["nodes"]]
['Placeholder', 'Sum', 'Const', 'Greater', 'If']
>>> cf2 = build_function(spec, LoadContext(sctx.tensors, []))
>>> cf2(np.array([1.0, 2.0], np.float32)).numpy().tolist()
[2.0, 4.0]
"""
import inspect
import math
import re

import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core import nest
from tensorweave.core.graph import FuncGraph, Graph, SymbolicTensor, get_default_graph
from tensorweave.core.registry import get_op
from tensorweave.core.shape import TensorShape
from tensorweave.saving import validation as V
from tensorweave.saving.validation import LoadError, fail

GRAPH_FORMAT_VERSION = 1
INLINE_ELEMENTS = 16        # constants up to this size stay in the JSON, readable

# Ops that run Python code held by the graph: they cannot be saved (there is no code to load).
UNSAVEABLE_OPS = {"PyFunc": "tw.py_function", "EagerPyFunc": "tw.py_function"}

# Ops that hold function bodies, which attrs hold them, and how a body's captures map to the
# op's inputs: ``captures(op attrs, n inputs)`` -> {graph attr: offset into the op's inputs of
# the capture index list, or a fixed offset}.
_CF_GRAPH_ATTRS = {
    "If": ("_then", "_else"), "StatefulIf": ("_then", "_else"),
    "While": ("_cond", "_body"), "StatefulWhile": ("_cond", "_body"),
    "WhileGrad": ("_graph",),
}
# Private attrs that are saved (everything else that starts with "_" is Python-side metadata).
_PRIVATE_SAVED = {
    "If": {"_then", "_else", "_then_idx", "_else_idx", "_out_specs"},
    "While": {"_cond", "_body", "_cond_idx", "_body_idx", "_var_specs", "_maximum_iterations"},
    "WhileGrad": {"_graph", "_specs"},
}
_PRIVATE_SAVED["StatefulIf"] = _PRIVATE_SAVED["If"]
_PRIVATE_SAVED["StatefulWhile"] = _PRIVATE_SAVED["While"]

# What kind of value each attr name may hold (the names used by the registered ops). A name
# not listed may hold any plain value (number, string, bool, dtype, shape, tensor, tuple, ...),
# but never a function body or a variable: those are allowed only where listed.
_INT, _BOOL, _STR, _NONE, _FLOAT = "int", "bool", "str", "none", "float"
_DTYPE, _SHAPE, _TENSOR, _TUPLE, _LIST = "dtype", "shape", "tensor", "tuple", "list"
_FUNCTION, _VARIABLE = "function", "variable"
ATTR_KINDS = {
    "dtype": {_DTYPE}, "DstT": {_DTYPE}, "out_type": {_DTYPE}, "output_type": {_DTYPE},
    "output_dtype": {_DTYPE}, "shape": {_SHAPE}, "Tout": {_TUPLE, _LIST},
    "value": {_TENSOR}, "variable": {_VARIABLE}, "shared_name": {_STR},
    "keepdims": {_BOOL}, "transpose_a": {_BOOL}, "transpose_b": {_BOOL}, "exclusive": {_BOOL},
    "reverse": {_BOOL}, "go_backwards": {_BOOL}, "approximate": {_BOOL}, "sorted": {_BOOL},
    "zero_output_for_mask": {_BOOL}, "reset_after": {_BOOL}, "validate_shape": {_BOOL},
    "axis": {_INT, _NONE, _TUPLE, _LIST}, "seed": {_INT, _NONE}, "seed2": {_INT, _NONE},
    "padding": {_STR, _TUPLE, _LIST}, "data_format": {_STR}, "mode": {_STR}, "direction": {_STR},
    "activation": {_STR}, "recurrent_activation": {_STR}, "equation": {_STR},
    "strides": {_TUPLE, _LIST}, "ksize": {_TUPLE, _LIST}, "dilations": {_TUPLE, _LIST},
    "perm": {_TUPLE, _LIST, _NONE}, "sizes": {_TUPLE, _LIST}, "fidx": {_TUPLE, _LIST},
    "k": {_INT}, "num": {_INT}, "n_out": {_INT}, "n_vars": {_INT}, "n_caps": {_INT}, "n": {_INT},
    "batch_dims": {_INT}, "alpha": {_FLOAT, _INT}, "spec": {_TUPLE, _LIST},
    "_then": {_FUNCTION}, "_else": {_FUNCTION}, "_cond": {_FUNCTION}, "_body": {_FUNCTION},
    "_graph": {_FUNCTION}, "_then_idx": {_LIST}, "_else_idx": {_LIST}, "_cond_idx": {_LIST},
    "_body_idx": {_LIST}, "_out_specs": {_LIST}, "_var_specs": {_LIST}, "_specs": {_LIST},
    "_maximum_iterations": {_INT, _NONE},
}
_RESTRICTED = {_FUNCTION, _VARIABLE}
_TAGS = {"tuple", "dtype", "shape", "float", "scalar", "tensor", "tensor_ref", "slice", "ellipsis", "dict",
         "variable", "function"}


class SaveError(ValueError):
    """Something in the object cannot be saved (Python code, a symbolic capture ...)."""


# ---- saving ---------------------------------------------------------------------------------------
class SaveContext:
    """Collects what a graph refers to outside itself: variables and large constants."""

    def __init__(self, inline_elements=INLINE_ELEMENTS):
        self.inline_elements = min(int(inline_elements), V.MAX_INLINE_ELEMENTS)   # what loaders accept
        self.tensors = {}          # tensor-file key -> array (constants; the caller adds variables)
        self.constants = {}        # key -> {"dtype", "shape"}
        self.variables = []        # Variable objects, by index
        self._var_index = {}
        self._const_ids = {}       # id(array) -> key: one array used by many nodes is stored once

    def variable_index(self, var):
        i = self._var_index.get(id(var))
        if i is None:
            i = self._var_index[id(var)] = len(self.variables)
            self.variables.append(var)
        return i

    def add_constant(self, array):
        key = self._const_ids.get(id(array))
        if key is None:
            key = f"constants/{len(self.constants)}"
            self._const_ids[id(array)] = key
            self.tensors[key] = array
            self.constants[key] = {"dtype": _dt.as_dtype(array.dtype).name, "shape": list(array.shape)}
        return key


def _number(x):
    """A JSON number for a Python/NumPy number; non-finite floats become strings."""
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    x = float(x)
    return x if math.isfinite(x) else repr(x)     # 'nan', 'inf', '-inf'


def encode_tensor(a, sctx, where):
    a = np.asarray(a)
    if a.dtype.kind in "OUS":
        values = a.ravel().tolist()
        if not all(isinstance(v, str) for v in values):
            raise SaveError(f"{where}: only string tensors of str values can be saved")
        if len(values) > V.MAX_INLINE_ELEMENTS:
            raise SaveError(f"{where}: a string constant of {len(values)} elements is too large to save (the "
                            f"limit is {V.MAX_INLINE_ELEMENTS}); feed it as an input or keep it in an asset file")
        return {"tensor": {"dtype": "string", "shape": list(a.shape), "values": values}}
    try:
        dt = _dt.as_dtype(a.dtype)
    except TypeError:
        raise SaveError(f"{where}: a tensor of dtype {a.dtype} cannot be saved") from None
    if dt.name not in V.TENSOR_DTYPES:
        raise SaveError(f"{where}: a tensor of dtype {dt.name} cannot be saved")
    if a.size <= sctx.inline_elements and (not dt.is_floating or bool(np.all(np.isfinite(a.astype(np.float64))))):
        flat = a.ravel()
        values = flat.astype(np.float64).tolist() if dt.is_floating else flat.tolist()
        return {"tensor": {"dtype": dt.name, "shape": list(a.shape), "values": values}}
    return {"tensor_ref": sctx.add_constant(a)}


def encode_value(v, sctx, where, chain):
    """The JSON form of one attr value (see the module docstring)."""
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else {"float": repr(v)}
    if isinstance(v, list):
        return [encode_value(x, sctx, where, chain) for x in v]
    if isinstance(v, tuple):
        return {"tuple": [encode_value(x, sctx, where, chain) for x in v]}
    if isinstance(v, _dt.DType):
        if v.name not in V.ALL_DTYPES:
            raise SaveError(f"{where}: unknown dtype {v!r}")
        return {"dtype": v.name}
    if isinstance(v, TensorShape):
        return {"shape": None if v.rank is None else list(v.as_tuple())}
    if isinstance(v, np.ndarray):
        return encode_tensor(v, sctx, where)
    if isinstance(v, np.generic):
        dt = _dt.as_dtype(v.dtype)
        if dt.name not in V.TENSOR_DTYPES or dt is _dt.string:
            raise SaveError(f"{where}: a scalar of dtype {v.dtype} cannot be saved")
        return {"scalar": {"dtype": dt.name, "value": _number(v.astype(np.float64) if dt.is_floating else v)}}
    if isinstance(v, slice):
        parts = [v.start, v.stop, v.step]
        if not all(p is None or (isinstance(p, (int, np.integer)) and not isinstance(p, bool)) for p in parts):
            raise SaveError(f"{where}: a slice with non-integer bounds cannot be saved")
        return {"slice": [None if p is None else int(p) for p in parts]}
    if v is Ellipsis:
        return {"ellipsis": None}
    if isinstance(v, dict):
        if not all(isinstance(k, str) for k in v):
            raise SaveError(f"{where}: a dict attr with non-string keys cannot be saved")
        return {"dict": {k: encode_value(x, sctx, where, chain) for k, x in v.items()}}
    if isinstance(v, Graph):
        return {"function": serialize_graph(v, sctx, v.inputs, v.outputs, chain, captures=[p for _, p in v.captures])}
    if getattr(v, "_is_variable", False):
        return {"variable": sctx.variable_index(v)}
    raise SaveError(f"{where}: a value of type {type(v).__name__} cannot be saved")


def _sanitize(name, used):
    base = re.sub(r"[^A-Za-z0-9_.\-/>]", "_", name) or "node"
    candidate, i = base, 1
    while candidate.lower() in used:
        candidate = f"{base}_{i}"
        i += 1
    used.add(candidate.lower())
    return candidate


def _needed(fetch_ops, feeds):
    """Ops the fetches need through data and control edges, stopping at fed tensors (by id)."""
    feed_ids = {id(t) for t in feeds}
    seen = {}
    stack = list(fetch_ops)
    while stack:
        op = stack.pop()
        if op is None or id(op) in seen:
            continue
        seen[id(op)] = op
        stack.extend(t.op for t in op.inputs if id(t) not in feed_ids)
        stack.extend(c for c in op.control_inputs if c is not None)
    for t in feeds:
        seen.setdefault(id(t.op), t.op)
    return sorted(seen.values(), key=lambda o: o._id)


_GRAPH_OWN = object()


def encode_nodes(graph, ops, sctx, chain=(), rename=None):
    """The JSON nodes of ``ops`` (in creation order, each input made earlier in ``ops``) and
    ``{id(op): node name}``. ``rename(op name) -> name`` changes the saved names (export scopes)."""
    used, names = set(), {}
    for op in ops:
        names[id(op)] = _sanitize(rename(op.name) if rename else op.name, used)

    def ref(t):
        if id(t.op) not in names:
            raise SaveError(f"tensor {t.name} used by the saved graph is not part of it (from another graph?)")
        return f"{names[id(t.op)]}:{t.value_index}"

    nodes = []
    for op in ops:
        where = f"node '{op.name}' ({op.type})"
        if op.type in UNSAVEABLE_OPS:
            raise SaveError(f"{where}: {UNSAVEABLE_OPS[op.type]} runs Python code and cannot be saved in a "
                            "SavedModel. Hint: express the computation with tensorweave ops")
        keep = _PRIVATE_SAVED.get(op.type, set())
        attrs = {}
        for k, v in op.attrs.items():
            if k.startswith("_") and k not in keep:
                continue    # Python-side metadata: branch functions, random Generator streams ...
            attrs[k] = encode_value(v, sctx, f"{where} attr '{k}'", tuple(chain) + (graph,))
        nodes.append({"name": names[id(op)], "op": op.type, "inputs": [ref(t) for t in op.inputs],
                      "control_inputs": [names[id(c)] for c in op.control_inputs
                                         if c is not None and id(c) in names],
                      "device": op.device or "", "attrs": attrs})
    return nodes, names


def serialize_graph(graph, sctx, inputs, outputs, chain=(), captures=(), last_stateful=_GRAPH_OWN):
    """The JSON form of the part of ``graph`` that computes ``outputs`` from ``inputs``.

    ``last_stateful`` is the op the graph's runs end with (its stateful ops are chained);
    by default the graph's own. Only the ops that run are kept.
    """
    if len(chain) >= V.MAX_FUNCTION_DEPTH:
        raise SaveError(f"function bodies nested deeper than {V.MAX_FUNCTION_DEPTH} levels cannot be saved")
    last = graph._last_stateful if last_stateful is _GRAPH_OWN else last_stateful
    feeds = list(inputs) + list(captures)
    for t in feeds:
        if t.op.type != "Placeholder":
            raise SaveError(f"graph input {t.name} must be a placeholder")
    ops = _needed([t.op for t in outputs] + ([last] if last is not None else []), feeds)
    ops = [op for op in ops if op.graph is graph]
    nodes, names = encode_nodes(graph, ops, sctx, chain)

    def ref(t):
        if id(t.op) not in names:
            raise SaveError(f"tensor {t.name} used by the saved graph is not part of it (from another graph?)")
        return f"{names[id(t.op)]}:{t.value_index}"

    return {"name": getattr(graph, "name", "graph"), "nodes": nodes, "inputs": [ref(t) for t in inputs],
            "outputs": [ref(t) for t in outputs], "captures": [ref(t) for t in captures],
            "last_stateful": names[id(last)] if last is not None and id(last) in names else None}


def encode_structure(s, out_index):
    """Structured outputs: tensors become {"tensor": i}; containers and plain values are kept."""
    if isinstance(s, SymbolicTensor):
        return {"tensor": out_index[id(s)]}
    if isinstance(s, dict):
        if not all(isinstance(k, (str, int)) and not isinstance(k, bool) for k in s):
            raise SaveError("function outputs: dict keys must be strings or ints")
        return {"dict": [[k, encode_structure(v, out_index)] for k, v in s.items()]}
    if isinstance(s, tuple):
        return {"tuple": [encode_structure(v, out_index) for v in s]}
    if isinstance(s, list):
        return {"list": [encode_structure(v, out_index) for v in s]}
    if s is None or isinstance(s, (bool, int, str)) or (isinstance(s, float) and math.isfinite(s)):
        return {"value": s}
    raise SaveError(f"function outputs: a value of type {type(s).__name__} cannot be saved")


def serialize_function(cf, sctx, name=None):
    """The JSON form of a ConcreteFunction: its graph, outputs structure and variables."""
    g = cf.graph
    if g.captures:
        raise SaveError(f"function '{name or g.name}' captures tensors of another graph "
                        f"({', '.join(t.name for t, _ in g.captures[:3])}); only variables and constants can "
                        "be captured by a saved function")
    # The stateful op its plan ends with: ops a gradient added to the graph later are not part of it.
    planned = [st.op for st in cf._plan.steps if st.op is not None]
    stateful = [op for op in planned if op.opdef.stateful]
    last = max(stateful, key=lambda o: o._id) if stateful else None
    spec = serialize_graph(g, sctx, cf.inputs, cf.outputs, (), (), last)
    out_index = {}
    for i, t in enumerate(cf.outputs):
        out_index.setdefault(id(t), i)
    return {"name": name or g.name, "graph": spec, "structured_outputs": encode_structure(cf.structured_outputs,
                                                                                          out_index),
            "variables": [sctx.variable_index(v) for v in cf.variables]}


# ---- loading ----------------------------------------------------------------------------------------
class LoadContext:
    """What a graph being loaded may refer to: tensors read from the file, restored variables."""

    def __init__(self, tensors, variables, constants=None, where="saved_model.json"):
        self.tensors = tensors
        self.variables = variables
        self.constants = constants      # key -> {"dtype", "shape"} declared in the JSON, or None
        self.where = where
        self.nodes = 0


_KERNEL_PARAMS = {}


def _kernel_params(opdef):
    """Names a CPU kernel takes as keywords, or None when it takes any (``**kwargs``)."""
    if opdef.name in _KERNEL_PARAMS:
        return _KERNEL_PARAMS[opdef.name]
    kernel = opdef.kernels.get("CPU")
    names = None
    if kernel is not None:
        try:
            params = inspect.signature(kernel).parameters.values()
            if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
                names = {p.name for p in params if p.kind in (inspect.Parameter.KEYWORD_ONLY,
                                                              inspect.Parameter.POSITIONAL_OR_KEYWORD)}
        except (TypeError, ValueError):
            names = None
    _KERNEL_PARAMS[opdef.name] = names
    return names


def _kernel_arity(opdef, attrs):
    """``(least, most)`` inputs the op's CPU kernel takes once ``attrs`` are bound, or None when
    its signature cannot be read. A NumPy ufunc kernel takes exactly ``nin`` (an extra input
    would become its ``out`` argument); a Python kernel takes its positional parameters that
    are not attrs (``*args``: any number). An op with a ``bind`` hook gets more keyword
    arguments when its plan is built, so only its upper bound is known."""
    kernel = opdef.kernels.get("CPU")
    if kernel is None:
        return None
    base = inspect.unwrap(kernel)
    if isinstance(base, np.ufunc):
        return base.nin, base.nin
    try:
        params = list(inspect.signature(kernel).parameters.values())
    except (TypeError, ValueError):
        return None
    least, most = 0, 0
    for p in params:
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            most = math.inf
        elif p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD) \
                and p.name not in attrs:
            most += 1
            least += p.default is inspect.Parameter.empty
    return (0 if opdef.bind is not None else least), most


def _kind(v):
    if v is None:
        return _NONE
    if isinstance(v, bool):
        return _BOOL
    if isinstance(v, int):
        return _INT
    if isinstance(v, float):
        return _FLOAT
    if isinstance(v, str):
        return _STR
    if isinstance(v, list):
        return _LIST
    return next(iter(v))          # a tagged object (already checked to have one key)


def _decode_number(v, dtype, where):
    if isinstance(v, str) and dtype.is_floating and v in ("nan", "inf", "-inf"):
        return float(v)
    if dtype.is_bool:
        V.expect(v, bool, where, "value")
        return v
    if dtype.is_integer:
        V.expect(v, int, where, "value")
        info = np.iinfo(dtype.np_dtype)
        if not info.min <= v <= info.max:
            fail(where, f"value {v} does not fit in {dtype.name}")
        return v
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        fail(where, f"value must be a number, got {V._short(v)}")
    if isinstance(v, int):
        try:
            float(v)
        except OverflowError:
            fail(where, f"value {V._short(v)} is out of range for {dtype.name}")
    return v


def decode_tensor(body, lctx, where):
    V.check_keys(body, where, ("dtype", "shape", "values"))
    dt = V.check_dtype(body["dtype"], where, "tensor dtype", V.TENSOR_DTYPES)
    shape = V.check_shape(body["shape"], where, "tensor shape", allow_unknown=False)
    n = V.num_elements(shape)
    if n > V.MAX_INLINE_ELEMENTS:
        fail(where, f"an inline tensor may have at most {V.MAX_INLINE_ELEMENTS} elements, shape {shape} has {n}")
    values = V.check_list(body["values"], where, "tensor values", V.MAX_INLINE_ELEMENTS)
    if len(values) != n:
        fail(where, f"tensor of shape {shape} needs {n} values, got {len(values)}")
    if dt is _dt.string:
        for v in values:
            V.check_string(v, where, "string tensor element")
        return np.array(values, dtype=object).reshape(shape)
    vals = [_decode_number(v, dt, where) for v in values]
    return np.array(vals, dtype=np.float64 if dt.is_floating else None).astype(dt.np_dtype).reshape(shape)


def decode_value(v, lctx, where, builder):
    """The Python value of one JSON attr value (inverse of :func:`encode_value`), validated."""
    if v is None or isinstance(v, (bool, int, str)):
        if isinstance(v, str):
            V.check_string(v, where, "string")
        return v
    if isinstance(v, float):
        return v
    if isinstance(v, list):
        V.check_list(v, where, "list")
        return [decode_value(x, lctx, where, builder) for x in v]
    if not isinstance(v, dict) or len(v) != 1:
        fail(where, f"an attr value must be JSON or a one-key tagged object, got {V._short(v)}")
    (tag, body), = v.items()
    if tag == "tuple":
        V.check_list(body, where, "tuple")
        return tuple(decode_value(x, lctx, where, builder) for x in body)
    if tag == "dtype":
        return V.check_dtype(body, where)
    if tag == "shape":
        return TensorShape(V.check_shape(body, where))
    if tag == "float":
        if body not in ("nan", "inf", "-inf"):
            fail(where, f"'float' must be 'nan', 'inf' or '-inf', got {V._short(body)}")
        return float(body)
    if tag == "scalar":
        V.check_keys(body, where, ("dtype", "value"))
        dt = V.check_dtype(body["dtype"], where, "scalar dtype", V.TENSOR_DTYPES)
        if dt is _dt.string:
            fail(where, "a string scalar attr is stored as a plain string")
        return dt.np_dtype.type(_decode_number(body["value"], dt, where))
    if tag == "tensor":
        return decode_tensor(body, lctx, where)
    if tag == "tensor_ref":
        V.check_string(body, where, "tensor_ref", V.MAX_NAME)
        if lctx.constants is not None and body not in lctx.constants:
            fail(where, f"tensor_ref {body!r} is not listed in 'constants'")
        a = lctx.tensors.get(body) if body.startswith("constants/") else None
        if a is None:
            fail(where, f"tensor_ref {body!r} is not in the tensor file")
        return a
    if tag == "slice":
        V.check_list(body, where, "slice", 3)
        if len(body) != 3 or not all(p is None or (isinstance(p, int) and not isinstance(p, bool)) for p in body):
            fail(where, f"'slice' must be [start, stop, step] of integers or null, got {V._short(body)}")
        return slice(*body)
    if tag == "ellipsis":
        if body is not None:
            fail(where, "'ellipsis' must be null")
        return Ellipsis
    if tag == "dict":
        V.expect(body, dict, where, "dict")
        return {V.check_string(k, where, "dict key", V.MAX_NAME): decode_value(x, lctx, where, builder)
                for k, x in body.items()}
    if tag == "variable":
        i = V.check_int(body, where, "variable index", 0, len(lctx.variables) - 1)
        return lctx.variables[i]
    if tag == "function":
        return builder.nested(body, where)
    fail(where, f"unknown attr value tag {tag!r}")


def _check_specs(value, where):
    """``[(shape, dtype), ...]`` as control-flow ops keep their output specs."""
    for s in value:
        if not (isinstance(s, tuple) and len(s) == 2 and isinstance(s[0], TensorShape)
                and isinstance(s[1], _dt.DType)):
            fail(where, "must be a list of (shape, dtype) pairs")


def _check_index_list(value, n, where):
    for i in value:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n:
            fail(where, f"index {V._short(i)} is out of range [0, {n})")


class GraphBuilder:
    """Creates the nodes of one JSON graph in a graph (see :func:`build_function`).

    ``substitute`` maps placeholder names of the spec to existing tensors: used to inline a
    loaded body into a graph being traced (gradients of loaded control flow).
    """

    def __init__(self, lctx, graph, where, depth=0, substitute=None):
        self.lctx, self.graph, self.where, self.depth = lctx, graph, where, depth
        self.substitute = substitute or {}
        self.ops = {}          # spec name -> Operation
        self.tensors = {}      # spec name -> list of output tensors (substituted placeholders too)
        self._placeholders = set()
        self.placeholder_names = {}   # id(placeholder tensor) -> spec name

    # -- references
    def tensor(self, ref, where):
        V.check_string(ref, where, "tensor reference", V.MAX_NAME + 12)
        name, sep, idx = ref.rpartition(":")
        if not sep or not idx.isdigit() or len(idx) > 6:
            fail(where, f"tensor reference {ref!r} must look like 'node:index'")
        outs = self.tensors.get(name)
        if outs is None:
            fail(where, f"input {ref!r} refers to node {name!r}, which is not defined before this node "
                        "(missing, or a cycle)")
        i = int(idx)
        if i >= len(outs):
            fail(where, f"input {ref!r}: node {name!r} has only {len(outs)} output(s)")
        return outs[i]

    def nested(self, spec, where):
        if self.depth + 1 > V.MAX_FUNCTION_DEPTH:
            fail(where, f"function bodies nested deeper than {V.MAX_FUNCTION_DEPTH} levels")
        V.check_keys(spec, where, ("name", "nodes", "inputs", "outputs", "captures", "last_stateful"))
        name = V.check_string(spec["name"], where, "function name", V.MAX_NAME)
        g = FuncGraph(name, outer_graph=self.graph)
        g.seed = self.graph.seed
        sub = GraphBuilder(self.lctx, g, f"{where} > function '{name}'", self.depth + 1)
        sub.build(spec)
        return g

    # -- graph
    def build(self, spec):
        """Builds ``spec`` into ``self.graph``; returns (inputs, outputs, captures) tensors."""
        where = self.where
        V.check_keys(spec, where, ("name", "nodes", "inputs", "outputs", "captures", "last_stateful"))
        nodes = V.check_list(spec["nodes"], where, "nodes", V.MAX_NODES)
        self.lctx.nodes += len(nodes)
        if self.lctx.nodes > V.MAX_NODES:
            fail(where, f"more than {V.MAX_NODES} nodes in all")
        with self.graph.as_default():
            for i, nd in enumerate(nodes):
                self.node(nd, i)
        inputs = [self.tensor(r, f"{where} inputs") for r in V.check_list(spec["inputs"], where, "inputs")]
        outputs = [self.tensor(r, f"{where} outputs") for r in V.check_list(spec["outputs"], where, "outputs")]
        caps = [self.tensor(r, f"{where} captures") for r in V.check_list(spec["captures"], where, "captures")]
        for t in inputs + caps:
            if id(t) not in self._placeholders:
                fail(where, f"input/capture {t.name} must be a Placeholder node of the function")
        if len({id(t) for t in inputs + caps}) != len(inputs + caps):
            fail(where, "a placeholder is listed twice among inputs and captures")
        last = spec["last_stateful"]
        if last is not None:
            V.check_string(last, where, "last_stateful", V.MAX_NAME)
            op = self.ops.get(last)
            if op is None:
                fail(where, f"last_stateful names an unknown node {last!r}")
            if self.graph.is_function_graph and not self.substitute:
                self.graph._last_stateful = op
        if isinstance(self.graph, FuncGraph) and not self.substitute:
            self.graph.inputs, self.graph.outputs = inputs, outputs
            self.graph.captures = [(None, p) for p in caps]   # outer tensors are set by the owning op
        return inputs, outputs, caps

    def node(self, nd, index):
        where = f"{self.where} node #{index}"
        V.check_keys(nd, where, ("name", "op", "inputs", "attrs"), ("control_inputs", "device"))
        name = V.check_name(nd["name"], where, "node name")
        where = f"{self.where} node '{name}'"
        if name in self.tensors:
            fail(where, "duplicate node name")
        op_type = V.check_string(nd["op"], where, "op", V.MAX_NAME)
        try:
            opdef = get_op(op_type)
        except Exception:   # noqa: BLE001 - the registry's NotFoundError, said as a load error
            fail(where, f"unknown op type {op_type!r}: it is not registered in this tensorweave "
                        "(a newer version, or a custom op whose module is not imported)")
        where = f"{self.where} node '{name}' ({op_type})"
        if op_type in UNSAVEABLE_OPS:
            fail(where, f"{UNSAVEABLE_OPS[op_type]} nodes cannot be loaded (they would need Python code)")
        if op_type == "Placeholder" and name in self.substitute:
            self.tensors[name] = [self.substitute[name]]
            self._placeholders.add(id(self.substitute[name]))
            return
        inputs = [self.tensor(r, where) for r in V.check_list(nd["inputs"], where, "inputs")]
        controls = []
        for c in V.check_list(nd.get("control_inputs", []), where, "control_inputs"):
            V.check_string(c, where, "control input", V.MAX_NAME)
            op = self.ops.get(c)
            if op is None:
                fail(where, f"control input {c!r} is not a node defined before this one")
            controls.append(op)
        device = V.check_string(nd.get("device", ""), where, "device", 256)
        attrs = self.attrs(opdef, V.expect(nd["attrs"], dict, where, "attrs"), where)
        arity = _kernel_arity(opdef, attrs)
        if arity is not None and not arity[0] <= len(inputs) <= arity[1]:
            want = arity[0] if arity[0] == arity[1] else (
                f"at least {arity[0]}" if arity[1] == math.inf else f"{arity[0]} to {arity[1]}")
            fail(where, f"has {len(inputs)} inputs, but op {op_type} takes {want}")
        self.check_op(opdef, attrs, inputs, where)
        try:
            specs = opdef.infer(inputs, attrs)
            if isinstance(specs, tuple) and len(specs) == 2 and isinstance(specs[1], _dt.DType):
                specs = [specs]
            specs = list(specs)
            n = opdef.n_outputs(attrs)
        except LoadError:
            raise
        except Exception as e:  # noqa: BLE001 - any failure of the op's own checks is a bad file
            fail(where, f"the op rejects its inputs/attrs: {type(e).__name__}: {e}")
        if n != len(specs):
            fail(where, f"the op declares {n} outputs but its shape rule gives {len(specs)}")
        op = self.graph._create_op(opdef, inputs, attrs, name, specs, f"loaded: {self.where} node '{name}'")
        for c in controls:
            if c not in op.control_inputs:
                op.control_inputs.append(c)
        if not self.substitute:
            op.device = device or None
        self.post_create(op, attrs, where)
        self.ops[name] = op
        self.tensors[name] = list(op.outputs)
        if op_type == "Placeholder":
            self._placeholders.add(id(op.outputs[0]))
            self.placeholder_names[id(op.outputs[0])] = name

    def attrs(self, opdef, raw, where):
        allowed_private = _PRIVATE_SAVED.get(opdef.name, set())
        params = _kernel_params(opdef)
        out = {}
        for k, v in raw.items():
            aw = f"{where} attr '{k}'"
            V.check_string(k, aw, "attr name", 128)
            if k.startswith("_"):
                if k not in allowed_private:
                    fail(aw, f"op {opdef.name} has no saved attr {k!r}")
            elif params is not None and k not in params:
                fail(aw, f"op {opdef.name} takes no attr {k!r} (its kernel takes {sorted(params)})")
            kind = _kind(v) if not isinstance(v, dict) or len(v) == 1 else None
            if kind is None:
                fail(aw, f"must be JSON or a one-key tagged object, got {V._short(v)}")
            if isinstance(v, dict) and kind not in _TAGS:
                fail(aw, f"unknown attr value tag {kind!r}")
            kind = {"tensor_ref": _TENSOR, "float": _FLOAT}.get(kind, kind)
            allowed = ATTR_KINDS.get(k)
            numeric = kind == _INT and _FLOAT in allowed if allowed else False
            numeric = numeric or (kind == "scalar" and allowed is not None and bool({_INT, _FLOAT} & allowed))
            if allowed is not None and kind not in allowed and not numeric:
                fail(aw, f"has a value of kind {kind!r}; op {opdef.name} expects {sorted(allowed)}")
            if allowed is None and kind in _RESTRICTED:
                fail(aw, f"a {kind} is not allowed in attr {k!r}")
            if kind == _FUNCTION and opdef.name not in _CF_GRAPH_ATTRS:
                fail(aw, f"op {opdef.name} does not take function bodies")
            if kind == _VARIABLE and opdef.name != "VarHandleOp":
                fail(aw, "only VarHandleOp refers to a variable")
            out[k] = decode_value(v, self.lctx, aw, self)
        return out

    def check_op(self, opdef, attrs, inputs, where):
        """Consistency checks for ops whose attrs index into their inputs or bodies."""
        t = opdef.name
        if t in ("If", "StatefulIf"):
            for k in ("_then", "_else", "_then_idx", "_else_idx", "_out_specs"):
                if k not in attrs:
                    fail(where, f"missing attr {k!r}")
            if not inputs or inputs[0].dtype is not _dt.bool_:
                fail(where, "the first input must be the bool predicate")
            _check_specs(attrs["_out_specs"], f"{where} attr '_out_specs'")
            for g, idx in (("_then", "_then_idx"), ("_else", "_else_idx")):
                body = attrs[g]
                _check_index_list(attrs[idx], len(inputs) - 1, f"{where} attr '{idx}'")
                if len(attrs[idx]) != len(body.captures) or body.inputs:
                    fail(where, f"attr {idx!r} must map each capture of '{g}' (and a branch takes no inputs)")
                if len(body.outputs) != len(attrs["_out_specs"]) or any(
                        o.dtype is not d for o, (_, d) in zip(body.outputs, attrs["_out_specs"])):
                    fail(where, f"the outputs of '{g}' do not match '_out_specs'")
        elif t in ("While", "StatefulWhile"):
            for k in ("_cond", "_body", "_cond_idx", "_body_idx", "_var_specs", "_maximum_iterations"):
                if k not in attrs:
                    fail(where, f"missing attr {k!r}")
            _check_specs(attrs["_var_specs"], f"{where} attr '_var_specs'")
            n = len(attrs["_var_specs"])
            if n > len(inputs):
                fail(where, f"{n} loop variables but only {len(inputs)} inputs")
            for g, idx in (("_cond", "_cond_idx"), ("_body", "_body_idx")):
                body = attrs[g]
                _check_index_list(attrs[idx], len(inputs) - n, f"{where} attr '{idx}'")
                if len(attrs[idx]) != len(body.captures) or len(body.inputs) != n:
                    fail(where, f"'{g}' must take the {n} loop variables and map each capture")
            if len(attrs["_cond"].outputs) != 1 or attrs["_cond"].outputs[0].dtype is not _dt.bool_:
                fail(where, "'_cond' must return one bool")
            specs = attrs["_var_specs"]
            if len(attrs["_body"].outputs) != n or any(
                    o.dtype is not d for o, (_, d) in zip(attrs["_body"].outputs, specs)) or any(
                    i.dtype is not d for i, (_, d) in zip(list(attrs["_body"].inputs) + list(attrs["_cond"].inputs)
                                                          + list(inputs[:n]), specs + specs + specs)):
                fail(where, f"'_body' must take and return the {n} loop variables with the dtypes of '_var_specs'")
            m = attrs["_maximum_iterations"]
            if m is not None and m < 0:
                fail(where, "'_maximum_iterations' must be >= 0")
        elif t == "WhileGrad":
            for k in ("_graph", "_specs", "n_vars", "fidx", "n_caps"):
                if k not in attrs:
                    fail(where, f"missing attr {k!r}")
            _check_specs(attrs["_specs"], f"{where} attr '_specs'")
            g = attrs["_graph"]
            fidx = attrs["fidx"]
            n_vars = V.check_int(attrs["n_vars"], where, "n_vars", 0, V.MAX_LIST)
            _check_index_list(fidx, n_vars, f"{where} attr 'fidx'")
            if len(inputs) != 1 + len(fidx) + len(g.captures) or len(g.inputs) != n_vars + len(fidx):
                fail(where, "inputs do not match the gradient body")
        elif t == "VarHandleOp":
            var = attrs.get("variable")
            if var is None or not getattr(var, "_is_variable", False):
                fail(where, "needs a 'variable' attr naming a saved variable")
            if attrs.get("dtype") is not var.dtype or not isinstance(attrs.get("shape"), TensorShape) \
                    or not attrs["shape"].is_compatible_with(var.shape):
                fail(where, f"dtype/shape attrs do not match variable '{var.name}' "
                            f"({var.dtype.name} {var.shape})")
        elif t == "Const":
            value = attrs.get("value")
            if not isinstance(value, np.ndarray) or not isinstance(attrs.get("dtype"), _dt.DType):
                fail(where, "needs a tensor 'value' and a 'dtype'")
            if (attrs["dtype"] is _dt.string) != (value.dtype == object) or \
                    (value.dtype != object and _dt.as_dtype(value.dtype) is not attrs["dtype"]):
                fail(where, f"value of dtype {value.dtype} does not match dtype attr {attrs['dtype'].name}")
        for k in ("dtype", "DstT", "out_type", "output_type", "output_dtype"):
            d = attrs.get(k)
            if isinstance(d, _dt.DType) and d.np_dtype is None and t not in ("Placeholder", "VarHandleOp"):
                fail(where, f"attr {k!r} cannot be {d.name}")

    def post_create(self, op, attrs, where):
        """Wires a new op to its context: captures of bodies (gradients replay them), variable handles."""
        t = op.type
        if t in ("If", "StatefulIf"):
            for g, idx in (("_then", "_then_idx"), ("_else", "_else_idx")):
                _set_captures(attrs[g], [op.inputs[1 + i] for i in attrs[idx]])
        elif t in ("While", "StatefulWhile"):
            n = len(attrs["_var_specs"])
            for g, idx in (("_cond", "_cond_idx"), ("_body", "_body_idx")):
                _set_captures(attrs[g], [op.inputs[n + i] for i in attrs[idx]])
        elif t == "WhileGrad":
            k = 1 + len(attrs["fidx"])
            _set_captures(attrs["_graph"], list(op.inputs[k:]))
        elif t == "VarHandleOp":
            var = attrs["variable"]
            if self.graph not in var._handles:
                var._handles[self.graph] = op.outputs[0]
        elif t == "CustomGradient":
            attrs["_grad_fn"] = _no_custom_gradient


def _no_custom_gradient(op, *grads):
    raise NotImplementedError(
        f"The gradient of loaded node '{op.name}' came from a tw.custom_gradient Python function, which a "
        "SavedModel does not store. Hint: differentiate the original Python code instead.")


def _set_captures(body, outer):
    body.captures = [(o, p) for o, (_, p) in zip(outer, body.captures)]
    body._capture_map = {id(o): (o, p) for o, p in body.captures}


def decode_structure(s, outputs, where, depth=0):
    if depth > V.MAX_JSON_DEPTH:
        fail(where, "structured_outputs nested too deeply")
    if not isinstance(s, dict) or len(s) != 1:
        fail(where, f"structured_outputs entry must be a one-key object, got {V._short(s)}")
    (tag, body), = s.items()
    if tag == "tensor":
        V.check_int(body, where, "output index", 0, len(outputs) - 1)
        return outputs[body]
    if tag in ("list", "tuple"):
        V.check_list(body, where, tag)
        items = [decode_structure(x, outputs, where, depth + 1) for x in body]
        return items if tag == "list" else tuple(items)
    if tag == "dict":
        V.check_list(body, where, "dict")
        out = {}
        for item in body:
            if not isinstance(item, list) or len(item) != 2 or isinstance(item[0], bool) \
                    or not isinstance(item[0], (str, int)):
                fail(where, "dict entries must be [key, value] with a string or int key")
            if item[0] in out:
                fail(where, f"duplicate key {item[0]!r}")
            out[item[0]] = decode_structure(item[1], outputs, where, depth + 1)
        return out
    if tag == "value":
        if body is not None and not isinstance(body, (bool, int, float, str)):
            fail(where, "'value' must be a JSON scalar")
        return body
    fail(where, f"unknown structured_outputs tag {tag!r}")


def build_function(spec, lctx, where="function"):
    """A ConcreteFunction from :func:`serialize_function`'s JSON, checked node by node."""
    from tensorweave.runtime.function import ConcreteFunction
    V.check_keys(spec, where, ("name", "graph", "structured_outputs", "variables"))
    name = V.check_string(spec["name"], where, "function name", V.MAX_NAME)
    where = f"{where} '{name}'"
    g = FuncGraph(name)
    builder = GraphBuilder(lctx, g, where)
    inputs, outputs, caps = builder.build(spec["graph"])
    if caps:
        fail(where, "a top-level function cannot have captures")
    structured = decode_structure(spec["structured_outputs"], outputs, f"{where} structured_outputs")
    flat = [o for o in nest.flatten(structured) if isinstance(o, SymbolicTensor)]
    if len(flat) != len(outputs) or any(a is not b for a, b in zip(flat, outputs)):
        fail(where, "structured_outputs must use each graph output once, in order")
    var_ids = V.check_list(spec["variables"], where, "variables")
    g.variables = []
    for i in var_ids:
        V.check_int(i, where, "variable index", 0, len(lctx.variables) - 1)
        var = lctx.variables[i]
        if all(var is not v for v in g.variables):
            g.variables.append(var)
            if g not in var._handles:
                h = next((op.outputs[0] for op in g.get_operations()
                          if op.type == "VarHandleOp" and op.attrs["variable"] is var), None)
                if h is not None:
                    var._handles[g] = h
    try:
        return ConcreteFunction(g, inputs, structured)
    except LoadError:
        raise
    except Exception as e:  # noqa: BLE001 - e.g. no kernel for a node's device type
        fail(where, f"cannot be prepared to run: {type(e).__name__}: {e}")


def op_counts(spec, counts=None, where="graph"):
    """``{op type: count}`` over a JSON graph and the bodies nested in it. Only the structure
    it walks is checked (nodes a list of objects with a string op): a file that is malformed
    there raises :class:`LoadError` naming the graph."""
    counts = {} if counts is None else counts
    stack = [(spec, where)]
    while stack:
        g, w = stack.pop()
        V.expect(g, dict, w, "graph")
        for i, nd in enumerate(V.check_list(g.get("nodes"), w, "nodes", V.MAX_NODES)):
            V.expect(nd, dict, f"{w} node #{i}", "node")
            op = V.check_string(nd.get("op"), f"{w} node #{i}", "op", V.MAX_NAME)
            counts[op] = counts.get(op, 0) + 1
            attrs = nd.get("attrs") or {}
            for k, v in (attrs.items() if isinstance(attrs, dict) else ()):
                if isinstance(v, dict) and "function" in v:
                    stack.append((v["function"], f"{w} node #{i} attr '{k}'"))
    return counts
