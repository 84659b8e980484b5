"""``tw.sparse`` and ``tw.SparseTensor``: see :mod:`tensorweave.sparse.sparse_ops`."""
from tensorweave.sparse.sparse_ops import *  # noqa: F401,F403
from tensorweave.sparse.sparse_ops import __all__ as _ops_all
from tensorweave.sparse.sparse_tensor import SparseTensor, SparseTensorValue  # noqa: F401

__all__ = ["SparseTensor", "SparseTensorValue"] + _ops_all
