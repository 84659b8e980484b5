"""``model.save_weights`` / ``load_weights``: all weights in one tensor file (safetensors layout),
written atomically and validated when read.

Keys are positional paths (``layers/2/layers/0/vars/1``), so a model rebuilt from the same code
finds its weights whatever names its layers got. Paths ending in ``.h5``/``.hdf5`` are Keras' HDF5
layouts instead (:mod:`tensorweave.keras.h5`); ``load_weights`` recognises an HDF5 file by its
signature, whatever its name.
"""
import os

import numpy as np

from tensorweave.saving.tensor_file import read_tensors, write_tensors


def _keyed_weights(model):
    out = {}
    seen = set()

    def visit(layer, prefix):
        own = [v for v in layer._own_trainable + layer._own_non_trainable if id(v) not in seen]
        for i, v in enumerate(own):
            seen.add(id(v))
            out[f"{prefix}vars/{i}"] = v
        for j, sub in enumerate(layer._layers):
            visit(sub, f"{prefix}layers/{j}/")
    visit(model, "")
    return out


def save_weights(model, filepath, overwrite=True):
    filepath = os.fspath(filepath)
    if not overwrite and os.path.exists(filepath):
        raise FileExistsError(f"{filepath} exists and overwrite=False")
    from tensorweave.keras import h5
    if h5.is_h5_path(filepath):
        h5.save_weights(model, filepath)
        return
    from tensorweave.keras import sharded_saving
    if sharded_saving.is_global_model(model):
        sharded_saving.save_weights(model, filepath, overwrite)
        return
    if os.path.isdir(filepath) and sharded_saving.is_sharded_save(filepath):
        from tensorweave.train._sharded import remove
        remove(filepath)        # (a sharded save of a global model was here; a file replaces it)
    tensors = {k: v.numpy() for k, v in _keyed_weights(model).items()}
    write_tensors(filepath, tensors, metadata={"format": "tensorweave.weights", "version": "1"})


class LoadStatus:
    """What ``load_weights`` returns (TF's checkpoint status): which file entries were used."""

    def __init__(self, filepath, missing, unused):
        self.filepath, self.missing, self.unused = filepath, missing, unused

    def assert_consumed(self):
        """Raises unless every weight of the model was loaded and every entry of the file used."""
        if self.missing or self.unused:
            raise AssertionError(f"Weights file {self.filepath}: model weights without values {self.missing[:5]}, "
                                 f"unused file entries {self.unused[:5]}")
        return self

    def assert_existing_objects_matched(self):
        if self.missing:
            raise AssertionError(f"Weights file {self.filepath} has no values for {self.missing[:5]}")
        return self

    def expect_partial(self):
        return self

    def assert_nontrivial_match(self):
        return self


def load_weights(model, filepath, skip_mismatch=False, data=None):
    from tensorweave.keras import h5, sharded_saving
    if data is None and sharded_saving.is_sharded_save(os.fspath(filepath)) and _keyed_weights(model):
        return sharded_saving.load_weights(model, filepath, skip_mismatch)
    if data is None and h5.is_hdf5_file(filepath):
        if not _keyed_weights(model):
            model._deferred_weights = (os.fspath(filepath), None, skip_mismatch)   # read at the first call
            return LoadStatus(os.fspath(filepath), [], [])
        return h5.load_weights(model, filepath, skip_mismatch)
    data = read_tensors(os.fspath(filepath)) if data is None else data
    targets = _keyed_weights(model)
    if not targets and data:
        # a subclassed model that has not created its weights yet: they are restored when its
        # first call creates them (TF's deferred restoration)
        model._deferred_weights = (os.fspath(filepath), data, skip_mismatch)
        return LoadStatus(os.fspath(filepath), [], [])
    unused = sorted(k for k in data if k not in targets)
    missing = [k for k in targets if k not in data]
    if missing and not skip_mismatch:
        raise ValueError(f"Weights file {filepath} has no values for {missing[:5]}"
                         f"{' ...' if len(missing) > 5 else ''}; model '{model.name}' does not match it")
    for k, v in targets.items():
        if k not in data:
            continue
        value = data[k]
        if tuple(v.shape.as_list()) != value.shape:
            if skip_mismatch:
                continue
            raise ValueError(f"Weight {k}: the file has shape {value.shape}, the model {tuple(v.shape.as_list())}")
        v.assign(np.asarray(value).astype(v.dtype.np_dtype))
    return LoadStatus(os.fspath(filepath), [k for k in targets if k not in data], unused)


def restore_deferred(model):
    """Assigns the values a ``load_weights`` before the model had weights left pending."""
    pending = model.__dict__.pop("_deferred_weights", None)
    if pending is not None:
        from tensorweave.core.context import init_scope
        filepath, data, skip_mismatch = pending
        with init_scope():
            load_weights(model, filepath, skip_mismatch, data=data)
