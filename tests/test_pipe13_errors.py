"""Bad input on global tensors: the error names the op (or API), the SBPs and the shapes
(beyond tests/test_distribute_global.py's: variables, boxing a global tensor, from_local's
axis/rank/dtype checks, optimizer updates, pipeline stages)."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core.sbp import B, S

P2 = tw.placement("cpu", ranks=[0, 1])
P3 = tw.placement("cpu", ranks=[0, 1, 2])
MESH = tw.placement("cpu", ranks=[[0, 1], [2, 3]])


def _ones(*shape):
    return np.ones(shape, np.float32)


def test_an_assignment_across_placements_names_the_op_sbps_shapes_and_ranks():
    v = tw.Variable(_ones(4, 3), placement=P2, sbp=B)
    value = tw.constant(_ones(4, 3)).to_global(placement=P3, sbp=S(0))
    with pytest.raises(tw.errors.InvalidArgumentError) as info:
        v.assign(value)
    msg = str(info.value)
    assert "different placements" in msg and "'AssignVariableOp'" in msg
    assert "[4,3] resource sbp=(B,) on ranks [0, 1]" in msg and "[4,3] float32 sbp=(S(0),) on ranks [0, 1, 2]" in msg
    assert "test_pipe13_errors.py" in msg and "Hint: move one with x.to_global(placement=...)" in msg


def test_an_optimizer_gradient_on_another_placement_names_the_update_op():
    v = tw.Variable(_ones(4, 3), placement=P2, sbp=S(0))
    g = tw.constant(_ones(4, 3)).to_global(placement=P3, sbp=B)
    with pytest.raises(tw.errors.InvalidArgumentError,
                       match=r"different placements.*for 'ResourceApply\w+' \(global\) with inputs: \[\[4,3\] resource "
                             r"sbp=\(S\(0\),\)"):
        tw.keras.optimizers.SGD(0.1).apply_gradients([(g, v)])


def test_a_shape_mismatch_on_global_inputs_names_the_op_and_both_layouts():
    x = tw.constant(_ones(4, 3)).to_global(placement=P2, sbp=S(0))
    w = tw.constant(_ones(4, 2)).to_global(placement=P2, sbp=B)
    with pytest.raises(tw.errors.InvalidArgumentError,
                       match=r"but are 3 and 4 .*for 'MatMul' \(global\) with inputs: \[\[4,3\] float32 sbp=\(S\(0\),\) "
                             r"on ranks \[0, 1\]; \[4,2\] float32 sbp=\(B,\)"):
        tw.matmul(x, w)


def test_sbp_axis_out_of_range_names_the_variable_or_api_the_sbp_and_the_shape():
    with pytest.raises(ValueError, match=r"Variable 'kernel': sbp \(S\(2\)\) splits axis 2 of a tensor of shape "
                                         r"\[4, 3\] \(rank 2\); hint: split an axis in \[0, 2\)"):
        tw.Variable(_ones(4, 3), name="kernel", placement=P2, sbp=S(2))
    with pytest.raises(ValueError, match=r"Variable 'bias': sbp \(S\(1\)\) splits axis 1 of a tensor of shape \[4\]"):
        tw.Variable(tw.keras.initializers.Ones(), shape=(4,), name="bias", placement=P2, sbp=S(1))
    g = tw.constant(_ones(4, 3)).to_global(placement=P2, sbp=S(0))
    with pytest.raises(ValueError, match=r"to_global: sbp \(S\(3\)\) splits axis 3 of a tensor of shape \[4, 3\]"):
        g.to_global(sbp=S(3))
    with pytest.raises(ValueError, match=r"to_global: sbp \(B, S\(2\)\) splits axis 2 of a tensor of shape \[4, 3\]"):
        g.to_global(placement=MESH, sbp=(B, S(2)))
    with pytest.raises(ValueError, match=r"to_global: sbp \(S\(0\)\) has 1 entries but the placement's mesh \[2, 2\]"):
        g.to_global(placement=MESH, sbp=S(0))
    with pytest.raises(ValueError, match=r"from_local with sbp \(S\(2\),\) and piece shapes \[\[2, 3\], \[2, 3\]\]: "
                                         r"sbp \(S\(2\),\) splits axis 2"):
        tw.distribute.from_local([tw.ones([2, 3]), tw.ones([2, 3])], P2, S(2))


def test_from_local_pieces_of_different_rank_or_dtype():
    with pytest.raises(ValueError, match=r"from_local with sbp \(S\(0\),\) and piece shapes \[\[2, 3\], \[2\]\]: pieces "
                                         r"have different numbers of dimensions \(rank 0: \[2, 3\], rank 1: \[2\]\)"):
        tw.distribute.from_local([tw.ones([2, 3]), tw.ones([2])], P2, S(0))
    with pytest.raises(TypeError, match=r"from_local: pieces for sbp \(S\(0\),\) have different dtypes: rank 0: float32 \[2, 3\], "
                                        r"rank 1: int32 \[2, 3\]"):
        tw.distribute.from_local([tw.ones([2, 3]), tw.ones([2, 3], dtype=tw.int32)], P2, S(0))
    with pytest.raises(ValueError, match=r"from_local: 3 tensors for a placement of 2 ranks \[0, 1\]"):
        tw.distribute.from_local([tw.ones([2])] * 3, P2, B)
    with pytest.raises(ValueError, match=r"from_local with sbp \(S\(0\), S\(1\)\) and piece shapes "
                                         r"\[\[2, 3\], \[2, 3\], \[2, 4\], \[2, 3\]\]: along mesh axis 0 \(S\(0\)\) the shapes "
                                         r"disagree outside split axis 0 \(ranks \[0, 1\]: \[2, 6\], ranks \[2, 3\]: \[2, 7\]\)"):
        tw.distribute.from_local([tw.ones([2, 3]), tw.ones([2, 3]), tw.ones([2, 4]), tw.ones([2, 3])], MESH,
                                 (S(0), S(1)))


def test_a_pipeline_stage_whose_variables_live_elsewhere():
    class Linear(tw.Module):
        def __init__(self):
            super().__init__()
            self.w = tw.Variable(_ones(3, 2), name="w", placement=P3, sbp=B)

        def __call__(self, x):
            return tw.matmul(x, self.w)
    with pytest.raises(ValueError, match=r"stage on placement\(type=\"cpu\", ranks=\[0, 1\]\) has variables \['w:0'\] "
                                         r"on another placement"):
        tw.distribute.pipeline([(Linear(), P2)])
