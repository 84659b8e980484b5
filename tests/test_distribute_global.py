"""Global tensors in eager mode: the public API, ops through the global interpreter, errors."""
import warnings

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core import dispatch
from tensorweave.core.sbp import B, P, Partial, S
from tensorweave.distribute import interpreter
from tensorweave.distribute.layout import assemble, split_to_pieces

P2 = tw.placement("cpu", ranks=[0, 1])
P3 = tw.placement("cpu", ranks=[0, 1, 2])
MESH = tw.placement("cpu", ranks=[[0, 1], [2, 3]])
RNG = np.random.default_rng(0)


def _rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def test_api_values_print_and_round_trip():
    assert (tw.sbp.split(0), tw.sbp.broadcast, tw.sbp.partial_sum, tw.sbp.partial_max) == (S(0), B, P, Partial("max"))
    assert repr(P2) == 'placement(type="cpu", ranks=[0, 1])'
    v = _rand(5, 3)
    for sbp in (tw.sbp.split(0), tw.sbp.split(1), tw.sbp.broadcast, tw.sbp.partial_sum):
        x = tw.constant(v).to_global(placement=P3, sbp=sbp)
        assert x.is_global and not tw.constant(v).is_global
        assert x.shape == tw.TensorShape([5, 3]) and x.dtype == tw.float32 and x.placement == P3
        assert x.sbp == (sbp,)
        np.testing.assert_array_equal(x.numpy(), v)
        locals_ = x.to_local()
        assert [t.shape.as_list() for t in locals_] == [list(p.shape) for p in split_to_pieces(v, P3, (sbp,))]
        y = tw.distribute.from_local(locals_, P3, sbp)
        np.testing.assert_array_equal(y.numpy(), v)
    x = tw.constant(v).to_global(placement=P2, sbp=tw.sbp.split(0))
    text = repr(x)
    assert "sbp=(S(0),)" in text and 'placement(type="cpu", ranks=[0, 1])' in text and "shape=(5, 3)" in text
    assert "sbp=(S(0),)" in str(x)


def test_to_global_of_a_partial_local_tensor_keeps_the_value_on_rank_zero():
    x = tw.constant([1.0, 2.0]).to_global(placement=P3, sbp=tw.sbp.partial_sum)
    assert [t.numpy().tolist() for t in x.to_local()] == [[1.0, 2.0], [0.0, 0.0], [0.0, 0.0]]


@pytest.mark.parametrize("layout", ["S0xB", "BxS1", "S1xS0"])
def test_seed_example_matmul_in_three_layouts_and_back_to_b(layout):
    i, w = _rand(5, 4), _rand(4, 3)
    sbps = {"S0xB": (S(0), B, S(0)), "BxS1": (B, S(1), S(1)), "S1xS0": (S(1), S(0), P)}[layout]
    gi = tw.constant(i).to_global(placement=P2, sbp=sbps[0])
    gw = tw.constant(w).to_global(placement=P2, sbp=sbps[1])
    y = tw.matmul(gi, gw)
    assert y.sbp == (sbps[2],)
    np.testing.assert_allclose(y.numpy(), i @ w, rtol=1e-5, atol=1e-6)
    yb = y.to_global(sbp=tw.sbp.broadcast)
    for t in yb.to_local():
        np.testing.assert_allclose(t.numpy(), i @ w, rtol=1e-5, atol=1e-6)


def test_least_boxing_signature_is_chosen_and_python_scalars_are_broadcast():
    a = tw.constant(_rand(7, 3)).to_global(placement=P3, sbp=tw.sbp.split(0))
    b = tw.constant(_rand(7, 3)).to_global(placement=P3, sbp=tw.sbp.broadcast)
    c = a * 2.0 + b                                  # S(0) x B: slicing B is free, gathering S is not
    assert c.sbp == (S(0),)
    np.testing.assert_allclose(c.numpy(), a.numpy() * 2 + b.numpy(), rtol=1e-6)
    p = tw.constant(_rand(7, 3)).to_global(placement=P3, sbp=tw.sbp.partial_sum)
    r = tw.nn.relu(p)                                 # not linear: P must be reduced; reduce-scatter beats all-reduce
    assert isinstance(r.sbp[0], tw.sbp.Split)
    np.testing.assert_allclose(r.numpy(), np.maximum(p.numpy(), 0), rtol=1e-6)
    s = tw.reduce_sum(a, axis=0)                      # a split reduced axis becomes P
    assert s.sbp == (P,)
    np.testing.assert_allclose(s.numpy(), a.numpy().sum(0), rtol=1e-5)
    m = tw.reduce_max(a)
    assert m.sbp == (Partial("max"),) and float(m) == pytest.approx(float(a.numpy().max()))


def test_uneven_and_empty_shards_through_ops():
    v = _rand(2, 5)
    x = tw.constant(v).to_global(placement=P3, sbp=tw.sbp.split(0))      # shards of 1, 1, 0 rows
    assert [t.shape[0] for t in x.to_local()] == [1, 1, 0]
    y = tw.exp(x) - 1.0
    np.testing.assert_allclose(y.numpy(), np.exp(v) - 1, rtol=1e-6)
    z = tw.reduce_sum(y, axis=1)
    np.testing.assert_allclose(z.numpy(), (np.exp(v) - 1).sum(1), rtol=1e-5)


def test_2x2_mesh_hybrid_matmul():
    x, w = _rand(6, 4), _rand(4, 5)
    gx = tw.constant(x).to_global(placement=MESH, sbp=(S(0), B))     # data parallel over mesh axis 0
    gw = tw.constant(w).to_global(placement=MESH, sbp=(B, S(1)))     # model parallel over mesh axis 1
    y = tw.matmul(gx, gw)
    assert y.sbp == (S(0), S(1))
    np.testing.assert_allclose(y.numpy(), x @ w, rtol=1e-5, atol=1e-6)
    assert [t.shape.as_list() for t in y.to_local()] == [[3, 3], [3, 2], [3, 3], [3, 2]]


def test_an_op_without_a_rule_boxes_to_b_and_warns_once_naming_it():
    from tensorweave.core.registry import registered_ops
    if "DistTestRowFlip" not in registered_ops():       # an op of the test's own: surely without a rule
        tw.register_op("DistTestRowFlip", infer=lambda i, a: (i[0].shape, i[0].dtype))
        tw.register_kernel("DistTestRowFlip", "CPU")(lambda x: np.array(x[::-1]))
    v = _rand(5, 3)
    x = tw.constant(v).to_global(placement=P2, sbp=tw.sbp.split(0))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = tw.raw_op("DistTestRowFlip", [x])
        tw.raw_op("DistTestRowFlip", [x])
    msgs = [str(w.message) for w in caught if "DistTestRowFlip" in str(w.message)]
    assert len(msgs) == 1 and "boxed to broadcast" in msgs[0] and "test_distribute_global.py" in msgs[0]
    assert y.sbp == (B,)
    np.testing.assert_array_equal(y.numpy(), v[::-1])


def test_shape_ops_use_the_logical_shape_without_moving_data():
    x = tw.constant(_rand(5, 3)).to_global(placement=P2, sbp=tw.sbp.partial_sum)
    s = tw.shape(x)
    assert s.numpy().tolist() == [5, 3] and x.sbp == (P,)
    # a B shape tensor is a value shape rules can read: the reshape's output shape is known before
    # running it (else only all-B would be offered)
    from tensorweave.core.registry import get_op
    flat = tw.constant(_rand(15)).to_global(placement=P2, sbp=tw.sbp.split(0))
    assert interpreter._out_specs(get_op("Reshape"), [flat, s], {"Tshape": tw.int32})[0][0] == (5, 3)
    assert tw.reshape(flat, s).shape == tw.TensorShape([5, 3])


def test_mismatched_placements_name_the_op_the_sbps_and_shapes():
    a = tw.constant(_rand(4, 3)).to_global(placement=P2, sbp=tw.sbp.split(0))
    b = tw.constant(_rand(4, 3)).to_global(placement=P3, sbp=tw.sbp.broadcast)
    with pytest.raises(tw.errors.InvalidArgumentError) as info:
        tw.add(a, b)
    msg = str(info.value)
    assert "different placements" in msg and "'AddV2'" in msg and "sbp=(S(0),)" in msg and "sbp=(B,)" in msg
    assert "[4,3]" in msg and "test_distribute_global.py" in msg and "Hint:" in msg


def test_sbp_axis_out_of_range_and_wrong_sbp_count():
    with pytest.raises(ValueError, match=r"splits axis 2 of a tensor of shape \[4, 3\].*rank 2"):
        tw.constant(_rand(4, 3)).to_global(placement=P2, sbp=tw.sbp.split(2))
    with pytest.raises(ValueError, match=r"has 1 entries but the placement's mesh \[2, 2\] has 2 axes"):
        tw.constant(_rand(4, 3)).to_global(placement=MESH, sbp=tw.sbp.split(0))


def test_from_local_pieces_whose_shapes_disagree():
    with pytest.raises(ValueError, match=r"disagree outside split axis 0"):
        tw.distribute.from_local([tw.ones([2, 3]), tw.ones([2, 4])], P2, tw.sbp.split(0))
    with pytest.raises(ValueError, match=r"the shapes disagree \(rank 0: \[2, 3\], rank 1: \[3, 3\]\) but B needs the same shape"):
        tw.distribute.from_local([tw.ones([2, 3]), tw.ones([3, 3])], P2, tw.sbp.broadcast)
    with pytest.raises(ValueError, match=r"rank 0's piece has shape \[1, 3\] but the balanced split"):
        tw.distribute.from_local([tw.ones([1, 3]), tw.ones([2, 3])], P2, tw.sbp.split(0))


def test_a_bad_local_rule_is_caught_by_the_shape_check():
    from tensorweave.core.registry import get_op
    from tensorweave.core.sbp import Signature
    op = get_op("Neg")
    saved = op.sbp
    op.sbp = lambda inputs, attrs: [Signature([S(0)], [S(1)])]     # wrong: claims the output is split on axis 1
    try:
        x = tw.constant(_rand(4, 6)).to_global(placement=P2, sbp=tw.sbp.split(0))
        with pytest.raises(tw.errors.InvalidArgumentError, match=r"needs \[4, 3\].*for 'Neg'"):
            tw.negative(x)
    finally:
        op.sbp = saved


def test_a_kernel_error_on_a_rank_names_the_op_and_rank():
    x = tw.constant(_rand(4, 6)).to_global(placement=P2, sbp=tw.sbp.split(0))
    with pytest.raises(tw.errors.InvalidArgumentError, match=r"Reshape"):
        tw.reshape(x, [5, 5])


def test_local_hot_path_has_one_extra_check_only_once_global_tensors_exist():
    assert dispatch._global_interpreter is interpreter.GLOBAL and dispatch._scoped >= 1
    y = tw.constant([1.0]) + 1.0                      # local tensors stay on the eager path
    assert not y.is_global and type(y) is tw.EagerTensor


def test_pieces_are_per_rank_buffers():
    x = tw.constant(_rand(3, 2)).to_global(placement=P2, sbp=tw.sbp.broadcast)
    a, b = x.to_local()
    assert a.numpy() is not b.numpy()
    np.testing.assert_array_equal(assemble([a.numpy(), b.numpy()], (3, 2), P2, (B,)), x.numpy())


def test_a_decomposition_is_used_when_every_signature_needs_boxing(monkeypatch):
    import sys
    import types
    calls = []

    def softmax(x, axis=-1):                          # in public ops: a split class axis needs no gather
        calls.append(x.sbp)
        e = tw.exp(x - tw.reduce_max(x, axis=axis, keepdims=True))
        return e / tw.reduce_sum(e, axis=axis, keepdims=True)
    module = types.ModuleType("tensorweave.distribute.decompositions")
    module.DECOMPOSITIONS = {"Softmax": softmax}
    monkeypatch.setitem(sys.modules, "tensorweave.distribute.decompositions", module)
    v = _rand(4, 6)
    x = tw.constant(v).to_global(placement=P2, sbp=tw.sbp.split(1))
    y = tw.nn.softmax(x)
    assert calls == [(S(1),)] and y.sbp == (S(1),)
    np.testing.assert_allclose(y.numpy(), np.exp(v) / np.exp(v).sum(-1, keepdims=True), rtol=1e-5)
    tw.nn.softmax(tw.constant(v).to_global(placement=P2, sbp=tw.sbp.broadcast))
    assert len(calls) == 1                            # B inputs fit all-B: no boxing, no decomposition


def test_an_op_whose_shape_is_known_only_after_running_runs_on_b():
    x = tw.constant([3, 1, 3, 2, 1]).to_global(placement=P3, sbp=tw.sbp.split(0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y, idx = tw.unique(x)
    assert y.sbp == (B,) and y.numpy().tolist() == [3, 1, 2] and idx.numpy().tolist() == [0, 1, 0, 2, 1]


def test_stateful_ops_without_a_rule_run_once_like_on_one_device():
    x = tw.ones([4, 6]).to_global(placement=P3, sbp=tw.sbp.split(0))
    tw.random.set_seed(5)
    want = tw.random.uniform([4, 6]).numpy()
    tw.random.set_seed(5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        u = tw.random.uniform(tw.shape(x))
    pieces = [t.numpy() for t in u.to_local()]
    assert u.sbp == (B,) and all(np.array_equal(p, pieces[0]) for p in pieces)      # B pieces agree
    np.testing.assert_array_equal(u.numpy(), want)                                     # the one-device draw
    calls = []

    def double(a):
        calls.append(1)
        return a * 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = tw.py_function(double, [x], tw.float32)
    assert len(calls) == 1 and y.numpy().tolist() == [[2.0] * 6] * 4
