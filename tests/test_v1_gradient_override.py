"""TF1's named gradients: ``tf.RegisterGradient`` + ``graph.gradient_override_map`` (also the
straight-through ``{"Round": "Identity"}``), ``tf.NotDifferentiable``/``tf.NoGradient``.

``tf_reference/v1_gradient_override_program.py`` runs here with ``tensorweave.compat.v1`` and must
give TensorFlow 2.21's results (``tf_reference/v1_gradient_override.json``)."""
import itertools
import json
import os
import sys

import numpy as np
import pytest

import tensorweave.compat.v1 as tf
from tensorweave.core.registry import register_kernel, register_op

HERE = os.path.dirname(os.path.abspath(__file__))
_count = itertools.count()


def test_override_map_matches_tensorflow():
    sys.path.insert(0, os.path.join(HERE, "tf_reference"))
    try:
        import v1_gradient_override_program
    finally:
        sys.path.pop(0)
    with open(os.path.join(HERE, "tf_reference", "v1_gradient_override.json")) as f:
        ref = json.load(f)
    got = v1_gradient_override_program.run(tf, suffix=f"_{next(_count)}")
    np.testing.assert_allclose(got["grads"], ref["grads"], rtol=1e-6)
    np.testing.assert_allclose(got["forward"], ref["forward"], rtol=1e-6)


def test_unregistered_name_says_what_to_register():
    g = tf.Graph()
    with g.as_default():
        x = tf.constant([1.0])
        with g.gradient_override_map({"Identity": "NeverRegistered"}):
            y = tf.identity(x)
        with pytest.raises(LookupError, match=r"NeverRegistered.*@tf.RegisterGradient\('NeverRegistered'\)"):
            tf.gradients(y, x)
        with pytest.raises(TypeError, match="op_type_map must map op type strings"):
            with g.gradient_override_map({"Identity": 3}):
                pass


def test_not_differentiable_and_no_gradient():
    name = f"V1NoGradCube{next(_count)}"
    register_op(name, infer=lambda inputs, attrs: (inputs[0].shape, inputs[0].dtype))
    register_kernel(name)(lambda x: x ** 3)
    from tensorweave.core.dispatch import execute
    from tensorweave.core.registry import get_op
    g = tf.Graph()
    with g.as_default():
        x = tf.constant([2.0])
        y = execute(get_op(name), [x], {})
        with pytest.raises(LookupError, match="No gradient defined"):
            tf.gradients(y, x)
        tf.NotDifferentiable(name)
        assert tf.gradients(y, x) == [None]
        with g.gradient_override_map({"Square": name}):     # an op type without a gradient: None too
            sq = tf.square(x)
        assert tf.gradients(sq, x) == [None]
    assert tf.NoGradient is tf.NotDifferentiable
