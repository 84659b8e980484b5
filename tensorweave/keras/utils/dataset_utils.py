"""Datasets from arrays and folders, as Keras makes them: ``timeseries_dataset_from_array``,
``image_dataset_from_directory`` and ``text_dataset_from_directory`` (one sub-folder per class,
sorted by name; files read with Pillow / as text; nothing in a file is run).

>>> import numpy as np
>>> from tensorweave.keras import utils
>>> ds = utils.timeseries_dataset_from_array(np.arange(10), np.arange(10) * 10, sequence_length=3, batch_size=4)
>>> x, y = next(iter(ds))
>>> x.numpy().tolist(), y.numpy().tolist()
([[0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 5]], [0, 10, 20, 30])
"""
import os

import numpy as np

_IMAGE_EXTENSIONS = (".bmp", ".gif", ".jpeg", ".jpg", ".png")


def timeseries_dataset_from_array(data, targets, sequence_length, sequence_stride=1, sampling_rate=1,
                                  batch_size=128, shuffle=False, seed=None, start_index=None, end_index=None):
    """Windows of ``sequence_length`` steps (every ``sampling_rate``-th), one every
    ``sequence_stride``; the target of a window is ``targets[start]`` (None: inputs only)."""
    from tensorweave.data import Dataset
    for name, value in (("sequence_length", sequence_length), ("sequence_stride", sequence_stride),
                        ("sampling_rate", sampling_rate)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
            raise ValueError(f"`{name}` must be a positive integer. Received: {name}={value!r}")
    data = np.asarray(data)
    start_index = 0 if start_index is None else int(start_index)
    end_index = len(data) if end_index is None else int(end_index)
    if not 0 <= start_index < end_index <= len(data):
        raise ValueError(f"`start_index` and `end_index` must satisfy 0 <= start_index < end_index <= len(data) = "
                         f"{len(data)}. Received: start_index={start_index}, end_index={end_index}")
    span = (sequence_length - 1) * sampling_rate
    starts = np.arange(start_index, end_index - span, sequence_stride)
    if targets is not None:
        targets = np.asarray(targets)
        starts = starts[starts < len(targets)]
    if shuffle:
        np.random.default_rng(seed).shuffle(starts)
    windows = starts[:, None] + np.arange(0, span + 1, sampling_rate)[None, :]
    x = data[windows] if len(starts) else np.zeros((0, sequence_length) + data.shape[1:], data.dtype)
    ds = Dataset.from_tensor_slices(x if targets is None else (x, targets[starts]))
    return ds.batch(batch_size) if batch_size is not None else ds


def _index_directory(directory, labels, extensions, class_names):
    """(file paths, int labels, class names), classes = sorted sub-folders (or ``class_names``)."""
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        raise ValueError(f"`directory` {directory!r} is not a directory")
    if labels == "inferred":
        found = sorted(d for d in os.listdir(directory) if os.path.isdir(os.path.join(directory, d)))
        if class_names is not None:
            if sorted(class_names) != found and set(class_names) != set(found):
                raise ValueError(f"The `class_names` passed did not match the names of the subdirectories of the "
                                 f"target directory. Expected: {found}, but received: {list(class_names)}")
            found = list(class_names)
        roots = [(os.path.join(directory, c), i) for i, c in enumerate(found)]
    else:
        found, roots = [], [(directory, None)]
    paths, ints = [], []
    for root, label in roots:
        for dirpath, _, files in sorted(os.walk(root)):
            for name in sorted(files):
                if name.lower().endswith(extensions):
                    path = os.path.join(dirpath, name)
                    if os.path.isfile(path) and not os.path.islink(path):
                        paths.append(path)
                        ints.append(label)
    if labels not in ("inferred", None):
        ints = list(labels)
        if len(ints) != len(paths):
            raise ValueError(f"Expected the lengths of `labels` to match the number of files in the target directory. "
                             f"len(labels) is {len(ints)} while we found {len(paths)} files in directory {directory}.")
    return paths, ints, found


def _labels(ints, label_mode, num_classes):
    if label_mode is None:
        return None
    ints = np.asarray(ints, np.int32)
    if label_mode == "int":
        return ints
    if label_mode == "binary":
        if num_classes != 2:
            raise ValueError(f'When passing `label_mode="binary"`, there must be exactly 2 class_names. Received: '
                             f"class_names with {num_classes} classes")
        return ints.astype(np.float32)[:, None]
    if label_mode == "categorical":
        return np.eye(num_classes, dtype=np.float32)[ints]
    raise ValueError(f'`label_mode` argument must be one of "int", "categorical", "binary", or None. Received: '
                     f"label_mode={label_mode!r}")


def _split(paths, ints, validation_split, subset, shuffle, seed):
    order = np.arange(len(paths))
    if shuffle or validation_split:
        if validation_split and seed is None:
            raise ValueError("If using `validation_split` and shuffling the data, you must provide a `seed` argument, "
                             "to make sure that there is no overlap between the training and validation subset.")
        np.random.RandomState(seed if seed is not None else np.random.randint(1 << 30)).shuffle(order)
    if not validation_split:
        return {None: order}
    if not 0 < validation_split < 1:
        raise ValueError(f"`validation_split` must be between 0 and 1, received: {validation_split}")
    n_val = int(validation_split * len(paths))
    parts = {"training": order[:len(order) - n_val], "validation": order[len(order) - n_val:]}
    if subset not in ("training", "validation", "both"):
        raise ValueError(f'`subset` must be either "training", "validation" or "both", received: {subset!r}')
    return parts if subset == "both" else {subset: parts[subset]}


def _datasets(parts, load, labels, batch_size, class_names):
    from tensorweave.data import Dataset
    out = []
    for order in parts.values():
        x = load(order)
        ds = Dataset.from_tensor_slices(x if labels is None else (x, labels[order]))
        if batch_size is not None:
            ds = ds.batch(batch_size)
        ds.class_names = list(class_names)
        out.append(ds)
    return out[0] if len(out) == 1 else tuple(out)


def image_dataset_from_directory(directory, labels="inferred", label_mode="int", class_names=None,
                                 color_mode="rgb", batch_size=32, image_size=(256, 256), shuffle=True, seed=None,
                                 validation_split=None, subset=None, interpolation="bilinear", follow_links=False,
                                 crop_to_aspect_ratio=False, **kwargs):
    """Images of ``directory/<class>/*`` as a Dataset of ``(images, labels)`` batches (float32,
    ``image_size``, 1/3/4 channels for "grayscale"/"rgb"/"rgba"), ``class_names`` attached."""
    from tensorweave.keras.utils.image_utils import load_img
    channels = {"grayscale": 1, "rgb": 3, "rgba": 4}
    if color_mode not in channels:
        raise ValueError(f'`color_mode` must be one of {{"rgb", "rgba", "grayscale"}}. Received: color_mode={color_mode}')
    paths, ints, names = _index_directory(directory, labels, _IMAGE_EXTENSIONS, class_names)
    label_array = _labels(ints, label_mode if labels is not None else None, len(names))
    parts = _split(paths, ints, validation_split, subset, shuffle, seed)

    def load(order):
        from tensorweave.keras.utils.image_utils import img_to_array
        h, w = image_size
        arrays = [img_to_array(load_img(paths[i], color_mode=color_mode, target_size=(h, w),
                                        interpolation=interpolation)) for i in order]
        return np.stack(arrays) if arrays else np.zeros((0, h, w, channels[color_mode]), np.float32)
    return _datasets(parts, load, label_array, batch_size, names)


def text_dataset_from_directory(directory, labels="inferred", label_mode="int", class_names=None, batch_size=32,
                                max_length=None, shuffle=True, seed=None, validation_split=None, subset=None,
                                follow_links=False, **kwargs):
    """The ``.txt`` files of ``directory/<class>/`` as a Dataset of ``(strings, labels)`` batches."""
    paths, ints, names = _index_directory(directory, labels, (".txt",), class_names)
    label_array = _labels(ints, label_mode if labels is not None else None, len(names))
    parts = _split(paths, ints, validation_split, subset, shuffle, seed)

    def load(order):
        texts = []
        for i in order:
            with open(paths[i], encoding="utf-8", errors="replace") as f:
                text = f.read()
            texts.append(text[:max_length] if max_length is not None else text)
        return np.array(texts, dtype=object)
    return _datasets(parts, load, label_array, batch_size, names)
