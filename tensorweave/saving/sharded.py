"""Sharded checkpoints: every rank writes the pieces it owns, one index describes them, a
commit marker makes the whole visible at once, and any layout can be restored from any other.

A checkpoint is a directory::

    ckpt-5/
      shards-rank0.safetensors   the pieces rank 0 owns (one entry per variable it owns a piece of)
      shards-rank1.safetensors
      index.json                 per variable: logical shape, dtype, placement, SBP, and each
                                 shard's file, key and region (start/stop per axis)
      commit_success             written last

**Ownership.** A piece is written once: by the ranks at coordinate 0 of every mesh axis
whose SBP is ``B`` (the copies are equal). Partial values (``P``) are refused — the caller
reduces them first (boxing to ``S`` moves the fewest bytes) — so every byte on disk is a
plain value.

**Commit.** Ranks write into ``.sharded-tmp-<name>-<id>/`` beside the target (each file fsynced);
when all are done the controller writes ``index.json`` and ``commit_success``, fsyncs the
directory and renames it to ``<name>``, then fsyncs the parent. A crash of any rank or of the
controller at any point leaves no directory called ``<name>`` (or the previous complete one
under it), and :func:`list_checkpoints` lists only committed ones; the next save removes the
staging directories of killed saves (a live save holds a lock on its own).

**Restore with resharding.** :func:`read_region` reads any box of a variable's logical value
from the shards that overlap it, each through ``tensor_file.read_slice`` (only those bytes);
:func:`restore` gives the pieces of any placement and SBP (1 rank, 3 ranks, a 2×2 mesh,
``B``, ...), whatever layout wrote it.

>>> import numpy as np, os, tempfile
>>> from tensorweave.core.sbp import S, B
>>> from tensorweave.distribute.layout import Placement, split_to_pieces
>>> four = Placement("cpu", [0, 1, 2, 3])
>>> w = np.arange(10.0).reshape(5, 2)
>>> path = save(os.path.join(tempfile.mkdtemp(), "ckpt-1"),
...             {"w": ShardedValue(w.shape, w.dtype, four, (S(0),), split_to_pieces(w, four, (S(0),)))})
>>> [p.tolist() for p in restore(path, "w", Placement("cpu", [0, 1]), (S(1),))]
[[[0.0], [2.0], [4.0], [6.0], [8.0]], [[1.0], [3.0], [5.0], [7.0], [9.0]]]
"""
import json
import os
import shutil
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor, wait  # noqa: F401 - wait used by sharded_workers

import numpy as np

from tensorweave.core.sbp import Broadcast, Partial, Split
from tensorweave.saving import checksum, tensor_file
from tensorweave.saving import validation as V
from tensorweave.saving.atomic import (crash_point, fsync_dir, lock_temporary, remove_stale, replace_dir,
                                      unlock)

FORMAT = "tensorweave.sharded_checkpoint"
VERSION = 1
INDEX = "index.json"
MARKER = "commit_success"
MAX_SHARDS = 1 << 16
CHUNK_BYTES = 1 << 20      # a shard's CRC-32 block (partial reads check only the blocks they read)
MAX_CHUNKS = 4096
STAGING = ".sharded-tmp-"
_POOL_SIZE = 8
_pool = [None]
_pool_lock = threading.Lock()


def _io_pool():
    """The threads that write and read rank files (kept: starting threads per call costs more
    than a small checkpoint's I/O on a busy machine). Tasks never wait on the pool themselves."""
    with _pool_lock:
        if _pool[0] is None:
            _pool[0] = ThreadPoolExecutor(_POOL_SIZE, thread_name_prefix="tw-sharded-io")
        return _pool[0]


class ShardedValue:
    """One variable to save: logical ``shape`` and ``dtype``, its ``placement`` and N-D
    ``sbp``, and ``pieces``: per rank index (mesh order) its local array — a list over all
    ranks, or a dict holding only the ranks this process runs."""

    __slots__ = ("shape", "dtype", "placement", "sbp", "pieces")

    def __init__(self, shape, dtype, placement, sbp, pieces):
        from tensorweave.distribute.layout import normalize_sbp
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self.placement = placement
        self.sbp = normalize_sbp(sbp, placement, self.shape, what="sharded save")
        self.pieces = dict(enumerate(pieces)) if isinstance(pieces, (list, tuple)) else dict(pieces)


def _sbp_text(s):
    return repr(s)


def _parse_sbp(text, where):
    if text == "B":
        return Broadcast()
    if text.startswith("S(") and text.endswith(")") and text[2:-1].isdigit():
        return Split(int(text[2:-1]))
    V.fail(where, f"unknown SBP {text!r} (a checkpoint holds S(i) and B only)")


def owned_region(value, index):
    """The region (tuple of slices) rank ``index`` writes for ``value``, or None when another
    rank writes the same bytes (it is not at coordinate 0 of every ``B`` mesh axis)."""
    from tensorweave.distribute.layout import shard_slices
    coords = value.placement.coords(index)
    if any(isinstance(s, Broadcast) and c != 0 for s, c in zip(value.sbp, coords)):
        return None
    return shard_slices(value.shape, value.placement, value.sbp)[index]


def _check_plain(name, value):
    for s in value.sbp:
        if isinstance(s, Partial):
            raise ValueError(f"sharded save: variable {name!r} has sbp {value.sbp} with a partial value; "
                             "reduce it first (e.g. to_global(sbp=S(0)))")


def write_rank(staging, rank, values, local_dir=None, upload=None, prefix="shards-rank"):
    """What one rank does — in this process, or on a worker of its own (a Ray actor, with its
    own pieces only): writes the pieces it owns of ``values`` (``{name: ShardedValue}``) as
    ``shards-rank<rank>.safetensors`` in the ``staging`` directory (fsynced there before this
    returns) and returns its shard records, which the controller passes to :func:`finish`.

    ``local_dir``: write the file on this rank's own disk first (under ``local_dir``), then
    ``upload(local_path, staging_path)`` puts it into the staging directory — default
    :func:`~tensorweave.saving.tensor_file.copy_atomic` (copied, fsynced, renamed); a hook
    for another store must be as durable before it returns. The local copy is removed after.
    ``prefix``: of the file name (the driver writing its own values beside Ray workers' files
    uses ``shards-host-rank``)."""
    tensors, records = {}, []
    fname = f"{prefix}{int(rank)}.safetensors"
    for name, value in values.items():
        if rank not in value.placement.ranks:
            continue
        index = value.placement.ranks.index(rank)
        region = owned_region(value, index)
        if region is None or index not in value.pieces:
            continue
        piece = np.asarray(value.pieces[index])
        want = tuple(sl.stop - sl.start for sl in region)
        if piece.shape != want or piece.dtype != value.dtype:
            raise ValueError(f"sharded save: variable {name!r} on rank {rank}: piece is {list(piece.shape)} "
                             f"{piece.dtype}, its layout {value.sbp} gives {list(want)} {value.dtype}")
        tensors[name] = piece
        records.append(dict(_crc_fields(piece), name=name, file=fname, key=name,
                            start=[sl.start for sl in region], stop=[sl.stop for sl in region]))
    if tensors:
        meta = {"format": FORMAT + ".shards"}
        target = os.path.join(staging, fname)
        if local_dir is None:
            tensor_file.write_tensors(target, tensors, meta, stage_prefix="sharded_file_")
        else:
            # (local copies of saves killed on this rank are removed; a live save holds its lock)
            os.makedirs(local_dir, exist_ok=True)
            remove_stale(local_dir, [STAGING])
            local = os.path.join(os.fspath(local_dir), os.path.basename(staging))
            os.mkdir(local)
            lock = lock_temporary(local)
            try:
                tensor_file.write_tensors(os.path.join(local, fname), tensors, meta, stage_prefix="sharded_file_")
                (upload or tensor_file.copy_atomic)(os.path.join(local, fname), target)
                crash_point("sharded_uploaded")
            finally:
                shutil.rmtree(local, ignore_errors=True)
                unlock(lock)
    crash_point("sharded_rank_written")
    return records


def piece_crc(a):
    """CRC-32 of an array's little-endian C-order bytes (as stored in a tensor file)."""
    return checksum.crc32(a)


def chunk_size(nbytes):
    """The CRC block of a shard of ``nbytes``: :data:`CHUNK_BYTES`, doubled until the shard has
    at most :data:`MAX_CHUNKS` blocks (the index stays small)."""
    size = CHUNK_BYTES
    while nbytes > size * MAX_CHUNKS:
        size *= 2
    return size


def _crc_fields(piece):
    """A shard record's checksums: ``crc32`` of the whole piece and, when it spans more than one
    block, ``chunk_bytes`` + ``chunk_crc32`` (one per block, the same pass), so a rank reading
    only some rows checks only the blocks it reads."""
    if piece.nbytes <= CHUNK_BYTES:
        return {"crc32": piece_crc(piece)}
    size = chunk_size(piece.nbytes)
    whole, chunks = checksum.chunked_crc32(piece, size)
    return {"crc32": whole, "chunk_bytes": size, "chunk_crc32": chunks}


def describe(values):
    """The index entries of ``values`` without their shards: ``{name: {"shape", "dtype",
    "placement", "sbp"}}`` (plain data: a worker sends it to the controller)."""
    return {name: {"shape": list(v.shape), "dtype": v.dtype.name,
                   "placement": {"type": v.placement.type, "ranks": v.placement.mesh.tolist()},
                   "sbp": [_sbp_text(s) for s in v.sbp]} for name, v in values.items()}


_RECORD_KEYS = ("file", "key", "crc32", "chunk_bytes", "chunk_crc32", "start", "stop")


def _index(described, records, metadata):
    variables = {name: dict(entry, shards=[]) for name, entry in described.items()}
    for rec in records:
        if rec["name"] not in variables:
            raise ValueError(f"sharded save: a rank wrote {rec['name']!r}, which no rank described")
        variables[rec["name"]]["shards"].append({k: rec[k] for k in _RECORD_KEYS if k in rec})
    if callable(metadata):
        metadata = metadata(variables)
    return {"format": FORMAT, "version": VERSION, "variables": variables,
            "metadata": {str(k): str(v) for k, v in (metadata or {}).items()}}


def _check_files(staging, records):
    """Every file the ranks reported is in ``staging`` with the tensors they reported (header
    only): an upload hook that lost a file fails the save instead of committing it."""
    by_file = {}
    for rec in records:
        by_file.setdefault(rec["file"], []).append(rec)
    for fname, recs in by_file.items():
        path = os.path.join(staging, fname)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"sharded save: {fname} was reported written but is not in {staging} "
                                    "(did the upload hook put it there?)")
        header, _ = tensor_file.read_header(path)
        for rec in recs:
            entry = header.get(rec["key"])
            want = [b - a for a, b in zip(rec["start"], rec["stop"])]
            if entry is None or list(entry["shape"]) != want:
                raise ValueError(f"sharded save: {fname} lacks {rec['key']!r} with shape {want} "
                                 f"(has {None if entry is None else entry['shape']})")


def commit(staging, target, index, overwrite=False):
    """The controller's last step: ``index.json``, then the marker, then the rename (with
    ``overwrite``, an atomic swap with an existing ``target``: ``atomic.replace_dir``)."""
    tensor_file.write_bytes_atomic(os.path.join(staging, INDEX), json.dumps(index, indent=1).encode())
    crash_point("sharded_index_written")
    tensor_file.write_bytes_atomic(os.path.join(staging, MARKER), b"ok\n")
    fsync_dir(staging)
    crash_point("sharded_marker_written")
    if overwrite and os.path.isdir(target) and not os.path.islink(target):
        replace_dir(staging, target, stage_prefix="sharded_")
    else:
        if os.path.lexists(target):
            raise FileExistsError(f"sharded save: {target} exists (checkpoints are never overwritten; "
                                  "pass overwrite=True to replace it atomically)")
        os.rename(staging, target)
        fsync_dir(os.path.dirname(os.path.abspath(target)))
    crash_point("sharded_renamed")


class Staging:
    """A save in progress: the directory ``.sharded-tmp-<name>-<id>/`` beside ``directory``,
    locked (so no other save's clean-up removes it) until :meth:`finish` or :meth:`abort`.
    The controller makes it, hands ``path`` to the ranks (:func:`write_rank`, wherever they
    run), then calls :meth:`finish` with what they described and recorded."""

    def __init__(self, directory):
        self.target = os.path.abspath(os.fspath(directory))
        parent, base = os.path.dirname(self.target), os.path.basename(self.target)
        os.makedirs(parent, exist_ok=True)
        remove_stale(parent, [STAGING])
        self.path = os.path.join(parent, f"{STAGING}{base}-{uuid.uuid4().hex[:12]}")
        os.mkdir(self.path)
        self._lock = lock_temporary(self.path)

    def finish(self, described, records, metadata=None, overwrite=False):
        """Checks the ranks' files, writes the index and the marker, renames into place."""
        try:
            _check_files(self.path, records)
            commit(self.path, self.target, _index(described, records, metadata), overwrite)
        except BaseException:
            self.abort()
            raise
        unlock(self._lock)
        return self.target

    def abort(self):
        """Removes the staging directory (every rank must have stopped writing into it)."""
        shutil.rmtree(self.path, ignore_errors=True)
        unlock(self._lock)


def save(directory, values, metadata=None, run_ranks=None, overwrite=False):
    """Saves ``values`` (``{name: ShardedValue}``) as the checkpoint directory ``directory``
    (which must not exist, unless ``overwrite``: then it is replaced atomically); returns its
    path. ``metadata``: string pairs for the index, or a function of the index's variables
    (with each shard's ``crc32``) returning them. ``run_ranks(fn, ranks)`` runs ``fn(rank)``
    on every rank and returns the results (default: one thread per rank of this process)."""
    for name, value in values.items():
        V.check_name(name, "sharded save", "variable name")
        _check_plain(name, value)
    staging = Staging(directory)
    try:
        ranks = sorted({r for v in values.values() for r in v.placement.ranks})
        if run_ranks is None:
            futures = [_io_pool().submit(write_rank, staging.path, r, values) for r in ranks]
            wait(futures)   # every rank done before a failure removes the staging directory under them
            per_rank = [f.result() for f in futures]
        else:
            per_rank = run_ranks(lambda r: write_rank(staging.path, r, values), ranks)
    except BaseException:
        staging.abort()
        raise
    return staging.finish(describe(values), [rec for recs in per_rank for rec in recs], metadata, overwrite)


class SaveHandle:
    """A save running in the background (:func:`save_async`)."""

    def __init__(self, thread, box):
        self._thread, self._box = thread, box

    def done(self):
        return not self._thread.is_alive()

    def wait(self):
        """Waits for the save; returns its path or raises its error."""
        self._thread.join()
        if "error" in self._box:
            raise self._box["error"]
        return self._box["path"]


def save_async(directory, values, metadata=None, run_ranks=None, overwrite=False, copy=True, then=None):
    """Snapshots the pieces now (a copy each, so training may change the variables at once;
    ``copy=False`` when the caller's arrays are never written in place, e.g. variable storage,
    which is copy-on-write while a reference is held) and saves them in a background thread;
    ``then(path)`` runs on that thread after the commit. Returns a :class:`SaveHandle`."""
    snap = {n: ShardedValue(v.shape, v.dtype, v.placement, v.sbp,
                            {i: np.array(p) if copy else p for i, p in v.pieces.items()})
            for n, v in values.items()}
    return in_background(lambda: save(directory, snap, metadata, run_ranks, overwrite), then)


def in_background(save_fn, then=None):
    """Runs ``save_fn()`` (returning a path), then ``then(path)``, on a thread of its own;
    returns the :class:`SaveHandle`."""
    box = {}

    def work():
        try:
            box["path"] = save_fn()
            if then is not None:
                then(box["path"])
        except BaseException as e:  # noqa: BLE001 - handed to wait()
            box["error"] = e
    thread = threading.Thread(target=work, name="tw-sharded-save", daemon=True)
    thread.start()
    return SaveHandle(thread, box)


def is_committed(directory):
    """Whether ``directory`` is a complete checkpoint (its marker is there)."""
    return os.path.isfile(os.path.join(directory, MARKER)) and os.path.isfile(os.path.join(directory, INDEX))


def list_checkpoints(parent):
    """The committed checkpoint directories in ``parent`` (staging directories never count)."""
    if not os.path.isdir(parent):
        return []
    return sorted(os.path.join(parent, d) for d in os.listdir(parent)
                  if not d.startswith(".") and is_committed(os.path.join(parent, d)))


# ---- reading ---------------------------------------------------------------------------------------
def read_index(directory):
    """The validated index of a committed checkpoint."""
    where = os.path.join(os.fspath(directory), INDEX)
    if not is_committed(directory):
        raise V.LoadError(f"{directory}: not a committed sharded checkpoint (no {MARKER}; an unfinished save?)")
    doc = V.read_json_file(where)
    V.check_keys(doc, where, ("format", "version", "variables", "metadata"))
    if doc["format"] != FORMAT or doc["version"] != VERSION:
        V.fail(where, f"format {doc['format']!r} version {doc['version']!r}, expected {FORMAT!r} {VERSION}")
    V.expect(doc["variables"], dict, where, "variables")
    for name, var in doc["variables"].items():
        _check_variable(where, name, var)
    return doc


def _check_variable(where, name, var):
    w = f"{where}: variable {name!r}"
    V.check_keys(var, w, ("shape", "dtype", "placement", "sbp", "shards"))
    shape = V.check_shape(var["shape"], w, allow_unknown=False)
    V.check_dtype(var["dtype"], w, "dtype", V.TENSOR_DTYPES)
    V.check_list(var["sbp"], w, "sbp")
    for s in var["sbp"]:
        _parse_sbp(s, w)
    V.check_list(var["shards"], w, "shards", MAX_SHARDS)
    covered = 0
    boxes = []
    for shard in var["shards"]:
        V.check_keys(shard, w, ("file", "key", "start", "stop"), ("crc32", "chunk_bytes", "chunk_crc32"))
        if "crc32" in shard:
            V.check_int(shard["crc32"], w, "shard crc32", 0, 0xFFFFFFFF)
        V.check_safe_filename(shard["file"], w, "shard file")
        V.check_string(shard["key"], w, "shard key")
        for key in ("start", "stop"):
            V.check_list(shard[key], w, key)
            if len(shard[key]) != len(shape):
                V.fail(w, f"shard {key} {shard[key]} does not match the rank of shape {shape}")
        for d, (a, b) in enumerate(zip(shard["start"], shard["stop"])):
            V.check_int(a, w, "shard start", 0, shape[d])
            V.check_int(b, w, "shard stop", a, shape[d])
        if ("chunk_bytes" in shard) != ("chunk_crc32" in shard):
            V.fail(w, "a shard has chunk_bytes without chunk_crc32 or the reverse")
        if "chunk_bytes" in shard:
            nbytes = V.num_elements([b - a for a, b in zip(shard["start"], shard["stop"])]) * \
                V.TENSOR_DTYPES[var["dtype"]].np_dtype.itemsize
            V.check_int(shard["chunk_bytes"], w, "shard chunk_bytes", 1, 1 << 62)
            V.check_list(shard["chunk_crc32"], w, "shard chunk_crc32", MAX_CHUNKS)
            if len(shard["chunk_crc32"]) != -(-nbytes // shard["chunk_bytes"]):
                V.fail(w, f"a shard of {nbytes} bytes has {len(shard['chunk_crc32'])} CRC-32 blocks of "
                          f"{shard['chunk_bytes']} bytes")
            for c in shard["chunk_crc32"]:
                V.check_int(c, w, "shard chunk crc32", 0, 0xFFFFFFFF)
        box = list(zip(shard["start"], shard["stop"]))
        for other in boxes:
            if all(max(a0, b0) < min(a1, b1) for (a0, a1), (b0, b1) in zip(box, other)) and box:
                V.fail(w, f"shards {box} and {other} overlap")
        boxes.append(box)
        covered += V.num_elements([b - a for a, b in box])
    if covered != V.num_elements(shape):
        V.fail(w, f"shards cover {covered} of the {V.num_elements(shape)} elements (a rank's file missing "
                  "from the index?)")


def read_region(directory, name, region, index=None):
    """The box ``region`` (a tuple of slices with explicit start/stop) of variable ``name``'s
    logical value, read only from the shards that overlap it."""
    index = index or read_index(directory)
    var = index["variables"].get(name)
    if var is None:
        raise KeyError(f"{directory}: no variable {name!r} (has {sorted(index['variables'])})")
    dtype = V.TENSOR_DTYPES[var["dtype"]].np_dtype
    out = np.empty([sl.stop - sl.start for sl in region], dtype)
    for shard in var["shards"]:
        lo = [max(sl.start, a) for sl, a in zip(region, shard["start"])]
        hi = [min(sl.stop, b) for sl, b in zip(region, shard["stop"])]
        if any(a >= b for a, b in zip(lo, hi)) and region:
            continue
        src = tuple(slice(a - s, b - s) for a, b, s in zip(lo, hi, shard["start"]))
        dst = tuple(slice(a - sl.start, b - sl.start) for a, b, sl in zip(lo, hi, region))
        whole = all(a == s0 and b == s1 for a, b, s0, s1 in zip(lo, hi, shard["start"], shard["stop"]))
        if whole:
            part = tensor_file.read_slice(os.path.join(directory, shard["file"]), shard["key"], src)
            if "crc32" in shard and piece_crc(part) != shard["crc32"]:
                raise V.LoadError(f"{directory}: variable {name!r}: the shard in {shard['file']} fails its CRC-32 "
                                  "check (corrupt file)")
        else:
            part = _read_part(directory, name, shard, src, dtype, (lo, hi))
        if list(part.shape) != [b - a for a, b in zip(lo, hi)] or part.dtype != dtype:
            raise V.LoadError(f"{directory}: variable {name!r}: {shard['file']}[{shard['key']!r}] is {part.dtype} "
                              f"{list(part.shape)}, the index says {dtype} for that region")
        if part.shape == out.shape:
            return part           # the region is this one shard (same layout as the save): no second copy
        out[dst] = part
    return out


def _read_part(directory, name, shard, src, dtype, box):
    """Part ``src`` (slices relative to the shard) of one shard, after checking the CRC-32 of
    every block of the shard's bytes that the part touches: the shard's blocks when the index
    has them, else the whole shard (one block). Raises ``LoadError`` naming the file, the
    variable, the region read and the bytes that fail."""
    path = os.path.join(directory, shard["file"])
    data, stored, shape = tensor_file.map_tensor(path, shard["key"])
    want = tuple(b - a for a, b in zip(shard["start"], shard["stop"]))
    if shape != want or stored.newbyteorder("=") != np.dtype(dtype):
        raise V.LoadError(f"{directory}: variable {name!r}: {shard['file']}[{shard['key']!r}] is {stored} "
                          f"{list(shape)}, the index says {np.dtype(dtype)} {list(want)}")
    item = stored.itemsize
    strides = [item * int(np.prod(shape[d + 1:], dtype=np.int64)) for d in range(len(shape))]
    first = sum(sl.start * st for sl, st in zip(src, strides))
    end = sum((sl.stop - 1) * st for sl, st in zip(src, strides)) + item
    if "chunk_crc32" in shard:
        size, crcs = shard["chunk_bytes"], shard["chunk_crc32"]
    elif "crc32" in shard:
        size, crcs = max(data.size, 1), [shard["crc32"]]
    else:
        size, crcs = None, ()          # (an index written before shards had checksums)
    if size is not None:
        for k in range(first // size, (end - 1) // size + 1):
            a, b = k * size, min((k + 1) * size, data.size)
            if checksum.bytes_crc32(data[a:b]) != crcs[k]:
                lo, hi = box
                raise V.LoadError(
                    f"{directory}: variable {name!r}: reading region start={lo} stop={hi} from {shard['file']} "
                    f"[{shard['key']!r}]: its bytes {a}..{b} (CRC-32 block {k} of {len(crcs)}) fail their check "
                    "(corrupt or altered file)")
    array = data.view(stored).reshape(shape)
    return np.array(array[src], dtype=np.dtype(dtype))


def restore(directory, name, placement, sbp, ranks=None, index=None):
    """The pieces (mesh order) of variable ``name`` laid out as ``sbp`` on ``placement``, or
    only those of rank indices ``ranks``; partial layouts get the value on coordinate 0.
    Each piece is read by its own thread (as each rank would), only from the shards it overlaps.
    ``index``: the checkpoint's :func:`read_index`, when the caller has it already."""
    from tensorweave.distribute.layout import normalize_sbp, partial_identity, shard_slices
    index = index or read_index(directory)
    var = index["variables"][name] if name in index["variables"] else None
    if var is None:
        raise KeyError(f"{directory}: no variable {name!r} (has {sorted(index['variables'])})")
    shape = tuple(var["shape"])
    nd = normalize_sbp(sbp, placement, shape, what="sharded restore")
    regions = shard_slices(shape, placement, nd)
    wanted = list(range(placement.size) if ranks is None else ranks)

    def one(i):
        piece = read_region(directory, name, regions[i], index)
        coords = placement.coords(i)
        for s, c in zip(nd, coords):
            if isinstance(s, Partial) and c != 0:
                return np.full(piece.shape, partial_identity(s.kind, piece.dtype), piece.dtype)
        return piece
    if len(wanted) == 1 or V.num_elements(shape) * np.dtype(V.TENSOR_DTYPES[var["dtype"]].np_dtype).itemsize < 1 << 20:
        return [one(i) for i in wanted]
    return list(_io_pool().map(one, wanted))
