"""Bad Python arguments to ops raise an error naming the op, the argument and the user's line
(issue 17, defect 9, and the same mistake in sibling ops), never a NumPy/Python internal error
or a silently truncated value."""
import numpy as np
import pytest

import tensorweave as tw

HERE = r"\n  Created at: .*test_op_arguments.py:\d+"
x = tw.ones((2, 3))


@pytest.mark.parametrize("call,pattern", [
    (lambda: tw.zeros((-1, 2)), r"zeros: argument `shape` must not have negative dimensions, got \(-1, 2\)"),
    (lambda: tw.ones((2.5, 2)), r"ones: argument `shape` must hold integers, got \(2.5, 2\)"),
    (lambda: tw.ones((2.0, 2)), r"ones: argument `shape` must hold integers"),
    (lambda: tw.zeros(tw.TensorShape([None, 2])), r"zeros: argument `shape` must not have unknown \(None\) dim"),
    (lambda: tw.fill([2 ** 62, 4], 1.0), r"fill: argument `dims` \[4611686018427387904, 4\] would have more than "
                                         r"2\*\*63 - 1 elements"),
    (lambda: tw.zeros((2 ** 40, 2 ** 40)), r"zeros: argument `shape` .* would have more than 2\*\*63 - 1 elements"),
    (lambda: tw.fill([2], [1, 2]), r"fill: argument `value` must be a scalar, got shape \[2\]"),
    (lambda: tw.reduce_sum(x, axis=1.5), r"reduce_sum: argument `axis` must be an int or a list of ints, got 1.5"),
    (lambda: tw.reduce_max(x, axis=[0, "a"]), r"reduce_max: argument `axis` must be an int or a list of ints"),
    (lambda: tw.reshape(x, [2.0, 3]), r"reshape: argument `shape` must hold integers"),
    (lambda: tw.broadcast_to(x, [-2, 3]), r"broadcast_to: argument `shape` must not have negative dimensions"),
    (lambda: tw.random.normal([3.5]), r"random.normal: argument `shape` must hold integers"),
    (lambda: tw.random.stateless_uniform([-3], seed=[1, 2]), r"random.stateless_uniform: argument `shape` must not"),
    (lambda: tw.eye(2.5), r"eye: argument `num_rows` must hold integers, got 2.5"),
    (lambda: tw.eye(-2), r"eye: argument `num_rows` must not have negative dimensions"),
    (lambda: tw.linspace(0.0, 1.0, 2.5), r"linspace: argument `num` must hold integers"),
    (lambda: tw.split(x, 1.5, axis=1), r"split: argument `num_or_size_splits` must be an int, got 1.5"),
    (lambda: tw.expand_dims(x, 1.5), r"expand_dims: argument `axis` must be an int, got 1.5"),
    (lambda: tw.squeeze(x, 1.5), r"squeeze: argument `axis` must be an int"),
    (lambda: tw.concat([x, x], 1.5), r"concat: argument `axis` must be an int"),
    (lambda: tw.stack([x, x], 1.5), r"stack: argument `axis` must be an int"),
    (lambda: tw.unstack(x, axis=1.5), r"unstack: argument `axis` must be an int"),
    (lambda: tw.gather(x, [0], axis=1.5), r"gather: argument `axis` must be an int"),
    (lambda: tw.argmax(x, 1.5), r"argmax: argument `axis` must be an int"),
    (lambda: tw.cumsum(x, 1.5), r"cumsum: argument `axis` must be an int"),
    (lambda: tw.math.top_k(x, 1.5), r"top_k: argument `k` must be an int"),
    (lambda: tw.transpose(x, [1.5, 0]), r"transpose: argument `perm` must be an int"),
    (lambda: tw.nn.softmax(x, 1.5), r"softmax: argument `axis` must be an int"),
    (lambda: tw.reverse(x, [0.5]), r"reverse: argument `axis` must be an int or a list of ints"),
    (lambda: tw.tile(x, [1.5, 1]), r"tile: argument `multiples` must be an int32 or int64 tensor .*got float32"),
    (lambda: tw.slice(x, [0, 0], [1.5, 2]), r"slice: argument `size` must be an int32 or int64 tensor"),
    (lambda: tw.pad(x, [[1.5, 0], [0, 0]]), r"pad: argument `paddings` must be an int32 or int64 tensor"),
    (lambda: tw.one_hot([1], 2.5), r"one_hot: argument `depth` must be an int, got 2.5"),
    (lambda: tw.sequence_mask([1], 2.5), r"sequence_mask: argument `maxlen` must be an int, got 2.5"),
    (lambda: tw.random.categorical(tw.ones((1, 3)), 2.5), r"random.categorical: argument `num_samples` must be an int"),
    (lambda: tw.linalg.band_part(x, 1.5, 0), r"band_part: argument `num_lower` must be an int"),
    (lambda: tw.strided_slice(x, [0.5], [1], [1]), r"strided_slice: argument `begin` must be an int"),
])
def test_bad_argument_names_op_argument_and_line(call, pattern):
    with pytest.raises(tw.errors.InvalidArgumentError, match=pattern + ".*" + HERE):
        call()


def test_allocation_beyond_memory_is_resource_exhausted():
    with pytest.raises(tw.errors.ResourceExhaustedError,
                       match=r"random.uniform: argument `shape` \(2147483648, 2147483648\) of float32 needs .* bytes, "
                             r"more than this machine's memory.*" + HERE):
        tw.random.uniform((2 ** 31, 2 ** 31))


def test_non_numeric_operand_names_the_op():
    with pytest.raises(tw.errors.InvalidArgumentError, match=r"Cannot convert 'abc' to a tensor of dtype float32 "
                                                            r"for 'MatMul'.*" + HERE):
        tw.matmul("abc", x)


def test_tensor_shape_rejects_floats():
    with pytest.raises(TypeError, match="Dimension value must be an integer or None, got 2.5"):
        tw.TensorShape([2.5, 2])
    assert tw.TensorShape([np.int64(2), None, tw.constant(3)]).as_list() == [2, None, 3]


def test_graph_mode_shapes_are_checked_too():
    with tw.Graph().as_default():
        with pytest.raises(tw.errors.InvalidArgumentError, match="zeros: argument `shape` must hold integers"):
            tw.zeros((2.5, 2))


def test_valid_arguments_still_work():
    assert tw.zeros(3).shape == [3] and tw.zeros([]).shape == []
    assert tw.zeros((np.int64(2), 1)).shape == [2, 1]
    assert tw.reshape(x, [-1]).shape == [6]
    assert tw.zeros((2 ** 31, 0)).shape == [2 ** 31, 0]
    assert tw.reduce_sum(x, axis=tw.constant(1)).shape == [2]
    assert tw.reduce_sum(x, axis=np.int64(0)).shape == [3]
    assert tw.reverse(tw.constant([[1, 2], [3, 4]]), [-1]).numpy().tolist() == [[2, 1], [4, 3]]
    assert [t.shape for t in tw.split(tw.ones((4,)), [1, -1])] == [[1], [3]]
