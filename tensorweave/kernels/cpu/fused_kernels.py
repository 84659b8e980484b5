"""Kernels of the nodes the ``remapping`` graph pass makes (``runtime/passes/remapping.py``).

They exist only in plans, never as graph ops, and compute what the ops they replace compute,
bit for bit, in fewer passes over memory:

- ``FusedConv{1,2,3}D`` / ``FusedMatMul``: the contraction, ``+ bias`` and optionally ReLU,
  the bias and ReLU applied to each output tile right after its GEMM, while it is in cache
  (instead of two more passes over the whole output);
- ``FusedReluGradBiasAddGrad``: ReLU's gradient and the bias gradient (its column sums) in
  one pass, returning both;
- ``FusedSparseSoftmaxCrossEntropy``: the loss and its gradient, softmax once, with the loss's
  mean and the gradient's constant scale where the pass took them in (:func:`sparse_xent_tail`);
- ``FusedMatMulGroupApplyAdam``: a grouped Adam update one of whose gradients is a weight
  gradient's product (``x^T @ dz``): each block of the product's rows is applied to the
  variable's rows on the thread that computed it, while it is in cache (``gemm.matmul_then``),
  instead of one more pass reading the whole gradient back after the product; the update's other
  large variables are slices taken by the same threads (no OpenMP pool for them).

>>> import numpy as np
>>> from tensorweave.kernels.cpu import fused_kernels
>>> a, w = np.ones((2, 3), np.float32), np.ones((3, 2), np.float32)
>>> fused_kernels.fused_matmul(a, w, np.array([-4.0, 1.0], np.float32), False, False, True)
array([[0., 4.],
       [0., 4.]], dtype=float32)
"""
import functools
import threading

import numpy as np

from tensorweave.core.registry import register_kernel
from tensorweave.kernels.cpu import gemm, math_kernels, nn_kernels, nn_loops, split_passes, training_kernels
from tensorweave.kernels.cpu.conv_kernels import conv_forward

#: dtypes the fused nodes take (the pass fuses nothing else)
DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
#: the stock ``Mul`` kernel (``math_kernels``), for a scale whose broadcast is not the gradient's shape
_MUL = split_passes.binary(np.multiply)


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


def relu_grad_bias_add_grad(gradients, features, data_format, in_place=False, name="FusedReluGradBiasAddGrad"):
    """``(ReluGrad(gradients, features), BiasAddGrad(that))`` for channels-last inputs; ``in_place``:
    the mask written over ``gradients`` (a fresh product only this node reads)."""
    if gradients.shape != features.shape or gradients.dtype != features.dtype:
        raise ValueError(f"{name}: gradients {gradients.dtype}{list(gradients.shape)} and "
                         f"features {features.dtype}{list(features.shape)} must match")
    if (gradients.dtype in DTYPES and gradients.ndim >= 2 and gradients.shape[-1]
            and gradients.flags.c_contiguous and features.flags.c_contiguous):
        c = gradients.shape[-1]
        g2 = gradients.reshape(-1, c)
        out, sums = nn_kernels.column_sums(g2, features.reshape(-1, c), in_place)
        return out.reshape(gradients.shape), sums
    dz = nn_kernels._relu_grad(gradients, features)
    return dz, nn_kernels._bias_add_grad(dz, data_format)


def matmul_relu_grad_bias_add_grad(a, b, features, transpose_a, transpose_b, data_format):
    """``FusedMatMulReluGradBiasAddGrad``: ``g = MatMul(a, b)`` by the stock kernel (its bits,
    on whichever threads and blocks it takes), then ``(ReluGrad(g, features), BiasAddGrad(that))``
    in place on ``g`` while it is in cache (``runtime/passes/matmul_relu_grad.py``).

    >>> a, b = np.ones((2, 2), np.float32), np.array([[1.0, -1.0], [1.0, 1.0]], np.float32)
    >>> dz, db = matmul_relu_grad_bias_add_grad(a, b, np.array([[1.0, 1.0], [0.0, 2.0]], np.float32),
    ...                                          False, False, "NHWC")
    >>> dz.tolist(), db.tolist()
    ([[2.0, 0.0], [0.0, 0.0]], [2.0, 0.0])
    """
    g = math_kernels._matmul(a, b, transpose_a, transpose_b)
    return relu_grad_bias_add_grad(g, features, data_format, in_place=True, name="FusedMatMulReluGradBiasAddGrad")


def sparse_xent_tail(logits, labels, *consts, scaled=False, scale_first=False, mean=False):
    """``FusedSparseSoftmaxCrossEntropy``: the per-sample losses and their gradient
    (``nn_kernels.sparse_xent_with_grad``), with the loss's scalar tail the remapping pass took in
    (``runtime/passes/loss_tail.py``): ``scaled``, the gradient times ``consts[0]`` (the ``Mul``,
    operands in its order: ``scale_first``); ``mean``, the losses' ``Sum`` over all axes divided
    by ``consts[-1]`` (``DivNoNan`` by a constant the pass checked: finite, ``|d| >= 1``). The
    stock kernels' NumPy calls on the same values: the unfused bits.

    >>> logits, labels = np.zeros((2, 3), np.float32), np.array([0, 2], np.int32)
    >>> loss, grad = sparse_xent_tail(logits, labels, np.float32(0.5), np.float32(2.0), scaled=True, mean=True)
    >>> round(float(loss), 4), [round(float(g), 4) for g in grad[0]]    # log 3; (1/3 - [1, 0, 0]) / 2
    (1.0986, [-0.3333, 0.1667, 0.1667])
    """
    loss, grad = nn_kernels.sparse_xent_with_grad(logits, labels)
    if scaled:
        c = consts[0]
        try:
            if getattr(c, "dtype", None) != grad.dtype:
                raise ValueError("the scale's dtype is not the gradient's")
            # into the gradient's own fresh buffer: the same products as the Mul's new array
            np.multiply(c, grad, out=grad) if scale_first else np.multiply(grad, c, out=grad)
        except ValueError:      # (raised before any write: a scale that broadcasts the gradient larger)
            grad = _MUL(c, grad) if scale_first else _MUL(grad, c)
    if mean:
        # the Sum kernel's ``np.sum(axis=None)`` is this reduction; the pass took a divisor that is
        # finite and at least 1 in size, so DivNoNan's zero branch and warnings (overflow, 0/0)
        # cannot arise: its division alone, without the error-state context (~1/3 of its cost)
        loss = np.true_divide(np.add.reduce(loss, axis=None), consts[-1])
    return loss, grad


def matmul_group_apply_adam(*inputs, num_variables, index, transpose_a, transpose_b, **adam):
    """``ResourceGroupApplyAdam`` whose ``index``-th gradient is ``MatMul(a, b)`` (``a`` and ``b``
    the last two inputs, in place of that gradient): the other variables as tasks shared out with
    the product's blocks (the large ones cut by :func:`_adam_tasks`, the small ones by the stock
    kernel together as one task, last), and this
    one block by block as the product's rows come out. Adam is elementwise, so the bits are the
    unfused plan's whichever blocks the product and the updates are cut into."""
    *group, a, b = inputs
    k = 4 if adam["amsgrad"] else 3
    lr, step = group[num_variables * k:num_variables * k + 2]
    grads = group[num_variables * k + 2:]
    handles = [group[i * k:(i + 1) * k] for i in range(num_variables)]
    tasks, small = [], []
    for i, g in zip([i for i in range(num_variables) if i != index], grads):
        if adam["amsgrad"]:
            training_kernels._apply_adam(*handles[i], lr, step, g, **adam)
        elif np.size(g) < training_kernels.PARALLEL_MIN:
            small.append(functools.partial(training_kernels._apply_adam, *handles[i], lr, step, g, **adam))
        else:
            tasks += _adam_tasks(handles[i], lr, step, g, adam)
    if small:
        # the small variables (biases, a last layer) by the stock kernel, its checks included, as
        # one task after the large ones: whichever thread is free takes it, instead of the calling
        # thread before the product's hand-off (issue 18 session 16: 0.25 ms of its CPU a step at
        # load 10); their errors are raised after the tasks end (``gemm.share_tasks``)
        tasks.append(functools.partial(_run_all, small))
    a = np.swapaxes(a, -1, -2) if transpose_a else a
    b = np.swapaxes(b, -1, -2) if transpose_b else b
    w, m, v = (h._storage_for_update() for h in handles[index][:3])
    if adam["amsgrad"] or a.ndim != 2 or b.ndim != 2 or w.shape != (a.shape[0], b.shape[1]) \
            or not (w.dtype == a.dtype == b.dtype and w.dtype in DTYPES) \
            or not (w.flags.c_contiguous and m.flags.c_contiguous and v.flags.c_contiguous):
        # (the stock kernel's checks and messages for anything else)
        for task in tasks:
            task()
        training_kernels._apply_adam(*handles[index], lr, step, math_kernels._matmul(a, b, False, False), **adam)
        return ()
    coeffs = training_kernels._coefficients(w.dtype, lr, step, adam["beta_1"], adam["beta_2"]) \
        + (w.dtype.type(adam["epsilon"]),)
    decay = training_kernels.decay_factors(w.dtype, lr, adam.get("weight_decay"))

    def update(g, i, j):
        _adam_flat(w[i:j].ravel(), m[i:j].ravel(), v[i:j].ravel(), g[i:j].ravel(), coeffs, decay)

    def scratch():      # the same update on copies (the epilogue's way is timed on them, gemm.after_way)
        copies = [x.copy() for x in (w, m, v)]
        return lambda g, i, j: _adam_flat(*(x[i:j].ravel() for x in copies), g[i:j].ravel(), coeffs, decay)
    gemm.matmul_then(a, b, update, tasks, scratch)
    return ()


def _run_all(tasks):
    """Runs ``tasks`` in order (several small updates as one task of ``gemm.share_tasks``)."""
    for task in tasks:
        task()


#: elements of a large variable's Adam update per task of :func:`_adam_tasks`
ADAM_TASK = 1 << 16


def _adam_tasks(handle, lr, step, g, adam):
    """A dense Adam update of a large variable as tasks over :data:`ADAM_TASK`-element slices,
    which the grouped update's product shares out with its blocks (``gemm.matmul_then``): the
    helper thread takes them instead of numba's OpenMP pool (``training_kernels._adam_chunks``),
    whose idle worker spun after every update (0.4-0.6 ms of CPU per mlp step at load 9). The
    same loop on each slice as on the whole: elementwise, so the same bits. The checks (and
    their errors) are the stock kernel's, made by the first of the tasks to run, on whichever
    thread (:class:`_Prepared`), not by the calling thread before the product's hand-off (issue 18
    session 16: the mlp's second layer's, ~0.1 ms of its CPU a step at load 10); at least one task,
    so they are always made."""
    prepared = _Prepared(functools.partial(_adam_arrays, handle, lr, step, g, adam))
    return [functools.partial(_adam_slice, prepared, s)
            for s in range(0, max(1, int(np.size(g))), ADAM_TASK)]


def _adam_arrays(handle, lr, step, g, adam):
    """``([w, m, v, g] flat, Adam's coefficients, AdamW's decay factors or None)`` of one variable,
    checked by the stock kernel's rules."""
    arrays, g = training_kernels._dense("Adam update", handle, g)
    dtype = arrays[0].dtype
    coeffs = training_kernels._coefficients(dtype, lr, step, adam["beta_1"], adam["beta_2"]) \
        + (dtype.type(adam["epsilon"]),)
    return arrays + [g], coeffs, training_kernels.decay_factors(dtype, lr, adam.get("weight_decay"))


def _adam_slice(prepared, s):
    """The Adam update of flat elements ``[s, s + ADAM_TASK)`` of ``prepared``'s variable."""
    arrays, coeffs, decay = prepared.get()
    _adam_flat(*(x[s:s + ADAM_TASK] for x in arrays), coeffs, decay)


def _adam_flat(w, m, v, g, coeffs, decay):
    """The Adam kernel on flat slices: AdamW's decay of the slice first (``decay``: its factors, or
    None), as the stock kernel decays the whole weight before its update (elementwise: same bits)."""
    if decay is not None:
        training_kernels._decay_flat(w, *decay)
    training_kernels._adam_flat(w, m, v, g, *coeffs)


class _Prepared:
    """``make()``'s value, made once by the first caller of :meth:`get` on any thread (the others
    wait for it); its error, if it raised, raised again by every call.

    >>> p = _Prepared(lambda: [1]); p.get() is p.get()
    True
    """
    __slots__ = ("make", "lock", "value", "error")

    def __init__(self, make):
        self.make, self.lock, self.value, self.error = make, threading.Lock(), None, None

    def get(self):
        with self.lock:
            if self.value is None and self.error is None:
                try:
                    self.value = self.make()
                except Exception as e:  # noqa: BLE001 - raised by every task of the update
                    self.error = e
        if self.error is not None:
            raise self.error
        return self.value


# The fused ops the remapping pass makes (ops/fused_ops.py), looked up by name like any op.
register_kernel("FusedMatMul", "CPU")(fused_matmul)
for _name in ("FusedConv1D", "FusedConv2D", "FusedConv3D"):
    register_kernel(_name, "CPU")(fused_conv)
register_kernel("FusedReluGradBiasAddGrad", "CPU")(relu_grad_bias_add_grad)
register_kernel("FusedMatMulReluGradBiasAddGrad", "CPU")(matmul_relu_grad_bias_add_grad)
register_kernel("FusedSparseSoftmaxCrossEntropy", "CPU")(sparse_xent_tail)
register_kernel("FusedMatMulGroupApplyAdam", "CPU")(matmul_group_apply_adam)
