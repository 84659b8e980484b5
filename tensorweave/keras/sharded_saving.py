"""Saving Keras models whose weights are global (built under ``MirroredStrategy`` or a
``keras.distribution`` layout such as ``ModelParallel``) without gathering them.

* ``model.save("m.keras")`` of such a model writes a **directory** ``m.keras/`` in the
  sharded checkpoint layout (:mod:`tensorweave.saving.sharded`): each rank writes the pieces
  of the weights and optimizer variables it owns, ``index.json`` holds the layouts and, in
  its metadata, the same Keras document a ``.keras`` zip holds (architecture, compile
  config, optimizer state layout); ``commit_success`` is written last and an existing save is
  swapped out atomically. ``model.save("m.keras", sharded=False)`` writes the ordinary
  (gathered) zip instead, for tools that need one file.
* ``model.save_weights(path)`` (not ``.h5``) likewise writes a sharded directory.
* ``keras.models.load_model`` / ``model.load_weights`` read either into whatever layout the
  loading program has: under a distribution scope each weight is laid out by that
  distribution and each rank reads only the byte ranges of its piece; outside one, the
  model is local (one process).
* ``model.save("dir")`` / ``tw.saved_model.save`` (a SavedModel, for serving) of a global
  model export a **gathered** local copy (same config, weights and optimizer state), so
  the SavedModel runs in one process without any distribution; ``model.save("dir",
  sharded=True)`` exports its variables as per-rank shards instead (:func:`structure_copy`).
* ``model.save("m.keras")`` of a model trained on Ray workers (``MultiWorkerMirroredStrategy``)
  has each worker write its 1/N of the rows of one copy (:func:`save_model_on_workers`).

>>> import os, tempfile, numpy as np, tensorweave as tw
>>> from tensorweave import keras
>>> with tw.distribute.MirroredStrategy(["cpu:0", "cpu:1"]).scope():
...     model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, kernel_initializer="ones")])
>>> path = os.path.join(tempfile.mkdtemp(), "m.keras")
>>> model.save(path)
>>> sorted(os.listdir(path))[:2]
['commit_success', 'index.json']
>>> keras.models.load_model(path).layers[0].kernel.numpy().tolist()     # one process
[[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]]
"""
import contextlib
import datetime
import json
import os

import numpy as np

from tensorweave.saving import sharded
from tensorweave.saving import validation as V

FORMAT = "tensorweave.keras.sharded"
WEIGHTS_FORMAT = "tensorweave.weights.sharded"
VERSION = 1


def _is_global(v):
    return bool(getattr(v, "is_global", False)) and hasattr(v, "_locals")


def is_global_model(model):
    """Whether any weight of ``model`` (or of its optimizer) is a global variable."""
    opt = getattr(model, "optimizer", None)
    opt_vars = list(getattr(opt, "variables", None) or []) if opt is not None and getattr(opt, "built", False) else []
    return any(_is_global(v) for v in list(model.weights) + opt_vars)


def is_sharded_save(path):
    """Whether ``path`` is a committed sharded directory (a model or weights saved here)."""
    return os.path.isdir(path) and sharded.is_committed(path)


def _value(v):
    from tensorweave.train._sharded import global_value, local_value
    return global_value(v) if _is_global(v) else local_value(np.asarray(v.numpy()))


def _prepare_path(path, overwrite):
    if os.path.lexists(path) and not os.path.isdir(path):
        if not overwrite:
            raise FileExistsError(f"{path} exists and overwrite=False")
        os.remove(path)          # (a single-file save of a local model was here; a directory replaces it)


def _save(path, values, metadata, overwrite):
    path = os.fspath(path)
    _prepare_path(path, overwrite)
    from tensorweave.train._sharded import save_values
    save_values(path, values, metadata, overwrite=overwrite)     # (pieces on Ray workers: they write them)


def save_weights(model, filepath, overwrite=True):
    """``model.save_weights`` of a global model: a sharded directory keyed by weight path."""
    from tensorweave.keras.engine.weights_io import _keyed_weights
    values = {k: _value(v) for k, v in _keyed_weights(model).items()}
    _save(filepath, values, {"format": WEIGHTS_FORMAT, "version": str(VERSION)}, overwrite)


def _document(model, include_optimizer):
    """``(doc, {tensor name: variable})``: the Keras document of ``model`` with its weights and
    optimizer variables referred to by tensor names (``weights/<key>``, ``optimizer/<i>``)."""
    from tensorweave.keras.saving import model_document
    doc, keyed = model_document(model, include_optimizer)
    variables = {f"weights/{k}": v for k, v in keyed.items()}
    doc["weights"] = {k: f"weights/{k}" for k in keyed}
    if doc["optimizer_state"] is not None:
        refs = []
        for i, v in enumerate(doc["optimizer_state"]["variables"]):
            variables[f"optimizer/{i}"] = v
            refs.append(f"optimizer/{i}")
        doc["optimizer_state"]["variables"] = refs
    return doc, variables


def _metadata(doc):
    import tensorweave
    return {"format": FORMAT, "version": str(VERSION), "tensorweave_version": tensorweave.__version__,
            "date_saved": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "keras": json.dumps(doc, allow_nan=False)}


def save_model(model, filepath, overwrite=True, include_optimizer=True):
    """``model.save("m.keras")`` of a global model: a sharded directory with the Keras document."""
    doc, variables = _document(model, include_optimizer)
    _save(filepath, {n: _value(v) for n, v in variables.items()}, _metadata(doc), overwrite)


# ---- models trained on Ray workers (MultiWorkerMirroredStrategy) -----------------------------------------------
def workers_holding(model):
    """The Ray cluster whose workers keep a replica of ``model`` (it was trained there under
    ``MultiWorkerMirroredStrategy``), or None."""
    if getattr(model, "_multi_worker", None) is None or "_multi_worker_token" not in model.__dict__:
        return None
    from tensorweave.distribute.ray import cluster as rc
    return rc.current()


def _worker_values(worker, token, include_optimizer):
    """On a worker: its share of one copy of the kept model's values (``split_replica``)."""
    from tensorweave.keras.engine.weights_io import _keyed_weights
    from tensorweave.saving.sharded_workers import WorkerStateMismatch, split_replica
    rep = worker.store.get("multi_worker_replica")      # the model MultiWorkerMirroredStrategy trained here
    model = rep.model if rep is not None and (rep.token or "").startswith(token + "-") else None
    if model is None:
        raise WorkerStateMismatch(f"worker {worker.rank} does not hold this model (trained elsewhere since?)")
    index, size = worker.ranks.index(worker.rank), len(worker.ranks)
    values = {f"weights/{k}": split_replica(v.numpy(), index, size) for k, v in _keyed_weights(model).items()}
    opt = model.optimizer
    if include_optimizer and opt is not None and opt.built:
        for i, v in enumerate(opt.variables):
            values[f"optimizer/{i}"] = split_replica(v.numpy(), index, size)
    return values


def save_model_on_workers(model, cluster, filepath, overwrite=True, include_optimizer=True):
    """``model.save("m.keras")`` of a model trained on Ray workers: each worker writes its
    1/N of the rows of every weight and optimizer variable (``sharded_workers.split_replica``)
    into the sharded directory, in parallel; the driver writes the Keras document and commits.
    The workers' shards are checked against the driver's values (CRC-32 of the same rows):
    if the driver's model changed since the last ``fit``, the driver writes them itself."""
    from tensorweave.saving import sharded_workers as sw
    doc, variables = _document(model, include_optimizer)
    arrays = {n: np.asarray(v.numpy()) for n, v in variables.items()}
    path = os.fspath(filepath)
    _prepare_path(path, overwrite)
    try:
        sw.save_on_workers(cluster, path, _worker_values, model._multi_worker_token, include_optimizer,
                           metadata=_metadata(doc), overwrite=overwrite, verify=sw.replica_verifier(arrays))
    except sw.WorkerStateMismatch:
        size = cluster.num_workers
        values = {}
        for n, a in arrays.items():
            parts = [sw.split_replica(a, i, size) for i in range(size)]
            values[n] = sharded.ShardedValue(a.shape, a.dtype, parts[0].placement, parts[0].sbp,
                                             {i: p.pieces[i] for i, p in enumerate(parts)})
        _save(path, values, _metadata(doc), overwrite)


# ---- loading ---------------------------------------------------------------------------------------------
class Assigner:
    """Assigns saved tensors of a sharded directory to variables in their current layout:
    a global variable's pieces are read per rank (only the shards each overlaps), a local
    variable gets the logical value."""

    def __init__(self, directory, where):
        self.directory, self.where = directory, where
        self.index = sharded.read_index(directory)

    def describe(self, ref):
        var = self.index["variables"].get(ref)
        if var is None:
            V.fail(self.where, f"reference {V._short(ref)} is not in the index")
        return tuple(var["shape"]), np.dtype(V.TENSOR_DTYPES[var["dtype"]].np_dtype)

    def check(self, var, ref, what):
        shape, dtype = self.describe(ref)
        if tuple(var.shape.as_list()) != shape or dtype != var.dtype.np_dtype:
            V.fail(self.where, f"{what} ({var.name}) is {var.dtype.name} {tuple(var.shape.as_list())} in the model "
                               f"but {dtype} {shape} in the file")

    def prepare(self, var, ref):
        """A function that assigns the value (read now, so every read is done before any write)."""
        if _is_global(var):
            pieces = sharded.restore(self.directory, ref, var.placement, var.sbp, index=self.index)

            def commit():
                for local, piece in zip(var._locals, pieces):
                    local._write(np.array(piece, dtype=var.dtype.np_dtype, copy=True))
            return commit
        shape, _ = self.describe(ref)
        value = sharded.read_region(self.directory, ref, tuple(slice(0, d) for d in shape), self.index)
        return lambda: var.assign(value)


def load_weights(model, filepath, skip_mismatch=False):
    """``model.load_weights`` of a sharded weights directory, into the model's current layout."""
    from tensorweave.keras.engine.weights_io import LoadStatus, _keyed_weights
    filepath = os.fspath(filepath)
    assigner = Assigner(filepath, filepath)
    if assigner.index["metadata"].get("format") != WEIGHTS_FORMAT:
        raise ValueError(f"{filepath}: a sharded directory, but not of model.save_weights (format "
                         f"{assigner.index['metadata'].get('format')!r:.60}); load a saved model with "
                         "keras.models.load_model")
    data = assigner.index["variables"]
    targets = _keyed_weights(model)
    unused = sorted(k for k in data if k not in targets)
    missing = [k for k in targets if k not in data]
    if missing and not skip_mismatch:
        raise ValueError(f"Weights file {filepath} has no values for {missing[:5]}"
                         f"{' ...' if len(missing) > 5 else ''}; model '{model.name}' does not match it")
    commits = []
    for k, v in targets.items():
        if k not in data:
            continue
        shape, _ = assigner.describe(k)
        if tuple(v.shape.as_list()) != shape:
            if skip_mismatch:
                continue
            raise ValueError(f"Weight {k}: the file has shape {shape}, the model {tuple(v.shape.as_list())}")
        commits.append(assigner.prepare(v, k))
    for commit in commits:
        commit()
    return LoadStatus(filepath, missing, unused)


def load_model(filepath, custom_objects, compile, safe_mode):
    """``keras.models.load_model`` of a sharded model directory."""
    from tensorweave.keras.saving import KerasLoadError, _check_document, restore_model
    from tensorweave.saving.validation import parse_json
    where = f"{filepath}: {sharded.INDEX} metadata keras"
    assigner = Assigner(filepath, where)
    meta = assigner.index["metadata"]
    if meta.get("format") != FORMAT or meta.get("version") != str(VERSION) or "keras" not in meta:
        raise KerasLoadError(f"{filepath}: a sharded directory, but not a saved Keras model (format "
                             f"{meta.get('format')!r:.60}); weights saved by model.save_weights load with "
                             "model.load_weights")
    doc = parse_json(meta["keras"].encode("utf-8", "surrogatepass"), where)
    _check_document(doc, where, str)
    refs = list(doc["weights"].values()) + list((doc["optimizer_state"] or {}).get("variables", []))
    unused = sorted(set(assigner.index["variables"]) - set(refs))
    if unused:
        V.fail(where, f"the index holds tensors the document does not use: {unused[:5]}")
    sizes = [V.num_elements(s) * d.itemsize for s, d in map(assigner.describe, refs)] or [0]
    return restore_model(doc, None, where, custom_objects, compile, safe_mode, (max(sizes), sum(sizes)),
                         assigner=assigner)


# ---- SavedModel export of a global model -------------------------------------------------------------------
@contextlib.contextmanager
def no_distribution():
    """No distribution is active inside (layers made here get local weights)."""
    from tensorweave.distribute import distribution as D
    stack = getattr(D._state, "stack", None)
    if stack is None:
        stack = D._state.stack = []
    stack.append(None)
    try:
        yield
    finally:
        stack.pop()


def structure_copy(model, include_optimizer=True):
    """``(copy, sources)``: a local copy of a global model with the same architecture, compile
    config and optimizer slots but zero values (nothing gathered), and ``{id(copy's
    variable): model's variable}`` — for a sharded SavedModel, whose functions are traced on
    the copy while each variable's value is written from the model's per-rank pieces."""
    from tensorweave.keras.saving import restore_model
    doc, variables = _document(model, include_optimizer)
    arrays = {n: np.zeros(v.shape.as_list(), v.dtype.np_dtype) for n, v in variables.items()}
    doc = json.loads(json.dumps(doc))
    sizes = [a.nbytes for a in arrays.values()] or [0]
    with no_distribution():
        copy = restore_model(doc, arrays.__getitem__, f"model '{model.name}'", None, True, False,
                             (max(sizes), sum(sizes)))
    _, copied = _document(copy, include_optimizer)
    if set(copied) != set(variables):
        raise ValueError(f"model '{model.name}': its local copy has other variables "
                         f"({sorted(set(copied) ^ set(variables))[:4]})")
    return copy, {id(copied[n]): variables[n] for n in variables}


def gathered_copy(model, include_optimizer=True):
    """A local (one-process) copy of a global model: same architecture, compile config,
    weights and optimizer state, each value gathered (for a SavedModel meant for serving)."""
    from tensorweave.keras.saving import restore_model
    doc, variables = _document(model, include_optimizer)
    arrays = {n: np.asarray(v.numpy()) for n, v in variables.items()}
    doc = json.loads(json.dumps(doc))
    sizes = [a.nbytes for a in arrays.values()] or [0]
    with no_distribution():
        return restore_model(doc, arrays.__getitem__, f"model '{model.name}'", None, True, False,
                             (max(sizes), sum(sizes)))
