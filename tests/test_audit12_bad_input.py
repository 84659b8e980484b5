"""Issue 13's bad-input sentence, whole (audit, session 12): an SBP axis out of range and local
pieces whose shapes disagree between ranks are errors naming the op (the call the user made),
the SBPs and the shapes — checked on the full message, where the earlier tests matched only
its middle."""
import numpy as np
import pytest

import tensorweave as tw

P2 = tw.placement("cpu", ranks=[0, 1])


def test_a_split_axis_out_of_range_names_the_call_the_sbp_and_the_shape():
    x = tw.constant(np.ones((4, 3), np.float32))
    with pytest.raises(ValueError) as info:
        x.to_global(placement=P2, sbp=tw.sbp.split(2))
    msg = str(info.value)
    assert msg.startswith("to_global:") and "S(2)" in msg and "[4, 3]" in msg and "hint:" in msg
    g = x.to_global(placement=P2, sbp=tw.sbp.split(0))
    with pytest.raises(ValueError, match=r"^to_global: .*S\(5\).*\[4, 3\]"):
        g.to_global(sbp=tw.sbp.split(5))                   # boxing a global tensor: the same check
    with pytest.raises(ValueError) as info:
        tw.Variable(np.ones((4, 3), np.float32), placement=P2, sbp=tw.sbp.split(3), name="emb")
    msg = str(info.value)
    assert msg.startswith("Variable 'emb'") and "S(3)" in msg and "[4, 3]" in msg


def test_pieces_whose_shapes_disagree_name_from_local_the_sbp_and_every_shape():
    with pytest.raises(ValueError) as info:
        tw.distribute.from_local([tw.ones([2, 3]), tw.ones([2, 4])], P2, tw.sbp.split(0))
    msg = str(info.value)
    assert msg.startswith("from_local") and "(S(0),)" in msg and "[[2, 3], [2, 4]]" in msg
    assert "rank 0: [2, 3], rank 1: [2, 4]" in msg
    with pytest.raises(ValueError) as info:
        tw.distribute.from_local([tw.ones([3]), tw.ones([2])], P2, tw.sbp.partial_sum)
    msg = str(info.value)
    assert msg.startswith("from_local") and "(P,)" in msg and "rank 0: [3], rank 1: [2]" in msg
