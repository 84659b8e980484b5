"""Kernels of the nodes the ``remapping`` graph pass makes (``runtime/passes/remapping.py``).

They exist only in plans, never as graph ops, and compute what the ops they replace compute,
bit for bit, in fewer passes over memory:

- ``FusedConv{1,2,3}D`` / ``FusedMatMul``: the contraction, ``+ bias`` and optionally ReLU,
  the bias and ReLU applied to each output tile right after its GEMM, while it is in cache
  (instead of two more passes over the whole output);
- ``FusedReluGradBiasAddGrad``: ReLU's gradient and the bias gradient (its column sums) in
  one pass, returning both.

>>> import numpy as np
>>> from tensorweave.kernels.cpu import fused_kernels
>>> a, w = np.ones((2, 3), np.float32), np.ones((3, 2), np.float32)
>>> fused_kernels.fused_matmul(a, w, np.array([-4.0, 1.0], np.float32), False, False, True)
array([[0., 4.],
       [0., 4.]], dtype=float32)
"""
import numpy as np

from tensorweave.core.registry import register_kernel
from tensorweave.kernels.cpu import math_kernels, nn_kernels, nn_loops
from tensorweave.kernels.cpu.conv_kernels import conv_forward

#: dtypes the fused nodes take (the pass fuses nothing else)
DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _check_bias(bias, y, name):
    if bias.ndim != 1 or bias.shape[0] != y.shape[-1] or bias.dtype != y.dtype:
        raise ValueError(f"{name}: bias {bias.dtype}{list(bias.shape)} must be a vector of the output's "
                         f"{y.shape[-1]} channels and dtype {y.dtype}")
    return np.ascontiguousarray(bias)


def fused_conv(x, f, bias, strides, dilations, padding, data_format, relu):
    """A channels-last convolution with its bias (and ReLU) applied tile by tile."""
    if bias.ndim != 1 or bias.shape[0] != f.shape[-1]:
        raise ValueError(f"FusedConv: bias {list(bias.shape)} must be a vector of the filter's "
                         f"{f.shape[-1]} output channels")
    return conv_forward(x, f, strides, dilations, padding, data_format, np.ascontiguousarray(bias), relu)


def fused_matmul(a, b, bias, transpose_a, transpose_b, relu):
    """``relu(a @ b + bias)`` (or without the ReLU), the epilogue in place on the product."""
    y = math_kernels._matmul(a, b, transpose_a, transpose_b)
    bias = _check_bias(bias, y, "FusedMatMul")
    if y.dtype in DTYPES and y.flags.c_contiguous and y.ndim == 2:
        nn_loops.bias_act(y, bias, relu)
        return y
    y = nn_kernels._bias_add(y, bias, "NHWC")
    return math_kernels._relu(y) if relu else y


def relu_grad_bias_add_grad(gradients, features, data_format):
    """``(ReluGrad(gradients, features), BiasAddGrad(that))`` for channels-last inputs."""
    if gradients.shape != features.shape or gradients.dtype != features.dtype:
        raise ValueError(f"FusedReluGradBiasAddGrad: gradients {gradients.dtype}{list(gradients.shape)} and "
                         f"features {features.dtype}{list(features.shape)} must match")
    if (gradients.dtype in DTYPES and gradients.ndim >= 2 and gradients.shape[-1]
            and gradients.flags.c_contiguous and features.flags.c_contiguous):
        c = gradients.shape[-1]
        out, sums = nn_kernels.column_sums(gradients.reshape(-1, c), features.reshape(-1, c))
        return out.reshape(gradients.shape), sums
    dz = nn_kernels._relu_grad(gradients, features)
    return dz, nn_kernels._bias_add_grad(dz, data_format)


# The fused ops the remapping pass makes (ops/fused_ops.py), looked up by name like any op.
register_kernel("FusedMatMul", "CPU")(fused_matmul)
for _name in ("FusedConv1D", "FusedConv2D", "FusedConv3D"):
    register_kernel(_name, "CPU")(fused_conv)
register_kernel("FusedReluGradBiasAddGrad", "CPU")(relu_grad_bias_add_grad)
register_kernel("FusedSparseSoftmaxCrossEntropy", "CPU")(nn_kernels.sparse_xent_with_grad)
