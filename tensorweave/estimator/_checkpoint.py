"""The Estimator's and monitored sessions' checkpoints: ``tf.train.Saver`` files in ``model_dir``.

A checkpoint is what ``Saver.save(sess, "<model_dir>/model.ckpt", global_step=step)`` writes:
``model.ckpt-<step>.safetensors`` (variables by name, CRC-32s), ``model.ckpt-<step>.meta`` (the
graph, see ``compat/v1_meta_graph.py``) and the directory's ``checkpoint`` state file. So
``tf.train.latest_checkpoint``, ``Saver.restore``, ``tf.train.load_variable``/``list_variables``
and ``import_meta_graph`` all work on an Estimator's ``model_dir``, and a model_dir written by a
TF1 program's ``Saver`` under ``model.ckpt`` is one an Estimator resumes from.
"""
import os

from tensorweave.compat.v1_saver import Saver, read_saver_file
from tensorweave.core import errors
from tensorweave.train import _io
from tensorweave.train.checkpoint import _file_of

BASENAME = "model.ckpt"


def read_checkpoint(prefix):
    """``{variable name: array}`` of the Saver checkpoint at ``prefix`` (validated)."""
    path = _file_of(prefix)
    if not os.path.isfile(path):
        raise errors.NotFoundError(f"Checkpoint {prefix} does not exist")
    return read_saver_file(path)


class VariableSaver:
    """A ``Saver`` of ``var_list`` (made in the current graph) writing ``<directory>/model.ckpt-<step>``,
    which continues the directory's list of kept checkpoints (``max_to_keep``)."""

    def __init__(self, var_list, directory, max_to_keep=5, saver=None):
        self._directory = directory
        self._saver = saver if saver is not None else Saver(var_list, max_to_keep=max_to_keep)
        self._saver.build()
        state = _io.read_state(directory) if os.path.isdir(directory) else None
        if state is not None:
            self._saver.recover_last_checkpoints(list(state.all_model_checkpoint_paths))

    @property
    def _vars(self):
        return self._saver._vars

    def save(self, sess, step):
        """Writes the variables' current values as ``model.ckpt-<step>``; returns the prefix."""
        os.makedirs(self._directory, exist_ok=True)
        return self._saver.save(sess, os.path.join(self._directory, BASENAME), global_step=int(step))

    def assign(self, sess, values):
        """Sets the variables named in ``values`` (a dict of arrays); the others keep their values."""
        feed, ops = {}, []
        for k, a in values.items():
            v = self._vars[k]
            if not v.shape.is_compatible_with(a.shape):
                raise ValueError(f"variable {k} has shape {v.shape} in the graph and {list(a.shape)} in the checkpoint")
            ph, op = self._saver._restore_ops[k]
            feed[ph] = a
            ops.append(op)
        if ops:
            sess.run(ops, feed)

    def restore(self, sess, prefix):
        try:
            self._saver.restore(sess, prefix)
        except errors.NotFoundError as e:
            raise errors.NotFoundError(
                f"{e.message.splitlines()[0]} Hint: the model_fn changed since the checkpoint was written; use a "
                f"new model_dir.") from None
