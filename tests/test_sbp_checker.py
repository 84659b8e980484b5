"""The brute-force SBP checker: every op with a rule, every candidate signature, against the
single-device result.

Table-driven from the op-test table (``tests/opinfos``): each OpInfo's samples run once
eagerly (with their gradients) under a recording interpreter, which keeps every primitive
call it sees (op type, attrs, input and output values). For each recorded call of an op
that has a rule (``sbp_rules.rule_for``), every signature the rule offers is run on
simulated ranks — 1-D meshes of 2 and 3 ranks, and a 2x2 mesh with EVERY pair of per-axis
signatures — with sizes that do not divide (op-table shapes like (3, 4), split twice on the
2x2 mesh, leave uneven and empty shards):

* inputs are laid out as the signature says: ``layout.split_to_pieces``'s slices, and for
  ``P`` inputs RANDOM shares that combine to the value (value + zeros would let a wrong
  ``P`` rule of a nonlinear op pass: relu(v) + relu(0) = relu(v));
* each rank runs the op's CPU kernel on its pieces, with the op type and attrs its
  signatures' ``local`` hooks give (chained in mesh-axis order, each seeing the rank's
  :class:`ShardInfo` built from ``layout.shard_slices``);
* each rank's output piece must have its slice's shape, ``B`` outputs must agree across
  that mesh axis, and ``layout.assemble`` of the pieces must equal the single-device output.

``test_checker_catches_wrong_rules`` injects wrong rules and wrong hooks and shows they fail.

Cost: the exhaustive 2x2 mesh runs ~2.2x the pairs the former sample of 8 per call did (5,703
vs 2,553 on the op table). A run is ~3 ms of which the kernels are a small part; what dominated
was the checking itself: ``np.testing.assert_allclose`` (its error-message machinery runs even
when values agree: ~27% of a run), ``Placement.coords`` (an ``np.unravel_index`` per rank per
piece, 120k calls: ~11%) and re-slicing per run. So values are compared with ``np.allclose``
first (``assert_allclose`` only to word a failure) and mesh coordinates and shard slices are
computed once per (mesh, shape, layout). Session 14: ``np.allclose`` was then ~20 % of a run (its
``isclose`` wrapper; ~3.8 ms a run on the loaded Zen 3), so bit-identical results are accepted by a
byte comparison first.
"""
import functools
import itertools
import zlib

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core import dtypes as _dt
from tensorweave.core.dispatch import EagerInterpreter, interpreter_scope
from tensorweave.core.registry import get_op
from tensorweave.core.sbp import B, P, S, Broadcast, SbpInput, ShardInfo, Signature, Split
from tensorweave.core.sbp_rules import embed_hook, rule_for
from tensorweave.distribute import layout
from tensorweave.distribute.decompositions import DECOMPOSITIONS

MESHES = (layout.Placement("cpu", [0, 1]), layout.Placement("cpu", [0, 1, 2]),
          layout.Placement("cpu", [[0, 1], [2, 3]]))
CALLS_PER_OP = 2           # recorded calls checked per op type (distinct input shapes)
SAMPLES_PER_INFO = 1        # op-table samples recorded per OpInfo (kernels compile per shape class)
PAIRS_PER_CALL = None      # per-axis signature pairs tried on the 2x2 mesh per call: None, every pair
# OpInfos recorded by hand instead (_rnn_calls: float64 with gradients, batches to split on 3 ranks)
SKIP_TABLES = ("rnn.",)


class Call:
    """One recorded primitive call: what the checker replays on simulated ranks."""

    def __init__(self, op_type, attrs, inputs, outputs, source="", fresh=None, variables=None):
        self.op_type, self.attrs, self.inputs, self.outputs = op_type, dict(attrs), inputs, outputs
        self.source = source
        self.fresh = fresh          # () -> attrs made anew per run (a random op's stream at its start)
        # {input index: the variable's value after the op}: inputs[i] is the value before; each
        # rank gets a variable holding its piece
        self.variables = variables or {}
        # {output index: function}: an opaque byte output (an RNN's reserve) compared as what the
        # function makes of it (the floats it holds: rank-local GEMMs over fewer rows round differently)
        self.views = {}
        # {input index: SBP}: a variable handle's layout as the rule sees it (the planner's SbpInput.sbp)
        self.handle_sbp = {}

    def run_attrs(self):
        return {**self.attrs, **(self.fresh() if self.fresh else {})}

    def key(self):
        return (self.op_type, tuple((a.shape, a.dtype.str) for a in self.inputs), repr(sorted(self.attrs.items())))

    def __repr__(self):
        return f"{self.op_type}{[a.shape for a in self.inputs]} {self.attrs} (from {self.source})"


class Recorder(EagerInterpreter):
    """Runs ops eagerly and keeps every call whose inputs and outputs are arrays."""
    name = "sbp-recorder"

    def __init__(self, source=""):
        self.calls, self.source = [], source

    def execute(self, opdef, inputs, attrs, name):
        out = super().execute(opdef, inputs, attrs, name)
        outs = out if isinstance(out, tuple) else (out,)
        values = [getattr(t, "_value", None) for t in tuple(inputs) + outs]
        if all(isinstance(v, (np.ndarray, np.generic)) for v in values):
            attrs = {k: v for k, v in (attrs or {}).items() if not k.startswith("_")}
            self.calls.append(Call(opdef.name, attrs, [np.asarray(v) for v in values[:len(inputs)]],
                                   [np.asarray(v) for v in values[len(inputs):]], self.source))
        return out


# ---- laying inputs out with random partial shares -------------------------------------------
def _random_shares(value, n, kind, rng):
    """``n`` arrays that combine (by ``kind``) to ``value``, none of them the value itself
    where that can be avoided."""
    value = np.asarray(value)
    dt = value.dtype
    if n == 1:
        return [value.copy()]
    if dt == np.bool_:
        owner = rng.integers(0, n, size=value.shape)
        noise = [rng.random(value.shape) < 0.5 for _ in range(n)]
        if kind in ("max", "sum"):          # or
            return [np.where(owner == i, value, value & noise[i]) for i in range(n)]
        return [np.where(owner == i, value, value | noise[i]) for i in range(n)]   # and
    if kind == "sum":
        if dt.kind in "iu":
            others = [rng.integers(-3, 4, size=value.shape).astype(dt) for _ in range(n - 1)]
        else:
            scale = np.where(np.isfinite(value), np.abs(value) + 1, 1) if value.size else np.abs(value)
            noise = (lambda: rng.standard_normal(value.shape) + 1j * rng.standard_normal(value.shape)) \
                if dt.kind == "c" else (lambda: rng.standard_normal(value.shape))
            others = [(noise() * scale).astype(dt) for _ in range(n - 1)]
        with np.errstate(over="ignore", invalid="ignore"):
            last = value - np.sum(others, axis=0).astype(dt)
        return [last.astype(dt)] + others
    if kind in ("max", "min"):
        owner = rng.integers(0, n, size=value.shape)
        sign = -1 if kind == "max" else 1
        shares = []
        for i in range(n):
            if dt.kind in "iu":
                info = np.iinfo(dt)
                moved = np.clip(value.astype(np.int64) + sign * rng.integers(0, 4, size=value.shape),
                                info.min, info.max).astype(dt)
            else:
                with np.errstate(invalid="ignore"):
                    moved = (value + sign * rng.uniform(0, 2, size=value.shape)).astype(dt)
            shares.append(np.where(owner == i, value, moved))
        return shares
    # prod: random non-zero factors on all but one share (ints: ones, no exact inverse)
    if dt.kind in "iu":
        return [value.copy()] + [np.ones_like(value) for _ in range(n - 1)]
    others = [(rng.uniform(0.5, 2.0, size=value.shape) * rng.choice([-1, 1], size=value.shape)).astype(dt)
              for _ in range(n - 1)]
    return [(value / np.prod(others, axis=0)).astype(dt)] + others


@functools.lru_cache(maxsize=None)
def _coords(placement):
    """Every rank's mesh coordinates (``Placement.coords`` unravels an index per call)."""
    return [placement.coords(r) for r in range(placement.size)]


@functools.lru_cache(maxsize=65536)
def _slices(shape, placement, nd_sbp):
    return layout.shard_slices(shape, placement, nd_sbp)


def _assert_close(got, full, tol, where):
    """``np.testing.assert_allclose`` with its message made only on a failure (the fast check
    first: the checker compares thousands of small arrays)."""
    got, full = np.asarray(got), np.asarray(full)
    if got.shape == full.shape:
        if got.dtype == full.dtype and got.tobytes() == full.tobytes():
            return          # the same bits (most splits of elementwise ops): close, without isclose's cost
        if full.dtype.kind in "fc" and got.dtype.kind in "fc":
            if np.allclose(got, full, *tol, equal_nan=True):
                return
        elif np.array_equal(got, full):
            return
    np.testing.assert_allclose(got, full, *tol, err_msg=where)


def lay_out(value, placement, nd_sbp, rng):
    """Per-rank pieces of ``value`` laid out as ``nd_sbp``: ``layout.split_to_pieces``'s slices,
    with random shares for ``P`` (mesh axes in order, like the layout definition)."""
    value = np.asarray(value)
    grid = {(): value}
    for mesh_axis, s in enumerate(nd_sbp):
        n = placement.mesh_shape[mesh_axis]
        nxt = {}
        for coords, piece in grid.items():
            if isinstance(s, Split):
                for i, (lo, hi) in enumerate(layout.balanced_bounds(piece.shape[s.axis], n)):
                    nxt[coords + (i,)] = np.take(piece, np.arange(lo, hi), axis=s.axis)
            elif isinstance(s, Broadcast):
                for i in range(n):
                    nxt[coords + (i,)] = piece
            else:
                for i, share in enumerate(_random_shares(piece, n, s.kind, rng)):
                    nxt[coords + (i,)] = share
        grid = nxt
    pieces = [np.array(grid[c], order="C") for c in _coords(placement)]
    if value.dtype.kind not in "fc":      # the shares must be a layout of the value (floats: up to rounding)
        np.testing.assert_array_equal(layout.assemble(pieces, value.shape, placement, nd_sbp), value)
    return pieces


# ---- running one signature choice on simulated ranks -------------------------------------
def _tolerance(*dtypes):
    """(rtol, atol) for the least precise float dtype among ``dtypes`` (partial shares are
    rounded in the input's dtype)."""
    floats = [np.dtype(d) for d in dtypes if np.dtype(d).kind in "fc" or np.dtype(d).name == "bfloat16"]
    if not floats or all(d in (np.float64, np.complex128) for d in floats):
        return 1e-7, 1e-9
    if all(d.itemsize >= 4 and d.name != "bfloat16" for d in floats):
        return 2e-4, 2e-5
    return 2e-2, 2e-2


def run_signature(call, placement, sigs, rng):
    """Runs ``call`` with one signature per mesh axis (``sigs``); raises AssertionError with
    the op, the signatures and the mesh when the result is not the single-device one."""
    where = f"{call!r} with {' x '.join(f'[{s}]' for s in sigs)} on mesh {list(placement.mesh_shape)}"
    n_in = len(call.inputs)
    nd_in = [tuple(s.inputs[i] for s in sigs) for i in range(n_in)]
    nd_out = [tuple(s.outputs[j] for s in sigs) for j in range(len(call.outputs))]
    assert all(len(s.inputs) == n_in for s in sigs), f"{where}: a signature has the wrong number of inputs"
    assert all(len(s.outputs) == len(call.outputs) for s in sigs), f"{where}: wrong number of outputs"
    for nd, a in zip(nd_in + nd_out, call.inputs + call.outputs):
        for s in nd:
            assert not isinstance(s, Split) or s.axis < a.ndim, f"{where}: splits axis {s.axis} of rank {a.ndim}"
    pieces = [lay_out(a, placement, nd, rng) for a, nd in zip(call.inputs, nd_in)]
    in_slices = [_slices(a.shape, placement, nd) for a, nd in zip(call.inputs, nd_in)]
    out_slices = [_slices(a.shape, placement, nd) for a, nd in zip(call.outputs, nd_out)]
    coords = _coords(placement)
    outs = []
    for r in range(placement.size):
        info = ShardInfo([a.shape for a in call.inputs], [sl[r] for sl in in_slices],
                         [a.shape for a in call.outputs], [sl[r] for sl in out_slices],
                         coords[r], placement.mesh_shape)
        op_type, attrs = call.op_type, call.run_attrs()
        for s in sigs:
            if s.local is not None:
                op_type, attrs = s.local(op_type, attrs, info)
        args = [tw.Variable(p[r]) if i in call.variables else p[r] for i, p in enumerate(pieces)]
        try:
            with np.errstate(all="ignore"):
                out = get_op(op_type).kernel("CPU")(*args, **attrs)
        except Exception as e:      # noqa: BLE001 - a rank that cannot run its pieces is a wrong rule
            raise AssertionError(f"{where}: rank {r}'s {op_type} kernel raised {type(e).__name__}: {e}") from e
        out = list(out) if isinstance(out, (tuple, list)) else [out]
        assert len(out) == len(call.outputs), f"{where}: rank {r} gave {len(out)} outputs"
        for j, (o, sl) in enumerate(zip(out, out_slices)):
            want = tuple(x.stop - x.start for x in sl[r])
            assert np.shape(o) == want, f"{where}: rank {r} output {j} has shape {np.shape(o)}, its slice {want}"
        outs.append([np.asarray(o) for o in out] + [args[i].numpy() for i in sorted(call.variables)])
    finals = call.outputs + [call.variables[i] for i in sorted(call.variables)]
    for j, (full, nd) in enumerate(zip(finals, nd_out + [nd_in[i] for i in sorted(call.variables)])):
        per_rank = [call.views[j](o[j]) if j in call.views else o[j] for o in outs]
        full = call.views[j](full) if j in call.views else full
        assert all(p.dtype == full.dtype for p in per_rank), f"{where}: output {j} dtype differs"
        tol = _tolerance(full.dtype, *[a.dtype for a in call.inputs])
        _check_broadcasts(per_rank, placement, nd, tol, f"{where}: output {j}")
        got = layout.assemble(per_rank, full.shape, placement, nd)
        if full.dtype.kind in "fc":
            _assert_close(got, full, tol, where)
        else:
            np.testing.assert_array_equal(got, full, err_msg=where)


def _check_broadcasts(pieces, placement, nd_sbp, tol, where):
    """``B`` on a mesh axis: the values made by combining the later mesh axes agree along it
    (``layout.assemble`` reads only coordinate 0 there, so it cannot see a disagreement)."""
    for m in range(placement.ndim):
        if not isinstance(nd_sbp[m], Broadcast):
            continue
        inner = layout.Placement("cpu", np.arange(int(np.prod(placement.mesh_shape[m + 1:], dtype=int)))
                                 .reshape(placement.mesh_shape[m + 1:] or (1,)))
        groups = {}
        for r, c in enumerate(_coords(placement)):
            groups.setdefault((c[:m], c[m]), []).append(pieces[r])
        for (outer, i), group in groups.items():
            sub = nd_sbp[m + 1:] or (Broadcast(),)
            value = _combine(group, inner, sub)
            first = _combine(groups[(outer, 0)], inner, sub)
            _assert_close(value, first, tol if value.dtype.kind in "fc" else (0, 0),
                          f"{where} is B on mesh axis {m} but differs at coordinate {i}")


def _combine(pieces, placement, nd_sbp):
    """``layout.assemble`` without its final shape check (on a sub-mesh of the pieces)."""
    grid = np.empty(placement.mesh_shape, dtype=object)
    for index, piece in enumerate(pieces):
        grid[_coords(placement)[index]] = piece
    for m in reversed(range(placement.ndim)):
        s, reduced = nd_sbp[m], np.empty(grid.shape[:-1], dtype=object)
        for outer in itertools.product(*map(range, grid.shape[:-1])):
            row = [grid[outer + (i,)] for i in range(grid.shape[-1])]
            reduced[outer] = (np.concatenate(row, axis=s.axis) if isinstance(s, Split) else row[0]
                              if isinstance(s, Broadcast) else layout.combine_partial(s.kind, row))
        grid = reduced
    return np.asarray(grid[()])


def check_call(call, rule=None, rng=None, pairs=PAIRS_PER_CALL):
    """Every signature of the op's rule on each mesh (on the 2x2 mesh every pair of per-axis
    signatures; ``pairs``: a sample of that many instead); returns the number of (signature
    choice, mesh) runs."""
    rng = rng or np.random.default_rng(zlib.crc32(repr(call.key()).encode()))
    rule = rule or rule_for(get_op(call.op_type))
    specs = [SbpInput((), _dt.resource, call.handle_sbp.get(i)) if i in call.variables
             else SbpInput(a.shape, _dt.from_numpy(a.dtype)) for i, a in enumerate(call.inputs)]
    runs = 0
    for placement in MESHES:
        # what the planner gives rules besides the op's attrs: the inferred output shapes and the mesh
        sigs = rule(specs, {**call.attrs, "_out_shapes": [a.shape for a in call.outputs],
                            "_mesh_shape": placement.mesh_shape})
        assert sigs and all(s == type(s)(s.inputs, s.outputs) for s in sigs)
        if placement.ndim == 1:
            choices = [(s,) for s in sigs]
        else:
            choices = list(itertools.product(sigs, repeat=2))
            if pairs is not None and len(choices) > pairs:
                keep = rng.choice(len(choices), size=pairs, replace=False)
                choices = [choices[i] for i in sorted(keep)]
        for choice in choices:
            run_signature(call, placement, choice, rng)
            runs += 1
    return runs


# ---- the op table's calls ------------------------------------------------------------------
def _table():
    from test_op_table import ALL_OPS, _flat, _samples
    return ALL_OPS, _flat, _samples


def _dtype_for(info):
    for d in (tw.float64, tw.float32, tw.int64, tw.int32):
        if d in info.dtypes:
            return d
    return info.dtypes[0]


def _cotangent(shape):
    return np.cos(np.arange(int(np.prod(shape)), dtype=np.float64)).reshape(shape)


def record_table_calls():
    """The op table's primitive calls (forward, and gradients for float64 OpInfos), at most
    :data:`CALLS_PER_OP` per op type with distinct input shapes/attrs."""
    all_ops, flat, samples = _table()
    kept, seen = {}, set()
    for info in all_ops:
        if info.name.startswith(SKIP_TABLES):
            continue
        dtype = _dtype_for(info)
        rec = Recorder(info.name)
        for s in samples(info, dtype)[:SAMPLES_PER_INFO]:
            args = [tw.constant(a) if isinstance(a, np.ndarray) else a for a in s.args]
            xs = [a for a in args if isinstance(a, tw.Tensor) and a.dtype == tw.float64]
            try:
                with interpreter_scope(rec), tw.GradientTape(persistent=False) as tape:
                    for x in xs:
                        tape.watch(x)
                    outs = [o for o in flat(info.op(*args, **s.kwargs)) if isinstance(o, tw.Tensor)]
                    ys = [o for o in outs if o.dtype == tw.float64]
                    loss = None
                    if info.grad and xs and ys:
                        loss = tw.add_n([tw.reduce_sum(y * tw.constant(_cotangent(y.numpy().shape))) for y in ys])
                    if loss is not None:
                        tape.gradient(loss, xs)
            except Exception:       # noqa: BLE001 - samples that raise are tested elsewhere
                continue
        for c in rec.calls:
            if c.key() in seen:
                continue
            seen.add(c.key())
            lst = kept.setdefault(c.op_type, [])
            if len(lst) < CALLS_PER_OP:
                lst.append(c)
    return kept


_CALLS = None


def table_calls():
    global _CALLS
    if _CALLS is None:
        _CALLS = record_table_calls()
    return _CALLS


def _ops_with_rules():
    from tensorweave.core.registry import registered_ops
    return sorted(n for n, d in registered_ops().items() if rule_for(d) is not None)


def _extra_calls():
    """Hand-written calls of ops the op table does not run (random streams, variables)."""
    out = {}
    for c in _random_calls() + _state_calls() + _update_calls() + _hand_calls() + _rnn_calls():
        out.setdefault(c.op_type, []).append(c)
    return out


_EXTRA = None


def extra_calls():
    global _EXTRA
    if _EXTRA is None:
        _EXTRA = _extra_calls()
    return _EXTRA


@pytest.mark.parametrize("op_type", _ops_with_rules())
def test_rule_gives_the_single_device_result(op_type):
    calls = table_calls().get(op_type, [])
    assert calls or op_type in extra_calls(), (
        f"{op_type} has an SBP rule but no op-table sample records it: add an OpInfo or a hand-written call here")
    for call in calls:
        check_call(call)


@pytest.mark.parametrize("group", ["random", "state", "update", "hand", "rnn"])
def test_hand_written_calls_give_the_single_device_result(group):
    """The calls the op table does not make (random streams, variables and optimizer updates,
    RNNs on splittable batches, pad constants, reshapes of split axes...), checked alike; one test
    per group of :func:`_extra_calls` (22.6 s of CPU as one test: split, xdist workers share it)."""
    calls = globals()[f"_{group}_calls"]()
    assert calls
    for call in calls:
        check_call(call)


def _call(op_type, *inputs, **attrs):
    """A call recorded from running ``op_type`` once on ``inputs`` (NumPy arrays)."""
    rec = Recorder("hand-written")
    with interpreter_scope(rec):
        tw.raw_op(op_type, [tw.constant(a) for a in inputs], attrs)
    return rec.calls[-1]


def _fails(call, rule):
    try:
        check_call(call, rule=lambda inputs, attrs: [Signature([B] * len(inputs), [B] * len(call.outputs))] + rule)
    except AssertionError:
        return True
    return False


def test_checker_catches_wrong_rules():
    rng = np.random.default_rng(3)
    x, w = rng.normal(size=(5, 4)), rng.normal(size=(4, 3))
    mm = _call("MatMul", x, w, transpose_a=False, transpose_b=False)
    assert not _fails(mm, [Signature([S(0), B], [S(0)]), Signature([S(1), S(0)], [P])])
    assert _fails(mm, [Signature([S(0), S(0)], [S(0)])])          # the classic illegal one
    assert _fails(mm, [Signature([S(1), S(0)], [B])])             # partial sums claimed complete
    assert _fails(mm, [Signature([B, S(1)], [S(0)])])             # wrong output axis
    relu = _call("Relu", x)
    # relu(v) + relu(0) = relu(v): with value + zeros shares this wrong rule would pass; random shares catch it
    assert _fails(relu, [Signature([P], [P])])
    pieces = layout.split_to_pieces(x, MESHES[0], (P,))
    assert np.allclose(sum(np.maximum(p, 0) for p in pieces), np.maximum(x, 0))
    assert _fails(_call("Max", x, axis=1, keepdims=False), [Signature([S(1)], [P])])   # sum instead of max
    assert _fails(_call("Sum", x, axis=1, keepdims=False), [Signature([S(1)], [S(0)])])
    assert _fails(_call("Exp", x), [Signature([S(0)], [B])])       # B claimed where ranks differ
    # local hooks: a row-split table's gather needs each rank's row offset
    table, ids = rng.normal(size=(7, 3)), np.array([[6, 0], [2, 2], [5, 1]])
    gather = _call("GatherV2", table, ids, axis=0, batch_dims=0)
    right = [s for s in rule_for(get_op("GatherV2"))([SbpInput(table.shape), SbpInput(ids.shape)], gather.attrs)
             if s.inputs[0] == S(0)]
    assert right and not _fails(gather, right)

    def offset_zero(op_type, attrs, shard):
        return "SbpMaskedGather", {**attrs, "offset": 0, "limit": 7}
    assert _fails(gather, [Signature([S(0), B], [P])])                        # no hook: the kernel fails
    assert _fails(gather, [Signature([S(0), B], [P], offset_zero)])           # every rank thinks it has rows 0..
    reshape = _call("Reshape", rng.normal(size=(6, 2, 2)), np.array([6, 4]))
    assert _fails(reshape, [Signature([S(0), B], [S(0)])])                    # the target shape is not local
    # a merge of an axis that does not divide: the balanced splitter's extra rows do not scale
    merge = _call("Reshape", rng.normal(size=(3, 2)), np.array([6]))
    local_shape = [s for s in rule_for(get_op("Reshape"))([SbpInput((6, 2, 2)), SbpInput((2,))],
                                                          {"_out_shapes": [(6, 4)]}) if s.inputs[0] == S(0)][0].local
    assert _fails(merge, [Signature([S(0), B], [S(0)], local_shape)])
    assert not any(s.inputs[0] == S(0) for s in rule_for(get_op("Reshape"))(
        [SbpInput((3, 2)), SbpInput((1,))], {"_out_shapes": [(6,)], "_mesh_shape": (2,)}))
    # a cut axis: each rank's piece embedded in zeros (the hook), the pad constant on the first rank only
    pad = _call("PadV2", x, np.array([[2, 1], [0, 3]]), np.float64(1.5))
    assert not _fails(pad, [Signature([S(0), B, B], [P], embed_hook(0, 0, (2,)))])
    assert _fails(pad, [Signature([S(0), B, B], [P], embed_hook(0))])        # every rank adds the constant
    assert _fails(pad, [Signature([S(0), B, B], [P])])                        # pieces padded as if whole
    assert _fails(pad, [Signature([S(0), B, B], [P], embed_hook(1, 0, (2,)))])  # embedded along the wrong axis


def _sig_strings(call):
    specs = [SbpInput(a.shape, _dt.from_numpy(a.dtype)) for a in call.inputs]
    return [str(s) for s in rule_for(get_op(call.op_type))(
        specs, {**call.attrs, "_out_shapes": [a.shape for a in call.outputs], "_mesh_shape": (2,)})]


def test_cut_axes_of_linear_ops_give_partial_sums():
    """A split axis that the op slices, pads, tiles or reverses gives P (each rank's piece embedded
    in zeros), an untouched one stays split; an empty axis is declined (every piece starts at 0,
    so no one rank would add a pad's constant). Each call runs through the checker."""
    rng = np.random.default_rng(21)
    x = rng.normal(size=(4, 3))
    cases = [
        (_call("Slice", x, np.array([1, 0]), np.array([2, 3])),
         ["B, B, B -> B", "S(1), B, B -> S(1)", "S(0), B, B -> P", "P, B, B -> P"]),
        (_call("PadV2", x, np.array([[0, 0], [1, 2]]), np.float64(2.0)),
         ["B, B, B -> B", "S(0), B, B -> S(0)", "S(1), B, B -> P", "P, B, P -> P"]),
        (_call("PadV2", np.zeros((0, 3)), np.array([[1, 1], [0, 0]]), np.float64(2.0)),
         ["B, B, B -> B", "S(1), B, B -> S(1)", "P, B, P -> P"]),
        (_call("PadV2", np.zeros((0, 3)), np.array([[1, 1], [1, 0]]), np.float64(2.0)),     # the next axis still cut
         ["B, B, B -> B", "S(1), B, B -> P", "P, B, P -> P"]),
        (_call("Tile", x, np.array([1, 2])), ["B, B -> B", "S(0), B -> S(0)", "S(1), B -> P", "P, B -> P"]),
        (_call("Tile", x[:, :1], np.array([1, 3])), ["B, B -> B", "S(0), B -> S(0)", "S(1), B -> P", "P, B -> P"]),
        (_call("ReverseV2", x, axis=(1,)), ["B -> B", "S(0) -> S(0)", "P -> P", "S(1) -> P"]),
        (_call("MirrorPad", x, np.array([[1, 2], [0, 0]]), mode="REFLECT"),
         ["B, B -> B", "S(1), B -> S(1)", "S(0), B -> P", "P, B -> P"]),
    ]
    for call, want in cases:
        assert _sig_strings(call) == want, call
        check_call(call)
    pad = cases[1][0]
    # on the 2x2 mesh an embedded axis beside an untouched split one, in both mesh-axis orders
    # (the hooks chain through each other's wrappers: SbpEmbedded inside or outside SbpReplaceInput)
    for call in [c for c, _ in cases if c.op_type in ("Slice", "MirrorPad") or c is pad]:
        specs = [SbpInput(a.shape) for a in call.inputs]
        sigs = rule_for(get_op(call.op_type))(specs, {**call.attrs, "_out_shapes": [a.shape for a in call.outputs]})
        cut = next(s for s in sigs if s.outputs == (P,) and isinstance(s.inputs[0], Split))
        kept = next(s for s in sigs if isinstance(s.outputs[0], Split))
        for pair in ((cut, kept), (kept, cut), (cut, cut)):
            run_signature(call, MESHES[2], pair, rng)
    # the hook lowers the op inside an earlier axis's wrapper, and merges a second embedded axis
    info = ShardInfo([(4, 3)], [(slice(2, 4), slice(1, 3))], [(4, 3)], [(slice(0, 4), slice(0, 3))], (1, 1), (2, 2))
    op, a = embed_hook(0)("SbpReplaceInput", {"op_type": "Tile", "op_attrs": {}, "index": 1, "value": 0}, info)
    assert (op, a["op_type"], a["op_attrs"]["op_type"], a["op_attrs"]["embeds"]) == (
        "SbpReplaceInput", "SbpEmbedded", "Tile", ((0, 2, 4),))
    op, a = embed_hook(1, 0, (2,))(*embed_hook(0)("Tile", {}, info), info)
    assert (op, a["op_type"], a["embeds"], a["zeroed"]) == ("SbpEmbedded", "Tile", ((0, 2, 4), (1, 1, 3)), (2,))
    assert not _fails(pad, [Signature([S(1), B, B], [P], embed_hook(1, 0, (2,)))])


def test_cut_axes_and_rnn_batch_split_on_global_tensors():
    """Through the eager global interpreter on 3 ranks (uneven): slicing, padding (with a
    constant), tiling and reversing a split axis keep it on the ranks (P out, no boxing in),
    and a fused RNN and its kernel gradient run batch-split; all equal one device."""
    from tensorweave.ops import rnn_ops
    p, rng = tw.placement("cpu", ranks=[0, 1, 2]), np.random.default_rng(5)
    x = rng.normal(size=(5, 4))
    g = tw.constant(x).to_global(placement=p, sbp=tw.sbp.split(0))
    for f in (lambda t: tw.slice(t, [1, 1], [3, 2]), lambda t: tw.pad(t, [[1, 2], [0, 1]], constant_values=1.5),
              lambda t: tw.tile(t, [2, 1]), lambda t: tw.reverse(t, [0]), lambda t: t[1:4:2, ::-1]):
        y = f(g)
        assert y.sbp == (P,)
        np.testing.assert_allclose(y.numpy(), f(tw.constant(x)).numpy(), rtol=1e-12)
    args = [rng.normal(size=s) for s in [(5, 3, 2), (5, 2), (2, 2), (2, 2), (2,)]]

    def run(xs, h0, k, r, b):
        with tw.GradientTape() as tape:
            tape.watch(k)
            out, _ = rnn_ops.simple_rnn_sequence(xs, h0, k, r, b)
            loss = tw.reduce_sum(out * out)
        return out, tape.gradient(loss, k)
    sbps = [tw.sbp.split(0)] * 2 + [tw.sbp.broadcast] * 3
    out, dk = run(*[tw.constant(a).to_global(placement=p, sbp=s) for a, s in zip(args, sbps)])
    want_out, want_dk = run(*[tw.constant(a) for a in args])
    assert out.sbp == (S(0),) and dk.sbp == (P,)
    np.testing.assert_allclose(out.numpy(), want_out.numpy(), rtol=1e-10)
    np.testing.assert_allclose(dk.numpy(), want_dk.numpy(), rtol=1e-10)


def _random_call(op_type, inputs, attrs, stateful):
    """A random op's call whose every run starts its stream afresh (as each rank does)."""
    from tensorweave.ops.random_ops import _op_key, _SeedState
    fresh = (lambda: {"state": _SeedState(_op_key(5, 9))}) if stateful else None
    inputs = [np.asarray(a) for a in inputs]
    call = Call(op_type, attrs, inputs, [], "hand-written", fresh)
    out = get_op(op_type).kernel("CPU")(*inputs, **call.run_attrs())
    call.outputs = [np.asarray(o) for o in (out if isinstance(out, tuple) else (out,))]
    return call


def _random_calls():
    shape, seed, logits = np.array([5, 3]), np.array([3, 4]), np.log(np.array([[0.2, 0.3, 0.5]] * 4))
    f64 = {"dtype": tw.float64}
    seeds = {"seed": 5, "seed2": 9}
    return [_random_call(*c) for c in [
        ("RandomUniform", [shape], {**f64, **seeds}, True),
        ("RandomUniform", [np.array([7, 3])], {"dtype": tw.float32, **seeds}, True),     # half words per value
        ("StatelessRandomUniformFullInt", [shape, seed], {"dtype": tw.int32}, False),
        ("StatelessRandomUniformFullInt", [np.array([3, 7]), seed], {"dtype": tw.uint64}, False),
        ("RandomStandardNormal", [shape], {**f64, **seeds}, True),
        ("TruncatedNormal", [shape], {**f64, **seeds}, True),
        ("RandomUniformInt", [shape, np.int64(-4), np.int64(9)], seeds, True),
        ("Multinomial", [logits, np.int32(5)], {"output_dtype": tw.int64, **seeds}, True),
        ("RandomShuffle", [np.arange(15.0).reshape(5, 3)], seeds, True),
        ("StatelessRandomUniform", [shape, seed], f64, False),
        ("StatelessRandomNormal", [shape, seed], f64, False),
        ("StatelessTruncatedNormal", [shape, seed], f64, False),
        ("StatelessRandomUniformInt", [shape, seed, np.int64(0), np.int64(7)], {}, False),
        ("StatelessRandomUniformFullInt", [shape, seed], {"dtype": tw.int64}, False),
        ("StatelessMultinomial", [logits, np.int32(5), seed], {"output_dtype": tw.int64}, False)]]


def test_random_ops_offer_splits_of_the_single_device_draw():
    """Each rank keeps its slice of the single-device draw (run by the test above)."""
    for call in _random_calls():
        sigs = rule_for(get_op(call.op_type))([SbpInput(a.shape) for a in call.inputs],
                                               {**call.attrs, "_out_shapes": [call.outputs[0].shape]})
        assert len(sigs) > 1, call.op_type


def test_uniform_draws_compute_only_their_piece_and_continue_the_stream(monkeypatch):
    """A rank's piece of a uniform draw (S(0) on 3 ranks) costs only its own Philox words, and
    the stream goes on as after the single-device draw (the next draw is the same)."""
    from tensorweave.kernels.cpu import sbp_local_kernels as slk
    from tensorweave.ops.random_ops import _op_key, _SeedState
    words = []
    real = slk._words_at
    monkeypatch.setattr(slk, "_words_at", lambda state, start, count: words.append(count) or real(state, start, count))
    for dtype, per_word in ((tw.float64, 1), (tw.float32, 2)):
        attrs, shape = {"dtype": dtype, "seed": 5, "seed2": 9}, np.array([1000, 3])
        one = _SeedState(_op_key(5, 9))
        kernel = get_op("RandomUniform").kernel("CPU")
        whole, second = kernel(shape, **attrs, state=one), kernel(shape, **attrs, state=one)
        sig = [s for s in rule_for(get_op("RandomUniform"))([SbpInput((2,))], {**attrs, "_out_shapes": [(1000, 3)]})
               if s.outputs == (S(0),)][0]
        for r, (lo, hi) in enumerate(layout.balanced_bounds(1000, 3)):
            words.clear()
            info = ShardInfo([(2,)], [(slice(0, 2),)], [(1000, 3)], [(slice(lo, hi), slice(0, 3))], (r,), (3,))
            op_type, local = sig.local("RandomUniform", {**attrs, "state": _SeedState(_op_key(5, 9))}, info)
            assert op_type == "SbpRandomPiece"
            piece = get_op(op_type).kernel("CPU")(shape, **local)
            np.testing.assert_array_equal(piece, whole[lo:hi])
            assert sum(words) <= (hi - lo) * 3 // per_word + 1, (dtype, words)
            np.testing.assert_array_equal(kernel(shape, **attrs, state=local["state"]), second)


# ---- optimizer updates: variables per rank ----------------------------------------------------
_UPDATES = [   # op, number of variable handles, scalars, attrs
    ("Adam", 3, [0.1, np.int64(3)], {"beta_1": 0.9, "beta_2": 0.99, "epsilon": 1e-7, "amsgrad": False}),
    ("KerasMomentum", 2, [0.1], {"momentum": 0.9, "nesterov": True}),
    ("AdagradV2", 2, [0.1], {"epsilon": 1e-7}),
    ("KerasRMSprop", 4, [0.1], {"rho": 0.9, "momentum": 0.5, "epsilon": 1e-7, "centered": True}),
    ("Lion", 2, [0.1], {"beta_1": 0.9, "beta_2": 0.99}),
    ("Adamax", 3, [0.1, np.int64(3)], {"beta_1": 0.9, "beta_2": 0.99, "epsilon": 1e-7}),
    ("Nadam", 3, [0.1, np.int64(3), 0.5], {"beta_1": 0.9, "beta_2": 0.99, "epsilon": 1e-7}),   # u_product 0.5
]


def _update_calls():
    """Every optimizer update, dense, sparse (rows 3, 0, 4) and grouped (two variables), on
    variables and slots of shape (5, 3)."""
    rng = np.random.default_rng(11)
    calls = []
    for name, n, scalars, attrs in _UPDATES:
        for kind in ("", "Sparse", "Group"):
            n_vars = 2 if kind == "Group" else 1
            values = [rng.uniform(0.5, 1.5, size=(5, 3)) for _ in range(n * n_vars)]
            grads = [rng.normal(size=(3, 3) if kind == "Sparse" else (5, 3)) for _ in range(n_vars)]
            inputs = values + [np.asarray(x, np.int64 if isinstance(x, np.int64) else np.float64) for x in scalars]
            inputs += grads + ([np.array([3, 0, 4])] if kind == "Sparse" else [])
            calls.append(_variable_call(f"Resource{kind}Apply{name}", inputs,
                                        dict(attrs, num_variables=2) if kind == "Group" else attrs,
                                        range(len(values))))
            if kind == "Group":      # the two variables laid out differently: rows, then columns
                mixed = _variable_call(calls[-1].op_type, inputs, calls[-1].attrs, range(len(values)))
                mixed.handle_sbp = {i: S(0) if i < n else S(1) for i in range(2 * n)}
                calls.append(mixed)
    return calls


def _variable_call(op_type, inputs, attrs, variables):
    """A call on variables (inputs at ``variables`` are the variables' values before the op)."""
    held = {i: tw.Variable(inputs[i]) for i in variables}
    args = [held[i] if i in held else np.asarray(a) for i, a in enumerate(inputs)]
    out = get_op(op_type).kernel("CPU")(*args, **attrs)
    out = [np.asarray(o) for o in (out if isinstance(out, tuple) else (out,))] if get_op(op_type).n_outputs(attrs) \
        else []
    return Call(op_type, attrs, [np.asarray(a) for a in inputs], out, "hand-written",
                variables={i: v.numpy() for i, v in held.items()})


def _state_calls():
    rng = np.random.default_rng(4)
    w, v, idx = rng.normal(size=(5, 3)), rng.normal(size=(5, 3)), np.array([[3, 0], [4, 3]])
    var = {"dtype": tw.float64, "shape": tw.TensorShape([5, 3])}
    return [_variable_call(*c) for c in [
        ("ReadVariableOp", [w], var, [0]),
        ("AssignVariableOp", [w, v], var, [0]),
        ("AssignAddVariableOp", [w, v], var, [0]),
        ("AssignSubVariableOp", [w, v], var, [0]),
        ("ResourceGather", [w, idx], var, [0]),
        ("ResourceScatterAdd", [w, idx, rng.normal(size=(2, 2, 3))], var, [0]),
        ("ResourceScatterUpdate", [w, np.array([3, 0, 4]), rng.normal(size=(3, 3))], var, [0])]]


def test_grouped_update_keeps_each_variables_layout():
    """A grouped optimizer step over a row-split and a column-split variable updates each where
    it lives (no boxing of either to B); pairing a variable with another's layout is caught."""
    call = next(c for c in _update_calls() if c.op_type == "ResourceGroupApplyKerasMomentum" and c.handle_sbp)
    specs = [SbpInput((), _dt.resource, call.handle_sbp.get(i)) if i in call.variables else SbpInput(a.shape)
             for i, a in enumerate(call.inputs)]
    sigs = [str(s) for s in rule_for(get_op(call.op_type))(specs, call.attrs)]
    assert "S(0), S(0), S(1), S(1), B, S(0), S(1) -> " in sigs, sigs
    assert _fails(call, [Signature([S(0), S(0), S(1), S(1), B, S(0), S(0)], [])])


# ---- decompositions -----------------------------------------------------------------------------
@pytest.mark.parametrize("op_type", sorted(DECOMPOSITIONS))
def test_decomposition_equals_the_op_and_has_rules_throughout(op_type):
    """On the op table's calls of the op: the decomposition gives the op's outputs, and each
    primitive it runs has an SBP rule (so the interpreter never boxes its input whole)."""
    calls = [c for c in table_calls().get(op_type, []) if c.inputs[0].dtype.kind == "f"]
    assert calls, op_type
    for call in calls:
        rec = Recorder("decomposition")
        with interpreter_scope(rec):
            got = DECOMPOSITIONS[op_type](*[tw.constant(a) for a in call.inputs], **call.attrs)
        got = got if isinstance(got, (tuple, list)) else [got]
        for g, want in zip(got, call.outputs):
            np.testing.assert_allclose(g.numpy(), want, rtol=1e-6, atol=1e-9, err_msg=f"{call!r}")
        without = sorted({c.op_type for c in rec.calls if rule_for(get_op(c.op_type)) is None})
        assert not without, f"{op_type}'s decomposition runs ops without SBP rules: {without}"


def _hand_calls():
    """Ops without an op-table entry of their own (see tests/test_op_coverage.py)."""
    rng = np.random.default_rng(8)
    x = rng.normal(size=(3, 4))
    pool = {"ksize": (2, 2), "strides": (1, 1), "padding": "VALID", "data_format": "NHWC"}
    img = rng.normal(size=(3, 4, 4, 2))
    return [_call("IdentityN", x, rng.normal(size=(3, 2)), n=2),
            _call("IsInf", np.where(x > 1, np.inf, x)),
            _call("Softsign", x),
            _call("MaxPoolGradGrad", img, rng.normal(size=img.shape), **pool),
            _call("CustomGradient", x, rng.normal(size=(2, 5)), n_out=1),
            _call("Bitcast", rng.normal(size=(3, 2)), type=tw.uint16),            # a last axis added
            _call("Bitcast", rng.integers(0, 255, size=(3, 5, 4)).astype(np.uint8), type=tw.float32),   # consumed
            _call("Bitcast", rng.normal(size=(3, 2)), type=tw.int64),
            # a pad constant only the first rank of a cut axis may add (the op table pads with 0)
            _call("PadV2", x, np.array([[2, 1], [0, 3]]), np.float64(1.5)),
            # reshapes merging and splitting a split axis (exact when both sizes divide by the mesh)
            _call("Reshape", rng.normal(size=(12, 2, 3)), np.array([24, 3])),
            _call("Reshape", rng.normal(size=(24, 3)), np.array([12, 2, 3])),
            _call("Reshape", rng.normal(size=(12, 4)), np.array([4, 12])),
            # a move between placements (plan_placements.py): on one placement, the identity's rule
            _call("_ToPlacement", x, placement_type="cpu", ranks=[0, 1])]


def _rnn_calls():
    """The fused RNN ops and their gradients (float64), on a batch of 5 with a mask and of 3
    without (an empty shard on the 2x2 mesh)."""
    from tensorweave.ops import rnn_ops
    rng = np.random.default_rng(12)
    calls = []
    for fn, gates, states, biases, kw in [(rnn_ops.lstm_sequence, 4, 2, 1, {}),
                                         (rnn_ops.gru_sequence, 3, 1, 2, {"go_backwards": True}),
                                         (rnn_ops.simple_rnn_sequence, 1, 1, 1, {"zero_output_for_mask": True})]:
        for b, masked in ((5, True), (3, False)):
            t, f, u = 3, 2, 2
            args = [rng.uniform(-1, 1, size=(b, t, f))] + [rng.uniform(-.5, .5, size=(b, u)) for _ in range(states)]
            args += [rng.uniform(-.7, .7, size=(f, gates * u)), rng.uniform(-.7, .7, size=(u, gates * u))]
            args = [tw.constant(a) for a in args + [rng.uniform(-.3, .3, size=gates * u) for _ in range(biases)]]
            mask = [tw.constant(rng.random((b, t)) < 0.8)] if masked else []
            rec = Recorder("hand-written rnn")
            with interpreter_scope(rec), tw.GradientTape() as tape:
                tape.watch(args)
                outs = fn(*args, *mask, **kw)
                loss = tw.add_n([tw.reduce_sum(o * tw.constant(_cotangent(o.numpy().shape))) for o in outs])
            with interpreter_scope(rec):
                tape.gradient(loss, args)
            for c in rec.calls:
                if c.op_type.endswith("Sequence"):
                    c.views = {len(c.outputs) - 1: _reserve_floats(c, u)}
                if "Sequence" in c.op_type:
                    calls.append(c)
    return calls


def _reserve_floats(call, u):
    """The reserve's floats (of a whole reserve or a rank's piece); LSTM's kernel leaves act(c')
    of masked steps unwritten (np.empty): with a mask those columns are no part of the value."""
    def view(reserve):
        floats = np.array(reserve).view(np.float64)
        if call.op_type == "LSTMSequence" and call.inputs[-1].dtype == np.bool_:
            floats[..., 4 * u:5 * u] = 0.0      # (its gradient, which reads them, is checked too)
        return floats
    return view


def test_rnn_rules_split_the_batch_only():
    """A batch split (uneven ones too: the reserve is batch-first bytes); units and time splits
    would be wrong (the recurrence needs all of h and every earlier step), and the checker says so."""
    call = next(c for c in _rnn_calls() if c.op_type == "SimpleRNNSequence" and c.inputs[0].shape[0] == 5)
    sigs = rule_for(get_op("SimpleRNNSequence"))([SbpInput(a.shape) for a in call.inputs], call.attrs)
    assert [str(s) for s in sigs] == ["B, B, B, B, B, B -> B, B, B", "S(0), S(0), B, B, B, S(0) -> S(0), S(0), S(0)"]
    assert _fails(call, [Signature([S(2), S(1), S(0), S(0), S(0), B], [S(2), S(1), B])])     # units
    assert _fails(call, [Signature([S(1), B, B, B, B, S(1)], [S(1), B, S(1)])])            # time


def test_seed_example_three_layouts():
    """I(N, C1) x W(C1, C2) as data parallel, model parallel and split contraction on 2 ranks,
    each boxed back to B (docs/design/sbp-rules.md), and the weight gradient of the first."""
    rng = np.random.default_rng(0)
    i, w = rng.normal(size=(5, 4)), rng.normal(size=(4, 3))
    mesh, full = MESHES[0], i @ w
    sigs = {str(s): s for s in rule_for(get_op("MatMul"))([SbpInput(i.shape), SbpInput(w.shape)], {})}
    kernel = get_op("MatMul").kernel("CPU")
    for name, shapes in [("S(0), B -> S(0)", [(3, 3), (2, 3)]), ("B, S(1) -> S(1)", [(5, 2), (5, 1)]),
                         ("S(1), S(0) -> P", [(5, 3), (5, 3)])]:
        sig = sigs[name]
        ip, wp = (layout.split_to_pieces(a, mesh, (s,)) for a, s in zip((i, w), sig.inputs))
        outs = [kernel(ip[r], wp[r], transpose_a=False, transpose_b=False) for r in range(2)]
        assert [o.shape for o in outs] == shapes, name
        np.testing.assert_allclose(layout.assemble(outs, full.shape, mesh, sig.outputs), full, rtol=1e-12)
    dgrad = _call("MatMul", i, rng.normal(size=(5, 3)), transpose_a=True, transpose_b=False)
    grad_sigs = rule_for(get_op("MatMul"))([SbpInput(a.shape) for a in dgrad.inputs], dgrad.attrs)
    assert Signature([S(0), S(0)], [P]) in grad_sigs      # the data-parallel weight gradient is P
    run_signature(dgrad, mesh, (Signature([S(0), S(0)], [P]),), rng)


def test_the_2x2_mesh_runs_every_signature_pair():
    """Exhaustive on the 2x2 mesh: every (axis-0, axis-1) pair of the rule's signatures runs
    (formerly a sample of 8 per call), beside every signature on the 1-D meshes."""
    call = table_calls()["AddV2"][0]
    rule = rule_for(get_op(call.op_type))
    specs = [SbpInput(a.shape, _dt.from_numpy(a.dtype)) for a in call.inputs]
    counts = [len(list(rule(specs, {**call.attrs, "_out_shapes": [a.shape for a in call.outputs],
                                    "_mesh_shape": m.mesh_shape}))) for m in MESHES]
    assert counts[2] ** 2 > 8
    assert check_call(call) == counts[0] + counts[1] + counts[2] ** 2
