"""``tw.experimental``: ``dlpack`` interop."""
from tensorweave.experimental import dlpack  # noqa: F401
