"""A thin product's weight in the transposed layout: ``x @ w`` (``x`` of a few rows, ``w`` a
variable's ``k x n`` storage) as MKL's NT call on ``w``'s transpose kept beside it.

Why: a batch-1 layer reads its whole weight for one row, so it runs at memory speed, and MKL's
threaded call reads the ``n x k`` layout (each output a contiguous dot product: PyTorch's ``Linear``
keeps its weights so) with less CPU than the ``k x n`` one: the mlp's two thin layers took 98 µs of
the calling thread (191 of the process) against 137 (265) (2 threads, load 5, issue 18 pred23).
Whether it is faster on a machine is timed with the thin class's other candidates
(``gemm._thin_timing``, backend ``"mklT"``), only for a variable's weight: the transpose is kept
in ``core/derived.py``, dropped when the variable is updated in place, and a new array stored by an
assignment is transposed afresh on its first product. Any other operand (a user's array, which
may change in place between calls) has no such candidate.

>>> import numpy as np
>>> from tensorweave.core import derived
>>> w = np.arange(6.0, dtype=np.float32).reshape(2, 3)
>>> applies(w)                   # not a variable's storage
False
>>> derived.track(w); applies(w) == ON, transposed(w).shape, transposed(w) is transposed(w)
(True, (3, 2), True)
"""
import os

import numpy as np

from tensorweave.core import derived

#: the derived-value key of the transpose
KEY = "thin_layout.T"
#: ``TW_THIN_LAYOUT=0``: no transposed candidate (the ``thincold:``/``threads:`` classes, as before
#: issue 18 pred23: an A/B switch, ``bench_models.py --tw-variants noflip``)
ON = os.environ.get("TW_THIN_LAYOUT", "1") != "0"


def applies(b):
    """Whether ``b`` (a thin product's ``k x n`` operand) is a variable's storage, whose transpose
    is kept until the variable changes (and the layout is on)."""
    return ON and derived.tracked(b)


def transposed(b):
    """``b``'s transpose (:func:`transpose`): kept while ``b`` is an unmodified variable storage,
    made afresh otherwise."""
    return derived.get(b, KEY, transpose)


def transpose(b):
    """``b``'s transpose, C-contiguous and read-only, made now (a timing's candidate: kept only
    once chosen, by :func:`transposed`)."""
    t = np.ascontiguousarray(b.T)
    t.flags.writeable = False           # shared by every product of the weight
    return t
