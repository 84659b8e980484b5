"""``keras.models``: Model, Sequential, and cloning from config."""
from tensorweave.keras.engine.functional import Functional  # noqa: F401
from tensorweave.keras.engine.model import Model  # noqa: F401
from tensorweave.keras.engine.sequential import Sequential  # noqa: F401
from tensorweave.keras.saving import load_model, save_model  # noqa: F401
from tensorweave.keras.utils.custom_objects import merged


def model_from_config(config, custom_objects=None):
    from tensorweave.keras.layers import deserialize
    return deserialize(config, custom_objects=merged(custom_objects))


def model_from_json(json_string, custom_objects=None):
    """The model (fresh weights) described by ``model.to_json()``; custom layers come from
    ``custom_objects``, a ``custom_object_scope`` or the registry (no code is loaded)."""
    import json
    config = json.loads(json_string)
    if not isinstance(config, dict) or "class_name" not in config:
        raise ValueError("model_from_json: expected the JSON of model.to_json() (with 'class_name' and 'config')")
    return model_from_config(config, custom_objects)


def clone_model(model, custom_objects=None):
    """A new model with the same architecture (fresh weights)."""
    from tensorweave.keras.layers import deserialize, serialize
    return deserialize(serialize(model), custom_objects=merged(custom_objects))
