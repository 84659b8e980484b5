"""``keras.utils``: seeding, one-hot labels, the progress bar, datasets from arrays and
folders, images, custom objects, plot_model."""
import random as _random

import numpy as np

from tensorweave.keras.datasets.text import pad_sequences  # noqa: F401
from tensorweave.keras.engine.data_adapter import pack_x_y_sample_weight, unpack_x_y_sample_weight  # noqa: F401
from tensorweave.keras.backend import clear_session, is_keras_tensor  # noqa: F401
from tensorweave.keras.utils.custom_objects import (CustomObjectScope, custom_object_scope,  # noqa: F401
                                                    get_custom_objects, get_registered_name, get_registered_object,
                                                    register_keras_serializable)
from tensorweave.keras.utils.dataset_split import split_dataset  # noqa: F401
from tensorweave.keras.utils.io_utils import (disable_interactive_logging, enable_interactive_logging,  # noqa: F401
                                              is_interactive_logging_enabled)
from tensorweave.keras.utils.serialization_utils import (Config, deserialize_keras_object,  # noqa: F401
                                                         get_source_inputs, serialize_keras_object, standardize_dtype)
from tensorweave.keras.utils.dataset_utils import (image_dataset_from_directory, text_dataset_from_directory,  # noqa: F401
                                                   timeseries_dataset_from_array)
from tensorweave.keras.utils.image_utils import array_to_img, img_to_array, load_img, save_img  # noqa: F401
from tensorweave.keras.utils.plot import model_to_dot, plot_model  # noqa: F401
from tensorweave.keras.utils.progbar import Progbar  # noqa: F401
from tensorweave.keras.utils.py_dataset import PyDataset, Sequence  # noqa: F401
from tensorweave.keras.utils.file_utils import get_file  # noqa: F401
from tensorweave.keras.utils.dataset_creator import experimental  # noqa: F401


def set_random_seed(seed):
    """Seeds Python's, NumPy's and tensorweave's generators, so a run repeats bit for bit."""
    import tensorweave as tw
    _random.seed(seed)
    np.random.seed(seed)
    tw.random.set_seed(seed)


def to_categorical(x, num_classes=None, dtype="float32"):
    x = np.asarray(x, dtype=np.int64)
    shape = x.shape
    if shape and shape[-1] == 1 and len(shape) > 1:
        x = x.reshape(shape[:-1])
    num_classes = int(x.max()) + 1 if num_classes is None else num_classes
    out = np.zeros(x.shape + (num_classes,), dtype=dtype)
    np.put_along_axis(out, x[..., None], 1, axis=-1)
    return out


def normalize(x, axis=-1, order=2):
    x = np.asarray(x, dtype=np.float32)
    n = np.linalg.norm(x, ord=order, axis=axis, keepdims=True)
    return x / np.where(n == 0, 1, n)
