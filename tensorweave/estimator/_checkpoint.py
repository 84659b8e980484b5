"""Saving and restoring a graph's variables by name, for the Estimator's ``model_dir``.

A checkpoint is ``<model_dir>/model.ckpt-<step>.safetensors``: one tensor per variable, keyed by
the variable's name without ``:0``, in the validated tensor-file format, written atomically;
the directory's ``checkpoint`` state file is the one ``tw.train.latest_checkpoint`` reads.
Restoring feeds the saved arrays into assign ops made beforehand, so it works in a fresh graph
whose variables have the same names (this is what lets a later ``train``/``evaluate``/``predict``
call resume from the last checkpoint).
"""
import os
import time

import numpy as np

from tensorweave.core import errors
from tensorweave.ops.array_ops import placeholder
from tensorweave.saving import tensor_file
from tensorweave.train import _io
from tensorweave.train.checkpoint import SUFFIX

FORMAT = "tensorweave.graph-variables"


def _key(v):
    return v.name[:-2] if v.name.endswith(":0") else v.name


def read_checkpoint(prefix):
    """``{variable name: array}`` of the checkpoint at ``prefix`` (validated)."""
    path = prefix + SUFFIX
    if not os.path.isfile(path):
        raise errors.NotFoundError(f"Estimator checkpoint {path} does not exist")
    meta = tensor_file.read_metadata(path)
    if meta.get("format") != FORMAT:
        raise ValueError(f"{path}: not an Estimator checkpoint (format {meta.get('format')!r:.60})")
    return tensor_file.read_tensors(path)


class VariableSaver:
    """Writes and reads the values of ``var_list`` (made in the current graph) under ``directory``."""

    def __init__(self, var_list, directory, max_to_keep=5):
        self._vars = {}
        for v in var_list:
            self._vars.setdefault(_key(v), v)
        self._directory = directory
        self._max_to_keep = max_to_keep
        self._reads = {k: v.read_value() for k, v in self._vars.items()}
        self._feeds = {}
        self._assigns = {}
        for k, v in self._vars.items():
            ph = placeholder(v.dtype, v.shape, name=f"save/{k}_value")
            self._feeds[k] = ph
            self._assigns[k] = v.assign(ph, read_value=False)

    def save(self, sess, step):
        """Writes the variables' current values as ``model.ckpt-<step>``; returns the prefix."""
        os.makedirs(self._directory, exist_ok=True)
        values = sess.run(self._reads)
        prefix = os.path.join(self._directory, f"model.ckpt-{int(step)}")
        tensor_file.write_tensors(prefix + SUFFIX, {k: np.asarray(a) for k, a in values.items()},
                                  {"format": FORMAT, "version": "1", "global_step": str(int(step))}, stage_prefix="")
        state = _io.read_state(self._directory)
        paths = [p for p in (state.all_model_checkpoint_paths if state else []) if p != prefix] + [prefix]
        stamps = [time.time()] * len(paths)
        dropped = paths[:-self._max_to_keep] if self._max_to_keep else []
        paths = paths[len(dropped):]
        _io.write_state(self._directory, prefix, paths, stamps[-len(paths):], 0.0)
        for old in dropped:
            if os.path.isfile(old + SUFFIX):
                os.remove(old + SUFFIX)
        return prefix

    def assign(self, sess, values):
        """Sets the variables named in ``values`` (a dict of arrays); the others keep their values."""
        feed, ops = {}, []
        for k, a in values.items():
            v = self._vars[k]
            if not v.shape.is_compatible_with(a.shape):
                raise ValueError(f"variable {k} has shape {v.shape} in the graph and {list(a.shape)} in the checkpoint")
            feed[self._feeds[k]] = a
            ops.append(self._assigns[k])
        if ops:
            sess.run(ops, feed)

    def restore(self, sess, prefix):
        arrays = read_checkpoint(prefix)
        missing = [k for k in self._vars if k not in arrays]
        if missing:
            raise errors.NotFoundError(
                f"Restoring from checkpoint {prefix} failed: the graph has variables the checkpoint lacks "
                f"({', '.join(missing[:5])}). Hint: the model_fn changed since the checkpoint was written; use a "
                f"new model_dir.")
        feed = {}
        for k, v in self._vars.items():
            a = arrays[k]
            if not v.shape.is_compatible_with(a.shape):
                raise ValueError(f"Restoring from checkpoint {prefix}: variable {k} has shape {v.shape} in the graph "
                                 f"and {list(a.shape)} in the checkpoint")
            feed[self._feeds[k]] = a
        sess.run(list(self._assigns.values()), feed)
