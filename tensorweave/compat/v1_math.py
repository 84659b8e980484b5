"""``tf.compat.v1.math``: ``tw.math`` with TF1's argument names (``reduction_indices``, ``keep_dims``,
``dimension``, ``dim``; see ``v1_aliases``)."""
from tensorweave.math import *  # noqa: F401,F403
from tensorweave.compat.v1_aliases import install as _install

_install({"math": globals()})
