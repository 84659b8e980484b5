"""``tw.strings``: TensorFlow's string ops (see :mod:`tensorweave.ops.string_ops`)."""
from tensorweave.ops.string_ops import *  # noqa: F401,F403
from tensorweave.ops.string_ops import __all__  # noqa: F401
