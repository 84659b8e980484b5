"""``tw.bitwise``: bitwise ops on integer tensors under TensorFlow's ``tf.bitwise`` names.

>>> import tensorweave as tw
>>> tw.bitwise.bitwise_xor(tw.constant([5]), tw.constant([3])).numpy()
array([6], dtype=int32)
"""
from tensorweave.ops.bitwise_ops import (bitwise_and, bitwise_or, bitwise_xor, invert,  # noqa: F401
                                         left_shift, right_shift)
