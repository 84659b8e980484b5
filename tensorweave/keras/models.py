"""``keras.models``: Model, Sequential, and cloning from config."""
from tensorweave.keras.engine.functional import Functional  # noqa: F401
from tensorweave.keras.engine.model import Model  # noqa: F401
from tensorweave.keras.engine.sequential import Sequential  # noqa: F401
from tensorweave.keras.saving import load_model, save_model  # noqa: F401


def model_from_config(config, custom_objects=None):
    from tensorweave.keras.layers import deserialize
    return deserialize(config, custom_objects=custom_objects)


def clone_model(model, custom_objects=None):
    """A new model with the same architecture (fresh weights)."""
    from tensorweave.keras.layers import deserialize, serialize
    return deserialize(serialize(model), custom_objects=custom_objects)
