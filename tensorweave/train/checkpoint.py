"""``tw.train.Checkpoint``: object-based checkpoints (TensorFlow 2 semantics), atomic and bit-exact.

A checkpoint saves the objects it is given (``Checkpoint(model=..., optimizer=..., step=...)``)
and everything they reach: variables, Keras layers and models, optimizers with their slot
variables and step counter, metrics, ``tw.data`` iterators (their position) and datasets
(shuffle seeds and epochs), ``tw.random.Generator`` objects, the process's random state
(:class:`RNGState`), nested checkpoints and lists/dicts of these. Values are matched by
*object path* (``model/layer-0/kernel``), not by variable name, so a program rebuilt from the
same code finds its values whatever names its variables got (see :mod:`.object_graph`).

**File.** ``save("dir/ckpt")`` writes ``dir/ckpt-<n>.safetensors`` (``n``: the save counter)
and updates the state file ``dir/checkpoint``; ``write(prefix)`` writes ``prefix.safetensors``
alone. The file is a tensor file in the safetensors layout (``tensorweave.saving.tensor_file``):
one tensor per variable and per array of iterator state, keyed by object path, and in its
metadata the object graph as JSON (nodes, named edges, slot table, dtypes, shapes, the JSON
state of iterators and generators, a CRC-32 per tensor). One file per checkpoint means one
atomic rename makes it appear complete, and overwriting a checkpoint (``write`` to the same
prefix) replaces it atomically too. The state file is written after the checkpoint, so it
never names an incomplete one; a crash at any moment leaves the previous checkpoint loadable
(``tests/test_checkpoint_crash.py`` kills a writer at every stage).

**Global variables.** When the objects reach a variable laid out over ranks (``placement=``,
``sbp=``; a Keras model built under a distribution), the checkpoint is the directory
``<prefix>.sharded/`` instead: each rank writes its own pieces, nothing is gathered, and a
restore gives every variable the pieces of its current layout (``train/_sharded.py``).

**Loading trusts nothing.** The tensor file is validated before any allocation; the object
graph must match a fixed schema (types, node references, dtypes, shapes, checksums); iterator
and random states are checked field by field before anything is changed. No pickle, no
``eval``, no names looked up from the file: a malformed or hostile file raises ``ValueError``.

**Restoring** walks the saved graph and the program's objects side by side from the roots and
assigns each matched value. Values whose objects do not exist yet are kept and assigned when
they appear (deferred restoration, as in TensorFlow): the variables of a Keras layer that is
built later, the slot variables an optimizer makes on its first step, an optimizer passed to
``compile`` later, an attribute set on the checkpoint later. The returned status reports what
was used, what is still waiting, what the file had that the program does not (``unused``) and
what the program has that the file did not (``missing``).

>>> import os, tempfile
>>> import tensorweave as tw
>>> from tensorweave.train import Checkpoint
>>> step, w = tw.Variable(3, dtype=tw.int64), tw.Variable([1.0, 2.0])
>>> ckpt = Checkpoint(step=step, weights={"w": w})
>>> path = ckpt.save(os.path.join(tempfile.mkdtemp(), "ckpt"))
>>> os.path.basename(path)
'ckpt-1'
>>> _ = w.assign([0.0, 0.0])
>>> restored = Checkpoint(step=step, weights={"w": w})
>>> status = restored.restore(path)
>>> w.numpy().tolist(), int(restored.save_counter.numpy()), status.unused, status.missing
([1.0, 2.0], 1, [], [])
"""
import json
import os
import random as _pyrandom
import time
import warnings

import numpy as np

from tensorweave.core import errors
from tensorweave.core.context import building_graph, init_scope
from tensorweave.saving import atomic, checksum, tensor_file
from tensorweave.saving.validation import parse_json
from tensorweave.train import _io, _sharded
from tensorweave.train import object_graph as og
from tensorweave.train._sharded import SHARDED_SUFFIX

SUFFIX = ".safetensors"

__all__ = ["Checkpoint", "CheckpointOptions", "CheckpointLoadStatus", "RNGState", "list_variables",
           "load_variable"]


class CheckpointOptions:
    """Options of ``save``/``write``/``restore`` (``tf.train.CheckpointOptions``).

    ``experimental_enable_async_checkpoint`` / ``enable_async``: ``save``/``write`` return once
    the values are snapshotted and write in the background (as ``CheckpointManager(...,
    async_save=True)``); the next save, ``restore``/``read`` and :meth:`Checkpoint.sync` wait
    for it, and ``sync`` raises its error. ``experimental_io_device`` changes nothing (tensorweave
    writes from the host). ``experimental_worker_io`` (tensorweave's): a
    ``tensorweave.saving.sharded_workers.WorkerIO`` — Ray workers holding global variables
    write their files on their own disks and ``upload`` them, and ``download`` the files they
    need before a restore, instead of using the checkpoint's path directly.
    """

    def __init__(self, experimental_io_device=None, experimental_enable_async_checkpoint=False,
                 experimental_write_callbacks=None, enable_async=False, experimental_skip_slot_variables=False,
                 experimental_sharding_callback=None, experimental_worker_io=None):
        self.experimental_worker_io = experimental_worker_io
        self.experimental_io_device = experimental_io_device
        self.experimental_enable_async_checkpoint = experimental_enable_async_checkpoint
        self.experimental_write_callbacks = experimental_write_callbacks
        self.enable_async = enable_async
        self.experimental_skip_slot_variables = experimental_skip_slot_variables


# ---- the process's random state as a trackable ---------------------------------------------------------
_MT_WORDS = 624


class RNGState:
    """The process-wide random state, as an object a :class:`Checkpoint` can hold.

    It covers tensorweave's global random state (``tw.random.set_seed``'s seed, the eager op
    streams and counter, the streams of random ops inside ``tw.function`` graphs, the global
    ``Generator``; see ``tw.random.get_rng_state``) and, when asked, NumPy's global generator
    (used by ``fit`` to shuffle arrays) and Python's ``random``. Restoring it in a new process
    lets dropout and other random ops continue exactly where the saved run was.

    >>> import os, tempfile
    >>> import tensorweave as tw
    >>> from tensorweave.train import Checkpoint, RNGState
    >>> tw.random.set_seed(0)
    >>> ckpt = Checkpoint(rng=RNGState())
    >>> path = ckpt.write(os.path.join(tempfile.mkdtemp(), "rng"))
    >>> a = tw.random.normal([3]).numpy()
    >>> _ = ckpt.read(path)
    >>> bool((tw.random.normal([3]).numpy() == a).all())
    True
    >>> tw.random.set_seed(None)
    """

    _tw_checkpoint_kind = "rng"

    def __init__(self, tensorweave=True, numpy=True, python=True):
        self.tensorweave, self.numpy, self.python = bool(tensorweave), bool(numpy), bool(python)

    def _checkpoint_state(self):
        from tensorweave.ops.random_ops import get_rng_state
        arrays, state = [], {"tensorweave": None, "numpy": None, "python": None}
        if self.tensorweave:
            state["tensorweave"] = get_rng_state()
        if self.numpy:
            kind, key, pos, has_gauss, cached = np.random.get_state()
            if kind != "MT19937":
                raise TypeError(f"RNGState: NumPy's global generator is {kind}, only MT19937 can be saved")
            arrays.append(np.asarray(key, np.uint32))
            state["numpy"] = {"pos": int(pos), "has_gauss": int(has_gauss), "cached_gaussian": repr(float(cached))}
        if self.python:
            version, words, gauss = _pyrandom.getstate()
            arrays.append(np.asarray(words, np.uint32))
            state["python"] = {"version": version, "gauss_next": None if gauss is None else repr(float(gauss))}
        return state, arrays

    def _prepare_restore(self, state, arrays):
        from tensorweave.ops.random_ops import set_rng_state
        if not isinstance(state, dict) or set(state) != {"tensorweave", "numpy", "python"}:
            raise ValueError("RNGState: the saved state must have tensorweave, numpy and python")
        arrays = list(arrays)
        actions = []
        if state["tensorweave"] is not None:
            from tensorweave.ops import random_ops
            saved = state["tensorweave"]
            # set_rng_state validates everything before it changes anything; check now too, so
            # a bad field fails before the other parts of the checkpoint are assigned.
            _dry_run_rng(random_ops, saved)
            actions.append(lambda: set_rng_state(saved))
        if state["numpy"] is not None:
            np_state = state["numpy"]
            if not isinstance(np_state, dict) or set(np_state) != {"pos", "has_gauss", "cached_gaussian"} or \
                    not arrays:
                raise ValueError("RNGState: malformed NumPy state")
            key = arrays.pop(0)
            pos, has_gauss = np_state["pos"], np_state["has_gauss"]
            cached = _float(np_state["cached_gaussian"], "NumPy cached_gaussian")
            if key.dtype != np.uint32 or key.shape != (_MT_WORDS,) or not og._is_int(pos) or \
                    not 0 <= pos <= _MT_WORDS or has_gauss not in (0, 1) or isinstance(has_gauss, bool):
                raise ValueError("RNGState: malformed NumPy state (MT19937 needs 624 uint32 words, pos in "
                                 "[0, 624], has_gauss 0 or 1)")
            actions.append(lambda: np.random.set_state(("MT19937", key.copy(), pos, has_gauss, cached)))
        if state["python"] is not None:
            py = state["python"]
            if not isinstance(py, dict) or set(py) != {"version", "gauss_next"} or py["version"] != 3 or not arrays:
                raise ValueError("RNGState: malformed Python random state")
            words = arrays.pop(0)
            gauss = None if py["gauss_next"] is None else _float(py["gauss_next"], "Python gauss_next")
            if words.dtype != np.uint32 or words.shape != (_MT_WORDS + 1,) or not words[-1] <= _MT_WORDS:
                raise ValueError("RNGState: malformed Python random state (625 uint32 words, the last <= 624)")
            actions.append(lambda: _pyrandom.setstate((3, tuple(int(w) for w in words), gauss)))
        if arrays:
            raise ValueError("RNGState: more arrays than the state uses")

        def commit():
            for act in actions:
                act()
        return commit

    def __repr__(self):
        return f"RNGState(tensorweave={self.tensorweave}, numpy={self.numpy}, python={self.python})"


def _float(text, what):
    if not isinstance(text, str) or len(text) > 40:
        raise ValueError(f"RNGState: {what} must be a float written as text")
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"RNGState: {what} is not a float: {text!r}") from None


def _dry_run_rng(random_ops, saved):
    # The validators of set_rng_state, without its effects.
    if not isinstance(saved, dict) or set(saved) != {"global_seed", "counter", "eager", "graph", "generator"}:
        raise ValueError("random state must be an object with global_seed, counter, eager, graph and generator")
    if not isinstance(saved["eager"], list) or not isinstance(saved["graph"], list):
        raise ValueError("random state: eager and graph must be lists")
    for i, e in enumerate(saved["eager"]):
        if not isinstance(e, dict) or "state" not in e:
            raise ValueError(f"random state: eager[{i}] is malformed")
        random_ops._check_seed_state(e["state"], f"eager[{i}].state")
    for i, g in enumerate(saved["graph"]):
        random_ops._check_seed_state(g, f"graph[{i}]")
    if saved["generator"] is not None:
        random_ops.Generator._check_checkpoint_state(saved["generator"])


# ---- state objects: save and prepare-restore by kind ----------------------------------------------------
def _get_state(kind, obj):
    if kind in ("iterator", "rng"):
        state, arrays = obj._checkpoint_state()
        return state, list(arrays)
    return obj._checkpoint_state(), []


def _prepare_state(kind, obj, state, arrays):
    """Validates ``state`` for ``obj`` and returns a function that applies it."""
    if kind == "iterator":
        return obj._prepare_checkpoint_restore(state, arrays)
    if kind == "rng":
        return obj._prepare_restore(state, arrays)
    if arrays:
        raise ValueError(f"a saved {kind} state has no tensors, this one has {len(arrays)}")
    if kind == "dataset":
        checked = obj._check_checkpoint_state(state)
        return lambda: obj._restore_checked_state(checked)
    if kind == "generator":
        checked = type(obj)._check_checkpoint_state(state)
        return lambda: obj._restore_checked(checked)
    raise ValueError(f"unknown state kind {kind!r}")


def _crc(a):
    return checksum.crc32(a)


_PARALLEL_CRC_BYTES = 8 << 20


def _crcs(arrays):
    """``{key: CRC-32}`` of ``{key: array}``; the checksum releases the GIL, so large ones run in threads."""
    big = sum(a.nbytes for a in arrays.values()) >= _PARALLEL_CRC_BYTES and len(arrays) > 1
    if not big:
        return {k: _crc(a) for k, a in arrays.items()}
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(min(8, os.cpu_count() or 1, len(arrays))) as pool:
        return dict(zip(arrays, pool.map(_crc, arrays.values())))


def _check_eager(what):
    g = building_graph()
    if g is not None and getattr(g, "is_function_graph", False):
        raise RuntimeError(f"Checkpoint.{what}() runs eagerly; it cannot be called while a tw.function is being "
                           "traced. Hint: call it between steps, outside the function")


def _file_of(save_path):
    """The file of a checkpoint given its prefix (``dir/ckpt-3``) or the file itself."""
    path = os.fspath(save_path)
    # (lexists, not isfile: anything else at that name gets the reader's own error, "is a FIFO" ...)
    if os.path.lexists(path + SUFFIX):
        return path + SUFFIX
    if path.endswith(SUFFIX) and os.path.lexists(path) and not os.path.isdir(path):
        return path
    if os.path.isdir(path):
        raise errors.NotFoundError(f"{path} is a directory; pass a checkpoint prefix such as "
                                   "tw.train.latest_checkpoint(directory)")
    raise errors.NotFoundError(f"Failed to find any matching files for {path} (looked for "
                               f"{path + SUFFIX})")


def _mtime(path):
    try:
        return os.stat(os.path.join(path, _sharded.sharded.MARKER) if os.path.isdir(path) else path).st_mtime_ns
    except OSError:
        return -1


def _locate(save_path):
    """``("file", path)`` or ``("sharded", directory)`` of the checkpoint ``save_path`` (a
    prefix, or the file or directory itself). When a kill between writing one format and
    removing the other left both under one prefix, the newer is the checkpoint."""
    path = os.fspath(save_path)
    directory = path if path.endswith(SHARDED_SUFFIX) and os.path.isdir(path) else path + SHARDED_SUFFIX
    if _sharded.sharded.is_committed(directory):
        other = path + SUFFIX
        if not os.path.lexists(other) or _mtime(directory) >= _mtime(other):
            return "sharded", directory
    return "file", _file_of(path)


def checkpoint_exists(prefix):
    """Whether a complete checkpoint (either format) is at ``prefix``."""
    prefix = os.fspath(prefix)
    return os.path.isfile(prefix + SUFFIX) or _sharded.sharded.is_committed(prefix + SHARDED_SUFFIX)


def remove_checkpoint(prefix):
    """Deletes the checkpoint at ``prefix`` (either format)."""
    prefix = os.fspath(prefix)
    try:
        os.remove(prefix + SUFFIX)
    except (FileNotFoundError, IsADirectoryError):
        pass
    _sharded.remove(prefix + SHARDED_SUFFIX)


# ---- writing ---------------------------------------------------------------------------------------------
def serialize(root):
    """``(tensors, object graph)`` of everything ``root`` reaches (the single-file format)."""
    tensors, graph, _ = collect(root, allow_sharded=False)
    graph["crc32"] = _crcs(tensors)
    return tensors, graph


def collect(root, allow_sharded=True, copy_state=False):
    """``(tensors, graph without crc32, sharded)``: what a checkpoint of ``root`` holds. When
    ``root`` reaches a global variable (and ``allow_sharded``), the tensors are
    :class:`~tensorweave.saving.sharded.ShardedValue` s (global variables keep their pieces:
    nothing is gathered), else arrays. Variable values are the variables' own storage (it is
    copy-on-write while referenced); state arrays are copied with ``copy_state``."""
    nodes = og.build_graph(root)
    is_sharded = allow_sharded and any(n.kind == "variable" and _sharded.is_global(n.obj) for n in nodes)
    tensors, used = {}, set()

    def key_for(path):
        key = base = _sharded.safe_key(path) if is_sharded else (path or "root")
        i = 1
        while key in used:
            key = f"{base}{'-' if is_sharded else '#'}{i}"
            i += 1
        used.add(key)
        return key

    out = []
    for node in nodes:
        d = {"kind": node.kind, "path": node.path}
        if node.kind in ("object", "optimizer"):
            d["class"] = type(node.obj).__name__
        if node.kind in ("object", "list", "dict", "optimizer"):
            d["children"] = dict(node.children)
        if node.kind == "optimizer":
            d["slots"] = [{"variable": vid, "index": idx, "slot": name, "node": sid}
                          for vid, idx, name, sid in node.slots]
        if node.kind == "variable":
            key = key_for(node.path)
            if is_sharded and _sharded.is_global(node.obj):
                tensors[key] = value = _sharded.global_value(node.obj)
                shape = value.shape
            else:
                value = np.asarray(node.obj.numpy())
                tensors[key] = _sharded.local_value(value) if is_sharded else value
                shape = value.shape
            d.update(tensor=key, dtype=node.obj.dtype.name, shape=list(shape))
        elif node.kind in og.STATE_KINDS:
            state, arrays = _get_state(node.kind, node.obj)
            if copy_state:
                state = json.loads(json.dumps(state))
            keys = []
            for i, a in enumerate(arrays):
                key = key_for(f"{node.path}/.state/{i}")
                a = np.array(a) if copy_state else np.asarray(a)
                tensors[key] = _sharded.local_value(a) if is_sharded else a
                keys.append(key)
            d.update(state=state, tensors=keys)
        out.append(d)
    return tensors, {"format": og.FORMAT, "version": og.VERSION, "nodes": out, "crc32": {}}, is_sharded


def write_file(path, root):
    """Writes ``root``'s checkpoint to the file ``path`` atomically (crash stages in ``_io``)."""
    _check_eager("write")
    tensors, graph = serialize(root)
    _write_tensors(path, tensors, graph)


def _write_tensors(path, tensors, graph):
    metadata = {"format": og.FORMAT, "version": str(og.VERSION), "object_graph": json.dumps(graph, allow_nan=False)}
    _io.crash_point("before_write")
    tensor_file.write_tensors(path, tensors, metadata, stage_prefix="")   # (crash stages in _io)


def _worker_io(options):
    return getattr(options, "experimental_worker_io", None)


def write_checkpoint(prefix, root, async_then=None, options=None):
    """Writes ``root``'s checkpoint at ``prefix``: ``<prefix>.safetensors``, or the sharded
    directory ``<prefix>.sharded`` when it holds global variables (see ``_sharded``), replacing
    either atomically. With ``async_then``, only the snapshot is taken now: the write runs in the
    background, then ``async_then(prefix)``; returns a ``SaveHandle`` (else ``prefix``)."""
    _check_eager("write")
    prefix = os.fspath(prefix)
    tensors, graph, is_sharded = collect(root, copy_state=async_then is not None)
    other = prefix + (SUFFIX if is_sharded else SHARDED_SUFFIX)

    def finish(_):
        _remove_other(other)
        if async_then is not None:
            async_then(prefix)
    if is_sharded:
        if async_then is None:
            _io.crash_point("before_write")
            _sharded.write(prefix + SHARDED_SUFFIX, tensors, graph, worker_io=_worker_io(options))
            finish(None)
            return prefix
        return _sharded.write(prefix + SHARDED_SUFFIX, tensors, graph, async_then=finish, worker_io=_worker_io(options))

    def write_it():
        graph["crc32"] = _crcs(tensors)
        _write_tensors(prefix + SUFFIX, tensors, graph)
        finish(None)
        return prefix
    if async_then is None:
        return write_it()
    return _in_background(write_it)


def _remove_other(path):
    if path.endswith(SHARDED_SUFFIX):
        _sharded.remove(path)
    else:
        try:
            os.remove(path)
        except (FileNotFoundError, IsADirectoryError):
            pass


def _in_background(fn):
    import threading
    box = {}

    def work():
        try:
            box["path"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to wait()
            box["error"] = e
    thread = threading.Thread(target=work, name="tw-checkpoint-save", daemon=True)
    thread.start()
    return _sharded.sharded.SaveHandle(thread, box)


# ---- reading ---------------------------------------------------------------------------------------------
def read_file(path):
    """``(nodes, tensors, crc32s)`` of a checkpoint file, validated (``ValueError`` when anything is wrong)."""
    try:
        meta = tensor_file.read_metadata(path)
    except RecursionError:
        raise ValueError(f"{path}: the header nests too deeply") from None
    if meta.get("format") != og.FORMAT or "object_graph" not in meta:
        raise ValueError(f"{path}: not a tensorweave checkpoint (format {meta.get('format')!r:.60}). Hint: "
                         "weights saved by model.save_weights load with model.load_weights")
    try:
        graph = parse_json(meta["object_graph"].encode("utf-8", "surrogatepass"), f"{path}: object graph")
    except (ValueError, UnicodeError) as e:
        raise ValueError(f"{path}: the object graph is not valid JSON ({e})") from None
    nodes = og.validate(graph, path)
    try:
        arrays = tensor_file.read_tensors(path)
    except RecursionError:
        raise ValueError(f"{path}: the header nests too deeply") from None
    crcs = graph["crc32"]
    if set(arrays) != set(crcs):
        extra = sorted(set(arrays) ^ set(crcs))[:3]
        raise ValueError(f"{path}: the tensors in the file do not match the object graph ({extra})")
    for key, actual in _crcs(arrays).items():
        if actual != crcs[key]:
            raise ValueError(f"{path}: tensor {key!r} fails its CRC-32 check: the file is corrupt")
    from tensorweave.core import dtypes as _dt
    for node in nodes:
        if node["kind"] == "variable":
            a = arrays[node["tensor"]]
            if a.dtype != _dt.as_dtype(node["dtype"]).np_dtype or list(a.shape) != node["shape"]:
                raise ValueError(f"{path}: tensor {node['tensor']!r} is {a.dtype}{list(a.shape)}, the object graph "
                                 f"says {node['dtype']}{node['shape']}")
    return nodes, arrays, crcs


def list_variables(ckpt_path):
    """``[(object path, shape)]`` of the variables in a checkpoint (``tf.train.list_variables``),
    sorted by path; ``ckpt_path`` is a prefix or a directory (its latest checkpoint).

    >>> import os, tempfile
    >>> import tensorweave as tw
    >>> prefix = Checkpoint(w=tw.Variable([[1.0, 2.0]])).write(os.path.join(tempfile.mkdtemp(), "c"))
    >>> list_variables(prefix), load_variable(prefix, "w").tolist()
    ([('w', [1, 2])], [[1.0, 2.0]])
    """
    kind, path = _locate(_latest_if_dir(ckpt_path))
    if kind == "sharded":
        return _sharded.list_variables(path)
    nodes, _, _ = read_file(path)
    return sorted((n["path"], list(n["shape"])) for n in nodes if n["kind"] == "variable")


def load_variable(ckpt_path, name):
    """The value (a NumPy array) of the variable at object path ``name`` (``tf.train.load_variable``)."""
    kind, path = _locate(_latest_if_dir(ckpt_path))
    if kind == "sharded":
        value = _sharded.load_variable(path, name)
        if value is not None:
            return value
        raise errors.NotFoundError(f"Key {name} not found in checkpoint {ckpt_path}")
    nodes, tensors, _ = read_file(path)
    for n in nodes:
        if n["kind"] == "variable" and n["path"] == name:
            return tensors[n["tensor"]]
    raise errors.NotFoundError(f"Key {name} not found in checkpoint {ckpt_path}")


def _latest_if_dir(path):
    path = os.fspath(path)
    if os.path.isdir(path) and not path.endswith(SHARDED_SUFFIX):
        state = _io.read_state(path)
        if state is None:
            raise errors.NotFoundError(f"{path} has no checkpoint state file")
        return state.model_checkpoint_path
    return path


# ---- restoring ---------------------------------------------------------------------------------------------
_STRUCTURAL = ("object", "list", "dict", "optimizer")


class _RestoreHook:
    """Stands in for a method of one object (``layer.build``, ``optimizer.build``,
    ``model.compile``) until pending values have somewhere to go: it calls the method, then
    lets each waiting restoration assign what has appeared, and removes itself when none waits."""

    def __init__(self, obj, name, original):
        self.obj, self.name, self.original = obj, name, original
        self.restorations = []

    def __call__(self, *args, **kwargs):
        result = self.original(*args, **kwargs)
        for r in list(self.restorations):
            r.retry()
        self.restorations = [r for r in self.restorations if r.waiting]
        if not self.restorations:
            self.remove()
        return result

    def remove(self):
        if self.obj.__dict__.get(self.name) is self:
            del self.obj.__dict__[self.name]


def _install_hook(obj, name, restoration):
    hook = obj.__dict__.get(name)
    if not isinstance(hook, _RestoreHook):
        hook = _RestoreHook(obj, name, getattr(obj, name))
        # object.__setattr__: a Keras layer must not track the hook as an attribute.
        object.__setattr__(obj, name, hook)
    if restoration not in hook.restorations:
        hook.restorations.append(restoration)
    return hook


class _FileSource:
    """The values of a single-file checkpoint: read at once; those not assigned yet are
    dropped when nothing waits for them, and read again (checksummed) if asked later."""

    def __init__(self, where, tensors, crcs):
        self.where, self.tensors, self.crcs = where, tensors, crcs

    def keep(self, keys):
        self.tensors = {k: v for k, v in self.tensors.items() if k in keys}

    def array(self, key):
        a = self.tensors.get(key)
        if a is not None:
            return a
        try:
            a = tensor_file.read_tensors(self.where, names=[key])[key]
        except (OSError, KeyError) as e:
            raise ValueError(f"{self.where}: cannot read {key!r} again for a value restored late ({e}); the "
                             "checkpoint file was removed or replaced since restore()") from None
        if _crc(a) != self.crcs[key]:
            raise ValueError(f"{self.where}: tensor {key!r} changed since restore() (the file was replaced)")
        return a

    def pieces(self, key, placement, sbp):
        from tensorweave.distribute.layout import normalize_sbp, split_to_pieces
        a = self.array(key)
        return split_to_pieces(a, placement, normalize_sbp(sbp, placement, a.shape, "checkpoint restore"))


class _Restoration:
    """One ``restore``/``read`` of a file into a root: what matched, what is applied, what waits.

    Values whose objects are not there yet wait in one of two ways. *Deferred* ones wait for an
    object that is being made (a layer not built yet, an optimizer without its slots, a model not
    compiled): a hook on that object assigns them, and they are kept in memory until then.
    Values for names a ``Checkpoint`` does not have (yet) are reported as unused, but the
    checkpoint still assigns them if the name is set later; their arrays are not kept, they are
    read again from the file (checksummed) in that case.
    """

    def __init__(self, root, nodes, source, where, skip_save_counter):
        self.root, self.nodes, self.source, self.where = root, nodes, source, where
        self.skip_save_counter = skip_save_counter
        self.applied = {}        # (node id, id(object)) -> object (kept alive so ids stay unique)
        self.applied_nodes = set()
        self.deferred_nodes = set()
        self.attribute_waits = set()
        self.hooks = []
        self.cancelled = False
        self._running = False
        self.leaves = [i for i, n in enumerate(nodes) if n["kind"] == "variable" or n["kind"] in og.STATE_KINDS]
        self.leaves_set = set(self.leaves)
        sc = nodes[0].get("children", {}).get("save_counter")
        self.ignored = {sc} if skip_save_counter and sc is not None else set()

    @property
    def waiting(self):
        return not self.cancelled and bool(self.deferred_nodes or self.attribute_waits)

    def cancel(self):
        self.cancelled = True
        self.deferred_nodes, self.attribute_waits = set(), set()
        self._release()

    def _release(self, needed=()):
        # Hooks this restoration no longer waits on (their objects got their values) let go of it.
        needed = {id(h) for h in needed} if self.deferred_nodes else set()
        for hook in self.hooks:
            if id(hook) not in needed and self in hook.restorations:
                hook.restorations.remove(self)
            if not hook.restorations:
                hook.remove()
        self.hooks = [h for h in self.hooks if id(h) in needed]
        # Only deferred values stay in memory; the others are read again if ever needed.
        keep = set()
        for i in self.deferred_nodes:
            node = self.nodes[i]
            keep.update([node["tensor"]] if node["kind"] == "variable" else node["tensors"])
        self.source.keep(keep)

    def _array(self, key):
        return self.source.array(key)

    def retry(self):
        if not self.cancelled and not self._running:
            self.run()

    def _descendant_leaves(self, nid):
        out, seen, stack = set(), set(), [nid]
        while stack:
            i = stack.pop()
            if i in seen:
                continue
            seen.add(i)
            node = self.nodes[i]
            if i in self.leaves_set:
                out.add(i)
            stack.extend(node.get("children", {}).values())
            stack.extend(s["node"] for s in node.get("slots", ()))
        return out

    def run(self):
        self._running = True
        try:
            self._run()
        finally:
            self._running = False

    def _match(self):
        """Walks the saved graph and the live objects together; returns ``(matched, unresolved,
        slot_waits)``: ``{node id: [objects]}``, edges whose live end is absent, and optimizer slots
        not made yet."""
        nodes = self.nodes
        matched, unresolved = {}, []
        queue, seen = [(0, self.root)], set()
        while queue:
            nid, obj = queue.pop(0)
            if (nid, id(obj)) in seen:
                continue
            seen.add((nid, id(obj)))
            saved = nodes[nid]
            kind = og.kind_of(obj) if nid else "object"
            if kind != saved["kind"]:
                raise ValueError(f"{self.where}: the checkpoint has a {saved['kind']} at '{saved['path']}', but the "
                                 f"program has a {kind or 'non-trackable'} ({type(obj).__name__}) there")
            matched.setdefault(nid, []).append(obj)
            if kind not in _STRUCTURAL:
                continue
            live = dict(og.children(obj, kind))
            for name, cid in saved["children"].items():
                if cid in self.ignored:
                    continue
                child = live.get(name)
                if child is None and nid == 0 and name == "save_counter" and getattr(obj, "_tw_checkpoint_root", 0):
                    child = obj.save_counter      # made on demand, as TensorFlow does
                if child is None:
                    unresolved.append((obj, kind, name, cid))
                else:
                    queue.append((cid, child))
        slot_waits = []
        for nid, objs in list(matched.items()):
            if nodes[nid]["kind"] != "optimizer":
                continue
            for opt in objs:
                for s in nodes[nid]["slots"]:
                    if s["variable"] is not None:
                        refs = matched.get(s["variable"], [])
                    else:
                        refs = [opt._trainable_variables[s["index"]]] if s["index"] < len(opt._trainable_variables) \
                            else []
                    slot = None
                    for ref in refs:
                        slot = opt._slots.get((id(ref), s["slot"]))
                        if slot is not None:
                            matched.setdefault(s["node"], []).append(slot)
                    if slot is None:
                        slot_waits.append((opt, s["node"]))
        return matched, unresolved, slot_waits

    def _run(self):
        matched, unresolved, slot_waits = self._match()
        nodes = self.nodes
        # Check everything that can be assigned now, then assign it all.
        plan = []
        for nid, objs in matched.items():
            saved = nodes[nid]
            for obj in objs:
                if (nid, id(obj)) in self.applied:
                    continue
                if saved["kind"] == "variable":
                    plan.append((nid, obj, self._prepare_variable(saved, obj)))
                elif saved["kind"] in og.STATE_KINDS:
                    arrays = [self._array(k) for k in saved["tensors"]]
                    try:
                        commit = _prepare_state(saved["kind"], obj, saved["state"], arrays)
                    except ValueError as e:
                        raise ValueError(f"{self.where}: '{saved['path']}': {e}") from None
                    plan.append((nid, obj, commit))
        for nid, obj, commit in plan:
            commit()
            self.applied[(nid, id(obj))] = obj
            self.applied_nodes.add(nid)
        # What is left waits for objects that do not exist yet; hook where they will appear.
        deferred, attribute_waits, needed = set(), set(), []
        for parent, kind, name, cid in unresolved:
            how = self._hook_for(parent, kind, name, needed)
            if how == "deferred":
                deferred |= self._descendant_leaves(cid)
            elif how == "attribute":
                attribute_waits |= self._descendant_leaves(cid)
        for opt, sid in slot_waits:
            needed.append(self._hook(opt, "build"))
            deferred.add(sid)
        self.deferred_nodes = deferred - self.applied_nodes
        self.attribute_waits = attribute_waits - self.applied_nodes - self.deferred_nodes
        self._release(needed)

    def _hook(self, obj, method):
        hook = _install_hook(obj, method, self)
        if all(h is not hook for h in self.hooks):
            self.hooks.append(hook)
        return hook

    def _hook_for(self, parent, kind, name, needed):
        """How a value under ``parent``'s missing edge ``name`` waits: "deferred" (a hook on the
        object that will make it), "attribute" (a checkpoint's attribute set later), or None."""
        if getattr(parent, "_tw_checkpoint_root", False):
            if self not in parent._restore_waiters:
                parent._restore_waiters.append(self)
            return "attribute"
        layer_cls = og._cls("tensorweave.keras.engine.layer", "Layer")
        if layer_cls is not None and isinstance(parent, layer_cls):
            if name == "optimizer" and getattr(parent, "optimizer", 0) is None and hasattr(parent, "compile"):
                needed.append(self._hook(parent, "compile"))
                return "deferred"
            if not parent.built:
                needed.append(self._hook(parent, "build"))
                return "deferred"
            return None
        if kind == "optimizer":
            needed.append(self._hook(parent, "build"))
            return "deferred"
        return None

    def _prepare_variable(self, saved, var):
        dtype = var.dtype
        if dtype.name != saved["dtype"]:
            raise ValueError(f"{self.where}: '{saved['path']}' was saved as {saved['dtype']}, but the variable "
                             f"{var.name} is {dtype.name}")
        if not var.shape.is_compatible_with(saved["shape"]):
            raise ValueError(f"{self.where}: '{saved['path']}' was saved with shape {list(saved['shape'])}, but the "
                             f"variable {var.name} has shape {var.shape}")
        if _sharded.on_workers(var) and hasattr(self.source, "restore_on_workers"):
            # Ray workers hold the pieces: each reads its own from the directory (nothing here).
            return self.source.restore_on_workers(saved["tensor"], var)
        if _sharded.is_global(var):
            # Each rank's piece of the variable's own layout, read only from what overlaps it.
            pieces = self.source.pieces(saved["tensor"], var.placement, var.sbp)

            def commit_pieces():
                # (fresh arrays read for this restore; a view or read-only one is copied by the
                # variable's copy-on-write at its first in-place update)
                for local, piece in zip(var._locals, pieces):
                    local._write(np.asarray(piece, dtype=dtype.np_dtype))
            return commit_pieces
        value = self._array(saved["tensor"])

        def commit():
            # The assign kernel's own write, without the variable's constraint (a restored value
            # is already constrained; applying e.g. a unit-norm constraint again would move its bits)
            # and the same in eager, tw.function tracing and TF1 modes.
            var._write(np.array(value, dtype=dtype.np_dtype, copy=True))
        return commit

    # ---- reports ----------------------------------------------------------------------------------
    def _paths(self, ids):
        return sorted(self.nodes[i]["path"] for i in ids)

    def unused(self):
        return self._paths(i for i in self.leaves if i not in self.applied_nodes and i not in self.deferred_nodes
                           and i not in self.ignored)

    def deferred(self):
        return self._paths(self.deferred_nodes)

    def missing(self):
        applied = {id(o) for o in self.applied.values()}
        out = []
        for node in og.build_graph(self.root):
            if node.kind in _STRUCTURAL or id(node.obj) in applied:
                continue
            if self.skip_save_counter and node.path == "save_counter":
                continue
            out.append(node.path)
        return sorted(out)


class CheckpointLoadStatus:
    """What ``Checkpoint.restore``/``read`` did (``tf.train.Checkpoint``'s load status).

    ``unused``: object paths with values in the file that nothing in the program took (and
    nothing is waiting for); ``deferred``: values kept until their objects are created (a
    layer's build, an optimizer's first step); ``missing``: objects of the program that the
    file had no value for. The ``assert_*`` methods raise ``AssertionError`` naming them.
    """

    def __init__(self, restoration):
        self._restoration = restoration
        self._expect_partial = False

    @property
    def unused(self):
        return self._restoration.unused()

    @property
    def deferred(self):
        return self._restoration.deferred()

    @property
    def missing(self):
        return self._restoration.missing()

    @property
    def save_path(self):
        return self._restoration.where

    def report(self):
        """A readable summary of the three lists."""
        r = self._restoration
        lines = [f"Restored {len(r.applied_nodes)} value(s) from {r.where}."]
        for title, items in (("Unused (in the file, not in the program)", self.unused),
                             ("Deferred (waiting for objects to be created)", self.deferred),
                             ("Missing (in the program, not in the file)", self.missing)):
            if items:
                shown = ", ".join(items[:20]) + (f", ... ({len(items)} in all)" if len(items) > 20 else "")
                lines.append(f"{title}: {shown}")
        return "\n".join(lines)

    def assert_consumed(self):
        """Every value of the file was used and every object of the program got one."""
        unused, deferred, missing = self.unused, self.deferred, self.missing
        if unused or deferred or missing:
            raise AssertionError("Checkpoint not consumed:\n" + self.report())
        return self

    def assert_existing_objects_matched(self):
        """Every object that exists now got a value (values for objects not yet made may wait)."""
        if self.missing or self.unused:
            raise AssertionError("Existing objects not matched:\n" + self.report())
        return self

    def assert_nontrivial_match(self):
        """At least one value besides the save counter was restored."""
        r = self._restoration
        sc = r.nodes[0].get("children", {}).get("save_counter")
        if not (r.applied_nodes - {sc}):
            raise AssertionError(f"Nothing except the save counter was restored from {r.where}:\n" + self.report())
        return self

    def expect_partial(self):
        """Silences the warning about unused values given when this status is deleted."""
        self._expect_partial = True
        return self

    def run_restore_ops(self, session=None):
        """Nothing to run: values are assigned eagerly (kept for TF1-style code)."""

    def initialize_or_restore(self, session=None):
        """Nothing to run: values are assigned eagerly (kept for TF1-style code)."""

    def __del__(self):
        try:
            if not self._expect_partial:
                unused = self._restoration.unused()
                if unused:
                    warnings.warn(f"Values in the checkpoint {self._restoration.where} were not used: "
                                  f"{', '.join(unused[:10])}{' ...' if len(unused) > 10 else ''}. Hint: call "
                                  "status.expect_partial() when a partial restore is intended", stacklevel=2)
        except Exception:  # noqa: BLE001 - a destructor must not raise (e.g. at interpreter exit)
            pass


class InitializationOnlyStatus:
    """What ``restore(None)`` returns: nothing was restored (TensorFlow's name)."""

    unused = deferred = missing = []

    def assert_consumed(self):
        raise AssertionError("No checkpoint specified (save_path=None); nothing is being restored.")

    assert_existing_objects_matched = assert_nontrivial_match = assert_consumed

    def expect_partial(self):
        return self

    def run_restore_ops(self, session=None):
        pass

    def initialize_or_restore(self, session=None):
        pass

    def report(self):
        return "No checkpoint specified (save_path=None); nothing was restored."


# ---- Checkpoint -------------------------------------------------------------------------------------------
class Checkpoint:
    """Groups trackable objects for saving and restoring (``tf.train.Checkpoint``).

    ``Checkpoint(root=None, **kwargs)``: each keyword names an object to save (see the module
    docstring for what can be saved); attributes set later are tracked too. ``root``, when
    given, is saved as the checkpoint itself (its attributes become the top-level names).

    >>> import os, tempfile
    >>> import tensorweave as tw
    >>> from tensorweave import keras
    >>> from tensorweave.train import Checkpoint
    >>> model = keras.Sequential([keras.Input(shape=(2,)), keras.layers.Dense(1)])
    >>> model.compile(optimizer="adam", loss="mse")
    >>> _ = model.train_on_batch(tw.ones([4, 2]), tw.ones([4, 1]))
    >>> prefix = os.path.join(tempfile.mkdtemp(), "ckpt")
    >>> path = Checkpoint(model=model).save(prefix)
    >>> fresh = keras.Sequential([keras.Input(shape=(2,)), keras.layers.Dense(1)])
    >>> fresh.compile(optimizer="adam", loss="mse")
    >>> status = Checkpoint(model=fresh).restore(path)
    >>> len(status.deferred), status.deferred[-1]     # Adam's slots are made on the first step
    (4, 'model/layer-0/kernel/.OPTIMIZER_SLOT/model/optimizer/velocity')
    >>> _ = fresh.train_on_batch(tw.ones([4, 2]), tw.ones([4, 1]))
    >>> _ = model.train_on_batch(tw.ones([4, 2]), tw.ones([4, 1]))
    >>> bool((fresh.get_weights()[0] == model.get_weights()[0]).all())
    True
    >>> _ = status.assert_consumed()
    """

    _tw_checkpoint_root = True

    def __init__(self, root=None, **kwargs):
        object.__setattr__(self, "_tracked", {})
        object.__setattr__(self, "_root", None)
        object.__setattr__(self, "_save_counter", None)
        object.__setattr__(self, "_restoration", None)
        object.__setattr__(self, "_restore_waiters", [])
        if root is not None:
            og.check_trackable(root, "Checkpoint(root=...)")
            object.__setattr__(self, "_root", root)
        for name, value in kwargs.items():
            if name == "save_counter":
                raise ValueError("'save_counter' is the checkpoint's own counter; use another name")
            og.check_trackable(value, f"Checkpoint({name}=...)")
            setattr(self, name, value)

    # ---- tracking --------------------------------------------------------------------------------
    def __setattr__(self, name, value):
        if name.startswith("_"):
            object.__setattr__(self, name, value)
            return
        if name == "save_counter":
            raise AttributeError("save_counter is managed by the checkpoint")
        object.__setattr__(self, name, value)
        if og.kind_of(value) is not None:
            self._tracked[name] = value
        else:
            self._tracked.pop(name, None)
        # A value restored earlier may have been waiting for this attribute (deferred restoration).
        for r in list(self._restore_waiters):
            r.retry()
        self._restore_waiters[:] = [r for r in self._restore_waiters if r.waiting]

    def __delattr__(self, name):
        object.__delattr__(self, name)
        self._tracked.pop(name, None)

    def _async(self, options):
        return options is not None and bool(getattr(options, "experimental_enable_async_checkpoint", False) or
                                            getattr(options, "enable_async", False))

    def _checkpoint_children(self):
        out = list(og.children(self._root)) if self._root is not None else []
        out += list(self._tracked.items())
        if self._save_counter is not None:
            out.append(("save_counter", self._save_counter))
        return out

    @property
    def save_counter(self):
        """An int64 variable counting ``save`` calls (made on first use); numbers the checkpoints."""
        if self._save_counter is None:
            from tensorweave.core import dtypes as _dt
            from tensorweave.ops.variables import Variable
            with init_scope():
                object.__setattr__(self, "_save_counter", Variable(
                    np.zeros((), np.int64), trainable=False, name="save_counter", dtype=_dt.int64))
        return self._save_counter

    # ---- saving ---------------------------------------------------------------------------------
    def write(self, file_prefix, options=None):
        """Writes ``<file_prefix>.safetensors`` — or the directory ``<file_prefix>.sharded``
        when the objects reach global variables (each rank writes its own pieces; see
        ``train/_sharded.py``) — atomically; the state file is not touched. Returns ``file_prefix``."""
        self.sync()
        if self._async(options):
            object.__setattr__(self, "_pending", write_checkpoint(file_prefix, self, async_then=lambda p: None,
                                                                  options=options))
            return os.fspath(file_prefix)
        return write_checkpoint(file_prefix, self, options=options)

    def save(self, file_prefix, options=None):
        """Increments ``save_counter`` and writes ``<file_prefix>-<n>``; records it as the latest
        checkpoint in the directory's ``checkpoint`` state file. Returns the checkpoint's prefix."""
        _check_eager("save")
        prefix = os.fspath(file_prefix)
        # Temporary files of earlier saves to this prefix that were killed before their rename.
        atomic.remove_stale(os.path.dirname(os.path.abspath(prefix)), [f".tmp-{os.path.basename(prefix)}-"])
        self.sync()
        counter = self.save_counter
        with init_scope():
            counter.assign_add(np.int64(1))
        path = f"{prefix}-{int(counter.numpy())}"
        if self._async(options):
            # the state file names it once it is complete (never a partial checkpoint)
            object.__setattr__(self, "_pending", write_checkpoint(path, self, async_then=_record_in_state,
                                                                  options=options))
            return path
        self.write(path, options)
        _record_in_state(path)
        return path

    # ---- restoring -------------------------------------------------------------------------------
    def restore(self, save_path, options=None):
        """Restores the values of the checkpoint ``save_path`` (a prefix such as
        ``latest_checkpoint(dir)``), including ``save_counter``; returns a
        :class:`CheckpointLoadStatus`. ``None`` restores nothing (TensorFlow's behaviour)."""
        if save_path is None:
            return InitializationOnlyStatus()
        return self._load(save_path, skip_save_counter=False, options=options)

    def read(self, save_path, options=None):
        """Like :meth:`restore` for a checkpoint made by :meth:`write`: the file's save counter
        (if any) is neither restored nor reported."""
        return self._load(save_path, skip_save_counter=True, options=options)

    def _load(self, save_path, skip_save_counter, options=None):
        _check_eager("restore")
        self.sync()
        kind, path = _locate(save_path)
        if kind == "sharded":
            source = _sharded.Source(path, _worker_io(options))
            nodes = source.nodes
        else:
            nodes, tensors, crcs = read_file(path)
            source = _FileSource(path, tensors, crcs)
        restoration = _Restoration(self, nodes, source, path, skip_save_counter)
        old = self._restoration
        if old is not None:
            old.cancel()      # a newer restore decides the values of objects made from now on
            if old in self._restore_waiters:
                self._restore_waiters.remove(old)
        object.__setattr__(self, "_restoration", restoration)
        restoration.run()
        return CheckpointLoadStatus(restoration)

    def sync(self):
        """Waits for an asynchronous save in flight (``CheckpointOptions(
        experimental_enable_async_checkpoint=True)``); raises its error if it failed."""
        pending = self.__dict__.get("_pending")
        if pending is not None:
            object.__setattr__(self, "_pending", None)
            pending.wait()

    def __repr__(self):
        return f"<tw.train.Checkpoint tracking {sorted(self._tracked)}>"


def _record_in_state(path):
    """Makes ``path`` the latest checkpoint in its directory's state file (``Checkpoint.save``);
    the paths already listed stay listed (``CheckpointManager`` prunes them, this does not)."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        state = _io.read_state(directory)
    except ValueError:
        state = None          # an unreadable state file is replaced, not trusted
    paths, stamps = [], []
    if state is not None:
        for p, t in zip(state.all_model_checkpoint_paths, state.all_model_checkpoint_timestamps):
            if os.path.abspath(p) != os.path.abspath(path):
                paths.append(p)
                stamps.append(t)
    paths.append(path)
    stamps.append(time.time())
    _io.write_state(directory, path, paths, stamps, state.last_preserved_timestamp if state else 0.0,
                    [p for p in state.pending_deletions if p not in paths] if state else ())
