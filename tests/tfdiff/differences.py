"""Deliberate differences from TensorFlow: case id -> the reason we keep ours. The same list is
written up for users in ``docs/differences-from-tensorflow.md``; every entry must be a case
that really differs (``tests/test_tf_differential.py`` checks it)."""
_NAN_ARG = "argmax/argmin return the first NaN's index (NumPy's rule: NaN compares as the extreme)"
_NAN_SORT = "sort puts NaN last ascending and first descending (NumPy's total order, NaN largest)"
_UINT8_WRAP = ("a Python int out of the tensor dtype's range raises instead of wrapping "
               "(TF: uint8 + 300 adds 44, silently)")
_BOOL_ARITH = "arithmetic on bool tensors raises (TF accepts `*` on bools as a logical and, but not `+`)"
_BOOL_SCALAR = "a Python bool is 1/0 for every numeric dtype (TF refuses it for uint8 only)"

DELIBERATE = {
    "edge/argmax_nan": _NAN_ARG, "edge/argmin_nan": _NAN_ARG,
    "reduce/argmax/nan": _NAN_ARG, "reduce/argmin/nan": _NAN_ARG,
    "edge/sort_desc_nan": _NAN_SORT, "edge/sort_asc_nan": _NAN_SORT,
    "edge/log_softmax_inf": "log_softmax with +inf gives -inf for the finite entries and NaN at the inf "
                            "(the limit of x - logsumexp(x)); TF gives NaN everywhere",
    "edge/cumsum_float16": "float16/bfloat16 cumsum accumulates in float32 (TF accumulates in float16 "
                           "and stalls at 256 when adding 0.1)",
    "edge/clip_inverted": "clip_by_value with min > max gives max (minimum(maximum(x, min), max)); "
                          "TF's kernel gives min",
    "edge/avg_pool_big_window": "a VALID pooling window larger than the input raises (TF's avg_pool returns "
                                "an empty tensor and its max_pool kills the process with SIGFPE)",
    "edge/uint8_plus_300": _UINT8_WRAP,
    "grad/cumprod_zero": "cumprod's gradient is exact where x has zeros (TF divides by x and gives 0)",
    "grad/div_where": "x / y's gradient is 0 where the incoming gradient is 0, as TF does for sqrt, "
                      "rsqrt and reciprocal (TF gives NaN at y = 0 for division)",
    **{f"edge/depthwise_dilated_strided_{k}": "a dilated and strided depthwise convolution follows the definition "
       "(output size from the dilated window, taps every `dilation` pixels); TF warns that it does not support the "
       "combination and returns other shapes and values" for k in ("same", "valid10", "values")},
    "grad/bessel_i1": "bessel_i1's derivative at 0 is its limit 1/2 (I1(x) ~ x/2); TF evaluates I0 - I1/x as 1",
    "name/parallel_stack": "parallel_stack also runs eagerly (TF refuses outside graphs); it is stack there",
    "unary/math.rint/float16": "rint has a float16 kernel (TF has none on CPU)",
    "tf2/activations/gelu/float64": "float64 gelu is exact in float64 (Keras on TF rounds its 1/sqrt(2) "
                                    "to float32: 1e-9 off)",
    "tf2/activations/leaky_relu/float64": "float64 leaky_relu multiplies by the slope in float64 (TF's "
                                          "LeakyRelu keeps `alpha` as a float32 attribute: 0.2 is 0.2000000030)",
    **{f"tf2/nn/{k}": "approx_max_k/approx_min_k are exact on any axis (TF's CPU has no ApproxTopK kernel "
       "except for the largest values along the last axis, and raises NotFoundError)"
       for k in ("approx_max_k_dim0", "approx_min_k", "approx_top_k_min")},
    "tf2/keras_ops/math_approx_min_k": "approx_max_k/approx_min_k are exact on any axis (TF's CPU has no ApproxTopK "
                                       "kernel for the smallest values, and raises NotFoundError)",
    "tf2/keras_ops/vectorize": "keras.ops.vectorize works (Keras' TensorFlow backend refuses it; its JAX and NumPy "
                               "backends run it as here)",
    "tf2/linalg/grad_lu": "tf.linalg.lu has a gradient (TF 2.21 registers none: LookupError)",
    "tf2/linalg/grad_lu_solve": "tf.linalg.lu has a gradient (TF 2.21 registers none: LookupError)",
    "tf2/top/grad_dynamic_stitch": "dynamic_stitch's gradient is zero for entries overwritten by a later index "
                                   "(TF also sends gradient to them, so it is not the derivative)",
    "tf2/top/histogram_fixed_width_bins_int64": "histogram_fixed_width_bins returns the requested dtype (TF ignores "
                                                "`dtype` and returns int32)",
    **{f"promote/uint8/{op}/bigint": _UINT8_WRAP
       for op in ("add", "radd", "mul", "div", "floordiv", "less", "eq", "max")},
    **{f"promote/uint8/{op}/bool": _BOOL_SCALAR
       for op in ("add", "radd", "mul", "div", "floordiv", "less", "eq", "max")},
    **{f"promote/bool/mul/{s}": _BOOL_ARITH for s in ("int", "float", "frac", "bool", "bigint")},
}
