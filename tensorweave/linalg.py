"""``tw.linalg``: matrix products, einsum, tensordot, norms, diagonals, inverse, determinant,
decompositions (cholesky, qr, svd, eigh) and solvers.

>>> import tensorweave as tw
>>> tw.linalg.det(tw.linalg.eye(3)).numpy().item()
1.0
"""
from tensorweave.ops.linalg_ops import *  # noqa: F401,F403
from tensorweave.ops.linalg_ops import (adjoint, cross, det, diag, diag_part, inv,  # noqa: F401
                                        matrix_transpose, set_diag, trace)
from tensorweave.ops.decomposition_ops import *  # noqa: F401,F403
from tensorweave.ops.indexing_ops import eye  # noqa: F401
from tensorweave.ops.math_ops import matmul  # noqa: F401
from tensorweave.ops.nn_ops import l2_normalize  # noqa: F401
from tensorweave.linear_operator import *  # noqa: F401,F403
from tensorweave.ops.matrix_function_ops import *  # noqa: F401,F403

from tensorweave.core.signatures import check_namespace as _check_namespace  # noqa: E402
_check_namespace(globals())
