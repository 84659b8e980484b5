"""``tw.train.load_checkpoint``: read a checkpoint's variables without the program that wrote it.

>>> import os, tempfile
>>> import tensorweave as tw
>>> prefix = tw.train.Checkpoint(step=tw.Variable(3, dtype=tw.int64)).write(os.path.join(tempfile.mkdtemp(), "c"))
>>> reader = tw.train.load_checkpoint(prefix)
>>> reader.get_variable_to_shape_map(), int(reader.get_tensor("step"))
({'step': []}, 3)
"""
from tensorweave.core import dtypes as _dt
from tensorweave.core import errors
from tensorweave.train._sharded import Source
from tensorweave.train.checkpoint import _latest_if_dir, _locate, read_file


class CheckpointReader:
    """The variables of one checkpoint by object path (TF's ``CheckpointReader``): a file is
    read once; a sharded directory (global variables) is read per tensor, when asked."""

    def __init__(self, ckpt_dir_or_file):
        self._path = _latest_if_dir(ckpt_dir_or_file)
        kind, path = _locate(self._path)
        if kind == "sharded":
            source = Source(path)
            nodes, self._tensors, self._source = source.nodes, None, source
        else:
            nodes, self._tensors, _ = read_file(path)
            self._source = None
        self._vars = {n["path"]: n for n in nodes if n["kind"] == "variable"}

    def get_tensor(self, tensor_str):
        """The value (NumPy array) of the variable at object path ``tensor_str``."""
        node = self._vars.get(tensor_str)
        if node is None:
            raise errors.NotFoundError(f"Key {tensor_str} not found in checkpoint {self._path}; it has: "
                                       f"{sorted(self._vars)[:10]}")
        if self._source is not None:
            return self._source.array(node["tensor"])
        return self._tensors[node["tensor"]]

    def has_tensor(self, tensor_str):
        return tensor_str in self._vars

    def get_variable_to_shape_map(self):
        return {k: list(n["shape"]) for k, n in sorted(self._vars.items())}

    def get_variable_to_dtype_map(self):
        return {k: _dt.as_dtype(n["dtype"]) for k, n in sorted(self._vars.items())}


def load_checkpoint(ckpt_dir_or_file):
    """A :class:`CheckpointReader` for a checkpoint prefix or a directory (its latest checkpoint)."""
    return CheckpointReader(ckpt_dir_or_file)
