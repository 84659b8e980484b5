"""``keras.utils.split_dataset``: two ``tw.data.Dataset``\\ s from arrays, a tuple/list/dict of
arrays or a finite dataset, split by count (int) or fraction (float) with Keras' rounding.

>>> import numpy as np
>>> left, right = split_dataset(np.arange(10), left_size=0.8)
>>> [int(x) for x in right]
[8, 9]
"""
import numpy as np


def _sizes(left, right, total):
    for value, side in ((left, "left_size"), (right, "right_size")):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"Invalid `{side}` type. Expected int or float, got {type(value).__name__}")
        if (isinstance(value, int) and not 0 < value < total) or (isinstance(value, float) and not 0 < value < 1):
            raise ValueError(f"`{side}` should be either a positive integer and smaller than {total} or a float "
                             f"within the range `[0, 1]`. Received: {side}={value}")
    if left is None and right is None:
        left = 0.5
    if isinstance(left, float) and isinstance(right, float) and left + right > 1:
        raise ValueError("The sum of `left_size` and `right_size` is greater than 1. It must be less than or equal "
                         "to 1.")
    left = round(left * total) if isinstance(left, float) else left
    right = round(right * total) if isinstance(right, float) else right
    left = total - right if left is None else left
    right = total - left if right is None else right
    if left + right > total:
        raise ValueError(f"The sum of `left_size` and `right_size` should be smaller than the {total}. Received: "
                         f"left_size + right_size = {left + right}and total_length = {total}")
    for size, side in ((left, "left"), (right, "right")):
        if size == 0:
            raise ValueError(f"With `dataset` of length={total}, `left_size`={left} and `right_size`={right}. "
                             f"Resulting {side} side dataset split will be empty. Adjust any of the aforementioned "
                             "parameters")
    return int(left), int(right)


def split_dataset(dataset, left_size=None, right_size=None, shuffle=False, seed=None, preferred_backend=None):
    """``(left, right)`` datasets holding the first ``left_size`` and the last ``right_size``
    samples (after a seeded shuffle when ``shuffle``)."""
    import tensorweave as tw
    import tensorweave.data  # noqa: F401
    from tensorweave.core import nest
    if isinstance(dataset, tw.data.Dataset):
        samples = list(dataset.as_numpy_iterator())
        flat = [np.stack(parts) for parts in zip(*[nest.flatten(s) for s in samples])] if samples else []
        structure = samples[0] if samples else None
    else:
        structure = dataset if not isinstance(dataset, list) else tuple(dataset)
        flat = [np.asarray(a) for a in nest.flatten(structure)] if nest.is_nested(structure) else [
            np.asarray(structure)]
    if not flat:
        raise ValueError("split_dataset: the dataset is empty")
    total = len(flat[0])
    if any(len(a) != total for a in flat):
        raise ValueError(f"split_dataset: all arrays must have the same length; got {[len(a) for a in flat]}")
    left, right = _sizes(left_size, right_size, total)
    order = np.random.default_rng(seed).permutation(total) if shuffle else np.arange(total)

    def part(idx):
        arrays = [a[idx] for a in flat]
        packed = nest.pack_sequence_as(structure, arrays) if nest.is_nested(structure) else arrays[0]
        return tw.data.Dataset.from_tensor_slices(packed)
    return part(order[:left]), part(order[total - right:])
