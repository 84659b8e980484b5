"""``tw.train.Checkpoint`` of global variables: the sharded checkpoint directory.

When the objects of a checkpoint reach a global variable (one laid out over ranks:
``tw.Variable(..., placement=, sbp=)``, the weights of a Keras model built under a
distribution, their optimizer slots), ``save``/``write`` make ``<prefix>.sharded/`` with
:mod:`tensorweave.saving.sharded` instead of ``<prefix>.safetensors``: every rank writes the
pieces it owns (nothing is gathered), a local variable or an iterator's state is a one-rank
value written by rank 0's file, and the object graph goes into the index's metadata. The
graph's ``crc32`` of a tensor is the CRC-32 of its shards' CRC-32s (big-endian, index order),
binding the graph to the index; each shard's own CRC-32 is checked whenever a restore reads
it whole.

Restoring reads, for each variable of the program, the region its own layout needs: a
global variable gets its pieces for its current placement and SBP (each piece from only the
shards it overlaps), a local variable the logical value. So a checkpoint written by 4 ranks
loads into 2 or 3 ranks, a 2x2 mesh, ``B``, or one process, and a single-file checkpoint
loads into global variables (split per rank).

>>> import os, tempfile
>>> import tensorweave as tw
>>> from tensorweave.train import Checkpoint
>>> four = tw.placement("cpu", ranks=[0, 1, 2, 3])
>>> w = tw.Variable(tw.reshape(tw.range(8.0), [4, 2]), placement=four, sbp=tw.sbp.split(0))
>>> prefix = Checkpoint(w=w).write(os.path.join(tempfile.mkdtemp(), "ckpt"))
>>> sorted(os.listdir(prefix + ".sharded"))[:3]
['commit_success', 'index.json', 'shards-rank0.safetensors']
>>> two = tw.Variable(tw.zeros([4, 2]), placement=tw.placement("cpu", ranks=[0, 1]), sbp=tw.sbp.split(1))
>>> _ = Checkpoint(w=two).read(prefix)
>>> [t.numpy().tolist() for t in two.to_local()]
[[[0.0], [2.0], [4.0], [6.0]], [[1.0], [3.0], [5.0], [7.0]]]
"""
import json
import os
import re
import shutil
import struct
import zlib

import numpy as np

from tensorweave.core.sbp import Broadcast, Partial
from tensorweave.saving import sharded
from tensorweave.saving import validation as V

SHARDED_SUFFIX = ".sharded"
_SAFE = re.compile(r"[^A-Za-z0-9_.\-/>]")


def is_global(obj):
    """Whether ``obj`` is a global variable (its value lives as per-rank pieces)."""
    return bool(getattr(obj, "is_global", False)) and hasattr(obj, "_locals")


def safe_key(path):
    """A tensor key the sharded index accepts, made from an object path."""
    return _SAFE.sub("_", path) or "root"


def on_workers(var):
    """Whether global variable ``var``'s pieces live on Ray workers (not in this process)."""
    from tensorweave.distribute.ray.pieces import RemotePiece
    return is_global(var) and any(isinstance(lv, RemotePiece) for lv in var._locals)


class WorkerValue:
    """A global value to save whose pieces live on Ray workers: its layout and, per rank index,
    the key of the piece in that worker's store (``keep`` holds what keeps those keys alive).
    The workers write it (``sharded_workers.save_on_workers``); its bytes never reach here."""

    __slots__ = ("shape", "dtype", "placement", "sbp", "keys", "keep")

    def __init__(self, shape, dtype, placement, sbp, pieces, keep):
        self.shape, self.dtype = tuple(int(d) for d in shape), np.dtype(dtype)
        self.placement, self.sbp, self.keep = placement, tuple(sbp), keep
        self.keys = {i: p.key for i, p in enumerate(pieces)}

    def spec(self):
        return self.shape, self.dtype.name, self.placement, self.sbp, self.keys

    def cluster(self):
        from tensorweave.distribute.ray.pieces import _cluster_of
        return _cluster_of(self.keep._locals[0] if hasattr(self.keep, "_locals") else self.keep._pieces[0])


def global_value(var):
    """The :class:`~tensorweave.saving.sharded.ShardedValue` of a global variable: its own
    per-rank arrays (no copy: variable storage is copy-on-write while a reference is held, so
    these stay the values of now), or a :class:`WorkerValue` when they live on Ray workers. A
    partial (``P``) mesh axis is reduced to ``B`` first (on the workers, for theirs)."""
    remote = on_workers(var)
    if any(isinstance(s, Partial) for s in var.sbp):
        nd = tuple(Broadcast() if isinstance(s, Partial) else s for s in var.sbp)
        g = var.read_value().to_global(sbp=nd)
        if remote:
            return WorkerValue(var.shape.as_list(), var.dtype.np_dtype, var.placement, nd, g._pieces, g)
        pieces = {i: np.asarray(p) for i, p in enumerate(g._pieces)}
        return sharded.ShardedValue(var.shape.as_list(), var.dtype.np_dtype, var.placement, nd, pieces)
    if remote:
        return WorkerValue(var.shape.as_list(), var.dtype.np_dtype, var.placement, var.sbp, var._locals, var)
    pieces = {i: np.asarray(lv._read()) for i, lv in enumerate(var._locals)}
    return sharded.ShardedValue(var.shape.as_list(), var.dtype.np_dtype, var.placement, var.sbp, pieces)


def local_value(array):
    """A local value (a variable of one process, an iterator's state array) as a one-rank
    value, written by rank 0."""
    from tensorweave.distribute.layout import Placement
    a = np.asarray(array)
    return sharded.ShardedValue(a.shape, a.dtype, Placement("cpu", [0]), (Broadcast(),), {0: a})


def shards_digest(shards):
    """The object graph's checksum of a sharded tensor: CRC-32 of its shards' CRC-32s."""
    return zlib.crc32(b"".join(struct.pack(">I", s.get("crc32", 0)) for s in shards)) & 0xFFFFFFFF


def write(directory, values, graph, overwrite=True, async_then=None, worker_io=None):
    """Saves ``values`` with the object ``graph`` (its ``crc32`` filled in at commit) as the
    sharded checkpoint ``directory``; with ``async_then``, in the background (returns a
    :class:`~tensorweave.saving.sharded.SaveHandle`, ``async_then(path)`` runs after the
    commit). :class:`WorkerValue` s are written by the Ray workers that hold them, each its own
    file (``worker_io``: a ``sharded_workers.WorkerIO`` for workers writing on their own disks),
    while this process writes the rest."""
    from tensorweave.train import object_graph as og

    def metadata(variables):
        graph["crc32"] = {k: shards_digest(variables[k]["shards"]) for k in values}
        return {"format": og.FORMAT, "version": str(og.VERSION),
                "object_graph": json.dumps(graph, allow_nan=False)}
    remote = {k: v for k, v in values.items() if isinstance(v, WorkerValue)}
    if remote:
        return _write_with_workers(directory, values, remote, metadata, overwrite, async_then, worker_io)
    if async_then is not None:
        return sharded.save_async(directory, values, metadata, overwrite=overwrite, copy=False, then=async_then)
    return sharded.save(directory, values, metadata, overwrite=overwrite)


def save_values(directory, values, metadata=None, overwrite=False):
    """:func:`~tensorweave.saving.sharded.save` of values among which :class:`WorkerValue` s may
    be (Keras ``model.save``, the sharded SavedModel): those are written by their workers."""
    remote = {k: v for k, v in values.items() if isinstance(v, WorkerValue)}
    if remote:
        return _write_with_workers(directory, values, remote, metadata, overwrite, None, None)
    return sharded.save(directory, values, metadata, overwrite=overwrite)


def _write_with_workers(directory, values, remote, metadata, overwrite, async_then, worker_io):
    from tensorweave.saving import sharded_workers as sw
    clusters = {id(c): c for c in (v.cluster() for v in remote.values())}
    (cluster,) = clusters.values()       # (one connected cluster at a time)
    host = {k: v for k, v in values.items() if k not in remote}
    specs = {k: v.spec() for k, v in remote.items()}
    io = dict(local_dir=worker_io.local_dir, upload=worker_io.upload) if worker_io is not None else {}
    if async_then is None:
        return sw.save_on_workers(cluster, directory, sw.store_values, specs, metadata=metadata,
                                  overwrite=overwrite, host_values=host, **io)
    token = sw.snapshot(cluster, specs)  # now, before the caller's next step reaches the workers

    def save():
        try:
            return sw.save_on_workers(cluster, directory, sw.snapshot_values, token, metadata=metadata,
                                      overwrite=overwrite, host_values=host, **io)
        except BaseException:
            sw.drop_snapshot(cluster, token)
            raise
    return sharded.in_background(save, async_then)


def remove(directory):
    """Deletes a sharded checkpoint directory: renamed to a staging name first (one atomic
    step, so no reader ever sees a half-deleted checkpoint; a kill during the removal leaves
    a staging directory that the next save removes)."""
    if not os.path.isdir(directory) or os.path.islink(directory):
        return
    parent, base = os.path.split(os.path.abspath(directory))
    doomed = os.path.join(parent, f"{sharded.STAGING}{base}-deleted-{os.getpid()}-{id(directory):x}")
    try:
        os.rename(directory, doomed)
    except FileNotFoundError:
        return
    sharded.fsync_dir(parent)
    shutil.rmtree(doomed, ignore_errors=True)


class Source:
    """The values of a sharded checkpoint, read on demand (the restoration asks per variable)."""

    def __init__(self, directory, worker_io=None):
        from tensorweave.saving.validation import parse_json
        from tensorweave.train import object_graph as og
        self.where, self.worker_io, self._requests = directory, worker_io, []
        self.index = sharded.read_index(directory)
        meta = self.index["metadata"]
        if meta.get("format") != og.FORMAT or "object_graph" not in meta:
            raise ValueError(f"{directory}: a sharded checkpoint, but not of a tw.train.Checkpoint (format "
                             f"{meta.get('format')!r:.60}). Hint: weights saved by model.save_weights load with "
                             "model.load_weights")
        graph = parse_json(meta["object_graph"].encode("utf-8", "surrogatepass"), f"{directory}: object graph")
        self.nodes = og.validate(graph, directory)
        self.crcs = graph["crc32"]
        variables = self.index["variables"]
        if set(variables) != set(self.crcs):
            extra = sorted(set(variables) ^ set(self.crcs))[:3]
            raise ValueError(f"{directory}: the index's variables do not match the object graph ({extra})")
        for key, crc in self.crcs.items():
            if shards_digest(variables[key]["shards"]) != crc:
                raise ValueError(f"{directory}: tensor {key!r}: the index's shards do not match the object graph's "
                                 "checksum (files from different saves?)")
        for node in self.nodes:
            if node["kind"] == "variable":
                var = variables[node["tensor"]]
                if var["dtype"] != node["dtype"] or var["shape"] != node["shape"]:
                    raise ValueError(f"{directory}: tensor {node['tensor']!r} is {var['dtype']}{var['shape']} in the "
                                     f"index, the object graph says {node['dtype']}{node['shape']}")

    def array(self, key):
        """The logical value of tensor ``key``."""
        shape = self.index["variables"][key]["shape"]
        return sharded.read_region(self.where, key, tuple(slice(0, d) for d in shape), self.index)

    def pieces(self, key, placement, sbp):
        """Tensor ``key`` laid out as ``sbp`` on ``placement`` (mesh order)."""
        return sharded.restore(self.where, key, placement, sbp, index=self.index)

    def restore_on_workers(self, key, var):
        """Has global variable ``var`` (its pieces on Ray workers) restored from tensor ``key``
        by the workers themselves; returns the commit. The first commit of a restoration pass
        sends every pending request at once (one call per worker; a worker downloads a file it
        needs once, with ``worker_io``)."""
        self._requests.append((key, var))

        def commit():
            self.flush()
        return commit

    def flush(self):
        from tensorweave.saving import sharded_workers as sw
        requests, self._requests = self._requests, []
        if not requests:
            return
        from tensorweave.distribute.ray.pieces import _cluster_of
        cluster = _cluster_of(requests[0][1]._locals[0])
        by_key = {}
        for key, var in requests:           # (one key restored into several variables: one worker key each)
            by_key.setdefault(key, []).append(var)
        rounds = max(len(v) for v in by_key.values())
        for r in range(rounds):
            batch = {k: vs[r] for k, vs in by_key.items() if r < len(vs)}
            sw.restore_on_workers(cluster, self.where, {k: (v.placement, v.sbp, {i: lv.key for i, lv in enumerate(v._locals)})
                                                        for k, v in batch.items()}, self.index, self.worker_io)

    def keep(self, keys):
        """(Nothing is held in memory: a late value is read again from the directory.)"""


def list_variables(directory):
    source = Source(directory)
    return sorted((n["path"], list(n["shape"])) for n in source.nodes if n["kind"] == "variable")


def load_variable(directory, name):
    source = Source(directory)
    for n in source.nodes:
        if n["kind"] == "variable" and n["path"] == name:
            return source.array(n["tensor"])
    return None




# ---- the TF1 Saver (name-based) on global variables ---------------------------------------------------------
def save_by_name(directory, variables, fmt, version, fetch=None):
    """``tf.compat.v1.train.Saver.save`` of ``{TF1 name: variable}`` holding a global variable:
    the sharded directory, keyed by the variables' names, each rank writing its pieces.
    ``fetch(variables) -> arrays`` reads values in a TF1 graph (one session run): a global
    variable's pieces are then read from its per-rank variables (only the owners' — a ``B``
    copy is read once), nothing is gathered."""
    for name in variables:
        V.check_name(name, "Saver", "variable name")
    if fetch is None:
        values = {name: global_value(v) if is_global(v) else local_value(np.asarray(v.numpy()))
                  for name, v in variables.items()}
    else:
        values = _fetched_values(variables, fetch)
    return save_values(directory, values, {"format": fmt, "version": str(version)}, overwrite=True)


def _fetched_values(variables, fetch):
    # A global variable's pieces live in its per-rank variables, in this process, whichever
    # session runs the graph: read there (as eagerly). A partial one is read gathered.
    from tensorweave.distribute.layout import split_to_pieces
    fetched = [n for n, v in variables.items() if not is_global(v) or any(isinstance(s, Partial) for s in v.sbp)]
    arrays = dict(zip(fetched, fetch([variables[n] for n in fetched]))) if fetched else {}
    values = {}
    for name, v in variables.items():
        if name not in arrays:
            values[name] = global_value(v)
        elif is_global(v):          # partial: its logical value, laid out with B for each P
            nd = tuple(Broadcast() if isinstance(s, Partial) else s for s in v.sbp)
            a = np.asarray(arrays[name])
            values[name] = sharded.ShardedValue(a.shape, a.dtype, v.placement, nd, split_to_pieces(a, v.placement, nd))
        else:
            values[name] = local_value(arrays[name])
    return values


def read_by_name(directory, variables, fmt, where, skip=()):
    """``{TF1 name: pieces (a global variable's, in its current layout) or value}`` read from a
    sharded Saver directory, every check done first. Raises ``NotFoundError`` /
    ``InvalidArgumentError`` as the Saver does."""
    from tensorweave.core import errors
    index = sharded.read_index(directory)
    if index["metadata"].get("format") != fmt:
        raise ValueError(f"{directory}: not a tf.train.Saver checkpoint (format "
                         f"{index['metadata'].get('format')!r:.60}). Hint: checkpoints of tw.train.Checkpoint "
                         "restore with Checkpoint.restore")
    saved = index["variables"]
    missing = [n for n in variables if n not in saved]
    if missing:
        raise errors.NotFoundError(
            f"Restoring from checkpoint failed: key {missing[0]} not found in checkpoint {where} "
            f"({len(missing)} missing of {len(variables)}). Hint: variable names must match the ones saved; "
            f"the checkpoint has {sorted(saved)[:5]}...")
    for name, v in variables.items():
        shape, dtype = saved[name]["shape"], saved[name]["dtype"]
        if shape != v.shape.as_list() and v.shape.is_fully_defined():
            raise errors.InvalidArgumentError(f"Restoring from checkpoint failed: {name} has shape {shape} in {where} "
                                              f"but {v.shape.as_list()} in the graph")
        if dtype != v.dtype.name:
            raise errors.InvalidArgumentError(f"Restoring from checkpoint failed: {name} is {dtype} in {where} but "
                                              f"{v.dtype.name} in the graph")
    out = {}
    for name, v in variables.items():
        if name in skip:
            continue
        if is_global(v):
            out[name] = sharded.restore(directory, name, v.placement, v.sbp, index=index)
        else:
            out[name] = sharded.read_region(directory, name, tuple(slice(0, d) for d in saved[name]["shape"]), index)
    return out


def restore_by_name(directory, variables, fmt, where, assign_local=None):
    """Restores ``{TF1 name: variable}`` from a sharded Saver directory into each variable's
    current layout (a global variable's ranks read only their pieces, written into its
    per-rank variables — in a TF1 graph too: they live in this process, not in a session).
    ``assign_local({name: value})`` sets the local variables (a session run in a TF1 graph)."""
    remote = {name: v for name, v in variables.items() if on_workers(v)}
    data = read_by_name(directory, variables, fmt, where, skip=remote)
    if remote:          # pieces on Ray workers: each worker reads and writes its own
        from tensorweave.distribute.ray.pieces import _cluster_of
        from tensorweave.saving import sharded_workers as sw
        sw.restore_on_workers(_cluster_of(next(iter(remote.values()))._locals[0]), directory,
                              {n: (v.placement, v.sbp, {i: lv.key for i, lv in enumerate(v._locals)})
                               for n, v in remote.items()})
    local = {}
    for name, value in data.items():
        v = variables[name]
        if is_global(v):
            for lv, p in zip(v._locals, value):
                lv._write(np.array(p, copy=True))
        else:
            local[name] = value
    if assign_local is None:
        for name, value in local.items():
            variables[name].assign(value)
    elif local:
        assign_local(local)
