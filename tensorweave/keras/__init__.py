"""Keras-style API (``tw.keras``): optimizers for now; layers and models come next."""
from tensorweave.keras import optimizers  # noqa: F401
