"""The kernels built ahead of time into the installed package (``aot_build``), and the
argument types each is built for.

Only the loops a cold process meets in its first training steps are here (the main job's CNN,
and the dense layers and Adam it shares with the MLP; the recurrent step loops; the transformer
encoders' fused layer norm and softmax rows; an embedding's sparse update), each for exactly the argument types its
callers pass (numba's dispatcher calls an ahead-of-time loop only on an exact match of the
arguments' types, so a signature missing here just means the JIT path of ``jit.py``).
``parallel=True`` loops cannot be built ahead of time (numba's thread pool is set up by the
JIT); they compile in the background once asked for often enough (``jit.PARALLEL_AFTER``), and
their twins call the one-thread loops here.

Keys are modules, values map a kernel's name in its module to its numba signatures (strings,
parsed by ``numba.core.sigutils``).

>>> "tensorweave.kernels.cpu.gemm" in KERNELS and "tensorweave.kernels.cpu.batch_norm_loops" in KERNELS
True
>>> all(s.startswith("void(") or s.startswith("int64(") for k in KERNELS.values() for ss in k.values() for s in ss)
True
"""


def _array(ndim, dtype="float32", layout="C"):
    """numba's spelling of a contiguous array type."""
    if layout == "F":
        return f"{dtype}[::1{', :' * (ndim - 1)}]"
    return f"{dtype}[{':, ' * (ndim - 1)}::1]"


_F1, _F2, _F3, _F4, _F5 = (_array(n) for n in range(1, 6))
_F2F = _array(2, layout="F")
_A2 = "float32[:, :]"
_A4 = "float32[:, :, :, :]"
_I32, _I64 = _array(1, "int32"), _array(1, "int64")
_D1 = _array(1, "float64")
_I, _T3 = "int64", "UniTuple(int64, 3)"
_R1 = "Array(float32, 1, 'C', readonly=True)"     # a read-only weight's view (numba types it apart)
#: float32 matrices read-only (a variable's weight handed out as such), C, Fortran and strided
_READ_ONLY = tuple(f"Array(float32, 2, '{layout}', readonly=True)" for layout in "CFA")


def _lstm(dtype):
    """The LSTM step loops' signatures (``lstm_kernels._forward_rows`` / ``_backward_rows``)."""
    a1, a2, a3, b2 = _array(1, dtype), _array(2, dtype), _array(3, dtype), _array(2, "bool")
    flags = f"{_I}, {_I}, boolean, boolean, {_I}, {_I}"
    return {"_forward_rows": [f"void({_I}, {_I}, {a3}, {a3}, {a2}, {a2}, {a3}, {a3}, {a1}, {a3}, {b2}, {flags})"],
            "_backward_rows": [f"int64({_I}, {_I}, {a3}, {a3}, {a3}, {a2}, {a2}, {a2}, {a2}, {a1}, {a2}, {b2}, "
                               f"{flags}, {_I})"]}


def _gru(dtype):
    """The GRU step loops' signatures (``gru_kernels._forward_rows`` / ``_backward_rows``)."""
    a1, a2, a3, b2 = _array(1, dtype), _array(2, dtype), _array(3, dtype), _array(2, "bool")
    tail = f"{b2}, {_I}, {_I}, boolean, boolean, boolean"
    return {"_forward_rows": [f"void({_I}, {_I}, {', '.join([a2] * 6)}, {a3}, {a1}, {a1}, {a3}, {tail})"],
            "_backward_rows": [f"void({_I}, {_I}, {', '.join([a3] * 4)}, {', '.join([a2] * 4)}, {a1}, "
                               f"{', '.join([a2] * 3)}, {tail})"]}


def _simple(dtype):
    """The SimpleRNN step loops' signatures (``simple_rnn_kernels._forward_rows`` / ``_backward_rows``)."""
    a1, a2, a3, b2 = _array(1, dtype), _array(2, dtype), _array(3, dtype), _array(2, "bool")
    tail = f"{b2}, {_I}, boolean, boolean"
    return {"_forward_rows": [f"void({_I}, {_I}, {a2}, {a2}, {a2}, {a2}, {a3}, {a1}, {a3}, {tail})"],
            "_backward_rows": [f"int64({_I}, {_I}, {a3}, {a3}, {a3}, {a2}, {a2}, {a2}, {a1}, {a2}, {tail})"]}


def _both(table_of):
    """``table_of(dtype)`` for float32 and float64, signatures of a kernel joined."""
    t32, t64 = table_of("float32"), table_of("float64")
    return {k: t32[k] + t64[k] for k in t32}


def _gemm(a, b, lead=0, c=_F2):
    """A ``cblas_?gemm`` stub's signature (``lead``: integer arguments before its own six)."""
    return f"void({', '.join([_I] * (6 + lead))}, {a}, {_I}, {b}, {_I}, {c}, {_I})"


KERNELS = {
    "tensorweave.kernels.cpu.gemm": {
        # MKL's cblas_sgemm called from compiled code; the address is an argument, not built in
        "_call": [_gemm(_F2, _F2), _gemm(_F2, _F2F), _gemm(_F2F, _F2)],
        # the same on one MKL thread (the one-thread products, batch-1 ``predict``'s among them):
        # not built, a fresh process timed its ctypes twin against OpenBLAS (gemm._serial_library)
        # Also every strided view a product split over threads hands a part (gemm._run_split: row
        # blocks of a transposed operand, column blocks of B and of the output): on a machine
        # whose classes choose splitting, the first split compiled LLVM code mid-run (+50 MB RSS
        # in the mlp's step memory on an AMD EPYC, session 22)
        # and B a variable's weight read-only (encoder2_predict's column blocks compiled a stub in its
        # first requests, session 23)
        "_call_threads": [_gemm(a, b, 2, c) for c in (_F2, _A2) for a in (_F2, _F2F, _A2)
                          for b in (_F2, _F2F, _A2) + _READ_ONLY],
    },
    # a split product's blocks with the spinning helper (every argument an int64: one signature
    # each; issue 18 mlp28): built, a cold process's first split takes the helper, not the pool
    "tensorweave.kernels.cpu.spin_share": {
        "_serve": ["int64(int64[::1], int64)"],
        "_split": [f"int64(int64[::1], {', '.join([_I] * 18)})"],
    },
    "tensorweave.kernels.cpu.nn_loops": {
        # (and with a read-only bias: a weight's view, the encoder's inference; issue 18, cold28)
        "bias_act": [f"void({_F2}, {b}, boolean)" for b in (_F1, _R1)],
        "column_sums": [f"void({_F2}, {_D1})"],
        "relu_grad_column_sums": [f"void({_F2}, {_F2}, {_F2}, {_D1})"],
        "relu_mask_column_sums": [f"void({_F2}, {_F2}, {_D1})"],
        "shift_rows": [f"int64({_F2}, {_I32}, {_F2}, {_F1})"],
        "xent_from_exps": [f"void({_F2}, {_I32}, {_F1}, {_F1}, boolean)"],
        "max_windows": [f"void({_F5}, {_T3}, {_T3}, {_T3}, {_F5}, {_F5}, boolean, boolean)"],
        # the im2col input gradient's scatter (the resnet's stride-2 layers; session 18, res22)
        "col2im": [f"void({_array(8)}, {_T3}, {_T3}, {_T3}, {_F5})"],
        # the Relu kernel's loop (every model's forward; session 25, rows29)
        "relu": [f"void({_F1}, {_F1})"],
    },
    # MaxPool's values-only pass (the cnn's 2x2 pooling: every cold cnn process compiled it, 0.7-1.0 s; cold28)
    "tensorweave.kernels.cpu.pool_tiled": {"max_tiled": [f"void({_F4}, {_I}, {_I}, {_F4})"]},
    # the fused batch norm's passes (the resnet's first step compiled them while the twins answered;
    # session 18, res22), float32 rows as batch_norm_kernels passes them
    "tensorweave.kernels.cpu.batch_norm_loops": {
        "moments": [f"void({_F2}, {_D1}, {_D1}, {_D1})"],
        "grad_sums": [f"void({_F2}, {_F2}, {_D1}, {_D1}, {_D1})"],
        "grad_sums_relu": [f"void({_F2}, {_F2}, {_F2}, {_D1}, {_D1}, {_D1})"],
        "grad_sums_relu_select": [f"void({_F2}, {_F2}, {_F2}, {_F2}, {_D1}, {_D1}, {_D1})"],
        "scale_shift": [f"void({_F2}, {_F1}, {_F1}, {_F2})"],
        "scale_shift_relu": [f"void({_F2}, {_F1}, {_F1}, {_F2})"],
        "scale_shift_add_relu": [f"void({_F2}, {_F2}, {_F1}, {_F1}, {_F2})"],
        "input_grad": [f"void({_F2}, {_F2}, {_F1}, {_F1}, {_F1}, {_F1}, {_F2})"],
        "input_grad_relu": [f"void({_F2}, {_F2}, {_F2}, {_F1}, {_F1}, {_F1}, {_F1}, {_F2})"],
    },
    # batch-1 inference's direct convolution (the cnn_predict's first layer; issue 18, pred24)
    "tensorweave.kernels.cpu.conv_batch1": {
        "direct_rows": [f"void({_F3}, {_F4}, {_F1}, boolean, boolean, {_I}, {_I}, {_I}, {_I}, {_I}, {_I}, {_F3})"],
    },
    "tensorweave.kernels.cpu.winograd": {
        "_input_transform": [f"void({_F4}, {_I}, {_I}, {_I}, {_I}, {_F3})"],
        "_output_transform": [f"void({_F3}, {_I}, {_I}, {_I}, {_I}, {_F4}, {_F1}, boolean, boolean)"],
        "_output_grad_transform": [f"void({_F4}, {_I}, {_I}, {_I}, {_I}, {_F3})"],
        "_input_grad_transform": [f"void({_F3}, {_I}, {_I}, {_I}, {_I}, {_I}, {_I}, {_F4})"],
    },
    # the recurrent kernels' whole step loops (the library call built in): the lstm workload's first
    # step compiled them on the caller's thread (~10 s of CPU), float64 for gradient checks
    "tensorweave.kernels.cpu.lstm_kernels": _both(_lstm),
    "tensorweave.kernels.cpu.gru_kernels": _both(_gru),
    "tensorweave.kernels.cpu.simple_rnn_kernels": _both(_simple),
    # the fused layer norm's row loops (and the one-op softmax gradient's, where TW_FUSED_SOFTMAX_GRAD
    # turns it on): a cold transformer/encoder step compiled them, ~1.8 s of CPU on the helper thread
    # while the NumPy twins answered (session 15, ln19); float32, as layer_norm_kernels passes them
    "tensorweave.kernels.cpu.layer_norm_loops": {
        "forward": [f"void({_F2}, {_F2}, boolean, {_F1}, {_F1}, float64, boolean, {_F2}, {_F1}, {_F1})"],
        "backward": [f"void({_F2}, {_F2}, {_F1}, {_F1}, {_F1}, {_D1}, {_D1}, boolean, {_F2}, {_D1}, {_D1})"],
        # the whole gradient in one call (session 26, trf30)
        "backward_tiles": [f"void({_F2}, {_F2}, {_F1}, {_F1}, {_F1}, {_D1}, {_D1}, boolean, {_I}, {_F2}, {_D1}, "
                           f"{_D1})"],
        "softmax_grad": [f"void({_F2}, {_F2}, float32, {_F2})"],
    },
    # the last-axis softmax's row loops (attention's scores: a cold transformer step compiled them;
    # session 19, tx23), float32 rows as nn_kernels passes them
    "tensorweave.kernels.cpu.softmax_loops": {
        "shift": [f"void({_F2}, {_F2})"],
        "normalize": [f"void({_F2})"],
        # the training attention's float32 exponentials (session 25, trf29): a score block flattened
        "exp_in_place": [f"void({_F1})"],
    },
    # attention's fused inference step (session 20, att24): float32, the query and key as strided
    # slices of the grouped projection's output ("A") or whole arrays, the value likewise
    "tensorweave.kernels.cpu.attention_kernels": {
        "scores_shift": [f"void({_I}, {_I}, {x}, {x}, {_F3}, {_I}, {_I})" for x in (_A4, _F4)],
        "normalize_combine": [f"void({_I}, {_I}, {_F3}, {x}, {_F4}, {_I}, {_I})" for x in (_A4, _F4)],
    },
    # attention's fused training backward (session 21, tr25): float32, every operand whole (C)
    "tensorweave.kernels.cpu.attention_train": {
        "grad_pairs": [f"void({_I}, {_I}, {_F3}, " + ", ".join([_F4] * 7) + f", {_F2}, float32, {_I}, {_I})"],
    },
    # the leading-axes sums of Sum/Mean and of SumToLike (the dense layers' bias gradients: every
    # training step of the mlp meets them; session 17, dp21), float64 for gradient checks
    "tensorweave.kernels.cpu.reduce_kernels": {
        "_sum_middle": [f"void({_F3}, {_F2})", f"void({_array(3, 'float64')}, {_array(2, 'float64')})"],
    },
    "tensorweave.kernels.cpu.training_kernels": {
        "_adam_flat": [f"void({_F1}, {_F1}, {_F1}, {_F1}, float32, float32, float32, float32)"],
        # AdamW's (and weight_decay='s) decay pass before the update (session 16, adamw20)
        "_decay_flat": [f"void({_F1}, float32, float32)"],
        # the sparse Adam update of an embedding's rows (fasttext's cold step compiled it, ~2 s; vec27)
        "_adam_rows": [f"void({_F2}, {_F2}, {_F2}, {_F2}, {ids}, {_F2}, float32, float32, float32, float32, boolean)"
                       for ids in (_I32, _I64)],
    },
    # the duplicate rows of an embedding's sparse gradient summed (UniqueSegmentSum: every fasttext step; the
    # marking loop compiled in its first measured step, session 22; vec27), int32 and int64 ids, float32 rows
    "tensorweave.keras.optimizers.sparse_ops": {
        "_unique_by_marking": [f"int64({ids}, {_I}, {ids}, {ids})" for ids in (_I32, _I64)],
        "_segment_sum_rows": [f"void({_F2}, {ids}, {_F2})" for ids in (_I32, _I64)],
    },
    # the gradient bucket's two-member sum-and-update loops of Lion and Adamax (a cold data-parallel
    # step with either meets them; session 17, nadam21), float32 as fused_rules passes them
    "tensorweave.distribute.fused_rules": {
        "_sum2_lion": [f"void({_F1}, {_F1}, {_F1}, {_F1}, float32, float32, float32, float32, float32)"],
        "_sum2_adamax": [f"void({_F1}, {_F1}, {_F1}, {_F1}, {_F1}, float32, float32, float32, float32, float32)"],
    },    # the nogil segments' interpreter (every steady training plan builds one; session 21, nogil25)
    # (and the segments' address reader on a float32 matrix: the main job's first epoch compiled it; cold28)
    "tensorweave.kernels.cpu.nogil_ops": {"run_program": [f"int64({_I}[:, ::1], {_I}[::1])"],
                                          "address": [f"int64({_F2})"]},
}
