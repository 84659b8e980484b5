"""Keras backend utilities: float type, unique layer names, session reset.

>>> from tensorweave.keras import backend
>>> backend.clear_session()
>>> backend.unique_name("dense"), backend.unique_name("dense")
('dense', 'dense_1')
"""
import re
import threading

_lock = threading.Lock()
_name_counts = {}
_floatx = ["float32"]
_epsilon = [1e-7]


def floatx():
    return _floatx[0]


def set_floatx(value):
    _floatx[0] = str(value)


def epsilon():
    return _epsilon[0]


def set_epsilon(value):
    _epsilon[0] = float(value)


def unique_name(base):
    """``base``, then ``base_1``, ``base_2`` ... (per process, reset by clear_session)."""
    with _lock:
        n = _name_counts.get(base, 0)
        _name_counts[base] = n + 1
    return base if n == 0 else f"{base}_{n}"


def snake_case(name):
    name = name.lstrip("_") or "layer"  # scope names may not start with "_"
    s = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub(r"([a-z])([A-Z])", r"\1_\2", s).lower()


def clear_session():
    """Resets layer-name counters (as Keras' clear_session)."""
    with _lock:
        _name_counts.clear()
