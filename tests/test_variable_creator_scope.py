"""``tw.variable_creator_scope`` (TF's): creators see the constructor's arguments by name,
innermost first, may change them or make the variable themselves."""
import numpy as np
import pytest

import tensorweave as tw
import tensorweave.compat.v1 as tf


def test_creators_nest_innermost_first_and_see_arguments_by_name():
    seen = []

    def outer(next_creator, **kwargs):
        seen.append(("outer", kwargs["name"], kwargs["trainable"]))
        kwargs["name"] = kwargs["name"] + "_outer"
        return next_creator(**kwargs)

    def inner(next_creator, **kwargs):
        seen.append(("inner", kwargs["name"], kwargs["trainable"]))
        kwargs["trainable"] = False
        return next_creator(**kwargs)
    with tw.variable_creator_scope(outer), tf.variable_creator_scope(inner):
        v = tw.Variable(np.ones(2, np.float32), True, "w")        # positional arguments are named too
    assert seen == [("inner", "w", True), ("outer", "w", False)]
    assert (v.name, v.trainable, type(v)) == ("w_outer:0", False, tw.Variable)
    np.testing.assert_array_equal(v.numpy(), [1, 1])
    assert tw.Variable(1.0, name="after").name == "after:0"       # the scope is closed


def test_a_creator_may_return_its_own_variable_and_see_global_arguments():
    made = tw.Variable(7.0, name="mine")
    got = []

    def creator(next_creator, **kwargs):
        got.append(sorted(k for k in ("placement", "sbp") if k in kwargs))
        return made if kwargs["name"] == "replace_me" else next_creator(**kwargs)
    p = tw.placement("cpu", ranks=[0, 1])
    with tw.variable_creator_scope(creator):
        assert tw.Variable(1.0, name="replace_me") is made
        g = tw.Variable(np.arange(4.0), name="g", placement=p, sbp=tw.sbp.split(0))
    assert got == [[], ["placement", "sbp"]]
    assert g.placement == p and g.numpy().tolist() == [0, 1, 2, 3]


def test_bad_arguments_still_raise_the_constructors_error():
    with tw.variable_creator_scope(lambda next_creator, **kw: next_creator(**kw)):
        with pytest.raises(TypeError):
            tw.Variable(1.0, no_such_argument=1)
