"""Model configs as Keras writes them (Keras 3 and tf-keras 2) ↔ tensorweave's.

Ours follows tf-keras' shape already; the differences are spelled out here, in one place:

* Keras 3 wraps values in ``{"module", "class_name", "config", "registered_name"}`` and
  dtypes in ``DTypePolicy`` objects; tf-keras names optimizers ``Custom>Adam``;
* functional nodes are ``{"args": [__keras_tensor__ ...], "kwargs": {...}}`` (Keras 3) or
  ``[[name, node, tensor, kwargs]]`` (tf-keras), ours ``[[name, node, tensor]]``;
* Sequential models carry their input as an ``InputLayer`` entry (``batch_shape`` or
  ``batch_input_shape``), ours as ``build_input_shape``;
* Keras adds settings we do not have (``quantization_config``, ``lora_rank``, ...). A setting
  whose value is Keras' neutral default is dropped; any other is refused with its name, so a
  model never loads as something other than what was saved.

>>> cfg = {"class_name": "Dense", "module": "keras.layers", "registered_name": None,
...        "config": {"name": "d", "units": 2, "quantization_config": None,
...                   "dtype": {"module": "keras", "class_name": "DTypePolicy",
...                             "config": {"name": "float32"}, "registered_name": None}}}
>>> import_layer(cfg)
{'class_name': 'Dense', 'config': {'name': 'd', 'units': 2, 'dtype': 'float32'}}
"""
import inspect

from tensorweave.saving.validation import fail

_WRAPPER_KEYS = ("module", "registered_name", "build_config", "compile_config", "shared_object_id")
_MODELS = ("Functional", "Model", "Sequential")
# Keras settings with no tensorweave counterpart, dropped when they hold these (neutral) values.
NEUTRAL = {"quantization_config": (None,), "lora_rank": (None,), "lora_alpha": (None,), "optional": (False,),
           "ragged": (False, None), "sparse": (False, None), "renorm": (False,), "renorm_clipping": (None,),
           "renorm_momentum": (0.99,), "synchronized": (False,), "input_axes": (None,), "output_axes": (None,),
           "activity_regularizer": (None,), "seed": (None,), "implementation": (1, 2), "unroll": (False,),
           "time_major": (False,), "reset_after": (True,), "use_cudnn": ("auto",), "zero_output_for_mask": (False,),
           "input_dim": (None,), "batch_size": (None,), "input_length": (None,), "sparse_input": (False,),
           "lora_enabled": (False,), "gradient_checkpointing": (False,)}


_SUBLAYER_KEYS = ("layer", "forward_layer", "backward_layer", "cell")


def _strip(obj):
    """Removes Keras 3's wrapper keys and DTypePolicy objects everywhere in ``obj``."""
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if obj.get("class_name") in ("DTypePolicy", "Policy", "FloatDTypePolicy") and isinstance(obj.get("config"), dict):
        return obj["config"].get("name")
    keras_object = "class_name" in obj        # (a Lambda's function descriptor keeps its "module")
    out = {k: _strip(v) for k, v in obj.items() if not (keras_object and k in _WRAPPER_KEYS)}
    if isinstance(out.get("class_name"), str) and out["class_name"].startswith("Custom>"):
        out["class_name"] = out["class_name"][len("Custom>"):]
    return out


def _accepted(cls):
    """The keyword names ``cls(...)`` accepts (through its ``__init__`` chain)."""
    from tensorweave.keras.engine.layer import Layer
    names = set(Layer._SAVED_KWARGS) | {"trainable", "name", "dtype", "autocast"}
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        params = inspect.signature(init).parameters
        names.update(n for n, p in params.items() if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL))
        if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
            break
    return names


def _nested_object(v):
    """Initializers, regularizers, constraints: drop settings left at None (Keras 3 adds some)."""
    if isinstance(v, dict) and isinstance(v.get("class_name"), str) and isinstance(v.get("config"), dict):
        return {"class_name": v["class_name"], "config": {k: x for k, x in v["config"].items()
                                                          if not (x is None and k in NEUTRAL)}}
    return v


def _layer_config(class_name, cfg, where, custom_objects):
    from tensorweave.keras.layers import _registry
    cls = {**_registry(), **(custom_objects or {})}.get(class_name)
    cfg = {k: import_layer(v, where, custom_objects) if k in _SUBLAYER_KEYS and isinstance(v, dict)
           else _nested_object(v) for k, v in cfg.items()}
    if cls is None or not isinstance(cls, type):
        return cfg           # deserialize names the unknown class
    if cfg.get("batch_input_shape") is not None and class_name == "InputLayer":
        cfg["batch_shape"] = cfg.pop("batch_input_shape")
    if class_name == "BatchNormalization" and isinstance(cfg.get("axis"), list) and len(cfg["axis"]) == 1:
        cfg["axis"] = cfg["axis"][0]        # tf-keras saves the normalised axis as a list
    accepted = _accepted(cls)
    out = {}
    for k, v in cfg.items():
        if k in accepted:
            out[k] = v
        elif k in NEUTRAL and v in NEUTRAL[k]:
            continue
        elif k in NEUTRAL and v is None:
            continue
        else:
            fail(where, f"layer '{cfg.get('name')}' ({class_name}) has the setting {k}={v!r}, which tensorweave's "
                        f"{class_name} does not support; loading it without would change the model")
    return out


def _keras_tensors(args):
    found = []
    stack = [args]
    while stack:
        v = stack.pop(0)
        if isinstance(v, dict) and v.get("class_name") == "__keras_tensor__":
            hist = v.get("config", {}).get("keras_history")
            if not (isinstance(hist, list) and len(hist) == 3):
                raise ValueError(f"malformed keras_history {hist!r}")
            found.append(hist)
        elif isinstance(v, (list, tuple)):
            stack[0:0] = list(v)
        elif isinstance(v, dict):
            stack[0:0] = list(v.values())
    return found


def _check_kwargs(kwargs, layer, where):
    bad = {k: v for k, v in (kwargs or {}).items() if v is not None and k != "training"}
    if bad:
        fail(where, f"layer '{layer}' is called with {sorted(bad)} in the saved graph; tensorweave reads only "
                    "tensor arguments from a Keras config")


def _triple(name, node, tensor):
    # our configs index a layer's outputs over all its calls: call k of a one-output layer is k
    return [name, 0, int(node) + int(tensor)]


def _import_nodes(nodes, layer, where):
    out = []
    for node in nodes:
        if isinstance(node, dict):                                    # Keras 3
            _check_kwargs(node.get("kwargs"), layer, where)
            out.append([_triple(*h) for h in _keras_tensors(node.get("args", []))])
        else:                                                         # tf-keras
            entries = []
            for e in node:
                if len(e) == 4:
                    _check_kwargs(e[3], layer, where)
                entries.append(_triple(*e[:3]))
            out.append(entries)
    return out


def _endpoints(v):
    if v and isinstance(v[0], str):
        v = [v]
    return [_triple(*e[:3]) for e in v]


def import_model(config, where, custom_objects=None):
    """Our ``{"class_name", "config"}`` for a model config that Keras wrote."""
    config = _strip(config)
    return import_layer(config, where, custom_objects)


def import_layer(entry, where="config", custom_objects=None):
    entry = _strip(entry)
    name, cfg = entry.get("class_name"), entry.get("config")
    if not isinstance(name, str) or not isinstance(cfg, dict):
        fail(where, f"expected {{'class_name', 'config'}}, found {str(entry)[:80]}")
    if name in ("Functional", "Model") and "layers" in cfg:
        layers = []
        for lc in cfg["layers"]:
            sub = import_layer({"class_name": lc["class_name"], "config": lc["config"]}, where, custom_objects)
            layers.append({"class_name": sub["class_name"], "name": lc.get("name", sub["config"].get("name")),
                           "config": sub["config"],
                           "inbound_nodes": _import_nodes(lc.get("inbound_nodes", []), lc.get("name"), where)})
        out = {"name": cfg.get("name"), "trainable": cfg.get("trainable", True), "layers": layers,
               "input_layers": _endpoints(cfg["input_layers"]), "output_layers": _endpoints(cfg["output_layers"])}
        return {"class_name": "Functional", "config": out}
    if name == "Sequential":
        layers = list(cfg.get("layers", []))
        shape = cfg.get("build_input_shape")
        if layers and layers[0].get("class_name") == "InputLayer":
            first = layers.pop(0)["config"]
            shape = first.get("batch_shape", first.get("batch_input_shape"))
        layers = [import_layer(lc, where, custom_objects) for lc in layers]
        return {"class_name": "Sequential", "config": {"name": cfg.get("name"), "trainable": cfg.get("trainable", True),
                                                       "layers": layers, "build_input_shape": shape}}
    return {"class_name": name, "config": _layer_config(name, cfg, where, custom_objects)}


# ---- ours → Keras --------------------------------------------------------------------------------------
_MODULE_OF_SUFFIX = (("_initializer", "keras.initializers"), ("_regularizer", "keras.regularizers"),
                     ("_constraint", "keras.constraints"))
# Optimizer settings tf-keras' HDF5 loader (legacy optimizers) does not take, dropped when neutral.
_OPTIMIZER_NEUTRAL = {"weight_decay": None, "use_ema": False, "ema_momentum": 0.99, "ema_overwrite_frequency": None,
                      "loss_scale_factor": None, "gradient_accumulation_steps": None, "global_clipnorm": None,
                      "clipnorm": None, "clipvalue": None}


def _wrapped(obj, module):
    return {"module": module, "class_name": obj["class_name"], "config": obj["config"], "registered_name": None}


def _export_value(key, v):
    """Nested objects get Keras 3's ``module`` key: its deserializer finds classes by it."""
    if isinstance(v, dict) and isinstance(v.get("class_name"), str) and isinstance(v.get("config"), dict):
        if key in _SUBLAYER_KEYS:
            return _wrapped(export_layer(v), "keras.layers")
        for suffix, module in _MODULE_OF_SUFFIX:
            if key.endswith(suffix):
                return _wrapped(v, module)
    return v


def export_optimizer(opt):
    """An optimizer config both loaders take (tf-keras' HDF5 path builds its legacy optimizers)."""
    if opt is None:
        return None
    cfg = {k: v for k, v in opt["config"].items() if not (k in _OPTIMIZER_NEUTRAL and v == _OPTIMIZER_NEUTRAL[k])}
    return {"class_name": opt["class_name"], "config": cfg}


def export_layer(entry):
    """A config of ours in the form both Keras 3 and tf-keras read."""
    name = entry["class_name"]
    cfg = {k: _export_value(k, v) for k, v in entry["config"].items()}
    if name == "InputLayer":
        cfg["batch_input_shape"] = cfg.pop("batch_shape")
        return {"class_name": name, "config": cfg}
    if name == "Functional":
        layers = []
        for lc in cfg["layers"]:
            sub = export_layer({"class_name": lc["class_name"], "config": lc["config"]})
            layers.append({"class_name": sub["class_name"], "name": lc["name"], "config": sub["config"],
                           "inbound_nodes": [[[n, ni, ti, {}] for n, ni, ti in node] for node in lc["inbound_nodes"]]})
        cfg["layers"] = layers
        return {"class_name": name, "config": cfg}
    if name == "Sequential":
        layers = [export_layer(lc) for lc in cfg["layers"]]
        shape = cfg.get("build_input_shape")
        if shape is not None:
            layers.insert(0, {"class_name": "InputLayer", "config": {"batch_input_shape": list(shape),
                                                                     "dtype": "float32", "sparse": False,
                                                                     "name": f"{cfg.get('name')}_input"}})
        cfg["layers"] = layers
        return {"class_name": name, "config": cfg}
    return {"class_name": name, "config": cfg}
