"""tw.Module (tracking, name scopes, checkpoints) and tw.train.load_checkpoint."""
import numpy as np
import pytest

import tensorweave as tw


class Dense(tw.Module):
    def __init__(self, n_in, n_out, name=None):
        super().__init__(name=name)
        with self.name_scope:
            self.w = tw.Variable(tw.fill([n_in, n_out], 0.5), name="w")
            self.b = tw.Variable(tw.zeros([n_out]), name="b")

    @tw.Module.with_name_scope
    def __call__(self, x):
        return tw.matmul(x, self.w) + self.b


class Net(tw.Module):
    def __init__(self):
        super().__init__()
        self.blocks = {"second": Dense(3, 1, name="out"), "first": Dense(2, 3)}
        self.steps = tw.Variable(0, trainable=False, name="steps")
        self.same = self.blocks["first"]          # reached twice, listed once


def test_tracking_order_and_names_follow_tensorflow():
    net = Net()
    assert net.name == "net" and Dense(1, 1).name == "dense"
    # sorted attribute names: blocks/first, blocks/second, same (already seen), steps
    assert [v.name for v in net.variables] == ["dense/b:0", "dense/w:0", "out/b:0", "out/w:0", "steps:0"]
    assert len(net.trainable_variables) == 4 and [v.name for v in net.non_trainable_variables] == ["steps:0"]
    assert [m.name for m in net.submodules] == ["dense", "out"]
    paths = [p for p, _ in net._flatten(predicate=lambda v: getattr(v, "_is_variable", False), with_path=True)]
    assert paths[0] == ("blocks", "first", "b")
    assert net.blocks["first"](tw.ones([1, 2])).numpy().tolist() == [[1.0, 1.0, 1.0]]


def test_gradients_through_trainable_variables():
    net = Net()
    with tw.GradientTape() as tape:
        y = net.blocks["second"](net.blocks["first"](tw.ones([4, 2])))
        loss = tw.reduce_sum(y)
    grads = tape.gradient(loss, net.trainable_variables)
    assert all(g is not None for g in grads)


def test_checkpoint_round_trip_and_reader(tmp_path):
    net = Net()
    net.blocks["first"].w.assign(tw.fill([2, 3], 7.0))
    prefix = tw.train.Checkpoint(model=net).save(str(tmp_path / "ckpt"))
    fresh = Net()
    tw.train.Checkpoint(model=fresh).read(prefix).assert_consumed()
    np.testing.assert_array_equal(fresh.blocks["first"].w.numpy(), np.full((2, 3), 7.0))
    reader = tw.train.load_checkpoint(str(tmp_path))
    shapes = reader.get_variable_to_shape_map()   # a shared object is saved under its shortest path
    assert shapes["model/same/w"] == [2, 3] and shapes["model/steps"] == []
    assert reader.get_variable_to_dtype_map()["model/steps"] == tw.int32
    assert reader.has_tensor("model/blocks/second/b") and not reader.has_tensor("nope")
    assert reader.get_tensor("model/same/w")[0, 0] == 7.0
    assert ("model/same/w", [2, 3]) in tw.train.list_variables(prefix)
    with pytest.raises(tw.errors.NotFoundError, match="Key model/x not found in checkpoint"):
        reader.get_tensor("model/x")


def test_invalid_module_name():
    with pytest.raises(ValueError, match="is not a valid Python identifier-like name"):
        tw.Module(name="1 bad")


def test_keras_layers_inside_a_module_are_tracked():
    class Wrapper(tw.Module):
        def __init__(self):
            super().__init__()
            self.layer = tw.keras.layers.Dense(2)
            self.layer.build((None, 3))
    assert len(Wrapper().trainable_variables) == 2
