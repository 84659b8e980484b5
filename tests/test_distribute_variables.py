"""Global variables (distribute/variables.py): made per shard, assignments, optimizer slots, errors."""
import threading

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core.sbp import B, P, S

P2 = tw.placement("cpu", ranks=[0, 1])
P3 = tw.placement("cpu", ranks=[0, 1, 2])


def test_an_initializer_runs_per_shard_on_each_rank_never_whole():
    calls = []

    def init(shape, dtype=None):
        calls.append((tuple(shape), threading.current_thread().name))
        return np.full(shape, 2.0, np.float32)
    v = tw.Variable(init, shape=(5, 4), placement=P3, sbp=tw.sbp.split(0))
    assert sorted(s for s, _ in calls) == [(1, 4), (2, 4), (2, 4)]
    assert {t for _, t in calls} == {f"tw-rank{r}" for r in range(3)}
    assert v.shape == tw.TensorShape([5, 4]) and v.sbp == (S(0),) and v.is_global
    np.testing.assert_array_equal(v.numpy(), np.full((5, 4), 2.0))
    assert "sbp=(S(0),)" in repr(v)


def test_a_partial_variable_keeps_the_value_on_coordinate_zero():
    v = tw.Variable(tw.keras.initializers.Ones(), shape=(2,), placement=P2, sbp=tw.sbp.partial_sum)
    assert [t.numpy().tolist() for t in v.to_local()] == [[1.0, 1.0], [0.0, 0.0]]
    v.assign_add(tw.constant([1.0, 2.0]))
    np.testing.assert_array_equal(v.numpy(), [2.0, 3.0])


@pytest.mark.parametrize("sbp", [S(0), S(1), B, P])
def test_assignments_on_every_layout(sbp):
    value = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    v = tw.Variable(value, placement=P2, sbp=sbp)
    v.assign_sub(tw.ones([3, 4]))
    np.testing.assert_array_equal(v.numpy(), value - 1)
    g = tw.constant(value * 2).to_global(placement=P2, sbp=tw.sbp.split(1))
    v.assign(g)                                             # boxed to the variable's layout
    np.testing.assert_array_equal(v.numpy(), value * 2)
    assert v.sbp == (sbp,)
    np.testing.assert_array_equal((v + 1.0).numpy(), value * 2 + 1)      # reads are global tensors
    assert v.read_value().sbp == (sbp,)


def test_variables_from_global_tensors_and_variables():
    x = tw.constant(np.ones((4, 2), np.float32)).to_global(placement=P2, sbp=tw.sbp.broadcast)
    v = tw.Variable(x, placement=P2, sbp=tw.sbp.split(0))
    assert [t.shape.as_list() for t in v.to_local()] == [[2, 2], [2, 2]]
    w = tw.Variable(tw.Variable(np.ones(3, np.float32)), placement=P3, sbp=tw.sbp.split(0))
    assert [t.shape.as_list() for t in w.to_local()] == [[1], [1], [1]]


@pytest.mark.parametrize("optimizer", ["SGD", "Adam"])
def test_optimizer_slots_take_the_variable_layout(optimizer):
    v = tw.Variable(np.ones((4, 3), np.float32), placement=P2, sbp=tw.sbp.split(0))
    opt = getattr(tw.keras.optimizers, optimizer)(0.1, **({"momentum": 0.9} if optimizer == "SGD" else {}))
    g = tw.constant(np.full((4, 3), 0.5, np.float32)).to_global(placement=P2, sbp=tw.sbp.partial_sum)
    opt.apply_gradients([(g, v)])
    ref = tw.Variable(np.ones((4, 3), np.float32))
    getattr(tw.keras.optimizers, optimizer)(0.1, **({"momentum": 0.9} if optimizer == "SGD" else {})).apply_gradients(
        [(tw.constant(np.full((4, 3), 0.5, np.float32)), ref)])
    np.testing.assert_allclose(v.numpy(), ref.numpy(), rtol=1e-6)
    slots = [s for s in opt.variables if getattr(s, "is_global", False)]
    assert slots and all(s.sbp == (S(0),) and s.placement == P2 for s in slots)
    assert all([t.shape.as_list() for t in s.to_local()] == [[2, 3], [2, 3]] for s in slots)


def test_ops_on_a_split_variable_without_a_fitting_rule_are_refused():
    from tensorweave.core.registry import registered_ops
    if "DistTestVarPeek" not in registered_ops():   # an op of the test's own on a handle, without a rule
        tw.register_op("DistTestVarPeek", infer=lambda i, a: (a["shape"], a["dtype"]))
        tw.register_kernel("DistTestVarPeek", "CPU")(lambda var, shape, dtype: np.array(var._read()))
    v = tw.Variable(np.ones((4, 3), np.float32), placement=P2, sbp=tw.sbp.split(0))
    attrs = {"shape": v.shape, "dtype": v.dtype}
    with pytest.raises(tw.errors.UnimplementedError, match=r"'DistTestVarPeek' on a variable laid out as \(S\(0\),\)"):
        tw.raw_op("DistTestVarPeek", [v.handle], attrs)
    b = tw.Variable(np.arange(4.0, dtype=np.float32), placement=P2, sbp=tw.sbp.broadcast)
    assert tw.raw_op("DistTestVarPeek", [b.handle], {"shape": b.shape, "dtype": b.dtype}).numpy().tolist() == \
        [0.0, 1.0, 2.0, 3.0]
    assert b.sparse_read([0, 3]).numpy().tolist() == [0.0, 3.0]


def test_a_local_variable_in_a_global_op_is_an_error():
    v = tw.Variable(np.ones(2, np.float32))
    g = tw.constant([1.0, 2.0]).to_global(placement=P2, sbp=tw.sbp.broadcast)
    with pytest.raises(tw.errors.InvalidArgumentError, match="local variable's handle met global tensors"):
        v.assign(g)
