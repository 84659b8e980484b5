"""Kernels: implementations of ops per device type. ``cpu/`` runs on NumPy (the reference
every other kernel is tested against)."""
from tensorweave.core.registry import register_kernel  # noqa: F401
