"""Compatibility namespaces: ``tensorweave.compat.v1`` holds TF1-only names."""
from tensorweave.compat import v1  # noqa: F401
