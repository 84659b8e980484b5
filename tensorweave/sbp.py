"""``tw.sbp``: the layouts of a global tensor over one mesh axis, in OneFlow's vocabulary.

``split(axis)`` (each rank holds a balanced slice along ``axis``), ``broadcast`` (each rank
holds the whole), ``partial_sum`` (each rank holds a partial value; the logical value is
their sum), and ``partial_max``/``partial_min``. Immutable values printing ``S(0)``, ``B``,
``P``; a tensor's SBP is a tuple with one entry per mesh axis.

>>> import tensorweave as tw
>>> tw.sbp.split(1), tw.sbp.broadcast, tw.sbp.partial_sum, tw.sbp.partial_max
(S(1), B, P, P(max))
"""
from tensorweave.core.sbp import B as broadcast
from tensorweave.core.sbp import P as partial_sum
from tensorweave.core.sbp import SBP, Partial, Split, Signature
from tensorweave.core.sbp import Broadcast  # noqa: F401 - the class of ``broadcast``
import tensorweave.distribute  # noqa: F401 - global tensors exist once SBPs do


def split(axis):
    """``S(axis)``: each rank holds its balanced slice along tensor axis ``axis``."""
    return Split(axis)


partial_max = Partial("max")
partial_min = Partial("min")

__all__ = ["split", "broadcast", "partial_sum", "partial_max", "partial_min", "SBP", "Signature"]
