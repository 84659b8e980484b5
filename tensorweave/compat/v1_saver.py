"""TF1's ``tf.train.Saver``: name-based checkpoints of a graph's variables in our safe tensor files.

A save writes ``<prefix>.safetensors`` (the tensor-file layout of ``tw.train.Checkpoint``: a
JSON header, raw little-endian data, no code) holding one tensor per variable under its TF1
name (``dense/kernel``), with CRC-32s in the metadata; then the directory's ``checkpoint``
state file, so ``tf.train.latest_checkpoint(dir)`` finds it. ``max_to_keep`` old checkpoints
are kept (None or 0: all), plus one every ``keep_checkpoint_every_n_hours``.

Restoring matches variables by name, so a fresh graph built by the same code (or with the
same variable names) restores from a checkpoint of another process; the values are fed into
assign ops that the Saver builds with the graph (``restore`` adds no nodes).

>>> import os, tempfile
>>> import tensorweave.compat.v1 as tf
>>> d = tempfile.mkdtemp()
>>> g = tf.Graph()
>>> with g.as_default():
...     v = tf.get_variable("v", initializer=tf.constant([1.0, 2.0]))
...     saver = tf.train.Saver()
>>> with tf.Session(graph=g) as sess:
...     sess.run(tf.variables_initializer([v]))
...     path = saver.save(sess, os.path.join(d, "model"), global_step=3)
>>> os.path.basename(path), os.path.basename(tf.train.latest_checkpoint(d))
('model-3', 'model-3')
"""
import json
import os
import time

import numpy as np

from tensorweave.core import errors
from tensorweave.core.context import building_graph, executing_eagerly
from tensorweave.core.graph import get_default_graph
from tensorweave.saving import tensor_file
from tensorweave.train import _io, _sharded
from tensorweave.train.checkpoint import SUFFIX, _crcs, _file_of, _locate

FORMAT = "tensorweave.saver"
VERSION = 1


def _name_of(v):
    name = getattr(v, "name", None)
    if name is None:
        raise TypeError(f"Saver: {v!r} is not a variable")
    return name[:-2] if name.endswith(":0") else name


def _var_dict(var_list):
    """{checkpoint name: variable} from TF1's var_list forms (None, a list, a dict)."""
    from tensorweave.compat.v1_variable_scope import PartitionedVariable
    if var_list is None:
        var_list = get_default_graph().get_collection("variables")
        var_list += [v for v in get_default_graph().get_collection("saveable_objects") if v not in var_list]
    if isinstance(var_list, dict):
        items = list(var_list.items())
    else:
        items = []
        for v in var_list:
            if isinstance(v, PartitionedVariable):
                items.extend((_name_of(p), p) for p in v)
            else:
                items.append((_name_of(v), v))
    out = {}
    for name, v in items:
        if isinstance(v, PartitionedVariable):
            for i, p in enumerate(v):
                out[f"{name}/part_{i}"] = p
            continue
        if not getattr(v, "_is_variable", False):
            raise TypeError(f"Saver: {name!r} is {v!r}, not a variable")
        if name in out and out[name] is not v:
            raise ValueError(f"At least two variables have the same name: {name}")
        out[name] = v
    return out


def read_saver_file(path):
    """``{name: array}`` of a Saver checkpoint file, after its format and CRC-32 checks."""
    meta = tensor_file.read_metadata(path)
    if meta.get("format") != FORMAT:
        raise ValueError(f"{path}: not a tf.train.Saver checkpoint (format {meta.get('format')!r:.60}). Hint: "
                         "checkpoints of tw.train.Checkpoint restore with Checkpoint.restore")
    try:
        crcs = json.loads(meta.get("crc32", "{}"))
    except json.JSONDecodeError:
        raise ValueError(f"{path}: the CRC table is not valid JSON") from None
    arrays = tensor_file.read_tensors(path)
    if not isinstance(crcs, dict) or set(crcs) != set(arrays):
        raise ValueError(f"{path}: the tensors in the file do not match its CRC table")
    for k, c in _crcs(arrays).items():
        if c != crcs[k]:
            raise ValueError(f"{path}: tensor {k!r} fails its CRC-32 check: the file is corrupt")
    return arrays


class Saver:
    """Saves and restores variables by name (``tf.compat.v1.train.Saver``); see the module doc."""

    def __init__(self, var_list=None, reshape=False, sharded=False, max_to_keep=5,
                 keep_checkpoint_every_n_hours=10000.0, name=None, restore_sequentially=False, saver_def=None,
                 builder=None, defer_build=False, allow_empty=False, write_version=2, pad_step_number=False,
                 save_relative_paths=False, filename=None, save_debug_info=False):
        self._var_list_arg = var_list
        if saver_def is not None:
            # (an imported graph's Saver: its variables and restore nodes already exist)
            self._var_list_arg = saver_def["variables"]
            max_to_keep = saver_def["max_to_keep"]
            keep_checkpoint_every_n_hours = saver_def["keep_checkpoint_every_n_hours"]
        self._max_to_keep = max_to_keep
        self._keep_every = keep_checkpoint_every_n_hours
        self._pad = pad_step_number
        self._allow_empty = allow_empty
        self._last = []                 # [(prefix, timestamp)] managed by this saver
        self._last_preserved = time.time()
        self._filename = filename
        self._vars = None
        self._graph = None
        self._restore_ops = None
        self._meta_cache = (None, None)     # (graph version, encoded .meta) of the last meta graph written
        if saver_def is not None and saver_def.get("restore"):
            self._vars = _var_dict(self._var_list_arg)
            self._graph = building_graph()
            self._restore_ops = dict(saver_def["restore"])
        if not defer_build:
            self.build()

    def build(self):
        if self._vars is not None:
            return
        self._vars = _var_dict(self._var_list_arg)
        if not self._vars and not self._allow_empty:
            raise ValueError("No variables to save")
        graph = building_graph()
        self._graph = graph
        if graph is not None:
            from tensorweave.ops.array_ops import placeholder
            self._restore_ops = {}
            with graph.name_scope("save/"), graph.control_dependencies(None):
                for name, v in self._vars.items():
                    ph = placeholder(v.dtype, v.shape, name="restore_value")
                    self._restore_ops[name] = (ph, v.assign(ph, read_value=False))

    # ---- save --------------------------------------------------------------------------------------
    def save(self, sess, save_path, global_step=None, latest_filename=None, meta_graph_suffix="meta",
             write_meta_graph=True, write_state=True, strip_default_attrs=False, save_debug_info=False):
        """Writes the variables; returns the checkpoint prefix (``save_path-<step>``)."""
        self.build()
        prefix = os.fspath(save_path)
        if global_step is not None:
            step = global_step if isinstance(global_step, (int, np.integer)) else self._value(sess, global_step)
            prefix = f"{prefix}-{int(step):08d}" if self._pad else f"{prefix}-{int(step)}"
        directory = os.path.dirname(os.path.abspath(prefix))
        if not os.path.isdir(directory):
            raise errors.NotFoundError(f"Parent directory of {save_path} doesn't exist, can't save.")
        if any(_sharded.is_global(v) for v in self._vars.values()):
            # global variables: each rank writes its own pieces, nothing is gathered (in a TF1
            # graph too: the pieces are the per-rank variables'; local ones come from the session)
            fetch = None if self._graph is None else (lambda vs: self._values(sess, vs))
            _sharded.save_by_name(prefix + _sharded.SHARDED_SUFFIX, self._vars, FORMAT, VERSION, fetch)
            _remove(prefix + SUFFIX)
        else:
            names = sorted(self._vars)
            values = self._values(sess, [self._vars[n] for n in names])
            arrays = {n: np.array(a, order="C") for n, a in zip(names, values)}  # (ascontiguousarray: scalars 1-D)
            meta = {"format": FORMAT, "version": str(VERSION), "crc32": json.dumps(_crcs(arrays))}
            tensor_file.write_tensors(prefix + SUFFIX, arrays, meta, stage_prefix="")
            _sharded.remove(prefix + _sharded.SHARDED_SUFFIX)
        now = time.time()
        self._last = [(p, t) for p, t in self._last if p != prefix] + [(prefix, now)]
        self._delete_old()
        if write_state:
            _io.write_state(directory, prefix, [p for p, _ in self._last], [t for _, t in self._last],
                            self._last_preserved)
        if write_meta_graph and self._graph is not None:
            self._write_meta_graph(f"{prefix}.{meta_graph_suffix}")
        return prefix

    def _write_meta_graph(self, filename):
        # The graph rarely changes between saves: its encoding is reused while its version is the same.
        version, chunks = self._meta_cache
        if version != self._graph.version:
            chunks = self.export_meta_graph().encode()
            self._meta_cache = (self._graph.version, chunks)
        tensor_file.write_bytes_atomic(filename, chunks)

    def export_meta_graph(self, filename=None, collection_list=None, as_text=False, export_scope=None,
                          clear_devices=False, clear_extraneous_savers=False, strip_default_attrs=False,
                          save_debug_info=False):
        """Writes this saver's graph as a meta graph with this saver in it (see ``v1_meta_graph``)."""
        from tensorweave.compat.v1_meta_graph import export_meta_graph
        self.build()
        return export_meta_graph(filename, graph=self._graph or get_default_graph(), saver_def=self.as_saver_def(),
                                 collection_list=collection_list, export_scope=export_scope,
                                 clear_devices=clear_devices)

    def _delete_old(self):
        if not self._max_to_keep:
            return
        while len(self._last) > self._max_to_keep:
            prefix, t = self._last.pop(0)
            if self._keep_every and t - self._last_preserved > self._keep_every * 3600:
                self._last_preserved = t
                continue
            for suffix in (SUFFIX, ".meta"):
                _remove(prefix + suffix)
            _sharded.remove(prefix + _sharded.SHARDED_SUFFIX)

    @staticmethod
    def _value(sess, t):
        if executing_eagerly() and sess is None:
            return t.numpy()
        return sess.run(t)

    def _values(self, sess, variables):
        if sess is None or self._graph is None:
            return [v.numpy() for v in variables]
        return sess.run(list(variables))

    # ---- restore -------------------------------------------------------------------------------------
    def restore(self, sess, save_path):
        """Sets every variable of this saver from the checkpoint ``save_path`` (a prefix)."""
        self.build()
        if save_path is None:
            raise ValueError("Can't load save_path when it is None.")
        kind, path = _locate(save_path)
        if kind == "sharded":
            if self._restore_ops is None:
                _sharded.restore_by_name(path, self._vars, FORMAT, save_path)
            else:
                self._restore_sharded_in_graph(sess, path, save_path)
            return
        arrays = read_saver_file(path)
        missing = [n for n in self._vars if n not in arrays]
        if missing:
            raise errors.NotFoundError(
                f"Restoring from checkpoint failed: key {missing[0]} not found in checkpoint {save_path} "
                f"({len(missing)} missing of {len(self._vars)}). Hint: variable names must match the ones saved; "
                f"the checkpoint has {sorted(arrays)[:5]}...")
        feeds, ops = {}, []
        for name, v in self._vars.items():
            a = arrays[name]
            if list(a.shape) != v.shape.as_list() and v.shape.is_fully_defined():
                raise errors.InvalidArgumentError(
                    f"Restoring from checkpoint failed: {name} has shape {list(a.shape)} in {save_path} but "
                    f"{v.shape.as_list()} in the graph")
            if a.dtype != v.dtype.np_dtype:
                raise errors.InvalidArgumentError(
                    f"Restoring from checkpoint failed: {name} is {a.dtype} in {save_path} but "
                    f"{v.dtype.name} in the graph")
            if self._restore_ops is None:
                v.assign(a)
            else:
                ph, op = self._restore_ops[name]
                feeds[ph] = a
                ops.append(op)
        if ops:
            sess.run(ops, feeds)

    def _restore_sharded_in_graph(self, sess, path, save_path):
        def assign_local(values):
            ops = [self._restore_ops[n][1] for n in values]
            sess.run(ops, {self._restore_ops[n][0]: a for n, a in values.items()})
        _sharded.restore_by_name(path, self._vars, FORMAT, save_path, assign_local)

    # ---- bookkeeping -------------------------------------------------------------------------------
    @property
    def last_checkpoints(self):
        return [p for p, _ in self._last]

    def set_last_checkpoints(self, last_checkpoints):
        self._last = [(p, time.time()) for p in last_checkpoints]

    def set_last_checkpoints_with_time(self, last_checkpoints_with_time):
        self._last = list(last_checkpoints_with_time)

    def recover_last_checkpoints(self, checkpoint_paths):
        self._last = [(p, os.path.getmtime(p + SUFFIX)) for p in checkpoint_paths if os.path.exists(p + SUFFIX)]

    def as_saver_def(self):
        """``{"max_to_keep", "keep_checkpoint_every_n_hours", "variables": {checkpoint name: variable},
        "restore": {checkpoint name: (placeholder, assign op)} or None}``; ``Saver(saver_def=...)``
        takes it back (``import_meta_graph`` passes the imported graph's)."""
        self.build()
        return {"max_to_keep": self._max_to_keep, "keep_checkpoint_every_n_hours": self._keep_every,
                "variables": dict(self._vars), "restore": dict(self._restore_ops) if self._restore_ops else None}


def _remove(path):
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def checkpoint_exists(checkpoint_prefix):
    return (os.path.isfile(os.fspath(checkpoint_prefix) + SUFFIX) or os.path.isfile(os.fspath(checkpoint_prefix))
            or _sharded.sharded.is_committed(os.fspath(checkpoint_prefix) + _sharded.SHARDED_SUFFIX))


def remove_checkpoint(checkpoint_prefix, checkpoint_format_version=2, meta_graph_suffix="meta"):
    for suffix in (SUFFIX, "." + meta_graph_suffix):
        _remove(os.fspath(checkpoint_prefix) + suffix)
    _sharded.remove(os.fspath(checkpoint_prefix) + _sharded.SHARDED_SUFFIX)


def _saver_file(ckpt_dir_or_file):
    from tensorweave.train.manager import latest_checkpoint
    path = os.fspath(ckpt_dir_or_file)
    if os.path.isdir(path):
        path = latest_checkpoint(path)
        if path is None:
            raise errors.NotFoundError(f"No checkpoint found in {ckpt_dir_or_file}")
    return _file_of(path)


def _sharded_saver_dir(ckpt_dir_or_file):
    """The sharded directory of a Saver checkpoint of global variables, or None."""
    from tensorweave.train.manager import latest_checkpoint
    path = os.fspath(ckpt_dir_or_file)
    if os.path.isdir(path) and not path.endswith(_sharded.SHARDED_SUFFIX):
        path = latest_checkpoint(path)
        if path is None:
            return None
    kind, found = _locate(path) if _sharded.sharded.is_committed(path + _sharded.SHARDED_SUFFIX) else ("", None)
    if kind != "sharded" or _sharded.sharded.read_index(found)["metadata"].get("format") != FORMAT:
        return None
    return found


def list_variables(ckpt_dir_or_file):
    """``[(name, shape)]`` of a checkpoint (a Saver file, or a ``tw.train.Checkpoint``'s), sorted."""
    sharded_dir = _sharded_saver_dir(ckpt_dir_or_file)
    if sharded_dir is not None:
        return sorted((n, v["shape"]) for n, v in _sharded.sharded.read_index(sharded_dir)["variables"].items())
    path = _saver_file(ckpt_dir_or_file)
    if tensor_file.read_metadata(path).get("format") != FORMAT:
        from tensorweave.train.checkpoint import list_variables as object_based
        return object_based(ckpt_dir_or_file)
    return sorted((n, list(a.shape)) for n, a in read_saver_file(path).items())


def load_variable(ckpt_dir_or_file, name):
    """The value (a NumPy array) of variable ``name`` in a checkpoint."""
    sharded_dir = _sharded_saver_dir(ckpt_dir_or_file)
    if sharded_dir is not None:
        index = _sharded.sharded.read_index(sharded_dir)
        if name not in index["variables"]:
            raise errors.NotFoundError(f"Key {name} not found in checkpoint {ckpt_dir_or_file}")
        shape = index["variables"][name]["shape"]
        return _sharded.sharded.read_region(sharded_dir, name, tuple(slice(0, d) for d in shape), index)
    path = _saver_file(ckpt_dir_or_file)
    if tensor_file.read_metadata(path).get("format") != FORMAT:
        from tensorweave.train.checkpoint import load_variable as object_based
        return object_based(ckpt_dir_or_file, name)
    arrays = read_saver_file(path)
    if name not in arrays:
        raise errors.NotFoundError(f"Key {name} not found in checkpoint {ckpt_dir_or_file}")
    return arrays[name]
