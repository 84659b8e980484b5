"""TF1's checkpoint utilities over ``tf.train.Saver`` files: readers, state-file helpers, and
initializing variables from a checkpoint (``init_from_checkpoint``, ``warm_start``).

``init_from_checkpoint`` and ``warm_start`` work as in TF1: they replace the chosen variables'
initializers, so the next ``global_variables_initializer()`` gives them the checkpoint's values
(the value is read when the function is called and kept as a constant of the graph).

>>> import os, tempfile
>>> import tensorweave.compat.v1 as tf
>>> d = tempfile.mkdtemp()
>>> with tf.Graph().as_default():
...     v = tf.get_variable("v", initializer=tf.constant([1.0, 2.0]))
...     with tf.Session() as sess:
...         sess.run(v.initializer)
...         _ = tf.train.Saver().save(sess, os.path.join(d, "m"))
>>> reader = tf.train.load_checkpoint(d)
>>> reader.get_variable_to_shape_map(), reader.get_tensor("v").tolist()
({'v': [2]}, [1.0, 2.0])
"""
import os
import re
import time

from tensorweave.compat.v1_saver import _saver_file, read_saver_file
from tensorweave.core import dtypes as _dt
from tensorweave.core import errors
from tensorweave.core.graph import get_default_graph
from tensorweave.train import _io
from tensorweave.train.checkpoint import SUFFIX
from tensorweave.train.manager import latest_checkpoint

__all__ = ["CheckpointReader", "NewCheckpointReader", "load_checkpoint", "checkpoints_iterator",
           "get_checkpoint_mtimes", "generate_checkpoint_state_proto", "update_checkpoint_state",
           "init_from_checkpoint", "warm_start"]


class CheckpointReader:
    """Reads one checkpoint (``tf.train.load_checkpoint``): tensors by name, names to shapes/dtypes."""

    def __init__(self, ckpt_dir_or_file):
        self._path = _saver_file(ckpt_dir_or_file)
        self._arrays = read_saver_file(self._path)

    def has_tensor(self, name):
        return name in self._arrays

    def get_tensor(self, name):
        if name not in self._arrays:
            raise errors.NotFoundError(f"Key {name} not found in checkpoint {self._path}")
        return self._arrays[name].copy()

    def get_variable_to_shape_map(self):
        return {k: list(a.shape) for k, a in self._arrays.items()}

    def get_variable_to_dtype_map(self):
        return {k: _dt.as_dtype(a.dtype) for k, a in self._arrays.items()}

    def debug_string(self):
        return "".join(f"{k} ({a.dtype}) {list(a.shape)}\n" for k, a in sorted(self._arrays.items())).encode()


def load_checkpoint(ckpt_dir_or_file):
    """A :class:`CheckpointReader` of a checkpoint prefix or of a directory's latest checkpoint."""
    return CheckpointReader(ckpt_dir_or_file)


def NewCheckpointReader(filepattern):  # noqa: N802 - TF's name
    return CheckpointReader(filepattern)


def checkpoints_iterator(checkpoint_dir, min_interval_secs=0, timeout=None, timeout_fn=None):
    """Yields each new latest checkpoint of ``checkpoint_dir`` as it appears; stops when none
    appears within ``timeout`` seconds (and ``timeout_fn``, if given, returns True)."""
    last = None
    while True:
        start = time.monotonic()
        path = _wait_for_new(checkpoint_dir, last, timeout)
        if path is None:
            if timeout_fn is None or timeout_fn():
                return
            continue
        last = path
        yield path
        left = min_interval_secs - (time.monotonic() - start)
        if left > 0:
            time.sleep(left)


def _wait_for_new(checkpoint_dir, last, timeout, seconds_to_sleep=1.0):
    stop = None if timeout is None else time.monotonic() + timeout
    while True:
        path = latest_checkpoint(checkpoint_dir)
        if path is not None and path != last:
            return path
        if stop is not None and time.monotonic() + seconds_to_sleep > stop:
            return None
        time.sleep(seconds_to_sleep)


def get_checkpoint_mtimes(checkpoint_prefixes):
    """The modification times of the checkpoints that exist (others are skipped, as TF)."""
    out = []
    for p in checkpoint_prefixes:
        path = os.fspath(p) + SUFFIX
        if os.path.isfile(path):
            out.append(os.path.getmtime(path))
    return out


def generate_checkpoint_state_proto(save_dir, model_checkpoint_path, all_model_checkpoint_paths=None,
                                    all_model_checkpoint_timestamps=None, last_preserved_timestamp=None):
    """A ``CheckpointState`` whose list ends with ``model_checkpoint_path``."""
    paths = list(all_model_checkpoint_paths or [])
    if not paths or paths[-1] != model_checkpoint_path:
        paths.append(model_checkpoint_path)
    if all_model_checkpoint_timestamps is not None and len(all_model_checkpoint_timestamps) != len(paths):
        raise ValueError(f"Checkpoint timestamps, if provided, must match checkpoint paths ({paths})")
    return _io.CheckpointState(model_checkpoint_path, paths, all_model_checkpoint_timestamps,
                               last_preserved_timestamp or 0.0)


def update_checkpoint_state(save_dir, model_checkpoint_path, all_model_checkpoint_paths=None, latest_filename=None,
                            all_model_checkpoint_timestamps=None, last_preserved_timestamp=None):
    """Writes the directory's ``checkpoint`` state file."""
    if latest_filename not in (None, _io.STATE_FILE):
        raise ValueError(f"latest_filename must be {_io.STATE_FILE!r} (tensorweave keeps one state file name)")
    st = generate_checkpoint_state_proto(save_dir, model_checkpoint_path, all_model_checkpoint_paths,
                                         all_model_checkpoint_timestamps, last_preserved_timestamp)
    stamps = st.all_model_checkpoint_timestamps
    if len(stamps) != len(st.all_model_checkpoint_paths):
        stamps = [time.time()] * len(st.all_model_checkpoint_paths)
    _io.write_state(os.fspath(save_dir), st.model_checkpoint_path, st.all_model_checkpoint_paths, stamps,
                    st.last_preserved_timestamp)


# ---- initializing variables from a checkpoint ----------------------------------------------------------------
def _graph_variables():
    graph = get_default_graph()
    out = {}
    for v in graph.get_collection("variables") + graph.get_collection("local_variables"):
        out.setdefault(v.name[:-2] if v.name.endswith(":0") else v.name, v)
    return out


def _set_initial_value(var, value, ckpt_name, path):
    from tensorweave.ops.array_ops import constant
    if var.shape.rank is not None and list(value.shape) != var.shape.as_list():
        raise ValueError(f"Shape of variable {var.name} ({var.shape.as_list()}) doesn't match with shape of tensor "
                         f"{ckpt_name} ({list(value.shape)}) from checkpoint reader {path}.")
    graph = var.graph
    with graph.as_default(), graph.control_dependencies(None), graph.name_scope(var.name[:-2] + "/"):
        init = constant(value.astype(var.dtype.np_dtype), name="checkpoint_initializer")
        var._initializer_op = var.assign(init, read_value=False, name="Assign_from_checkpoint")
        var._init_value_tensor = init


def init_from_checkpoint(ckpt_dir_or_file, assignment_map):
    """Initializes variables from a checkpoint (TF1): ``assignment_map`` maps checkpoint names or
    scopes (``"old_scope/"``) to variable names, scopes (``"new_scope/"``) or variables."""
    path = _saver_file(ckpt_dir_or_file)
    arrays = read_saver_file(path)
    variables = _graph_variables()
    for ckpt_key, target in assignment_map.items():
        if getattr(target, "_is_variable", False) or not isinstance(target, str):
            targets = target if isinstance(target, (list, tuple)) else [target]
            if ckpt_key not in arrays:
                raise ValueError(f"Tensor {ckpt_key} is not found in {path} checkpoint")
            for v in targets:
                _set_initial_value(v, arrays[ckpt_key], ckpt_key, path)
            continue
        if not ckpt_key.endswith("/"):
            if ckpt_key not in arrays:
                raise ValueError(f"Tensor {ckpt_key} is not found in {path} checkpoint")
            if target not in variables:
                raise ValueError(f"Variable {target} is not found in the graph")
            _set_initial_value(variables[target], arrays[ckpt_key], ckpt_key, path)
            continue
        scope = "" if ckpt_key == "/" else ckpt_key
        prefix = "" if target == "/" else (target if target.endswith("/") else target + "/")
        found = False
        for name, v in variables.items():
            if not name.startswith(prefix):
                continue
            key = scope + name[len(prefix):]
            if key in arrays:
                _set_initial_value(v, arrays[key], key, path)
                found = True
        if not found and scope and not any(k.startswith(scope) for k in arrays):
            raise ValueError(f"Tensor {ckpt_key} is not found in {path} checkpoint")


def warm_start(ckpt_to_initialize_from, vars_to_warm_start=".*", var_name_to_vocab_info=None,
               var_name_to_prev_var_name=None):
    """``tf.train.warm_start``: the trainable variables matching ``vars_to_warm_start`` (a regular
    expression, or a list of names/variables) start from ``ckpt_to_initialize_from``."""
    if var_name_to_vocab_info:
        raise ValueError("warm_start: var_name_to_vocab_info (remapping vocabularies) is not supported")
    path = _saver_file(ckpt_to_initialize_from)
    arrays = read_saver_file(path)
    renames = dict(var_name_to_prev_var_name or {})
    graph = get_default_graph()
    if isinstance(vars_to_warm_start, str) or vars_to_warm_start is None:
        pattern = re.compile(vars_to_warm_start or ".*")
        chosen = [v for v in graph.get_collection("trainable_variables") if pattern.match(v.name[:-2])]
    else:
        by_name = _graph_variables()
        chosen = [by_name[v] if isinstance(v, str) else v for v in vars_to_warm_start]
    for v in chosen:
        name = v.name[:-2]
        prev = renames.get(name, name)
        if prev not in arrays:
            raise ValueError(f"warm_start: {prev!r} is not in checkpoint {path}")
        _set_initial_value(v, arrays[prev], prev, path)
