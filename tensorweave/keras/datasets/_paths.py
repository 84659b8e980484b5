"""Where loaders look for files given by path: an explicit ``path``, else the directory named
by ``$TENSORWEAVE_DATASETS`` (or ``$KERAS_DATASETS_DIR``). Either may be the dataset's own folder
or a folder holding it under the dataset's name (like ``../shared/datasets`` with ``mnist/``).
Nothing is ever downloaded."""
import os

ENV_VARS = ("TENSORWEAVE_DATASETS", "KERAS_DATASETS_DIR")


def _roots(path):
    if path is not None:
        return [os.fspath(path)]
    return [os.environ[v] for v in ENV_VARS if os.environ.get(v)]


def find_dir(name, path, has_files):
    """The directory holding dataset ``name``: ``has_files(dir)`` says whether one does."""
    roots = _roots(path)
    if not roots:
        raise FileNotFoundError(
            f"{name}: no path given and neither ${ENV_VARS[0]} nor ${ENV_VARS[1]} is set. Hint: pass the "
            f"directory that holds the {name} files (nothing is downloaded).")
    tried = []
    for root in roots:
        for d in (root, os.path.join(root, name)):
            tried.append(d)
            if os.path.isdir(d) and has_files(d):
                return d
    raise FileNotFoundError(f"{name}: no {name} files found in " + " or ".join(tried))


def first_existing(directory, names):
    """The first of ``names`` present in ``directory`` (full path), else None."""
    for n in names:
        p = os.path.join(directory, n)
        if os.path.isfile(p):
            return p
    return None


def split_indices(labels, test_split, seed):
    """A fixed stratified split: each class gives ``round(count * test_split)`` examples, chosen
    by a seeded permutation, to the test set. Both index arrays come out shuffled (so a file
    sorted by class does not give class-sorted training data)."""
    import numpy as np
    if not 0.0 <= test_split < 1.0:
        raise ValueError(f"test_split must be in [0, 1), got {test_split}")
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(labels))
    is_test = np.zeros(len(labels), bool)
    for c in np.unique(labels):
        members = perm[labels[perm] == c]
        is_test[members[:int(round(len(members) * test_split))]] = True
    # Shuffled again: in `perm` order each class's test picks come early, which would leave the
    # start of the training order short of some classes.
    train, test = np.flatnonzero(~is_test), np.flatnonzero(is_test)
    return train[rng.permutation(len(train))], test[rng.permutation(len(test))]
