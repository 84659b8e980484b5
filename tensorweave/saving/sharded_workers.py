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
                    overwrite=False, verify=None):
    """Saves the values the workers of ``cluster`` build (``values_fn(worker, *args)``, run on
    each) as the sharded checkpoint ``directory``, each worker writing its own file in
    parallel; returns the path. ``metadata``: as :func:`~tensorweave.saving.sharded.save`.
    ``local_dir``/``upload``: each worker writes on its own disk, then uploads (see
    :func:`~tensorweave.saving.sharded.write_rank`). ``verify(described, records)``: a last
    check before the commit; raising aborts the save (nothing committed)."""
    staging = sharded.Staging(directory)
    try:
        results = cluster.run(write_on_worker, staging.path, values_fn, tuple(args), local_dir, upload)
        described, records = _merge(results)
        if verify is not None:
            verify(described, records)
    except BaseException:
        staging.abort()        # (Cluster.run returns or raises only after every worker stopped)
        raise
    return staging.finish(described, records, metadata, overwrite)


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
