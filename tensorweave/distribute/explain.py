"""``tw.distribute.explain(fn, *args)``: what the planner will do with a function, before it runs.

For every op: the signature chosen (per mesh axis), its inputs' and outputs' SBPs and the
user's source line; for every collective inserted: its kind, mesh axis, the layouts before and
after, the bytes moved (all ranks together, the cost model the planner minimised), the tensor
and the op that needed it; per rank: the peak memory of the plan (live buffers in run order,
from the local shapes) and the variable shards it holds. A control-flow op (``tw.cond``,
``tw.while_loop``, a loop's gradient) planned on split layouts lists, per body, the body's ops
with their signatures and the collectives its nested plan runs each time it runs (``bodies``
of the op's entry; indented under the op in the text). As text (``str``/``.text()``) and as a
dict (``.to_dict()``). Read it first when a run is slow (the collectives and their bytes) or
runs out of memory (the peaks).

>>> import numpy as np, tensorweave as tw
>>> p = tw.placement("cpu", ranks=[0, 1])
>>> def f(x, w):
...     return tw.matmul(x, w)
>>> x = tw.constant(np.ones((8, 4), np.float32)).to_global(placement=p, sbp=tw.sbp.split(1))
>>> w = tw.constant(np.ones((4, 2), np.float32)).to_global(placement=p, sbp=tw.sbp.split(0))
>>> e = tw.distribute.explain(f, x, w)
>>> [(o["type"], o["signature"]) for o in e.to_dict()["ops"]]
[('MatMul', 'S(1), S(0) -> P')]
>>> e.to_dict()["collectives"]
[]
>>> g = tw.distribute.explain(lambda x, w: f(x, w).to_global(sbp=tw.sbp.broadcast), x, w)
>>> [(c["kind"], c["before"], c["after"], c["bytes"]) for c in g.to_dict()["collectives"]]
[('all_reduce', '(P,)', '(B,)', 128)]
>>> print(g)                                     # doctest: +ELLIPSIS
Plan of '<lambda>' on cpu ranks [0, 1] ...
"""
from tensorweave.core import dtypes as _dt
from tensorweave.core import errors
from tensorweave.core.sbp import B, S
from tensorweave.distribute.interpreter import _cost
from tensorweave.distribute.planner import _nbytes

_S0, _B1 = (S(0),), (B,)

_LOCAL_STEPS = ("slice", "fill", "pad")


def _nd(nd):
    return "(" + ", ".join(map(repr, nd)) + ("," if len(nd) == 1 else "") + ")"


def _size(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


class Explanation:
    """The planner's decisions for one call signature (see the module docstring)."""

    def __init__(self, name, placement, seconds, ops, collectives, memory, stages=(), transfers=(), pipeline=None,
                 results=()):
        self.name, self.placement, self.seconds = name, placement, seconds
        # the function's global results: their layouts and the bytes reading their logical values moves
        # (outside the plan: what the joint search priced them at, planner.PRICE_OUTPUTS)
        self.results = list(results)
        self.ops, self.collectives, self.memory = ops, collectives, memory
        self.pipeline = pipeline      # micro-batched (plan_pipeline.py): the schedule and its bubble
        # several placements (pipeline stages in one function): the segments and the transfers between them
        self.stages, self.transfers = list(stages), list(transfers)

    @property
    def total_bytes(self):
        """Bytes moved between ranks per call (all collectives and transfers)."""
        return sum(c["bytes"] for c in self.collectives) + sum(t["bytes"] for t in self.transfers)

    @property
    def nested_collectives(self):
        """How many collectives the control-flow bodies hold (each runs every time its body runs)."""
        def count(ops):
            return sum(len(b["collectives"]) + count(b["ops"]) for o in ops for b in o.get("bodies", ()))
        return count(self.ops)

    def to_dict(self):
        d = {"function": self.name, "placement": {"type": self.placement.type,
                                                  "ranks": self.placement.mesh.tolist()},
             "planning_seconds": self.seconds, "ops": [dict(o) for o in self.ops],
             "collectives": [dict(c) for c in self.collectives], "bytes_moved": self.total_bytes,
             "memory": [dict(m) for m in self.memory], "nested_collectives": self.nested_collectives,
             "results": [dict(r) for r in self.results],
             "results_read_bytes": sum(r["read_bytes"] for r in self.results)}
        if self.stages:
            d["segments"] = [dict(s) for s in self.stages]
            d["transfers"] = [dict(t) for t in self.transfers]
        if self.pipeline is not None:
            d["pipeline"] = dict(self.pipeline)
        return d

    def text(self):
        where = (f"{len(self.stages)} segments on " + ", ".join(
            f"ranks {st['placement']['ranks']}" for st in self.stages) if self.stages else
                 f"{self.placement.type} ranks {self.placement.mesh.tolist()}")
        nested = self.nested_collectives
        lines = [f"Plan of '{self.name}' on {where} "
                 f"(planned in {self.seconds * 1e3:.1f} ms): {len(self.ops)} ops, {len(self.collectives)} "
                 f"collectives" + (f", {len(self.transfers)} transfers" if self.stages else "")
                 + f" moving {_size(self.total_bytes)} per call"
                 + (f" (and {nested} inside control-flow bodies, listed under their op)" if nested else ""),
                 "", "ops:"]
        if self.pipeline is not None:
            pl = self.pipeline
            lines[1:1] = [f"pipeline: {len(pl['stages'])} stages x {pl['micro_batches']} micro-batches, "
                          f"{pl['schedule']}: bubble fraction {pl['bubble_fraction']:.3f} (idle slots / all slots); "
                          "the segments below run once per micro-batch"] + ["  " + g for g in pl["grid"].splitlines()]
        w = max([len(o["name"]) for o in self.ops] + [4])
        segment = None
        for o in self.ops:
            if o.get("segment") is not None and o["segment"] != segment:
                segment = o["segment"]
                lines.append(f" segment {segment} on ranks {o['placement']}:")
            lines += _op_lines(o, w, "  ")
        lines += ["", "collectives:" if self.collectives else "collectives: none"]
        for c in self.collectives:
            lines.append(_collective_line(c, "  "))
        if self.stages:
            lines += ["", "transfers between placements:" if self.transfers else "transfers between placements: none"]
            for t in self.transfers:
                lines.append(f"  {t['kind']:<14} ranks {t['from']['ranks']} {t['from']['sbp']} -> ranks "
                             f"{t['to']['ranks']} {t['to']['sbp']}  {_size(t['bytes']):>10}  {t['dtype']}{t['shape']} "
                             f"{t['tensor']} for '{t['op']}' (segment {t['segment']})"
                             + (f"  [{t['line']}]" if t["line"] else ""))
        laid = [r for r in self.results if r["read_bytes"]]
        if laid:
            lines += ["", "results not replicated (reading their values moves these bytes after the call):"]
            lines += [f"  {r['tensor']} {r['sbp']}  {_size(r['read_bytes']):>10}" for r in laid]
        lines += ["", "peak memory per rank (activations, estimated from local shapes and liveness):"]
        for m in self.memory:
            lines.append(f"  rank {m['rank']}: peak {_size(m['peak_bytes'])}, variables {_size(m['variable_bytes'])}"
                         + (f" (segment {m['segment']})" if "segment" in m else ""))
        return "\n".join(lines)

    __str__ = text

    def __repr__(self):
        return (f"<Explanation of '{self.name}': {len(self.ops)} ops, {len(self.collectives)} collectives, "
                f"{self.total_bytes} bytes moved>")


def _op_lines(o, w, indent):
    ins = " ".join(o["inputs"]) or "-"
    outs = " ".join(o["outputs"]) or "-"
    sig = o["signature"] if len(o["signature"]) <= 40 else o["signature"][:37] + "..."
    lines = [f"{indent}{o['name']:<{w}}  {o['type']:<18} {sig:<28} in {ins} -> out {outs}"
             + (f"  [{o['line']}]" if o["line"] else "")]
    for body in o.get("bodies", ()):      # a control-flow op's bodies, indented under it
        lines.append(f"{indent}    {body['body']}: {len(body['ops'])} ops, {len(body['collectives'])} collectives "
                     f"moving {_size(body['bytes_moved'])} per {body['per']}")
        bw = max([len(b["name"]) for b in body["ops"]] + [4])
        for b in body["ops"]:
            lines += _op_lines(b, bw, indent + "      ")
        for c in body["collectives"]:
            lines.append(_collective_line(c, indent + "      "))
    return lines


def _collective_line(c, indent):
    what = (f"weight {c['tensor']} after" if c.get("zero") else f"for input {c['input']} of" if "input" in c
            else "for")
    return (f"{indent}{c['kind']:<14} mesh axis {c['mesh_axis']}  {c['before']} -> {c['after']}  "
            f"{_size(c['bytes']):>10}  {c['dtype']}{c['shape']} {what} "
            f"'{c['op']}'" + (" (ZeRO-1)" if c.get("zero") else "")
            + (f" ({_size(c['gather_bytes'])} as per-rank copies; {c['note']})" if "note" in c else "")
            + (f" (segment {c['segment']})" if "segment" in c else "")
            + (f"  [{c['line']}]" if c["line"] else ""))


def _signature(p):
    if p.kind == "global":
        return " x ".join(f"[{s}]" for s in p.sigs) if len(p.sigs) > 1 else str(p.sigs[0])
    return {"local": "local (every rank)", "once": "once (first rank, broadcast)", "pin": "pinned (to_global)"}[p.kind]


def _zero_gathers(gp, op, p):
    """The all-gather of each weight a ZeRO-1 update wrote in shards (``_GatherRows``). On in-process
    ranks with :data:`planner.SHARED_ZERO_STORAGE` the ranks keep such a weight in one buffer
    (``zero_update.share_storage``): each writes its rows in place and the others' rows are
    already there, so the entry is a ``shared_view`` moving 0 bytes, with the bytes a gather of
    per-rank copies would move (``gather_bytes``) and a note on when the copies come back."""
    out = []
    shared = _shares_zero_storage(gp.placement)
    for w, _ in p.zero:
        t = op.inputs[w]
        var = t.op.attrs["variable"]
        shape, dtype = tuple(var.shape.as_list()), var.dtype.np_dtype
        moved = _cost(shape, dtype, gp.placement, _S0, _B1)
        entry = {"kind": "all_gather", "mesh_axis": 0, "before": _nd(_S0), "after": _nd(_B1),
                 "bytes": moved, "tensor": var.name, "shape": list(shape),
                 "dtype": var.dtype.name, "op": op.name, "input": w, "line": op.traceback, "zero": True}
        if shared:
            entry.update(kind="shared_view", bytes=0, gather_bytes=moved, note=SHARED_VIEW_NOTE)
        out.append(entry)
    return out


#: the note on a ZeRO-1 weight the in-process ranks keep in one buffer (``shared_view``)
SHARED_VIEW_NOTE = ("in-process ranks keep this weight in one buffer: each rank writes its rows in place, "
                    "nothing is copied (a rank plan reading the weight after its gradient bucket starts "
                    "keeps per-rank copies, gathered as all_gather)")


def _shares_zero_storage(placement):
    """True where ZeRO-1 weights on ``placement`` live in one buffer the ranks share: in-process
    ranks (no Ray cluster) with :data:`planner.SHARED_ZERO_STORAGE` on."""
    from tensorweave.distribute import planner
    from tensorweave.distribute.ray.pieces import cluster_for
    return bool(planner.SHARED_ZERO_STORAGE) and cluster_for(placement) is None


def _memory(gp, index):
    spec, _ = gp.rank_spec(index)
    sizes = gp.slot_bytes[index]
    preset = {s for s, _ in spec.presets}
    live = sum(sizes.get(s, 0) for s in spec.feed_slots) + sum(sizes.get(s, 0) for s in preset)
    peak = live
    for node, frees in zip(spec.nodes, spec.frees):
        live += sum(sizes.get(s, 0) for s in node.out_slots())
        peak = max(peak, live)
        live -= sum(sizes.get(s, 0) for s in frees if s not in preset)
    variables = sum(_nbytes(d["shape"].as_list(), d["dtype"]) for d in spec.resources
                    if d["kind"] == "variable" and d["shape"].is_fully_defined())
    return {"rank": gp.placement.ranks[index], "peak_bytes": int(peak), "variable_bytes": int(variables)}


def explain(fn, *args, **kwargs):
    """An :class:`Explanation` of how ``fn`` (a ``tw.function`` or a Python function) is planned
    for these arguments (global tensors); nothing runs. See the module docstring."""
    from tensorweave.distribute.plan_pipeline import PlannedPipeline
    from tensorweave.runtime.function import Function, function
    if isinstance(fn, PlannedPipeline):
        return fn.explain(*args)
    f = fn if isinstance(fn, Function) else function(fn)
    cf = f.get_concrete_function(*args, **kwargs)
    planned = getattr(cf, "_global", None)
    if planned is None:
        raise errors.InvalidArgumentError(
            f"explain: no global tensor reaches '{f._name}' with these arguments, so nothing is planned over ranks. "
            "Hint: pass global tensors (x.to_global(placement=..., sbp=...)) or use global variables")
    if hasattr(planned, "segments"):      # several placements (plan_placements.py)
        return _explain_segments(f._name, planned)
    gp = planned.plan
    ops, collectives = _ops_and_collectives(gp)
    memory = [_memory(gp, i) for i in range(gp.placement.size)]
    return Explanation(f._name, gp.placement, gp.seconds, ops, collectives, memory, results=_results(gp, cf.outputs))


def _results(gp, outputs):
    """Per global result of the plan ``gp``: its layout and the bytes its logical value's read moves."""
    out, b = [], (B,) * gp.placement.ndim
    for t in outputs:
        lay = gp.layouts.get(id(t))
        if lay is None or id(t) in gp.local or getattr(lay, "_shape", None) is None or lay._dtype is _dt.resource:
            continue
        out.append({"tensor": t.name, "sbp": _nd(lay._sbp), "read_bytes": _cost(
            tuple(lay._shape), lay._dtype.np_dtype, gp.placement, tuple(lay._sbp), b)})
    return out


def _ops_and_collectives(gp):
    """One planned graph's op entries and the collectives its boxings run."""
    ops, collectives, seen = [], [], set()
    for op in gp.ops:
        p = gp.op_plans[id(op)]
        if p.kind in ("const", "variable", "metadata", "alias"):     # alias: a decomposition's ops follow
            continue
        ins = [_nd(gp.layouts[id(t)]._sbp) if id(t) not in gp.local else "local" for t in op.inputs]
        outs = [_nd(gp.layouts[id(t)]._sbp) if id(t) not in gp.local else "local" for t in op.outputs]
        if p.kind == "global":
            ins = [_nd(nd) for nd in p.in_nd]
        entry = {"name": op.name, "type": op.type, "kind": p.kind, "signature": _signature(p), "inputs": ins,
                 "outputs": outs, "line": op.traceback}
        if p.zero:                # ZeRO-1 (zero_update.py): these weights are updated in shards
            entry["zero"] = [op.inputs[w].op.attrs["variable"].name for w, _ in p.zero]
            entry["signature"] = "ZeRO-1 " + entry["signature"]
        bodies = _bodies(gp, op)
        if bodies:                # control flow: its bodies' own plans (ops, collectives) nested under it
            entry["bodies"] = bodies
        ops.append(entry)
        for k, (t, plan) in enumerate(zip(op.inputs, p.plans)):
            if plan is None or (id(t), plan.dst_sbp) in seen:
                continue        # boxed once, shared by every reader (as in the rank plans)
            seen.add((id(t), plan.dst_sbp))
            collectives += _steps(plan, t, op.name, op.traceback, input=k)
        collectives += _zero_gathers(gp, op, p)
    return ops, collectives


def _steps(plan, t, op_name, line, **where):
    """The collective steps of boxing ``plan`` of tensor ``t`` for ``op_name`` (local re-layouts left out)."""
    return [dict({"kind": step.kind, "mesh_axis": step.mesh_axis, "before": _nd(step.before), "after": _nd(step.after),
                  "bytes": step.bytes, "tensor": t.name, "shape": list(plan.shape), "dtype": plan.dtype.name,
                  "op": op_name, "line": line}, **where)
            for step in plan.steps if step.kind not in _LOCAL_STEPS]


# plan_control.py's names of a control-flow op's bodies
_BODY_NAMES = {"then_plan": "then branch", "else_plan": "else branch", "cond_plan": "loop condition",
               "body_plan": "loop body", "plan": "loop gradient body"}


def _bodies(gp, op):
    """Per body of control-flow op ``op`` planned on split layouts (``plan_control.py``): its ops and
    the collectives its nested rank plans run (each time the body runs: per iteration of a loop),
    the boxing of its outputs to the layouts the op returns included."""
    planned = getattr(gp, "nested", {}).get(id(op))
    if not planned:
        return None
    out = []
    for key, body in planned.items():
        name = _BODY_NAMES.get(key, key)
        b_ops, b_coll = _ops_and_collectives(body.gp)
        for k, (t, plan) in enumerate(zip(body.gp.fetches, body.out_plans)):
            if plan is not None:
                b_coll += _steps(plan, t, f"{op.name} ({name} output {k})", op.traceback, output=k)
        out.append({"body": name, "per": "iteration" if "loop" in name else "call", "ops": b_ops,
                    "collectives": b_coll, "bytes_moved": sum(c["bytes"] for c in b_coll)
                    + sum(b["bytes_moved"] for o in b_ops for b in o.get("bodies", ()))})
    return out


def _where(placement):
    return {"type": placement.type, "ranks": placement.mesh.tolist()}


def explain_pipeline(name, planned, segments, info):
    """A micro-batched function on several placements (``plan_pipeline.py``): one micro-batch's
    forward and backward ``segments`` as :func:`_explain_segments` lists them, and ``info`` (the
    schedule, its bubble fraction, the grid) as ``pipeline``."""
    e = _explain_segments(name, planned, segments)
    e.pipeline = info
    return e


def _explain_segments(name, planned, segments=None):
    """A function on several placements: each segment's ops and collectives tagged with its
    placement and segment number, and the transfers between placements (each step of the
    boxing plan that brings a value over, with its bytes)."""
    ops, collectives, memory, transfers, stages = [], [], [], [], []
    for k, seg in enumerate(planned.segments if segments is None else segments):
        gp = seg.plan
        s_ops, s_coll = _ops_and_collectives(gp)
        for e in s_ops + s_coll:
            e["segment"], e["placement"] = k, seg.placement.mesh.tolist()
        for t in seg.feeds:
            if id(t) not in seg.transfers:
                continue
            plan, src, reader = seg.transfers[id(t)]
            for step in plan.steps:
                if step.kind in _LOCAL_STEPS:
                    continue
                transfers.append({"kind": step.kind, "segment": k, "tensor": t.name, "shape": list(plan.shape),
                                  "dtype": plan.dtype.name, "from": dict(_where(plan.src_placement), sbp=_nd(src[1])),
                                  "to": dict(_where(plan.dst_placement), sbp=_nd(plan.dst_sbp)),
                                  "before": _nd(step.before), "after": _nd(step.after), "mesh_axis": step.mesh_axis,
                                  "bytes": step.bytes, "op": reader.name, "line": reader.traceback})
        ops += s_ops
        collectives += s_coll
        for i in range(seg.placement.size):
            memory.append(dict(_memory(gp, i), segment=k))
        stages.append({"segment": k, "placement": _where(seg.placement), "ops": len(s_ops)})
    return Explanation(name, planned.placement, planned.seconds, ops, collectives, memory, stages, transfers)


__all__ = ["explain", "Explanation"]
