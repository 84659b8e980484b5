"""Where Keras puts each weight in an HDF5 file, in its two layouts.

* **Legacy** (``model.save("m.h5")``'s ``model_weights`` group; tf-keras' ``save_weights("w.h5")``):
  one group per top-level layer (root attribute ``layer_names``), each with a ``weight_names``
  attribute listing its datasets in order: the layer's trainable weights, then the rest.
  Layers are matched by position among the layers that have weights (as Keras does).
* **Tree** (Keras 3's and tf-keras 2.21's ``save_weights("w.weights.h5")``): the object tree,
  ``layers/dense_1/vars/0``: a model's ``layers`` are keyed by class name in snake case made
  unique (``dense``, ``dense_1``), other sublayers by the attribute holding them
  (``layers/lstm/cell/vars/0``); ``vars/<i>`` are a layer's own variables in creation order.
  Optimizer and metric variables (Keras writes them too) are not read.
"""
import numpy as np

from tensorweave.keras import backend

# The layout's weights are TensorFlow's (kernels HWIO, gates i,f,c,o): what Keras' loaders
# compare this attribute against to decide on conversions.
BACKEND = "tensorflow"
KERAS_VERSION = "3.15.1"


def _bytes_list(names):
    return np.array([n.encode("utf-8") for n in names], dtype="S") if names else np.array([], dtype="S1")


def legacy_weights(layer):
    """A layer's weights in Keras' legacy order: trainable first, then the others."""
    trainable = layer.trainable_weights
    ids = {id(v) for v in trainable}
    return trainable + [v for v in layer.weights if id(v) not in ids]


def _weight_names(layer, weights):
    names, used = [], set()
    for v in weights:
        name = v.name.split(":")[0]
        # drop the outer model's scope: Keras writes ``dense/kernel:0`` inside the layer's group
        parts = name.split("/")
        if layer.name in parts:
            parts = parts[parts.index(layer.name):]
        name = "/".join(parts) + ":0"
        base, k = name, 1
        while name in used:
            name, k = f"{base[:-2]}_{k}:0", k + 1
        used.add(name)
        names.append(name)
    return names


def write_legacy(group, model):
    group.attrs["backend"] = BACKEND.encode("utf-8")
    group.attrs["keras_version"] = KERAS_VERSION.encode("utf-8")
    layers = list(model.layers)
    group.attrs["layer_names"] = _bytes_list([layer.name for layer in layers])
    for layer in layers:
        g = group.create_group(layer.name)
        weights = legacy_weights(layer)
        names = _weight_names(layer, weights)
        g.attrs["weight_names"] = _bytes_list(names)
        for name, v in zip(names, weights):
            g.create_dataset(name, data=v.numpy())
    top = group.create_group("top_level_model_weights")
    own = model._own_trainable + model._own_non_trainable
    names = _weight_names(model, own)
    top.attrs["weight_names"] = _bytes_list(names)
    for name, v in zip(names, own):
        top.create_dataset(name, data=v.numpy())


def _assign(var, value, where, skip_mismatch, skipped):
    if tuple(var.shape.as_list()) != tuple(value.shape):
        if skip_mismatch:
            skipped.append(where)
            return
        raise ValueError(f"{where}: the file has a weight of shape {tuple(value.shape)}, the model's {var.name} "
                         f"is {tuple(var.shape.as_list())}")
    var.assign(value.astype(var.dtype.np_dtype))


def read_legacy(reader, group, model, skip_mismatch=False):
    """Loads the legacy layout from ``group`` into ``model``; returns the skipped weights."""
    names = reader.attr(group, "layer_names")
    if not isinstance(names, list):
        reader._fail(group.name, "has no 'layer_names' list: not a Keras weights group")
    saved = []
    for name in names:
        g = reader.group(name, group)
        if g is None:
            reader._fail(group.name, f"lists layer {name!r}, which it does not hold")
        weight_names = reader.attr(g, "weight_names", [])
        if not isinstance(weight_names, list):
            reader._fail(g.name, "'weight_names' is not a list")
        if weight_names:
            saved.append((name, [reader.array(g, w) for w in weight_names]))
    layers = [layer for layer in model.layers if layer.weights]
    if len(saved) != len(layers):
        raise ValueError(f"{reader.path}: the file has weights for {len(saved)} layers "
                         f"({[n for n, _ in saved][:8]}), model '{model.name}' has {len(layers)} layers with weights "
                         f"({[layer.name for layer in layers][:8]})")
    skipped = []
    for layer, (name, values) in zip(layers, saved):
        weights = legacy_weights(layer)
        if len(weights) != len(values):
            raise ValueError(f"{reader.path}: layer '{layer.name}' ({type(layer).__name__}) has {len(weights)} weights, "
                             f"the file's layer '{name}' {len(values)}")
        for i, (var, value) in enumerate(zip(weights, values)):
            _assign(var, value, f"{reader.path}: layer '{name}' weight {i}", skip_mismatch, skipped)
    top = reader.group("top_level_model_weights", group)
    own = model._own_trainable + model._own_non_trainable
    if top is not None:
        values = [reader.array(top, w) for w in reader.attr(top, "weight_names", []) or []]
        if len(values) != len(own):
            raise ValueError(f"{reader.path}: the file has {len(values)} top-level model weights, the model {len(own)}")
        for var, value in zip(own, values):
            _assign(var, value, f"{reader.path}: top-level weight {var.name}", skip_mismatch, skipped)
    return skipped


# ---- the tree layout -----------------------------------------------------------------------------------
def _name_key(name):
    return "~" + name if name.startswith("_") else name


def _children(layer):
    """``(attribute, value)`` pairs of the sublayers Keras' saving walk visits, in its order."""
    from tensorweave.keras.engine.functional import Functional
    from tensorweave.keras.engine.layer import Layer
    from tensorweave.keras.engine.sequential import Sequential
    if isinstance(layer, (Functional, Sequential)):
        yield "layers", list(layer.layers)
        return
    for attr in sorted(vars(layer), key=_name_key):
        if attr.startswith("_"):
            continue        # our tracking ignores private attributes; their weights are not the layer's
        value = vars(layer)[attr]
        if isinstance(value, Layer):
            yield attr, value
        elif isinstance(value, (list, tuple, dict)):
            items = list(value.values()) if isinstance(value, dict) else list(value)
            if items and any(isinstance(v, Layer) for v in items):
                yield attr, [v for v in items if isinstance(v, Layer)]


def tree_entries(model):
    """``[(path, layer, own variables)]`` in Keras' ``.weights.h5`` layout."""
    out, seen = [], set()

    def visit(layer, path):
        if id(layer) in seen:
            return
        seen.add(id(layer))
        out.append((f"{path}/vars" if path else "vars", layer, layer._own_trainable + layer._own_non_trainable))
        for attr, child in _children(layer):
            base = f"{path}/{attr}" if path else attr
            if isinstance(child, list):
                used = {}
                for sub in child:
                    key = backend.snake_case(type(sub).__name__)
                    if key in used:
                        used[key] += 1
                        key = f"{key}_{used[key]}"
                    else:
                        used[key] = 0
                    visit(sub, f"{base}/{key}")
            else:
                visit(child, base)
    visit(model, "")
    return out


def write_tree(f, model):
    for path, layer, variables in tree_entries(model):
        g = f.require_group(path)
        g.attrs["name"] = layer.name
        for i, v in enumerate(variables):
            g.create_dataset(str(i), data=v.numpy())


def _all_datasets(reader, skip=("optimizer", "metrics")):
    out, stack = [], [("", reader.file)]
    while stack:
        prefix, g = stack.pop()
        for name, kind in reader.children(g):
            path = f"{prefix}{name}"
            if kind == "group" and path not in skip:
                stack.append((path + "/", reader.group(name, g)))
            elif kind == "dataset":
                out.append(path)
    return out


def read_tree(reader, model, skip_mismatch=False):
    """Loads a ``.weights.h5`` tree into ``model``; returns ``(missing, skipped, unused)`` paths
    (the optimizer's and metrics' variables that Keras also writes are not read)."""
    missing, skipped, used = [], [], set()
    for path, layer, variables in tree_entries(model):
        group = reader.file
        for part in path.split("/"):
            group = reader.group(part, group) if group is not None else None
        names = [n for n, kind in reader.children(group) if kind == "dataset"] if group is not None else []
        if len(names) != len(variables):
            if skip_mismatch or (not variables and group is None):
                if variables:
                    missing.append(path)
                continue
            raise ValueError(f"{reader.path}: layer '{layer.name}' ({type(layer).__name__}) has {len(variables)} "
                             f"variables, the file has {len(names)} at '{path}'"
                             + ("" if group is not None else " (absent: the model does not match the file)"))
        for i, var in enumerate(variables):
            _assign(var, reader.array(group, str(i)), f"{reader.path}: {path}/{i}", skip_mismatch, skipped)
            used.add(f"{path}/{i}")
    return missing, skipped, sorted(set(_all_datasets(reader)) - used)


def is_tree(reader):
    return "layer_names" not in reader.file.attrs and "model_weights" not in reader.file
