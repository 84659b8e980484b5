"""Sharded checkpoints written by ranks in other processes: the workers of a Ray cluster
(``tw.distribute.connect``) write the shards they own, in parallel; the driver commits.

The protocol is :mod:`~tensorweave.saving.sharded`'s, split over processes:

1. The driver makes the staging directory on a path every worker sees (``Staging``: a
   shared file system), locked while the save runs.
2. Each worker builds the values it holds (``values_fn(worker, *args)`` →
   ``{name: ShardedValue}`` with *its own* pieces only) and calls
   :func:`~tensorweave.saving.sharded.write_rank` — the same call a rank of this process
   makes — which writes and fsyncs ``shards-rank<k>.safetensors`` there (or on the worker's
   own disk, ``local_dir``, then ``upload(local_path, staging_path)`` copies it over). It
   returns its values' descriptions and its shard records (CRC-32 included); nothing else
   travels to the driver.
3. When every worker has returned (so every file is fsynced) the driver checks the files'
   headers against the records, writes ``index.json``, then ``commit_success``, then
   renames the directory into place.

A worker killed at any point (``kill -9`` during its write, after it, during the upload)
makes ``Cluster.run`` raise once the other workers are done; the driver removes the staging
directory and the previous checkpoint stays the latest — no partial checkpoint is listed,
since only a directory with its marker counts. A killed driver leaves an unlocked staging
directory, which the next save removes.

**Replicated values** (``MultiWorkerMirroredStrategy``: every worker holds the whole model)
are written once, split: :func:`split_replica` makes worker ``i`` of ``n`` the owner of rows
``balanced_bounds(rows, n)[i]`` (``S(0)`` over the workers; a scalar is rank 0's), as
PyTorch DCP de-duplicates replicated tensors. The index then describes an ordinary ``S(0)``
layout, so any number of workers, a 2x2 mesh or one process restores it
(:func:`~tensorweave.saving.sharded.restore`: a worker reads only the rows it needs with
``ranks=[its index]``). A global tensor whose pieces live on the workers uses the same call:
its ``ShardedValue`` holds the worker's pieces under its own layout.

>>> import numpy as np
>>> value = split_replica(np.arange(10.0).reshape(5, 2), index=1, size=2)
>>> value.sbp, value.pieces[1].tolist()
((S(0),), [[6.0, 7.0], [8.0, 9.0]])
"""
import numpy as np

from tensorweave.saving import sharded
from tensorweave.saving import validation as V


class WorkerStateMismatch(ValueError):
    """The workers' values are not the ones the driver expects (``verify`` refused them)."""


def split_replica(array, index, size):
    """A value that all ``size`` workers hold whole, as worker ``index``'s share of one copy:
    ``S(0)`` over ranks ``0..size-1`` (its piece: its balanced rows; a view, no copy), or
    ``B`` for a 0-d value (written by rank 0)."""
    from tensorweave.core.sbp import Broadcast, Split
    from tensorweave.distribute.layout import Placement, shard_slices
    a = np.asarray(array)
    placement = Placement("cpu", list(range(int(size))))
    sbp = (Split(0),) if a.ndim else (Broadcast(),)
    region = shard_slices(a.shape, placement, sbp)[int(index)]
    return sharded.ShardedValue(a.shape, a.dtype, placement, sbp, {int(index): a[region]})


def write_on_worker(worker, staging, values_fn, args=(), local_dir=None, upload=None):
    """Runs on each worker (via ``Cluster.run``): its values, written by
    :func:`~tensorweave.saving.sharded.write_rank` as rank ``worker.rank``; returns
    ``(descriptions, records)``. ``local_dir`` is per worker (``<local_dir>/<staging>-rank<k>``)."""
    import os
    values = values_fn(worker, *args)
    for name, value in values.items():
        V.check_name(name, "sharded save", "variable name")
        sharded._check_plain(name, value)
    if local_dir is not None:
        local_dir = os.path.join(os.fspath(local_dir), f"rank{int(worker.rank)}")
    records = sharded.write_rank(staging, worker.rank, values, local_dir, upload)
    return sharded.describe(values), records


def _merge(results):
    """One description per variable (every worker that has it must agree) and all records."""
    described, first, records = {}, {}, []
    for rank, (desc, recs) in enumerate(results):
        for name, entry in desc.items():
            if name in described and described[name] != entry:
                raise ValueError(f"sharded save: workers {first[name]} and {rank} describe {name!r} differently: "
                                 f"{described[name]} vs {entry}")
            described.setdefault(name, entry)
            first.setdefault(name, rank)
        records.extend(recs)
    return described, records


def save_on_workers(cluster, directory, values_fn, *args, metadata=None, local_dir=None, upload=None,
                    overwrite=False, verify=None, host_values=None):
    """Saves the values the workers of ``cluster`` build (``values_fn(worker, *args)``, run on
    each) as the sharded checkpoint ``directory``, each worker writing its own file in
    parallel; returns the path. ``metadata``: as :func:`~tensorweave.saving.sharded.save`.
    ``local_dir``/``upload``: each worker writes on its own disk, then uploads (see
    :func:`~tensorweave.saving.sharded.write_rank`). ``verify(described, records)``: a last
    check before the commit; raising aborts the save (nothing committed). ``host_values``
    (``{name: ShardedValue}``): values the driver holds (a ``tw.train.Checkpoint``'s local
    variables and iterator states), written by the driver meanwhile as ``shards-host-rank<k>``
    files of the same checkpoint."""
    staging = sharded.Staging(directory)
    host_values = host_values or {}
    host_ranks = sorted({r for v in host_values.values() for r in v.placement.ranks})
    host = [sharded._io_pool().submit(sharded.write_rank, staging.path, r, host_values, prefix="shards-host-rank")
            for r in host_ranks]
    try:
        try:
            results = cluster.run(write_on_worker, staging.path, values_fn, tuple(args), local_dir, upload)
        finally:
            sharded.wait(host)     # (every writer stopped before a failure removes the staging directory)
        described, records = _merge(results + [(sharded.describe(host_values), [r for f in host for r in f.result()])])
        if verify is not None:
            verify(described, records)
    except BaseException:
        staging.abort()        # (Cluster.run returns or raises only after every worker stopped)
        raise
    return staging.finish(described, records, metadata, overwrite)


# ---- global tensors whose pieces live on the workers (``tw.train.Checkpoint``) --------------------------
def _store_array(obj):
    """A worker-store entry's value: a variable's storage (no copy: it is copy-on-write while
    referenced), or the array itself."""
    return np.asarray(obj._read()) if hasattr(obj, "_read") else np.asarray(obj)


def _mine(worker, specs):
    """``{name: (index, spec)}`` of the entries of ``specs`` (``{name: (shape, dtype, placement,
    sbp, {index: store key})}``) this worker holds a piece of."""
    out = {}
    for name, spec in specs.items():
        placement = spec[2]
        if worker.rank in placement.ranks:
            i = placement.ranks.index(worker.rank)
            if i in spec[4]:
                out[name] = (i, spec)
    return out


def store_values(worker, specs):
    """A ``values_fn`` for :func:`save_on_workers`: this worker's pieces of the global values
    ``specs`` describes, read from its store where they live."""
    return {name: sharded.ShardedValue(shape, dtype, placement, sbp, {i: _store_array(worker.store[keys[i]])})
            for name, (i, (shape, dtype, placement, sbp, keys)) in _mine(worker, specs).items()}


def _w_snapshot(worker, token, specs):
    worker.store[token] = store_values(worker, specs)


def snapshot_values(worker, token):
    """A ``values_fn``: the values :func:`snapshot` kept under ``token`` (then let go)."""
    return worker.store.pop(token)


def snapshot(cluster, specs):
    """Keeps, on each worker, its pieces of ``specs`` as they are now (no copy: variable storage
    is copy-on-write while referenced, so a training step after this copies what it updates);
    returns the token that :func:`snapshot_values` and :func:`drop_snapshot` take. (An
    asynchronous save: the snapshot is taken before the next step's calls reach the workers.)"""
    from tensorweave.distribute.ray.pieces import heap_of
    token = ("tw-checkpoint-snapshot", heap_of(cluster).key())
    cluster.run(_w_snapshot, token, specs)
    return token


def _w_drop(worker, token):
    worker.store.pop(token, None)


def drop_snapshot(cluster, token):
    """Lets go of a snapshot a failed save did not consume (workers that died hold nothing)."""
    try:
        cluster.run(_w_drop, token)
    except Exception:  # noqa: BLE001 - a dead worker's snapshot died with it
        pass


class WorkerIO:
    """Where Ray workers put and get the files of a checkpoint when the checkpoint's path is
    not their shared file system: ``local_dir`` (on each worker's own disk), ``upload(local_path,
    remote_path)`` after a worker wrote its file there, ``download(remote_path, local_path)``
    before a worker reads (only the files holding bytes it needs; removed after). The defaults
    copy durably (``tensor_file.copy_atomic``). Pass as ``tw.train.CheckpointOptions(
    experimental_worker_io=WorkerIO(...))``."""

    __slots__ = ("local_dir", "upload", "download")

    def __init__(self, local_dir, upload=None, download=None):
        import os
        self.local_dir = os.fspath(local_dir)
        self.upload, self.download = upload, download


def _overlaps(region, shard):
    return all(max(sl.start, a) < min(sl.stop, b) for sl, a, b in zip(region, shard["start"], shard["stop"]))


def restore_on_worker(worker, directory, index, requests, local_dir=None, download=None):
    """Runs on each worker (via ``Cluster.run``): for each ``name: (placement, sbp, {index:
    store key})`` of ``requests`` it holds a piece of, reads that piece — only the byte ranges
    of the shards it overlaps, checksummed — and writes it into the variable under its store key.
    With ``local_dir``, first ``download(remote, local)`` s the shard files it needs into its own
    ``<local_dir>/rank<k>/`` (removed after). Returns the number of bytes it restored."""
    import os
    import shutil
    import uuid
    from tensorweave.distribute.layout import normalize_sbp, shard_slices
    mine = _mine(worker, {n: (index["variables"][n]["shape"], None, *req) for n, req in requests.items()})
    if not mine:
        return 0
    source, local = os.fspath(directory), None
    if local_dir is not None:
        from tensorweave.saving import tensor_file
        files = set()
        for name, (i, (shape, _, placement, sbp, _keys)) in mine.items():
            region = shard_slices(tuple(shape), placement, normalize_sbp(sbp, placement, tuple(shape)))[i]
            files.update(s["file"] for s in index["variables"][name]["shards"] if _overlaps(region, s))
        local = os.path.join(os.fspath(local_dir), f"rank{int(worker.rank)}",
                             f"{sharded.STAGING}download-{os.path.basename(source)}-{uuid.uuid4().hex[:8]}")
        os.makedirs(local)
        for fname in sorted(files):
            (download or tensor_file.copy_atomic)(os.path.join(source, fname), os.path.join(local, fname))
        source = local
    try:
        total = 0
        for name, (i, (_, _, placement, sbp, keys)) in mine.items():
            piece = sharded.restore(source, name, placement, sbp, ranks=[i], index=index)[0]
            var = worker.store[keys[i]]
            var._write(np.array(piece, dtype=var.dtype.np_dtype, copy=True))
            total += piece.nbytes
        return total
    finally:
        if local is not None:
            shutil.rmtree(local, ignore_errors=True)


def restore_on_workers(cluster, directory, requests, index=None, worker_io=None):
    """Restores global variables whose pieces live on ``cluster``'s workers from the sharded
    checkpoint ``directory``, into their current layouts, each worker reading its own pieces
    (nothing passes the driver but the index). ``requests``: ``{name: (placement, sbp, {index:
    store key of that rank's variable})}``. ``worker_io``: a :class:`WorkerIO` whose ``download``
    hook brings the files a worker needs to its local disk first. Returns the bytes restored."""
    index = index or sharded.read_index(directory)
    sub = dict(index, variables={n: index["variables"][n] for n in requests})
    io = worker_io
    return sum(cluster.run(restore_on_worker, directory, sub, requests,
                           None if io is None else io.local_dir, None if io is None else io.download))


def replica_verifier(arrays):
    """A ``verify`` for :func:`save_on_workers` of replicated values: every shard's CRC-32
    must be that of the same rows of ``arrays[name]`` (the driver's copy), every name there
    and nothing else. Raises :class:`WorkerStateMismatch` otherwise."""
    def verify(described, records):
        if set(described) != set(arrays):
            raise WorkerStateMismatch(f"the workers hold {sorted(set(described) ^ set(arrays))[:4]} "
                                      "differently from the driver")
        for name, entry in described.items():
            a = np.asarray(arrays[name])
            if entry["shape"] != list(a.shape) or entry["dtype"] != a.dtype.name:
                raise WorkerStateMismatch(f"{name!r} is {entry['dtype']}{entry['shape']} on the workers, "
                                          f"{a.dtype.name}{list(a.shape)} on the driver")
        for rec in records:
            a = np.asarray(arrays[rec["name"]])
            region = tuple(slice(lo, hi) for lo, hi in zip(rec["start"], rec["stop"]))
            if sharded.piece_crc(a[region]) != rec["crc32"]:
                raise WorkerStateMismatch(f"{rec['name']!r} on the workers differs from the driver's value")
    return verify
