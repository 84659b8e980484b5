"""Data files that ship inside installed packages, found without importing those packages
(importing scikit-learn alone takes over a second)."""
import importlib.util
import os


def package_file(package, *parts):
    """Path of a file inside an installed package, or None when the package or file is absent."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        p = os.path.join(root, *parts)
        if os.path.isfile(p):
            return p
    return None


def read_csv_ints(path, columns, dtype):
    """A comma-separated file of small non-negative integers (gzip or plain) as an array."""
    import gzip

    import numpy as np
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        try:
            arr = np.loadtxt(f, delimiter=",", dtype=np.int64, ndmin=2)
        except ValueError as e:
            raise ValueError(f"{path}: not a CSV file of integers ({e})") from None
    if arr.shape[1] != columns:
        raise ValueError(f"{path}: expected {columns} columns per row, found {arr.shape[1]}")
    info = np.iinfo(dtype)
    if arr.size and (arr.min() < info.min or arr.max() > info.max):
        raise ValueError(f"{path}: values outside {info.min}..{info.max}")
    return arr.astype(dtype)
