"""plan_io for a receiver that holds the plan's variables already (a Ray worker holding its
shards): variables written by name, dtype and shape only; bound to live objects by index."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.runtime import executor
from tensorweave.runtime.runtime import Runtime
from tensorweave.saving.plan_io import plan_from_json, plan_to_json


def _plan():
    g = tw.Graph()
    with g.as_default():
        v = tw.Variable([1.0, 2.0], name="w")
        x = tw.compat.v1.placeholder(tw.float32, [2])
        y = v.assign_add(x)
    with tw.compat.v1.Session(graph=g) as sess:
        sess.run(v.initializer)
    return executor.build_plan([y], [], [x])


def test_variables_without_values_bind_to_the_receivers_objects():
    doc, tensors = plan_to_json(_plan(), variable_values=False)
    assert tensors == {} and doc["resources"][0]["value"] is None
    mine = tw.Variable(np.array([10.0, 20.0], np.float32))
    bound = plan_from_json(doc, tensors, Runtime("rank1", rank=1), live=[mine])
    assert bound([np.ones(2, np.float32)])[0].tolist() == [11.0, 21.0]
    assert mine.numpy().tolist() == [11.0, 21.0]


def test_a_missing_variable_without_value_is_named():
    doc, tensors = plan_to_json(_plan(), variable_values=False)
    with pytest.raises(tw.errors.NotFoundError, match="variable 'w' was written without its value.*'rank2'"):
        plan_from_json(doc, tensors, Runtime("rank2", rank=2))
    with pytest.raises(ValueError, match="1 resources in the plan but 2 given"):
        plan_from_json(doc, tensors, Runtime("rank3", rank=3), live=[None, None])
