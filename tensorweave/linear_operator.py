"""``tw.linalg.LinearOperator`` and its structured subclasses (TF's ``tf.linalg.LinearOperator*``).

A linear operator is a (batch of) matrices known by its structure, not by its entries: a diagonal,
a Kronecker product, a low-rank update... The base class gives every method (``matmul``, ``solve``,
``determinant``, ``log_abs_determinant``, ``diag_part``, ``trace``, ``to_dense``, ``adjoint``,
``inverse``, ``cholesky``, ``eigvals``, ``cond``...) from ``_to_dense()`` with the dense ops, so a
subclass (ours or a user's) needs only its shape and its dense matrix; the structured subclasses
override what their structure makes cheaper (a diagonal solves by division). Everything is composed
of tensor ops, so gradients reach the operators' parameters and graphs work.

>>> import tensorweave as tw
>>> op = tw.linalg.LinearOperatorDiag([1.0, 2.0])
>>> op.matvec([3.0, 4.0]).numpy(), op.log_abs_determinant().numpy().round(4)
(array([3., 8.], dtype=float32), np.float32(0.6931))
"""
import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.shape import TensorShape
from tensorweave.core.tensor import Tensor
from tensorweave.module import Module
from tensorweave.ops import array_ops as A
from tensorweave.ops import complex_ops as C
from tensorweave.ops import decomposition_ops as D
from tensorweave.ops import indexing_ops as I
from tensorweave.ops import linalg_ops as L
from tensorweave.ops import math_ops as M
from tensorweave.ops import reduce_ops as R

__all__ = ["LinearOperator", "LinearOperatorFullMatrix", "LinearOperatorDiag", "LinearOperatorIdentity",
           "LinearOperatorScaledIdentity", "LinearOperatorZeros", "LinearOperatorLowerTriangular",
           "LinearOperatorComposition", "LinearOperatorAdjoint", "LinearOperatorInversion",
           "LinearOperatorBlockDiag", "LinearOperatorBlockLowerTriangular", "LinearOperatorKronecker",
           "LinearOperatorLowRankUpdate", "LinearOperatorPermutation", "LinearOperatorToeplitz",
           "LinearOperatorTridiag", "LinearOperatorHouseholder", "LinearOperatorCirculant",
           "LinearOperatorCirculant2D", "LinearOperatorCirculant3D"]


def _adj(x):
    return L.matrix_transpose(x, conjugate=True)


class LinearOperator(Module):
    """Base class: subclasses define ``_shape()`` (a TensorShape ``batch + [rows, cols]``) and
    ``_to_dense()``; the rest has dense defaults that subclasses may override."""

    def __init__(self, dtype, graph_parents=None, is_non_singular=None, is_self_adjoint=None,
                 is_positive_definite=None, is_square=None, name=None, parameters=None):
        if is_positive_definite and is_non_singular is False:
            raise ValueError("A positive definite matrix is always non-singular.")
        super().__init__(name=name or type(self).__name__)
        self._dtype = _dt.as_dtype(dtype) if dtype is not None else None
        self._is_non_singular = is_non_singular
        self._is_self_adjoint = is_self_adjoint
        self._is_positive_definite = is_positive_definite
        self._is_square_hint = is_square
        self._parameters = dict(parameters or {})
        if is_square is False and (is_self_adjoint or is_positive_definite):
            raise ValueError("A non-square operator cannot be self-adjoint or positive definite.")

    # ---- what a subclass provides ----
    def _shape(self):
        raise NotImplementedError(f"{type(self).__name__} must define _shape()")

    def _to_dense(self):
        raise NotImplementedError(f"{type(self).__name__} must define _to_dense()")

    # ---- properties ----
    @property
    def dtype(self):
        return self._dtype

    @property
    def parameters(self):
        return dict(self._parameters)

    @property
    def graph_parents(self):
        return []

    @property
    def shape(self):
        return self._shape()

    def shape_tensor(self, name="shape_tensor"):
        s = self.shape
        if s.is_fully_defined():
            return A.constant(np.asarray(s.as_list(), np.int32))
        return A.shape(self.to_dense())

    @property
    def batch_shape(self):
        return self.shape[:-2]

    def batch_shape_tensor(self, name="batch_shape_tensor"):
        return self.shape_tensor()[:-2]

    @property
    def tensor_rank(self):
        return self.shape.rank

    def tensor_rank_tensor(self, name="tensor_rank_tensor"):
        return A.constant(np.int32(self.shape.rank))

    @property
    def domain_dimension(self):
        return self.shape[-1]

    def domain_dimension_tensor(self, name="domain_dimension_tensor"):
        return self.shape_tensor()[-1]

    @property
    def range_dimension(self):
        return self.shape[-2]

    def range_dimension_tensor(self, name="range_dimension_tensor"):
        return self.shape_tensor()[-2]

    @property
    def is_non_singular(self):
        return self._is_non_singular

    @property
    def is_self_adjoint(self):
        return self._is_self_adjoint

    @property
    def is_positive_definite(self):
        return self._is_positive_definite

    @property
    def is_square(self):
        rows, cols = self.shape[-2], self.shape[-1]
        if self._is_square_hint is not None:
            return self._is_square_hint
        if rows is None or cols is None:
            return None
        return rows == cols

    # ---- the dense defaults ----
    def to_dense(self, name="to_dense"):
        return self._to_dense()

    def _matmul(self, x, adjoint=False, adjoint_arg=False):
        return M.matmul(self.to_dense(), x, adjoint_a=adjoint, adjoint_b=adjoint_arg)

    def matmul(self, x, adjoint=False, adjoint_arg=False, name="matmul"):
        """``A @ x`` (``A^H`` with ``adjoint``, ``x^H`` with ``adjoint_arg``); an operator ``x`` gives a
        :class:`LinearOperatorComposition`."""
        if isinstance(x, LinearOperator):
            left = self.adjoint() if adjoint else self
            right = x.adjoint() if adjoint_arg else x
            return LinearOperatorComposition([left, right])
        x = self._arg(x)
        self._check_inner(x, adjoint, adjoint_arg, "matmul", True)
        return self._matmul(x, adjoint, adjoint_arg)

    def __matmul__(self, other):
        return self.matmul(other)

    def matvec(self, x, adjoint=False, name="matvec"):
        x = self._arg(x)
        return self.matmul(A.expand_dims(x, -1), adjoint=adjoint)[..., 0]

    def _solve(self, rhs, adjoint=False, adjoint_arg=False):
        rhs = _adj(rhs) if adjoint_arg else rhs
        return D.solve(self.to_dense(), rhs, adjoint=adjoint)

    def solve(self, rhs, adjoint=False, adjoint_arg=False, name="solve"):
        """``A^{-1} rhs`` (an operator ``rhs`` gives the composition with :meth:`inverse`)."""
        if self.is_non_singular is False:
            raise NotImplementedError("Exact solve not implemented for an operator that is expected to be singular.")
        if self.is_square is False:
            raise NotImplementedError("Exact solve not implemented for an operator that is expected to not be square.")
        if isinstance(rhs, LinearOperator):
            left = self.adjoint() if adjoint else self
            right = rhs.adjoint() if adjoint_arg else rhs
            return LinearOperatorComposition([left.inverse(), right])
        rhs = self._arg(rhs)
        self._check_inner(rhs, adjoint, adjoint_arg, "solve", False)
        return self._solve(rhs, adjoint, adjoint_arg)

    def solvevec(self, rhs, adjoint=False, name="solve"):
        rhs = self._arg(rhs)
        return self.solve(A.expand_dims(rhs, -1), adjoint=adjoint)[..., 0]

    def _determinant(self):
        return L.det(self.to_dense())

    def determinant(self, name="det"):
        self._need_square("determinant")
        return self._determinant()

    def _log_abs_determinant(self):
        return D.slogdet(self.to_dense())[1]

    def log_abs_determinant(self, name="log_abs_det"):
        self._need_square("log_abs_determinant")
        return self._log_abs_determinant()

    def _diag_part(self):
        return L.diag_part(self.to_dense())

    def diag_part(self, name="diag_part"):
        return self._diag_part()

    def trace(self, name="trace"):
        return R.reduce_sum(self.diag_part(), -1)

    def add_to_tensor(self, x, name="add_to_tensor"):
        return M.add(self.to_dense(), self._arg(x))

    def adjoint(self, name="adjoint"):
        if self.is_self_adjoint is True:
            return self
        return LinearOperatorAdjoint(self)

    H = property(adjoint)

    def inverse(self, name="inverse"):
        if self.is_square is False:
            raise ValueError("Cannot take the Inverse: This operator represents a non square matrix.")
        if self.is_non_singular is False:
            raise ValueError("Cannot take the Inverse: This operator represents a singular matrix.")
        return LinearOperatorInversion(self)

    def cholesky(self, name="cholesky"):
        if not (self.is_self_adjoint and self.is_positive_definite):
            raise ValueError("Cannot take the Cholesky decomposition: Not a positive definite self adjoint matrix.")
        return LinearOperatorLowerTriangular(D.cholesky(self.to_dense()), is_non_singular=True,
                                             is_self_adjoint=False, is_square=True)

    def eigvals(self, name="eigvals"):
        if not self.is_self_adjoint:
            raise NotImplementedError("Only self-adjoint matrices are supported.")
        return D.eigvalsh(self.to_dense())

    def cond(self, name="cond"):
        s = D.svd(self.to_dense(), compute_uv=False)
        return R.reduce_max(s, -1) / R.reduce_min(s, -1)

    def assert_non_singular(self, name="assert_non_singular"):
        return _assert(R.reduce_all(M.not_equal(self._log_abs_determinant(), -np.inf)),
                       "Singular operator: the determinant is zero.")

    def assert_positive_definite(self, name="assert_positive_definite"):
        return _assert(R.reduce_all(M.greater(D.eigvalsh(self.to_dense()), 0)), "Operator is not positive definite.")

    def assert_self_adjoint(self, name="assert_self_adjoint"):
        d = self.to_dense()
        return _assert(R.reduce_all(M.equal(d, _adj(d))), "Operator is not self-adjoint.")

    # ---- helpers ----
    def _arg(self, x):
        if isinstance(x, LinearOperator):
            return x
        if not isinstance(x, Tensor):
            x = convert_to_tensor(np.asarray(x, self.dtype.np_dtype) if self.dtype is not None
                                  and not hasattr(x, "dtype") else x)
        if self.dtype is not None and x.dtype != self.dtype:
            raise TypeError(f"{self.name}: the argument has dtype {x.dtype.name} but the operator is "
                            f"{self.dtype.name}. Hint: tw.cast the argument")
        return x

    def _check_inner(self, x, adjoint, adjoint_arg, what, is_matmul):
        if x.shape.rank is None or x.shape.rank < 2:
            raise ValueError(f"{self.name}.{what}: the argument must be at least 2-D, got shape {x.shape}")
        inner = self.shape[-2] if adjoint else self.shape[-1]
        if not is_matmul:
            inner = self.shape[-1] if adjoint else self.shape[-2]
        arg = x.shape[-1] if adjoint_arg else x.shape[-2]
        if inner is not None and arg is not None and inner != arg:
            raise ValueError(f"{self.name}.{what}: the operator of shape {self.shape} (adjoint={adjoint}) does not "
                             f"fit an argument of shape {x.shape} (adjoint_arg={adjoint_arg})")

    def _need_square(self, what):
        if self.is_square is False:
            raise NotImplementedError(f"Determinant not implemented for an operator that is expected to not be "
                                      f"square ({what}).")

    def __repr__(self):
        return f"<tw.linalg.{type(self).__name__} '{self.name}' shape={self.shape} dtype={self.dtype.name}>"


def _assert(cond, message):
    from tensorweave.core import errors
    from tensorweave.core.graph import constant_value
    v = constant_value(cond) if not hasattr(cond, "numpy") else cond.numpy()
    if v is not None and not bool(v):
        raise errors.InvalidArgumentError(message)
    from tensorweave.ops.control_flow_ops import no_op
    return no_op()


def _float_tensor(x, name):
    t = convert_to_tensor(x)
    if t.dtype.is_integer or t.dtype == _dt.bool_:
        raise TypeError(f"{name}: the operator needs a float or complex tensor, got {t.dtype.name}")
    return t


def _broadcast_batch(*shapes):
    out = TensorShape([])
    for s in shapes:
        out = TensorShape(np.broadcast_shapes(tuple(d if d is not None else 1 for d in out.as_list()),
                                              tuple(d if d is not None else 1 for d in s.as_list())))
    return out


class LinearOperatorFullMatrix(LinearOperator):
    """The operator of a dense ``[..., M, N]`` matrix."""

    def __init__(self, matrix, is_non_singular=None, is_self_adjoint=None, is_positive_definite=None,
                 is_square=None, name="LinearOperatorFullMatrix"):
        self._matrix = _float_tensor(matrix, name)
        if self._matrix.shape.rank is not None and self._matrix.shape.rank < 2:
            raise ValueError(f"{name}: the matrix must be at least 2-D, got shape {self._matrix.shape}")
        super().__init__(self._matrix.dtype, None, is_non_singular, is_self_adjoint, is_positive_definite, is_square,
                         name, {"matrix": matrix})

    def _shape(self):
        return self._matrix.shape

    def _to_dense(self):
        return self._matrix


class LinearOperatorDiag(LinearOperator):
    """``diag(d)`` for ``d`` of shape ``[..., N]``: products and solves are elementwise."""

    def __init__(self, diag, is_non_singular=None, is_self_adjoint=None, is_positive_definite=None, is_square=None,
                 name="LinearOperatorDiag"):
        self._diag = _float_tensor(diag, name)
        if not self._diag.dtype.is_complex:
            if is_self_adjoint is False:
                raise ValueError("A real diagonal operator is always self adjoint.")
            is_self_adjoint = True
        if is_square is False:
            raise ValueError("Only square diagonal operators currently supported.")
        super().__init__(self._diag.dtype, None, is_non_singular, is_self_adjoint, is_positive_definite, True, name,
                         {"diag": diag})

    @property
    def diag(self):
        return self._diag

    def _shape(self):
        s = self._diag.shape
        return s.concatenate([s[-1]]) if s.rank is not None else TensorShape(None)

    def _to_dense(self):
        return L.diag(self._diag)

    def _d(self, adjoint):
        return C.conj(self._diag) if adjoint and self._diag.dtype.is_complex else self._diag

    def _matmul(self, x, adjoint=False, adjoint_arg=False):
        x = _adj(x) if adjoint_arg else x
        return A.expand_dims(self._d(adjoint), -1) * x

    def _solve(self, rhs, adjoint=False, adjoint_arg=False):
        rhs = _adj(rhs) if adjoint_arg else rhs
        return rhs / A.expand_dims(self._d(adjoint), -1)

    def _determinant(self):
        return R.reduce_prod(self._diag, -1)

    def _log_abs_determinant(self):
        return R.reduce_sum(M.log(M.abs(self._diag)), -1)

    def _diag_part(self):
        return self._diag * A.ones_like(self._diag)


def _batch_rows(batch_shape):
    return [] if batch_shape is None else [int(d) for d in np.ravel(batch_shape)]


class LinearOperatorIdentity(LinearOperator):
    """The ``num_rows x num_rows`` identity (batched by ``batch_shape``)."""

    def __init__(self, num_rows, batch_shape=None, dtype=None, is_non_singular=True, is_self_adjoint=True,
                 is_positive_definite=True, is_square=True, assert_proper_shapes=False,
                 name="LinearOperatorIdentity"):
        if not (is_non_singular and is_self_adjoint and is_positive_definite and is_square):
            raise ValueError("An identity operator is always non-singular, self-adjoint, positive definite and "
                             "square.")
        self._n = int(num_rows)
        if self._n < 0:
            raise ValueError(f"Argument num_rows must be non-negative, got {num_rows}")
        self._batch = _batch_rows(batch_shape)
        super().__init__(dtype or _dt.float32, None, True, True, True, True, name,
                         {"num_rows": num_rows, "batch_shape": batch_shape, "dtype": dtype})

    def _shape(self):
        return TensorShape(self._batch + [self._n, self._n])

    def _to_dense(self):
        return I.eye(self._n, batch_shape=self._batch or None, dtype=self.dtype)

    def _matmul(self, x, adjoint=False, adjoint_arg=False):
        x = _adj(x) if adjoint_arg else x
        if not self._batch:
            return x
        return x + A.zeros(self._batch + [1, 1], self.dtype)

    def _solve(self, rhs, adjoint=False, adjoint_arg=False):
        return self._matmul(rhs, adjoint, adjoint_arg)

    def add_to_tensor(self, x, name="add_to_tensor"):
        return M.add(self._arg(x), I.eye(self._n, dtype=self.dtype))

    def _determinant(self):
        return A.ones(self._batch, self.dtype)

    def _log_abs_determinant(self):
        return A.zeros(self._batch, self.dtype)

    def _diag_part(self):
        return A.ones(self._batch + [self._n], self.dtype)


class LinearOperatorScaledIdentity(LinearOperator):
    """``multiplier * I`` (``multiplier`` of shape ``batch_shape``)."""

    def __init__(self, num_rows, multiplier, is_non_singular=None, is_self_adjoint=None, is_positive_definite=None,
                 is_square=True, assert_proper_shapes=False, name="LinearOperatorScaledIdentity"):
        self._n = int(num_rows)
        self._mult = _float_tensor(multiplier, name)
        if not is_square:
            raise ValueError("A ScaledIdentity operator is always square.")
        if not self._mult.dtype.is_complex and is_self_adjoint is None:
            is_self_adjoint = True
        super().__init__(self._mult.dtype, None, is_non_singular, is_self_adjoint, is_positive_definite, True, name,
                         {"num_rows": num_rows, "multiplier": multiplier})

    @property
    def multiplier(self):
        return self._mult

    def _shape(self):
        return self._mult.shape.concatenate([self._n, self._n])

    def _m(self, adjoint):
        return C.conj(self._mult) if adjoint and self._mult.dtype.is_complex else self._mult

    def _to_dense(self):
        return A.expand_dims(A.expand_dims(self._mult, -1), -1) * I.eye(self._n, dtype=self.dtype)

    def _matmul(self, x, adjoint=False, adjoint_arg=False):
        x = _adj(x) if adjoint_arg else x
        return A.expand_dims(A.expand_dims(self._m(adjoint), -1), -1) * x

    def _solve(self, rhs, adjoint=False, adjoint_arg=False):
        rhs = _adj(rhs) if adjoint_arg else rhs
        return rhs / A.expand_dims(A.expand_dims(self._m(adjoint), -1), -1)

    def _determinant(self):
        return M.pow(self._mult, M.cast(self._n, self.dtype))

    def _log_abs_determinant(self):
        return M.cast(self._n, self._mult.dtype) * M.log(M.abs(self._mult))

    def _diag_part(self):
        return A.expand_dims(self._mult, -1) * A.ones([self._n], self.dtype)


class LinearOperatorZeros(LinearOperator):
    """The ``num_rows x num_columns`` zero matrix."""

    def __init__(self, num_rows, num_columns=None, batch_shape=None, dtype=None, is_non_singular=False,
                 is_self_adjoint=True, is_positive_definite=False, is_square=True, assert_proper_shapes=False,
                 name="LinearOperatorZeros"):
        if is_non_singular or is_positive_definite:
            raise ValueError("A zeros operator is always singular and never positive definite.")
        self._rows = int(num_rows)
        self._cols = self._rows if num_columns is None else int(num_columns)
        self._batch = _batch_rows(batch_shape)
        square = self._rows == self._cols
        if is_square and not square:
            raise ValueError(f"LinearOperatorZeros initialized as is_square=True, but got num_rows({self._rows}) != "
                             f"num_columns({self._cols})")
        super().__init__(dtype or _dt.float32, None, False, is_self_adjoint, False, is_square, name,
                         {"num_rows": num_rows, "num_columns": num_columns, "batch_shape": batch_shape,
                          "dtype": dtype})

    def _shape(self):
        return TensorShape(self._batch + [self._rows, self._cols])

    def _to_dense(self):
        return A.zeros(self._batch + [self._rows, self._cols], self.dtype)

    def _matmul(self, x, adjoint=False, adjoint_arg=False):
        x = _adj(x) if adjoint_arg else x
        rows = self._cols if adjoint else self._rows
        return A.zeros_like(x[..., :1, :]) * A.zeros(self._batch + [rows, 1], self.dtype)

    def _determinant(self):
        return A.zeros(self._batch, self.dtype)

    def _log_abs_determinant(self):
        return M.log(A.zeros(self._batch, self.dtype))

    def _diag_part(self):
        return A.zeros(self._batch + [min(self._rows, self._cols)], self.dtype)


class LinearOperatorLowerTriangular(LinearOperator):
    """The lower triangle of ``tril`` (entries above the diagonal are ignored)."""

    def __init__(self, tril, is_non_singular=None, is_self_adjoint=None, is_positive_definite=None, is_square=None,
                 name="LinearOperatorLowerTriangular"):
        if is_square is False:
            raise ValueError("Only square lower triangular operators supported at this time.")
        self._tril = D.band_part(_float_tensor(tril, name), -1, 0)
        super().__init__(self._tril.dtype, None, is_non_singular, is_self_adjoint, is_positive_definite, True, name,
                         {"tril": tril})

    def _shape(self):
        return self._tril.shape

    def _to_dense(self):
        return self._tril

    def _solve(self, rhs, adjoint=False, adjoint_arg=False):
        rhs = _adj(rhs) if adjoint_arg else rhs
        return D.triangular_solve(self._tril, rhs, lower=True, adjoint=adjoint)

    def _determinant(self):
        return R.reduce_prod(L.diag_part(self._tril), -1)

    def _log_abs_determinant(self):
        return R.reduce_sum(M.log(M.abs(L.diag_part(self._tril))), -1)


def _same_dtype(operators, name):
    dtypes = {op.dtype for op in operators}
    if len(dtypes) != 1:
        raise TypeError(f"{name}: all operators must have the same dtype, got {sorted(d.name for d in dtypes)}")
    return operators[0].dtype


def _joined_name(operators, sep):
    return sep.join(op.name for op in operators)


class LinearOperatorComposition(LinearOperator):
    """``A1 @ A2 @ ... @ Ak``."""

    def __init__(self, operators, is_non_singular=None, is_self_adjoint=None, is_positive_definite=None,
                 is_square=None, name=None):
        operators = list(operators)
        if not operators:
            raise ValueError(f"Expected a non-empty list of operators. Found: {operators}")
        dtype = _same_dtype(operators, "LinearOperatorComposition")
        for a, b in zip(operators[:-1], operators[1:]):
            if a.shape[-1] is not None and b.shape[-2] is not None and a.shape[-1] != b.shape[-2]:
                raise ValueError(f"LinearOperatorComposition: operators of shapes {a.shape} and {b.shape} do not "
                                 "compose")
        if all(op.is_non_singular for op in operators) and is_non_singular is None:
            is_non_singular = True
        self._ops = operators
        super().__init__(dtype, None, is_non_singular, is_self_adjoint, is_positive_definite, is_square,
                         name or _joined_name(operators, "_o_"), {"operators": operators})

    @property
    def operators(self):
        return list(self._ops)

    def _shape(self):
        batch = _broadcast_batch(*[op.batch_shape for op in self._ops])
        return batch.concatenate([self._ops[0].shape[-2], self._ops[-1].shape[-1]])

    def _to_dense(self):
        out = self._ops[-1].to_dense()
        for op in reversed(self._ops[:-1]):
            out = op.matmul(out)
        return out

    def _matmul(self, x, adjoint=False, adjoint_arg=False):
        x = _adj(x) if adjoint_arg else x
        ops = self._ops if adjoint else self._ops[::-1]
        for op in ops:
            x = op.matmul(x, adjoint=adjoint)
        return x

    def _solve(self, rhs, adjoint=False, adjoint_arg=False):
        rhs = _adj(rhs) if adjoint_arg else rhs
        ops = self._ops[::-1] if adjoint else self._ops
        for op in ops:
            rhs = op.solve(rhs, adjoint=adjoint)
        return rhs

    def _determinant(self):
        out = self._ops[0].determinant()
        for op in self._ops[1:]:
            out = out * op.determinant()
        return out

    def _log_abs_determinant(self):
        out = self._ops[0].log_abs_determinant()
        for op in self._ops[1:]:
            out = out + op.log_abs_determinant()
        return out


class LinearOperatorAdjoint(LinearOperator):
    """The adjoint (conjugate transpose) of ``operator``."""

    def __init__(self, operator, is_non_singular=None, is_self_adjoint=None, is_positive_definite=None,
                 is_square=None, name=None):
        self._op = operator
        hints = [operator.is_non_singular if is_non_singular is None else is_non_singular,
                 operator.is_self_adjoint if is_self_adjoint is None else is_self_adjoint,
                 operator.is_positive_definite if is_positive_definite is None else is_positive_definite,
                 operator.is_square if is_square is None else is_square]
        super().__init__(operator.dtype, None, *hints, name=name or operator.name + "_adjoint",
                         parameters={"operator": operator})

    @property
    def operator(self):
        return self._op

    def _shape(self):
        s = self._op.shape
        return s[:-2].concatenate([s[-1], s[-2]])

    def _to_dense(self):
        return _adj(self._op.to_dense())

    def _matmul(self, x, adjoint=False, adjoint_arg=False):
        return self._op.matmul(x, adjoint=not adjoint, adjoint_arg=adjoint_arg)

    def _solve(self, rhs, adjoint=False, adjoint_arg=False):
        return self._op.solve(rhs, adjoint=not adjoint, adjoint_arg=adjoint_arg)

    def _determinant(self):
        d = self._op.determinant()
        return C.conj(d) if d.dtype.is_complex else d

    def _log_abs_determinant(self):
        return self._op.log_abs_determinant()


class LinearOperatorInversion(LinearOperator):
    """The inverse of ``operator``: products are its solves and solves its products."""

    def __init__(self, operator, is_non_singular=None, is_self_adjoint=None, is_positive_definite=None,
                 is_square=None, name=None):
        if operator.is_non_singular is False or is_non_singular is False:
            raise ValueError("operator and supplied hints must have `is_non_singular` equal to `True` or `None`.")
        if operator.is_square is False or is_square is False:
            raise ValueError("operator and supplied hints must have `is_square` equal to `True` or `None`.")
        self._op = operator
        hints = [operator.is_non_singular if is_non_singular is None else is_non_singular,
                 operator.is_self_adjoint if is_self_adjoint is None else is_self_adjoint,
                 operator.is_positive_definite if is_positive_definite is None else is_positive_definite,
                 operator.is_square if is_square is None else is_square]
        super().__init__(operator.dtype, None, *hints, name=name or operator.name + "_inv",
                         parameters={"operator": operator})

    @property
    def operator(self):
        return self._op

    def _shape(self):
        return self._op.shape

    def _to_dense(self):
        # the operator's own solve (structured) applied to the identity, as TF
        n = self._op.shape[-1]
        return self._op.solve(I.eye(n, batch_shape=self.batch_shape.as_list() or None, dtype=self.dtype))

    def _matmul(self, x, adjoint=False, adjoint_arg=False):
        return self._op.solve(x, adjoint=adjoint, adjoint_arg=adjoint_arg)

    def _solve(self, rhs, adjoint=False, adjoint_arg=False):
        return self._op.matmul(rhs, adjoint=adjoint, adjoint_arg=adjoint_arg)

    def _determinant(self):
        return 1.0 / self._op.determinant()

    def _log_abs_determinant(self):
        return -self._op.log_abs_determinant()


def _blocks_dense(rows, dtype, batch):
    """A dense matrix from a grid of dense blocks (None = zeros of the right size)."""
    heights = [next(b for b in row if b is not None).shape[-2] for row in rows]
    widths = [next(rows[i][j] for i in range(len(rows)) if rows[i][j] is not None).shape[-1]
              for j in range(len(rows[0]))]
    out_rows = []
    for i, row in enumerate(rows):
        cells = []
        for j, b in enumerate(row):
            if b is None:
                b = A.zeros(batch + [heights[i], widths[j]], dtype)
            else:
                b = b + A.zeros(batch + [1, 1], dtype) if batch else b
            cells.append(b)
        out_rows.append(A.concat(cells, -1))
    return A.concat(out_rows, -2)


class LinearOperatorBlockDiag(LinearOperator):
    """The block-diagonal matrix of square ``operators``."""

    def __init__(self, operators, is_non_singular=None, is_self_adjoint=None, is_positive_definite=None,
                 is_square=True, name=None):
        operators = list(operators)
        if not operators:
            raise ValueError(f"Expected a non-empty list of operators. Found: {operators}")
        if not is_square:
            raise ValueError("A block diagonal operator is always square.")
        dtype = _same_dtype(operators, "LinearOperatorBlockDiag")
        if all(op.is_non_singular for op in operators) and is_non_singular is None:
            is_non_singular = True
        if all(op.is_self_adjoint for op in operators) and is_self_adjoint is None:
            is_self_adjoint = True
        if all(op.is_positive_definite for op in operators) and is_positive_definite is None:
            is_positive_definite = True
        self._ops = operators
        super().__init__(dtype, None, is_non_singular, is_self_adjoint, is_positive_definite, True,
                         name or _joined_name(operators, "_ds_"), {"operators": operators})

    @property
    def operators(self):
        return list(self._ops)

    def _shape(self):
        batch = _broadcast_batch(*[op.batch_shape for op in self._ops])
        return batch.concatenate([sum(op.shape[-2] for op in self._ops), sum(op.shape[-1] for op in self._ops)])

    def _to_dense(self):
        k = len(self._ops)
        rows = [[self._ops[i].to_dense() if i == j else None for j in range(k)] for i in range(k)]
        return _blocks_dense(rows, self.dtype, self.batch_shape.as_list())

    def _determinant(self):
        out = self._ops[0].determinant()
        for op in self._ops[1:]:
            out = out * op.determinant()
        return out

    def _log_abs_determinant(self):
        out = self._ops[0].log_abs_determinant()
        for op in self._ops[1:]:
            out = out + op.log_abs_determinant()
        return out

    def _diag_part(self):
        batch = self.batch_shape.as_list()
        return A.concat([op.diag_part() + (A.zeros(batch + [1], self.dtype) if batch else 0)
                         for op in self._ops], -1)


class LinearOperatorBlockLowerTriangular(LinearOperator):
    """A block lower-triangular matrix: ``operators[i]`` lists the blocks of row ``i`` up to the
    diagonal (``i + 1`` operators); the diagonal blocks are square."""

    def __init__(self, operators, is_non_singular=None, is_self_adjoint=None, is_positive_definite=None,
                 is_square=None, name="LinearOperatorBlockLowerTriangular"):
        rows = [list(r) for r in operators]
        if not rows:
            raise ValueError(f"Expected a non-empty list of operators. Found: {operators}")
        for i, r in enumerate(rows):
            if len(r) != i + 1:
                raise ValueError(f"Argument `operators[{i}]` must contain `{i + 1}` blocks. Received: {len(r)}")
        dtype = _same_dtype([op for r in rows for op in r], name)
        if all(r[-1].is_non_singular for r in rows) and is_non_singular is None:
            is_non_singular = True
        self._rows = rows
        super().__init__(dtype, None, is_non_singular, is_self_adjoint, is_positive_definite, True, name,
                         {"operators": operators})

    @property
    def operators(self):
        return [list(r) for r in self._rows]

    def _shape(self):
        ops = [op for r in self._rows for op in r]
        n = sum(r[-1].shape[-1] for r in self._rows)
        return _broadcast_batch(*[op.batch_shape for op in ops]).concatenate([n, n])

    def _to_dense(self):
        k = len(self._rows)
        grid = [[self._rows[i][j].to_dense() if j <= i else None for j in range(k)] for i in range(k)]
        # the zero blocks take heights from their row's diagonal and widths from their column's diagonal
        batch = self.batch_shape.as_list()
        out_rows = []
        for i in range(k):
            cells = []
            for j in range(k):
                b = grid[i][j]
                if b is None:
                    b = A.zeros(batch + [self._rows[i][i].shape[-2], self._rows[j][j].shape[-1]], self.dtype)
                elif batch:
                    b = b + A.zeros(batch + [1, 1], self.dtype)
                cells.append(b)
            out_rows.append(A.concat(cells, -1))
        return A.concat(out_rows, -2)

    def _determinant(self):
        out = self._rows[0][0].determinant()
        for r in self._rows[1:]:
            out = out * r[-1].determinant()
        return out

    def _log_abs_determinant(self):
        out = self._rows[0][0].log_abs_determinant()
        for r in self._rows[1:]:
            out = out + r[-1].log_abs_determinant()
        return out


def _kron(a, b):
    """Kronecker product of the last two dims: ``out[..., i*p + k, j*q + l] = a[..., i, j] * b[..., k, l]``."""
    m, n = a.shape[-2], a.shape[-1]
    p, q = b.shape[-2], b.shape[-1]
    prod = A.expand_dims(A.expand_dims(a, -2), -1) * A.expand_dims(A.expand_dims(b, -3), -2)   # [..., m, p, n, q]
    batch = A.shape(prod)[:-4]
    return A.reshape(prod, A.concat([batch, A.constant(np.array([m * p, n * q], np.int32))], 0))


class LinearOperatorKronecker(LinearOperator):
    """The Kronecker product ``A1 ⊗ A2 ⊗ ... ⊗ Ak``."""

    def __init__(self, operators, is_non_singular=None, is_self_adjoint=None, is_positive_definite=None,
                 is_square=None, name=None):
        operators = list(operators)
        if not operators:
            raise ValueError(f"Expected a non-empty list of operators. Found: {operators}")
        dtype = _same_dtype(operators, "LinearOperatorKronecker")
        if all(op.is_non_singular for op in operators) and is_non_singular is None:
            is_non_singular = True
        if all(op.is_self_adjoint for op in operators) and is_self_adjoint is None:
            is_self_adjoint = True
        self._ops = operators
        super().__init__(dtype, None, is_non_singular, is_self_adjoint, is_positive_definite, is_square,
                         name or _joined_name(operators, "_x_"), {"operators": operators})

    @property
    def operators(self):
        return list(self._ops)

    def _shape(self):
        rows = int(np.prod([op.shape[-2] for op in self._ops]))
        cols = int(np.prod([op.shape[-1] for op in self._ops]))
        return _broadcast_batch(*[op.batch_shape for op in self._ops]).concatenate([rows, cols])

    def _to_dense(self):
        out = self._ops[0].to_dense()
        for op in self._ops[1:]:
            out = _kron(out, op.to_dense())
        return out

    def _determinant(self):
        n = self.shape[-1]
        out = None
        for op in self._ops:
            d = M.pow(op.determinant(), M.cast(n // op.shape[-1], self.dtype))
            out = d if out is None else out * d
        return out

    def _log_abs_determinant(self):
        n = self.shape[-1]
        out = None
        for op in self._ops:
            d = op.log_abs_determinant() * M.cast(n // op.shape[-1], self.dtype)
            out = d if out is None else out + d
        return out


class LinearOperatorLowRankUpdate(LinearOperator):
    """``base_operator + U D V^H`` (``D = diag(diag_update)``, the identity when None; ``V = U`` when None)."""

    def __init__(self, base_operator, u, diag_update=None, v=None, is_diag_update_positive=None,
                 is_non_singular=None, is_self_adjoint=None, is_positive_definite=None, is_square=None,
                 name="LinearOperatorLowRankUpdate"):
        self._base = base_operator
        self._u = _float_tensor(u, name)
        self._v = self._u if v is None else _float_tensor(v, name)
        self._diag = None if diag_update is None else _float_tensor(diag_update, name)
        for t in (self._u, self._v, self._diag):
            if t is not None and t.dtype != base_operator.dtype:
                raise TypeError(f"{name}: u, v and diag_update must have the base operator's dtype "
                                f"{base_operator.dtype.name}, got {t.dtype.name}")
        if v is None and is_self_adjoint is None and base_operator.is_self_adjoint:
            is_self_adjoint = True
        super().__init__(base_operator.dtype, None, is_non_singular, is_self_adjoint, is_positive_definite,
                         is_square, name, {"base_operator": base_operator, "u": u, "diag_update": diag_update,
                                           "v": v})

    @property
    def base_operator(self):
        return self._base

    @property
    def u(self):
        return self._u

    @property
    def v(self):
        return self._v

    @property
    def diag_update(self):
        return self._diag

    def _shape(self):
        return self._base.shape

    def _to_dense(self):
        ud = self._u if self._diag is None else self._u * A.expand_dims(self._diag, -2)
        return self._base.to_dense() + M.matmul(ud, self._v, adjoint_b=True)


class LinearOperatorPermutation(LinearOperator):
    """The permutation matrix ``P[i, perm[i]] = 1``: ``(P x)[i] = x[perm[i]]``."""

    def __init__(self, perm, dtype=_dt.float32, is_non_singular=None, is_self_adjoint=None,
                 is_positive_definite=None, is_square=None, name="LinearOperatorPermutation"):
        self._perm = convert_to_tensor(perm)
        if not self._perm.dtype.is_integer:
            raise TypeError(f"{name}: perm must be integer, got {self._perm.dtype.name}")
        if is_non_singular is False:
            raise ValueError("A Permutation operator is always non-singular.")
        if is_square is False:
            raise ValueError("A Permutation operator is always square.")
        super().__init__(dtype, None, True, is_self_adjoint, is_positive_definite, True, name,
                         {"perm": perm, "dtype": dtype})

    @property
    def perm(self):
        return self._perm

    def _shape(self):
        s = self._perm.shape
        return s.concatenate([s[-1]])

    def _to_dense(self):
        return I.one_hot(self._perm, self._perm.shape[-1], dtype=self.dtype)

    def _matmul(self, x, adjoint=False, adjoint_arg=False):
        x = _adj(x) if adjoint_arg else x
        if adjoint or self._perm.shape.rank != 1:
            return M.matmul(self.to_dense(), x, adjoint_a=adjoint)
        return A.gather(x, self._perm, axis=x.shape.rank - 2)

    def _determinant(self):
        return M.cast(_perm_sign(self._perm), self.dtype)

    def _log_abs_determinant(self):
        return A.zeros(self.batch_shape.as_list(), self.dtype)


def _perm_sign(perm):
    """The sign of each permutation (+1 or -1): the parity of the number of inversions."""
    p = M.cast(perm, _dt.int64)
    inversions = R.reduce_sum(M.cast(M.greater(A.expand_dims(p, -1), A.expand_dims(p, -2)), _dt.int64)
                              * M.cast(D.band_part(A.ones_like(A.expand_dims(p, -1) * A.expand_dims(p, -2)), 0, -1)
                                       - L.diag(A.ones_like(p)), _dt.int64), [-2, -1])
    return 1 - 2 * (inversions % 2)


class LinearOperatorToeplitz(LinearOperator):
    """The Toeplitz matrix with first column ``col`` and first row ``row`` (``row[0]`` is ignored:
    the diagonal is ``col[0]``)."""

    def __init__(self, col, row, is_non_singular=None, is_self_adjoint=None, is_positive_definite=None,
                 is_square=None, name="LinearOperatorToeplitz"):
        self._col = _float_tensor(col, name)
        self._row = _float_tensor(row, name)
        if self._col.dtype != self._row.dtype:
            raise TypeError(f"{name}: col and row must have the same dtype, got {self._col.dtype.name} and "
                            f"{self._row.dtype.name}")
        if is_square is False:
            raise ValueError("Only square Toeplitz operators currently supported.")
        super().__init__(self._col.dtype, None, is_non_singular, is_self_adjoint, is_positive_definite, True, name,
                         {"col": col, "row": row})

    @property
    def col(self):
        return self._col

    @property
    def row(self):
        return self._row

    def _shape(self):
        n = self._col.shape[-1]
        batch = _broadcast_batch(self._col.shape[:-1], self._row.shape[:-1])
        return batch.concatenate([n, n])

    def _to_dense(self):
        n = self._col.shape[-1]
        batch = self.batch_shape.as_list()
        col = self._col + (A.zeros(batch + [1], self.dtype) if batch else 0)
        row = self._row + (A.zeros(batch + [1], self.dtype) if batch else 0)
        # values[k] for k = i - j + n - 1: the row reversed (j > i), then the column (i >= j)
        values = A.concat([I.reverse(row[..., 1:], [-1]), col], -1)
        idx = np.arange(n)[:, None] - np.arange(n)[None, :] + n - 1
        return A.gather(values, idx.astype(np.int32), axis=len(batch))


class LinearOperatorTridiag(LinearOperator):
    """A tridiagonal matrix from ``diagonals`` in TF's formats: ``"compact"`` ``[..., 3, N]`` (super-,
    main and subdiagonal; ``super[..., -1]`` and ``sub[..., 0]`` unused), ``"sequence"`` (the three as a
    list) or ``"matrix"`` (the tridiagonal band of a full matrix)."""

    def __init__(self, diagonals, diagonals_format="compact", is_non_singular=None, is_self_adjoint=None,
                 is_positive_definite=None, is_square=None, name="LinearOperatorTridiag"):
        if diagonals_format not in ("compact", "sequence", "matrix"):
            raise ValueError(f"Diagonals Format must be one of compact, matrix, sequence, got : {diagonals_format}")
        if diagonals_format == "sequence":
            diags = [_float_tensor(d, name) for d in diagonals]
            dtype = diags[0].dtype
        else:
            diags = _float_tensor(diagonals, name)
            dtype = diags.dtype
        self._diags, self._format = diags, diagonals_format
        if is_square is False:
            raise ValueError("Only square tridiagonal operators are supported.")
        super().__init__(dtype, None, is_non_singular, is_self_adjoint, is_positive_definite, True, name,
                         {"diagonals": diagonals, "diagonals_format": diagonals_format})

    @property
    def diagonals(self):
        return self._diags

    @property
    def diagonals_format(self):
        return self._format

    def _shape(self):
        if self._format == "matrix":
            return self._diags.shape
        s = self._diags[1].shape if self._format == "sequence" else self._diags.shape[:-2].concatenate(
            self._diags.shape[-1:])
        return s.concatenate([s[-1]])

    def _to_dense(self):
        if self._format == "matrix":
            return self._diags   # as TF: the matrix as given; products and solves use its band only
        if self._format == "sequence":
            sup, main, sub = self._diags
        else:
            sup, main, sub = self._diags[..., 0, :], self._diags[..., 1, :], self._diags[..., 2, :]
        n = self.shape[-1]
        upper = L.diag(sup)                                  # sup[i] at (i, i), shifted to (i, i + 1)
        lower = L.diag(sub)
        shift_up = np.eye(n, k=1)
        shift_down = np.eye(n, k=-1)
        up = M.matmul(upper, A.constant(shift_up.astype(self.dtype.np_dtype)))
        down = M.matmul(lower, A.constant(shift_down.astype(self.dtype.np_dtype)))
        return L.diag(main) + up + down


    def _band(self):
        return D.band_part(self._diags, 1, 1) if self._format == "matrix" else self._to_dense()

    def _matmul(self, x, adjoint=False, adjoint_arg=False):
        return M.matmul(self._band(), x, adjoint_a=adjoint, adjoint_b=adjoint_arg)

    def _solve(self, rhs, adjoint=False, adjoint_arg=False):
        rhs = _adj(rhs) if adjoint_arg else rhs
        return D.solve(self._band(), rhs, adjoint=adjoint)


class LinearOperatorHouseholder(LinearOperator):
    """The reflection ``I - 2 v v^H / (v^H v)`` across the hyperplane orthogonal to ``reflection_axis``."""

    def __init__(self, reflection_axis, is_non_singular=None, is_self_adjoint=None, is_positive_definite=None,
                 is_square=None, name="LinearOperatorHouseholder"):
        self._v = _float_tensor(reflection_axis, name)
        if is_self_adjoint is False:
            raise ValueError("A Householder operator is always self adjoint.")
        if is_non_singular is False:
            raise ValueError("A Householder operator is always non-singular.")
        if is_positive_definite is True:
            raise ValueError("A Householder operator is always non-positive definite.")
        if is_square is False:
            raise ValueError("A Householder operator is always square.")
        super().__init__(self._v.dtype, None, True, True, False, True, name, {"reflection_axis": reflection_axis})

    @property
    def reflection_axis(self):
        return self._v

    def _shape(self):
        s = self._v.shape
        return s.concatenate([s[-1]])

    def _to_dense(self):
        v = A.expand_dims(self._v, -1)
        n = self._v.shape[-1]
        norm = M.matmul(v, v, adjoint_a=True)
        return I.eye(n, dtype=self.dtype) - 2.0 * M.matmul(v, v, adjoint_b=True) / norm

    def _determinant(self):
        return -A.ones(self.batch_shape.as_list(), self.dtype)

    def _log_abs_determinant(self):
        return A.zeros(self.batch_shape.as_list(), self.dtype)


class _BaseCirculant(LinearOperator):
    """A (block-)circulant operator given by its spectrum over the last ``rank`` dimensions:
    ``A x = ifftn(spectrum * fftn(x))``; its dense form is ``c[(i - j) mod n]`` with ``c = ifftn(spectrum)``
    (per dimension for the block forms)."""

    _rank = 1

    def __init__(self, spectrum, input_output_dtype=_dt.complex64, is_non_singular=None, is_self_adjoint=None,
                 is_positive_definite=None, is_square=True, name=None):
        name = name or type(self).__name__       # LinearOperatorCirculant, ...2D, ...3D as in TF
        spec = convert_to_tensor(spectrum)
        if spec.dtype.is_integer:
            raise TypeError(f"{name}: spectrum must be float or complex, got {spec.dtype.name}")
        if not is_square:
            raise ValueError("A circulant operator is always square.")
        cdtype = _dt.complex128 if spec.dtype in (_dt.float64, _dt.complex128) else _dt.complex64
        if not spec.dtype.is_complex:   # a real spectrum makes a Hermitian operator
            if is_self_adjoint is False:
                raise ValueError("A real spectrum always corresponds to a self-adjoint operator.")
            is_self_adjoint = True
        self._spectrum = spec
        self._cspec = M.cast(spec, cdtype) if not spec.dtype.is_complex else spec
        super().__init__(input_output_dtype, None, is_non_singular, is_self_adjoint, is_positive_definite, True,
                         name, {"spectrum": spectrum, "input_output_dtype": input_output_dtype})

    @property
    def spectrum(self):
        return self._spectrum

    def _block(self):
        return self._spectrum.shape[-self._rank:].as_list()

    def _shape(self):
        n = int(np.prod(self._block()))
        return self._spectrum.shape[:-self._rank].concatenate([n, n])

    def _to_dense(self):
        from tensorweave import signal
        ifft = {1: signal.ifft, 2: signal.ifft2d, 3: signal.ifft3d}[self._rank]
        c = ifft(self._cspec)
        dims = self._block()
        n = int(np.prod(dims))
        # index of c for entry (i, j): per block dimension (i_d - j_d) mod n_d, flattened
        coords = np.stack(np.unravel_index(np.arange(n), dims), -1)         # [n, rank]
        diff = (coords[:, None, :] - coords[None, :, :]) % np.asarray(dims)
        idx = np.ravel_multi_index(tuple(diff[..., k] for k in range(self._rank)), dims).astype(np.int32)
        batch = self._spectrum.shape[:-self._rank].as_list()
        flat = A.reshape(c, batch + [n]) if batch else A.reshape(c, [n])
        dense = A.gather(flat, idx, axis=len(batch))
        if self.dtype.is_complex:
            return M.cast(dense, self.dtype)
        return M.cast(C.real(dense), self.dtype)


class LinearOperatorCirculant(_BaseCirculant):
    _rank = 1


class LinearOperatorCirculant2D(_BaseCirculant):
    _rank = 2


class LinearOperatorCirculant3D(_BaseCirculant):
    _rank = 3
