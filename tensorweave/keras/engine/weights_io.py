"""``model.save_weights`` / ``load_weights``: all weights in one tensor file (safetensors layout),
written atomically and validated when read.

Keys are positional paths (``layers/2/layers/0/vars/1``), so a model rebuilt from the same code
finds its weights whatever names its layers got.
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
    tensors = {k: v.numpy() for k, v in _keyed_weights(model).items()}
    write_tensors(filepath, tensors, metadata={"format": "tensorweave.weights", "version": "1"})


def load_weights(model, filepath, skip_mismatch=False):
    data = read_tensors(os.fspath(filepath))
    targets = _keyed_weights(model)
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
