"""Top-level TF2 framework names of issue 16 that the TF-differential cases cannot express (custom
gradients registered by users, graph-only Hessians, user subclasses of LinearOperator...)."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core.registry import register_kernel, register_op


def test_hessians_in_a_graph_equal_the_analytic_hessian():
    g = tw.Graph()
    with g.as_default():
        x = tw.constant([1.0, 2.0, -1.0], tw.float64)
        y = tw.reduce_sum(x * x * x) + x[0] * x[1]
        (h,) = tw.hessians(y, x)
    with tw.Session(graph=g) as s:
        got = s.run(h)
    want = np.diag(6 * np.array([1.0, 2.0, -1.0]))
    want[0, 1] = want[1, 0] = 1.0
    np.testing.assert_allclose(got, want)


def test_register_gradient_and_no_gradient_on_a_user_op():
    register_op("KopsCube", infer=lambda inputs, attrs: (inputs[0].shape, inputs[0].dtype))
    register_kernel("KopsCube")(lambda x: x ** 3)
    from tensorweave.core.dispatch import execute
    from tensorweave.core.registry import get_op

    @tw.RegisterGradient("KopsCube")
    def _cube_grad(op, g):
        return g * 3.0 * op.inputs[0] * op.inputs[0]

    x = tw.constant([2.0, -1.0])
    with tw.GradientTape() as t:
        t.watch(x)
        y = execute(get_op("KopsCube"), [x], {})
    np.testing.assert_allclose(t.gradient(y, x).numpy(), [12.0, 3.0])
    tw.no_gradient("KopsCube")
    with tw.GradientTape() as t:
        t.watch(x)
        y = execute(get_op("KopsCube"), [x], {})
    assert t.gradient(y, x) is None
    with pytest.raises(TypeError, match="op_type must be a string"):
        tw.RegisterGradient(3)


def test_a_user_linear_operator_gets_every_method_from_its_dense_matrix():
    class Ones(tw.linalg.LinearOperator):
        """The all-ones n x n matrix plus n times the identity (a user's operator)."""

        def __init__(self, n):
            self.n = n
            super().__init__(tw.float64, is_self_adjoint=True, is_positive_definite=True, is_square=True)

        def _shape(self):
            return tw.TensorShape([self.n, self.n])

        def _to_dense(self):
            return tw.ones([self.n, self.n], tw.float64) + self.n * tw.eye(self.n, dtype=tw.float64)

    op = Ones(3)
    dense = np.ones((3, 3)) + 3 * np.eye(3)
    rhs = np.arange(6.0).reshape(3, 2)
    np.testing.assert_allclose(op.solve(rhs).numpy(), np.linalg.solve(dense, rhs))
    np.testing.assert_allclose(op.log_abs_determinant().numpy(), np.log(np.linalg.det(dense)))
    np.testing.assert_allclose(op.cholesky().to_dense().numpy(), np.linalg.cholesky(dense))
    np.testing.assert_allclose(np.sort(op.eigvals().numpy()), np.linalg.eigvalsh(dense))
    np.testing.assert_allclose(op.inverse().matvec([1.0, 2.0, 3.0]).numpy(), np.linalg.solve(dense, [1.0, 2.0, 3.0]))
    assert op.adjoint() is op and op.name == "Ones" and op.tensor_rank == 2
    with pytest.raises(NotImplementedError, match="_to_dense"):
        tw.linalg.LinearOperator(tw.float32).to_dense()


def test_dtypes_namespace_and_static_values():
    assert tw.dtypes.double is tw.float64 and tw.dtypes.half is tw.float16 and tw.dtypes.bool is tw.bool
    assert isinstance(tw.float32, tw.DType) and tw.dtypes.as_dtype("int8") is tw.int8
    assert tw.resource.name == "resource" and tw.variant.name == "variant"
    np.testing.assert_array_equal(tw.saturate_cast(tw.constant([-3, 300]), tw.uint8).numpy(), [0, 255])
    np.testing.assert_array_equal(tw.get_static_value(tw.constant([1, 2])), [1, 2])
    with tw.Graph().as_default():
        p = tw.placeholder(tw.float32, [2])
        assert tw.get_static_value(p) is None
        with tw.init_scope():
            c = tw.constant(1.0)
        assert tw.get_static_value(c) == 1.0


def test_assert_in_a_graph_raises_when_run():
    g = tw.Graph()
    with g.as_default():
        x = tw.placeholder(tw.float32, [2])
        check = tw.assert_greater(x, 0.0, message="must be positive")
        with tw.control_dependencies([check]):
            y = tw.identity(x)
    with tw.Session(graph=g) as s:
        np.testing.assert_array_equal(s.run(y, {x: [1.0, 2.0]}), [1.0, 2.0])
        with pytest.raises(tw.errors.InvalidArgumentError, match="must be positive"):
            s.run(y, {x: [1.0, -2.0]})
