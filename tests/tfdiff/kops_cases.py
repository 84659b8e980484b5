"""Differential cases for the TF2/Keras names of issue 16's second ops pass: ``keras.activations``,
``keras.initializers``, ``tf.nn``, ``tf.linalg`` and top-level ``tf`` names, plus the generic ops on
sparse/ragged values. Same format as ``cases.py`` (one expression over ``tf``, ``np``, ``grad``);
the ids all start with ``tf2/`` so that their recorded results form one block of ``tf_results.json``.
"""
X = "tf.constant([-3.0, -1.0, -0.25, 0.0, 0.5, 2.0, 8.0])"
M = "tf.constant([[-1.0, 0.5, 2.0, 0.0], [3.0, -2.0, 0.25, 1.0]])"
X64 = "tf.constant([-3.0, -0.25, 0.0, 0.5, 2.0], tf.float64)"


def _activations():
    unary = ["celu", "elu", "exponential", "gelu", "hard_shrink", "hard_sigmoid", "hard_silu", "hard_swish",
             "hard_tanh", "leaky_relu", "linear", "log_sigmoid", "mish", "relu", "relu6", "selu", "sigmoid",
             "silu", "soft_shrink", "softplus", "softsign", "sparse_plus", "sparse_sigmoid", "squareplus", "swish",
             "tanh", "tanh_shrink"]
    for n in unary:
        yield f"tf2/activations/{n}", "keras.activations", f"tf.keras.activations.{n}({X})"
        yield f"tf2/activations/{n}/float64", "keras.activations", f"tf.keras.activations.{n}({X64})"
    for n in ("softmax", "log_softmax", "sparsemax", "glu"):
        yield f"tf2/activations/{n}", "keras.activations", f"tf.keras.activations.{n}({M})"
        yield f"tf2/activations/{n}/axis0", "keras.activations", f"tf.keras.activations.{n}({M}, axis=0)"
    calls = {
        "celu_alpha": f"tf.keras.activations.celu({X}, alpha=0.5)",
        "elu_alpha": f"tf.keras.activations.elu({X}, alpha=0.5)",
        "gelu_approx": f"tf.keras.activations.gelu({X}, approximate=True)",
        "hard_shrink_t": f"tf.keras.activations.hard_shrink({X}, threshold=1.0)",
        "soft_shrink_t": f"tf.keras.activations.soft_shrink({X}, threshold=1.0)",
        "squareplus_b": f"tf.keras.activations.squareplus({X}, b=1)",
        "threshold": f"tf.keras.activations.threshold({X}, 0.4, -7.0)",
        "leaky_relu_slope": f"tf.keras.activations.leaky_relu({X}, negative_slope=0.1)",
        "relu_max": f"tf.keras.activations.relu({X}, max_value=1.5)",
        "relu_max6": f"tf.keras.activations.relu({X}, max_value=6.0)",
        "relu_threshold": f"tf.keras.activations.relu({X}, threshold=0.4)",
        "relu_negative_threshold_max": f"tf.keras.activations.relu({X}, threshold=-0.5, max_value=4.0)",
        "relu_slope_threshold_max": f"tf.keras.activations.relu({X}, negative_slope=0.1, threshold=1.0, max_value=5.0)",
        "relu_slope": f"tf.keras.activations.relu({X}, negative_slope=0.1)",
        "get_mish": f"tf.keras.activations.get('mish')({X})",
        "get_hard_swish": f"tf.keras.activations.get('hard_swish')({X})",
        "get_sparsemax": f"tf.keras.activations.get('sparsemax')({M})",
        "deserialize_mish": f"tf.keras.activations.deserialize('mish')({X})",
        "deserialize_celu": f"tf.keras.activations.deserialize('celu')({X})",
        "serialize_mish": "tf.keras.activations.serialize(tf.keras.activations.mish)",
        "serialize_relu": "tf.keras.activations.serialize(tf.keras.activations.relu)",
        "get_unknown": "tf.keras.activations.get('no_such_activation')",
        "grad_mish": "grad(tf.keras.activations.mish, [-2.0, 0.0, 1.5])",
        "grad_celu": "grad(tf.keras.activations.celu, [-2.0, 0.5, 1.5])",
        "grad_squareplus": "grad(tf.keras.activations.squareplus, [-2.0, 0.0, 1.5])",
        "grad_log_sigmoid": "grad(tf.keras.activations.log_sigmoid, [-2.0, 0.0, 1.5])",
        "grad_tanh_shrink": "grad(tf.keras.activations.tanh_shrink, [-2.0, 0.5, 1.5])",
        "grad_glu": "grad(tf.keras.activations.glu, [[-2.0, 0.5, 1.5, 0.25]])",
    }
    for n, src in calls.items():
        yield f"tf2/activations/{n}", "keras.activations", src


def _std(init, expected):
    return f"tf.abs(tf.math.reduce_std({init}) / ({expected}) - 1.0) < 0.01"


def _initializers():
    k = "tf.keras.initializers"
    calls = {
        "identity": f"{k}.Identity()((2, 3))",
        "identity_gain": f"{k}.Identity(gain=2.0)((3, 2))",
        "identity_lower": f"{k}.identity(gain=0.5)((2, 2))",
        "identity_old_name": f"{k}.IdentityInitializer(gain=3.0)((2, 2))",
        "identity_rank3": f"{k}.Identity()((2, 3, 4))",
        "identity_get": f"{k}.get('identity')((2, 2))",
        "identity_deserialize": f"{k}.deserialize({{'class_name': 'IdentityInitializer', 'config': {{'gain': 2.0}}}})((2, 2))",
        "orthogonal_rank1": f"{k}.Orthogonal()((3,))",
        "orthogonal_shape": f"{k}.Orthogonal(seed=1)((2, 3, 4)).shape",
        "orthogonal_old_name_rank1": f"{k}.OrthogonalInitializer()((3,))",
        "orthogonal_columns": f"tf.round(tf.matmul({k}.Orthogonal(seed=3)((5, 3)), {k}.Orthogonal(seed=3)((5, 3)), "
                              "transpose_a=True) * 1000.0)",
        "orthogonal_rows_gain": f"tf.round(tf.matmul({k}.orthogonal(gain=2.0, seed=4)((3, 5)), "
                                f"{k}.orthogonal(gain=2.0, seed=4)((3, 5)), transpose_b=True) * 1000.0)",
        "variance_scaling_negative": f"{k}.VarianceScaling(scale=-1.0)",
        "variance_scaling_mode": f"{k}.VarianceScaling(mode='fan_sideways')",
        "variance_scaling_distribution": f"{k}.VarianceScaling(distribution='cauchy')",
        "variance_scaling_normal_is_truncated": f"{k}.VarianceScaling(distribution='normal').distribution",
        "variance_scaling_upper": f"{k}.VarianceScaling(distribution='Uniform').distribution",
        "variance_scaling_config": f"{k}.variance_scaling(2.0, 'fan_out', seed=3).get_config()['mode']",
        "he_normal_int": f"{k}.HeNormal(seed=1)((3, 4), dtype='int32')",
        "random_normal_int": f"{k}.RandomNormal()((2,), dtype='int32')",
        "truncated_normal_int": f"{k}.TruncatedNormal()((2,), dtype='int32')",
        "serialize_he_normal": f"{k}.serialize({k}.HeNormal(seed=3))['class_name']",
        "serialize_config": f"{k}.serialize({k}.GlorotNormal(seed=3))['config']['seed']",
        "initializer_base": f"{k}.Initializer().get_config()",
        "truncated_normal_dtype": f"{k}.truncated_normal(seed=1)((3,), dtype='float64').dtype.name",
        "he_uniform_bound": f"tf.reduce_all(tf.abs({k}.HeUniform(seed=1)((50, 40))) <= (6.0 / 50) ** 0.5)",
        "lecun_uniform_bound": f"tf.reduce_all(tf.abs({k}.lecun_uniform(seed=1)((3, 3, 10, 8))) <= (3.0 / 90) ** 0.5)",
        "glorot_normal_bound": f"tf.reduce_all(tf.abs({k}.glorot_normal(seed=2)((30, 20))) <= "
                               "2.0 * (2.0 / 50) ** 0.5 / 0.87962566103423978)",
        "truncated_bound": f"tf.reduce_all(tf.abs({k}.TruncatedNormal(stddev=0.5, seed=2)((40, 40))) <= 1.0)",
        # Sample standard deviations against the initializer's formula, to 1 % (120,000 draws pin them
        # to about 0.3 %).
        "he_normal_std": _std(f"{k}.HeNormal(seed=1)((400, 300))", "(2 / 400) ** 0.5"),
        "he_uniform_std": _std(f"{k}.he_uniform(seed=1)((400, 300))", "(2 / 400) ** 0.5"),
        "lecun_normal_std": _std(f"{k}.LecunNormal(seed=1)((20, 20, 300))", "(1 / 400) ** 0.5"),
        "lecun_uniform_std": _std(f"{k}.LecunUniform(seed=1)((300, 400))", "(1 / 300) ** 0.5"),
        "glorot_normal_std": _std(f"{k}.GlorotNormal(seed=1)((300, 500))", "(2 / 800) ** 0.5"),
        "glorot_uniform_std": _std(f"{k}.GlorotUniform(seed=1)((300, 500))", "(2 / 800) ** 0.5"),
        "variance_scaling_avg_std": _std(f"{k}.VarianceScaling(3.0, 'fan_avg', 'untruncated_normal', seed=1)"
                                         "((300, 500))", "(3 / 400) ** 0.5"),
        "variance_scaling_axes_std": _std(f"{k}.VarianceScaling(1.0, 'fan_in', 'uniform', seed=1, input_axes=[0, 1], "
                                          "output_axes=[2])((10, 30, 400))", "(1 / 300) ** 0.5"),
        "he_normal_axes_std": _std(f"{k}.he_normal(seed=1, input_axes=[2], output_axes=[0])((10, 30, 400))",
                                   "(2 / 400) ** 0.5"),
        "truncated_normal_std": _std(f"{k}.truncated_normal(stddev=2.0, seed=1)((300, 400))", "2 * 0.8796257"),
        "random_normal_std": _std(f"{k}.random_normal(stddev=2.0, seed=1)((300, 400))", "2.0"),
        "seeded_repeats": f"tf.reduce_all({k}.RandomNormal(seed=5)((4, 3)) == {k}.RandomNormal(seed=5)((4, 3)))",
        "seeded_instance_repeats": f"(lambda i: tf.reduce_all(i((4,)) == i((4,))))({k}.GlorotUniform(seed=5))",
    }
    for n, src in calls.items():
        yield f"tf2/initializers/{n}", "keras.initializers", src


def _r(shape, dtype="float32", scale=1.0):
    """A deterministic, tie-free input: a permutation of 0..n-1 times ``scale``, shaped."""
    n = 1
    for d in shape:
        n *= d
    return f"tf.reshape(tf.cast((tf.range({n}) * 7919) % {n}, tf.{dtype}) * {scale}, {list(shape)})"


def _nn():
    img = _r((2, 4, 4, 8), scale=0.1)
    im5 = _r((2, 5, 6, 3), scale=0.25)
    neg = f"({im5} - 10.0)"
    sv = "(tf.constant([1, 5, 7], tf.int64), tf.constant([[0.3], [0.2]]), tf.constant([0.3, 0.1, 0.2]))"
    emb = _r((10, 4), scale=0.05)
    calls = {
        "crelu": f"tf.nn.crelu({M})",
        "crelu_axis0": f"tf.nn.crelu({M}, axis=0)",
        "depth_to_space": f"tf.nn.depth_to_space({img}, 2)",
        "depth_to_space_indivisible": f"tf.nn.depth_to_space({im5}, 2)",
        "depth_to_space_block1": f"tf.nn.depth_to_space({img}, 1)",
        "space_to_depth": f"tf.nn.space_to_depth({img}, 2)",
        "space_to_depth_indivisible": f"tf.nn.space_to_depth({im5}, 2)",
        "space_to_batch": f"tf.space_to_batch({im5}, [2, 3], [[1, 0], [0, 0]])",
        "space_to_batch_nn": f"tf.nn.space_to_batch({im5}, [2, 3], [[1, 0], [0, 0]])",
        "space_to_batch_nd_1d": f"tf.space_to_batch_nd({_r((2, 6, 2))}, [3], [[1, 2]])",
        "space_to_batch_nd_bad": f"tf.space_to_batch_nd({im5}, [2, 2], [[0, 0], [0, 0]])",
        "batch_to_space": f"tf.batch_to_space({_r((12, 2, 2, 1))}, [2, 3], [[1, 0], [0, 2]])",
        "batch_to_space_roundtrip": f"tf.batch_to_space(tf.space_to_batch({im5}, [2, 3], [[1, 0], [0, 0]]), "
                                    "[2, 3], [[1, 0], [0, 0]])",
        "batch_to_space_bad": f"tf.batch_to_space({_r((5, 2, 2, 1))}, [2, 2], [[0, 0], [0, 0]])",
        "required_paddings": "tf.required_space_to_batch_paddings([5, 7], [2, 3])",
        "required_paddings_base": "tf.required_space_to_batch_paddings([5, 7], [2, 3], [[1, 0], [2, 2]])",
        "lrn": f"tf.nn.lrn({img}, 2, 1.5, 0.3, 0.75)",
        "local_response_normalization": f"tf.nn.local_response_normalization({img})",
        "lrn_radius0": f"tf.nn.local_response_normalization({img}, depth_radius=0, bias=2.0)",
        "sufficient_statistics": f"tf.nn.sufficient_statistics({M}, [1])",
        "sufficient_statistics_shift": f"tf.nn.sufficient_statistics({M}, [0, 1], shift=0.5, keepdims=True)",
        "normalize_moments": f"tf.nn.normalize_moments(4.0, tf.constant([2.0, 6.0]), tf.constant([5.0, 17.0]), 1.0)",
        "normalize_moments_noshift": f"tf.nn.normalize_moments(4.0, tf.constant([2.0, 6.0]), tf.constant([5.0, 17.0]), None)",
        "weighted_moments": f"tf.nn.weighted_moments({M}, [1], tf.constant([[1.0], [3.0]]))",
        "weighted_moments_keepdims": f"tf.nn.weighted_moments({M}, [0, 1], tf.constant([1.0, 0.0, 2.0, 1.0]), keepdims=True)",
        "weighted_moments_zero_weight": f"tf.nn.weighted_moments({M}, [1], tf.zeros([2, 1]))",
        "compute_average_loss": "tf.nn.compute_average_loss([1.0, 2.0, 4.0])",
        "compute_average_loss_weights": "tf.nn.compute_average_loss([1.0, 2.0, 4.0], sample_weight=[1.0, 0.0, 0.5])",
        "compute_average_loss_scalar_weight": "tf.nn.compute_average_loss([[1.0, 2.0], [4.0, 3.0]], sample_weight=2.0)",
        "compute_average_loss_global": "tf.nn.compute_average_loss([1.0, 2.0, 4.0], global_batch_size=8)",
        "compute_average_loss_scalar": "tf.nn.compute_average_loss(3.0)",
        "compute_average_loss_float_batch": "tf.nn.compute_average_loss([1.0, 2.0], global_batch_size=2.0)",
        "compute_average_loss_float64": "tf.nn.compute_average_loss(tf.constant([1.0, 2.0], tf.float64))",
        "scale_regularization_loss": "tf.nn.scale_regularization_loss(2.5)",
        "scale_regularization_loss_list": "tf.nn.scale_regularization_loss([tf.constant(1.0), tf.constant(2.5)])",
        "max_pool_with_argmax": f"tf.nn.max_pool_with_argmax({im5}, 2, 2, 'VALID')",
        "max_pool_with_argmax_same": f"tf.nn.max_pool_with_argmax({neg}, [1, 3, 3, 1], [1, 2, 2, 1], 'SAME')",
        "max_pool_with_argmax_batch": f"tf.nn.max_pool_with_argmax({im5}, 2, [1, 2], 'SAME', "
                                      "include_batch_in_index=True, output_dtype=tf.int32)",
        "max_pool_with_argmax_ties": "tf.nn.max_pool_with_argmax(tf.ones([1, 2, 2, 1]), 2, 2, 'VALID')",
        "dilation2d_same": f"tf.nn.dilation2d({im5}, tf.reshape(tf.range(18.0) * 0.1 - 0.5, [2, 3, 3]), "
                           "[1, 1, 1, 1], 'SAME', 'NHWC', [1, 1, 1, 1])",
        "dilation2d_strided_rates": f"tf.nn.dilation2d({neg}, tf.reshape(tf.range(12.0) * 0.1, [2, 2, 3]), "
                                    "[1, 2, 1, 1], 'VALID', 'NHWC', [1, 2, 2, 1])",
        "dilation2d_bad_depth": f"tf.nn.dilation2d({im5}, tf.zeros([2, 2, 2]), [1, 1, 1, 1], 'SAME', 'NHWC', [1, 1, 1, 1])",
        "erosion2d_same": f"tf.nn.erosion2d({im5}, tf.reshape(tf.range(18.0) * 0.1, [2, 3, 3]), "
                          "[1, 1, 1, 1], 'SAME', 'NHWC', [1, 1, 1, 1])",
        "erosion2d_strided": f"tf.nn.erosion2d({neg}, tf.reshape(tf.range(12.0) * 0.1, [2, 2, 3]), "
                             "[1, 2, 2, 1], 'VALID', 'NHWC', [1, 1, 2, 1])",
        "approx_max_k": f"tf.nn.approx_max_k({M}, 2)",
        "approx_max_k_dim0": f"tf.nn.approx_max_k({M}, 1, reduction_dimension=0)",
        "approx_min_k": f"tf.nn.approx_min_k({M}, 3)",
        "approx_top_k": f"tf.approx_top_k({M}, 2)",
        "approx_top_k_min": f"tf.approx_top_k({M}, 2, is_max_k=False)",
        "bn_global": f"tf.nn.batch_norm_with_global_normalization({M}, tf.constant([0.5, 0.0, 1.0, -1.0]), "
                     "tf.constant([1.0, 2.0, 0.5, 4.0]), tf.constant([0.1, 0.2, 0.3, 0.4]), tf.constant([2.0, 1.0, 3.0, 0.5]), "
                     "0.001, True)",
        "bn_global_noscale": f"tf.nn.batch_norm_with_global_normalization({M}, tf.constant([0.5, 0.0, 1.0, -1.0]), "
                             "tf.constant([1.0, 2.0, 0.5, 4.0]), tf.constant([0.1, 0.2, 0.3, 0.4]), "
                             "tf.constant([2.0, 1.0, 3.0, 0.5]), 0.001, False)",
        "depthwise_backprop_input": f"tf.nn.depthwise_conv2d_backprop_input([2, 5, 6, 3], {_r((2, 2, 3, 2), scale=0.1)}, "
                                    f"{_r((2, 3, 3, 6), scale=0.01)}, [1, 2, 2, 1], 'SAME')",
        "depthwise_backprop_filter": f"tf.nn.depthwise_conv2d_backprop_filter({im5}, [2, 2, 3, 2], "
                                     f"{_r((2, 3, 3, 6), scale=0.01)}, [1, 2, 2, 1], 'SAME')",
        "depthwise_backprop_filter_dilated": f"tf.nn.depthwise_conv2d_backprop_filter({im5}, [2, 2, 3, 1], "
                                             f"{_r((2, 4, 5, 3), scale=0.01)}, [1, 1, 1, 1], 'VALID', dilations=[1, 1])",
        "atrous_conv2d_transpose": f"tf.nn.atrous_conv2d_transpose({_r((1, 5, 6, 2), scale=0.1)}, "
                                   f"{_r((3, 3, 3, 2), scale=0.1)}, [1, 5, 6, 3], 2, 'SAME')",
        "atrous_conv2d_transpose_valid": f"tf.nn.atrous_conv2d_transpose({_r((1, 1, 2, 2), scale=0.1)}, "
                                         f"{_r((3, 3, 3, 2), scale=0.1)}, [1, 5, 6, 3], 2, 'VALID')",
        "atrous_conv2d": f"tf.nn.atrous_conv2d({im5}, {_r((2, 2, 3, 2), scale=0.1)}, 2, 'SAME')",
        "avg_pool3d": f"tf.nn.avg_pool3d(tf.reshape({im5}, [2, 5, 6, 3, 1]), 2, 2, 'VALID')",
        "max_pool3d": f"tf.nn.max_pool3d(tf.reshape({im5}, [2, 5, 6, 3, 1]), 2, 1, 'SAME')",
        "conv1d_transpose": f"tf.nn.conv1d_transpose({_r((2, 3, 2), scale=0.1)}, {_r((3, 4, 2), scale=0.1)}, "
                            "[2, 6, 4], 2, 'SAME')",
        "conv3d_transpose": f"tf.nn.conv3d_transpose({_r((1, 2, 2, 2, 2), scale=0.1)}, {_r((2, 2, 2, 3, 2), scale=0.1)}, "
                            "[1, 4, 4, 4, 3], 2, 'SAME')",
        "pool_max": f"tf.nn.pool({im5}, [2, 2], 'MAX', strides=[2, 2], padding='SAME')",
        "pool_avg_1d": f"tf.nn.pool({_r((2, 6, 2))}, [3], 'AVG', strides=[1], padding='VALID')",
        "silu": f"tf.nn.silu({X})", "silu_beta": f"tf.nn.silu({X}, beta=0.5)", "swish": f"tf.nn.swish({X})",
        "softsign": f"tf.nn.softsign({X})",
        "in_top_k": f"tf.nn.in_top_k([1, 0], {M}, 2)",
        "zero_fraction": f"tf.nn.zero_fraction({M})",
        "all_candidate_sampler": "tf.nn.all_candidate_sampler(tf.constant([[1], [3]], tf.int64), 1, 5, True)",
        "compute_accidental_hits": "tf.nn.compute_accidental_hits(tf.constant([[1, 2], [5, 0]], tf.int64), "
                                   "tf.constant([0, 5, 2, 7], tf.int64), 2)",
        "compute_accidental_hits_repeats": "tf.nn.compute_accidental_hits(tf.constant([[2, 2], [7, 0]], tf.int64), "
                                           "tf.constant([2, 5, 2, 7], tf.int64), 2)",
        "fixed_unigram_sampler_shape": "[t.shape for t in tf.nn.fixed_unigram_candidate_sampler(tf.constant([[1], [3]], "
                                       "tf.int64), 1, 4, True, 6, unigrams=[1.0, 2.0, 3.0, 1.0, 1.0, 2.0])]",
        "nce_loss": f"tf.nn.nce_loss({emb}, tf.range(10.0) * 0.01, tf.constant([[2], [9]], tf.int64), {_r((2, 4), scale=0.1)}, 3, 10, "
                    f"sampled_values={sv})",
        "nce_loss_sharded": f"tf.nn.nce_loss(tf.split({emb}, [4, 3, 3]), tf.range(10.0) * 0.01, tf.constant([[2], [9]], tf.int64), "
                            f"{_r((2, 4), scale=0.1)}, 3, 10, sampled_values={sv})",
        "nce_loss_accidental": f"tf.nn.nce_loss({emb}, tf.range(10.0) * 0.01, tf.constant([[5], [9]], tf.int64), {_r((2, 4), scale=0.1)}, 3, 10, "
                               f"sampled_values={sv}, remove_accidental_hits=True)",
        "sampled_softmax_loss": f"tf.nn.sampled_softmax_loss({emb}, tf.range(10.0) * 0.01, tf.constant([[5], [9]], tf.int64), "
                                f"{_r((2, 4), scale=0.1)}, 3, 10, sampled_values={sv})",
        "sampled_softmax_loss_sharded": f"tf.nn.sampled_softmax_loss(tf.split({emb}, [4, 3, 3]), tf.range(10.0) * 0.01, "
                                        f"tf.constant([[2], [9]], tf.int64), {_r((2, 4), scale=0.1)}, 3, 10, sampled_values={sv})",
        "grad_crelu": "grad(lambda x: tf.nn.crelu(x) * [1.0, 2.0, 3.0, 4.0], [-1.0, 2.0])",
        "grad_lrn": f"grad(lambda x: tf.nn.lrn(x, 1, 1.0, 0.5, 0.75) * {_r((1, 1, 2, 4))}, "
                    "[[[[1.0, -2.0, 0.5, 3.0], [0.25, 1.0, -1.0, 2.0]]]])",
        "grad_dilation2d": "grad(lambda x, f: tf.nn.dilation2d(x, f, [1, 1, 1, 1], 'VALID', 'NHWC', [1, 1, 1, 1]), "
                           "[[[[1.0], [5.0], [2.0]], [[3.0], [0.0], [4.0]]]], [[[0.5], [0.0]], [[1.0], [0.25]]])",
        "grad_max_pool_with_argmax": f"grad(lambda x: tf.nn.max_pool_with_argmax(x, 2, 2, 'VALID')[0] * 1.0, "
                                     "[[[[1.0], [5.0]], [[3.0], [0.0]]]])",
        "grad_weighted_moments": "grad(lambda x: tf.nn.weighted_moments(x, [0], [1.0, 2.0, 1.0])[1], [1.0, 4.0, 2.0])",
        "grad_space_to_depth": f"grad(lambda x: tf.nn.space_to_depth(x, 2) * {_r((1, 1, 1, 4))}, [[[[1.0], [2.0]], [[3.0], [4.0]]]])",
    }
    for n, src in calls.items():
        yield f"tf2/nn/{n}", "tf.nn", src


def _linear_operators():
    L = "tf.linalg"
    a = "[[4.0, 1.0, 0.5], [1.0, 3.0, 0.25], [0.5, 0.25, 2.0]]"
    x = "tf.constant([[1.0, -2.0], [0.5, 3.0], [2.0, 1.0]])"
    v = "tf.constant([1.0, -2.0, 0.5])"
    ops = {
        "full": f"{L}.LinearOperatorFullMatrix({a}, is_self_adjoint=True, is_positive_definite=True)",
        "full_batch": f"{L}.LinearOperatorFullMatrix([{a}, [[2.0, 0.0, 1.0], [0.0, 1.0, 0.0], [1.0, 0.0, 3.0]]])",
        "diag": f"{L}.LinearOperatorDiag([2.0, -0.5, 4.0])",
        "identity": f"{L}.LinearOperatorIdentity(3)",
        "identity_batch": f"{L}.LinearOperatorIdentity(3, batch_shape=[2])",
        "scaled_identity": f"{L}.LinearOperatorScaledIdentity(3, -2.0)",
        "lower_triangular": f"{L}.LinearOperatorLowerTriangular({a})",
        "composition": f"{L}.LinearOperatorComposition([{L}.LinearOperatorFullMatrix({a}), {L}.LinearOperatorDiag([2.0, -0.5, 4.0])])",
        "adjoint": f"{L}.LinearOperatorAdjoint({L}.LinearOperatorLowerTriangular({a}))",
        "inversion": f"{L}.LinearOperatorInversion({L}.LinearOperatorFullMatrix({a}))",
        "block_diag": f"{L}.LinearOperatorBlockDiag([{L}.LinearOperatorFullMatrix([[2.0, 1.0], [0.5, 3.0]]), {L}.LinearOperatorDiag([5.0])])",
        "block_lower": f"{L}.LinearOperatorBlockLowerTriangular([[{L}.LinearOperatorDiag([1.0, 2.0])], "
                       f"[{L}.LinearOperatorFullMatrix([[7.0, 8.0]]), {L}.LinearOperatorDiag([5.0])]])",
        "kronecker": f"{L}.LinearOperatorKronecker([{L}.LinearOperatorFullMatrix([[2.0, 1.0], [0.5, 3.0]]), "
                     f"{L}.LinearOperatorDiag([1.0, -3.0])])",
        "low_rank": f"{L}.LinearOperatorLowRankUpdate({L}.LinearOperatorDiag([2.0, 1.0, 4.0]), [[1.0], [2.0], [0.5]])",
        "low_rank_dv": f"{L}.LinearOperatorLowRankUpdate({L}.LinearOperatorFullMatrix({a}), [[1.0, 0.0], [2.0, 1.0], [0.5, 1.0]], "
                       "diag_update=[0.5, 2.0], v=[[0.0, 1.0], [1.0, 1.0], [0.5, -1.0]])",
        "permutation": f"{L}.LinearOperatorPermutation([2, 0, 1])",
        "toeplitz": f"{L}.LinearOperatorToeplitz([4.0, 1.0, 0.5], [9.0, -1.0, 0.25])",
        "tridiag": f"{L}.LinearOperatorTridiag([[1.0, 2.0, 0.0], [4.0, 5.0, 6.0], [0.0, 3.0, 9.0]])",
        "tridiag_sequence": f"{L}.LinearOperatorTridiag([[1.0, 2.0, 0.0], [4.0, 5.0, 6.0], [0.0, 3.0, 9.0]], 'sequence')",
        "tridiag_matrix": f"{L}.LinearOperatorTridiag({a}, diagonals_format='matrix')",
        "householder": f"{L}.LinearOperatorHouseholder([1.0, 2.0, 2.0])",
        "circulant_real": f"{L}.LinearOperatorCirculant([6.0, -1.0, -1.0], input_output_dtype=tf.float32)",
    }
    methods = {"to_dense": ".to_dense()", "matmul": f".matmul({x})", "matmul_adjoint": f".matmul({x}, adjoint=True)",
               "matmul_adjoint_arg": f".matmul(tf.transpose({x}), adjoint_arg=True)", "matvec": f".matvec({v})",
               "solve": f".solve({x})", "solve_adjoint": f".solve({x}, adjoint=True)", "solvevec": f".solvevec({v})",
               "determinant": ".determinant()", "log_abs_determinant": ".log_abs_determinant()",
               "diag_part": ".diag_part()", "trace": ".trace()", "add_to_tensor": ".add_to_tensor(tf.ones([3, 3]))",
               "shape": ".shape", "batch_shape": ".batch_shape", "adjoint_dense": ".adjoint().to_dense()",
               "H_dense": ".H.to_dense()", "inverse_dense": ".inverse().to_dense()",
               "is_self_adjoint": ".is_self_adjoint", "is_square": ".is_square"}
    for on, ctor in ops.items():
        for mn, call in methods.items():
            if on.startswith("identity_batch") and mn in ("matvec", "solvevec"):
                continue
            yield f"tf2/linalg_op/{on}/{mn}", "tf.linalg operators", f"{ctor}{call}"
    extra = {
        "full/cholesky_dense": f"{ops['full']}.cholesky().to_dense()",
        "full/eigvals": f"{ops['full']}.eigvals()",
        "full/cond": f"{ops['full']}.cond()",
        "full/cholesky_not_pd": f"{L}.LinearOperatorFullMatrix({a}).cholesky()",
        "full/eigvals_not_sa": f"{L}.LinearOperatorFullMatrix({a}).eigvals()",
        "full/non_square_solve": f"{L}.LinearOperatorFullMatrix([[1.0, 2.0]]).solve([[1.0]])",
        "full/non_square_shape": f"{L}.LinearOperatorFullMatrix([[1.0, 2.0]]).shape",
        "full/non_square_is_square": f"{L}.LinearOperatorFullMatrix([[1.0, 2.0]]).is_square",
        "full/int_matrix": f"{L}.LinearOperatorFullMatrix([[1, 2], [3, 4]])",
        "full/bad_matmul": f"{ops['full']}.matmul(tf.ones([2, 2]))",
        "full/matmul_operator": f"{ops['full']}.matmul({ops['diag']}).to_dense()",
        "full/solve_operator": f"{ops['full']}.solve({ops['diag']}).to_dense()",
        "full/matmul_dtype": f"{ops['full']}.matmul(tf.ones([3, 1], tf.float64))",
        "full/pd_singular_hint": f"{L}.LinearOperatorFullMatrix({a}, is_positive_definite=True, is_non_singular=False)",
        "diag/is_self_adjoint_hint": f"{ops['diag']}.is_self_adjoint",
        "diag/not_self_adjoint": f"{L}.LinearOperatorDiag([1.0, 2.0], is_self_adjoint=False)",
        "diag/inverse_solve": f"{ops['diag']}.inverse().solve({x})",
        "diag/inverse_det": f"{ops['diag']}.inverse().determinant()",
        "diag/float64": f"{L}.LinearOperatorDiag(tf.constant([1.0, 2.0], tf.float64)).matvec(tf.constant([1.0, 1.0], tf.float64))",
        "identity/hints": f"[{ops['identity']}.is_non_singular, {ops['identity']}.is_positive_definite]",
        "identity/bad_hint": f"{L}.LinearOperatorIdentity(3, is_self_adjoint=False)",
        "identity/float64": f"{L}.LinearOperatorIdentity(2, dtype=tf.float64).to_dense()",
        "zeros/non_square_default": f"{L}.LinearOperatorZeros(2, 3).to_dense()",
        "zeros/non_square_self_adjoint": f"{L}.LinearOperatorZeros(2, 3, is_square=False).to_dense()",
        "zeros/to_dense": f"{L}.LinearOperatorZeros(2, 3, is_square=False, is_self_adjoint=False).to_dense()",
        "zeros/matmul": f"{L}.LinearOperatorZeros(2, 3, is_square=False, is_self_adjoint=False).matmul(tf.ones([3, 4]))",
        "zeros/matmul_adjoint": f"{L}.LinearOperatorZeros(2, 3, is_square=False, is_self_adjoint=False).matmul(tf.ones([2, 4]), adjoint=True)",
        "zeros/shape": f"{L}.LinearOperatorZeros(2, 3, batch_shape=[4], is_square=False, is_self_adjoint=False).shape",
        "zeros/square_det": f"{L}.LinearOperatorZeros(2).determinant()",
        "zeros/diag_part": f"{L}.LinearOperatorZeros(2, 3, is_square=False, is_self_adjoint=False).diag_part()",
        "zeros/inverse": f"{L}.LinearOperatorZeros(2).inverse()",
        "zeros/hint": f"{L}.LinearOperatorZeros(2, is_non_singular=True)",
        "composition/empty": f"{L}.LinearOperatorComposition([])",
        "composition/name": f"{ops['composition']}.name",
        "adjoint/name": f"{ops['adjoint']}.name",
        "inversion/name": f"{ops['inversion']}.name",
        "inversion/singular": f"{L}.LinearOperatorInversion({L}.LinearOperatorFullMatrix({a}, is_non_singular=False))",
        "block_lower/bad_rows": f"{L}.LinearOperatorBlockLowerTriangular([[{ops['diag']}, {ops['diag']}]])",
        "permutation/float64": f"{L}.LinearOperatorPermutation([[1, 0, 2], [2, 1, 0]], dtype=tf.float64).to_dense()",
        "permutation/batch_det": f"{L}.LinearOperatorPermutation([[1, 0, 2], [2, 0, 1]]).determinant()",
        "permutation/batch_matmul": f"{L}.LinearOperatorPermutation([[1, 0, 2], [2, 0, 1]]).matmul({x})",
        "householder/hints": f"[{ops['householder']}.is_self_adjoint, {ops['householder']}.is_positive_definite]",
        "householder/bad_hint": f"{L}.LinearOperatorHouseholder([1.0, 2.0], is_positive_definite=True)",
        "tridiag/bad_format": f"{L}.LinearOperatorTridiag({a}, diagonals_format='banded')",
        "circulant/complex_dense": f"{L}.LinearOperatorCirculant(tf.constant([1.0, 2.0, 3.0], tf.complex64)).to_dense()",
        "circulant/dtype": f"{L}.LinearOperatorCirculant([1.0, 2.0, 3.0]).dtype",
        "circulant2d": f"{L}.LinearOperatorCirculant2D([[4.0, 1.0], [1.0, 2.0]], input_output_dtype=tf.float32).to_dense()",
        "circulant2d_3x2": f"{L}.LinearOperatorCirculant2D([[4.0, 1.0], [1.0, 2.0], [3.0, 0.5]]).to_dense()",
        "circulant3d": f"{L}.LinearOperatorCirculant3D(tf.reshape(tf.range(1.0, 9.0), [2, 2, 2]), "
                       "input_output_dtype=tf.float32).to_dense()",
        "circulant3d_shape": f"{L}.LinearOperatorCirculant3D(tf.ones([2, 2, 3, 2])).shape",
        "grad_diag_logdet": f"grad(lambda d: {L}.LinearOperatorDiag(d).log_abs_determinant(), [2.0, -0.5])",
        "grad_low_rank_solve": f"grad(lambda u: {L}.LinearOperatorLowRankUpdate({ops['diag']}, u).solvevec({v}), "
                               "[[1.0], [2.0], [0.5]])",
        "grad_kronecker_dense": f"grad(lambda a: {L}.LinearOperatorKronecker([{L}.LinearOperatorFullMatrix(a), "
                                f"{L}.LinearOperatorDiag([1.0, -3.0])]).to_dense() * tf.range(16.0), [[2.0, 1.0], [0.5, 3.0]])",
    }
    for n, src in extra.items():
        yield f"tf2/linalg_op/{n}", "tf.linalg operators", src


def _linalg():
    a = "tf.constant([[4.0, 1.0, 0.5], [1.0, 3.0, 0.25], [0.5, 0.25, 2.0]])"
    g = "tf.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 10.0]])"
    n = "tf.constant([[0.5, -1.0], [2.0, 0.25]])"
    a64 = "tf.constant([[4.0, 1.0], [1.0, 3.0]], tf.float64)"
    tri = "tf.constant([[1.0, 2.0, 0.0], [4.0, 5.0, 6.0], [0.0, 3.0, 9.0]])"
    rhs = "tf.constant([[1.0, -2.0], [0.5, 3.0], [2.0, 1.0]])"
    calls = {
        "expm": f"tf.linalg.expm({a} * 0.25)", "expm_nonsym": f"tf.linalg.expm({n})",
        "expm_batch": f"tf.linalg.expm(tf.stack([{n}, -{n}]))", "expm_float64": f"tf.linalg.expm({a64})",
        "expm_zeros": "tf.linalg.expm(tf.zeros([2, 2]))", "expm_int": "tf.linalg.expm([[1, 2], [3, 4]])",
        "expm_nonsquare": "tf.linalg.expm(tf.ones([2, 3]))",
        "sqrtm": f"tf.linalg.sqrtm({a})", "sqrtm_nonsym": f"tf.linalg.sqrtm({n} + 2.0 * tf.eye(2))",
        "matrix_square_root": f"tf.matrix_square_root({a64})",
        "sqrtm_batch": f"tf.linalg.sqrtm(tf.stack([{a}, {a} * 2.0]))",
        "logm": f"tf.linalg.logm(tf.cast({a}, tf.complex64))",
        "logm_float": f"tf.linalg.logm({a})",
        "eigvals_sym": f"tf.linalg.eigvals({a})", "eigvals_rotation": "tf.eigvals(tf.constant([[0.0, 1.0], [-1.0, 0.0]]))",
        "eigvals_general": f"tf.linalg.eigvals({g})", "eig_values": f"tf.eig({g})[0]",
        "eig_vector_moduli": f"tf.abs(tf.linalg.eig({a})[1])", "eig_float64": f"tf.linalg.eigvals({a64})",
        "lu": f"tf.linalg.lu({g})", "lu_int64": f"tf.linalg.lu({g}, output_idx_type=tf.int64)",
        "lu_batch": f"tf.linalg.lu(tf.stack([{g}, {a}]))",
        "lu_reconstruct": f"tf.linalg.lu_reconstruct(*tf.linalg.lu({g}))",
        "lu_reconstruct_batch": f"tf.linalg.lu_reconstruct(*tf.linalg.lu(tf.stack([{g}, {a}])))",
        "lu_solve": f"tf.linalg.lu_solve(*tf.linalg.lu({g}), {rhs})",
        "lu_solve_batch": f"tf.linalg.lu_solve(*tf.linalg.lu(tf.stack([{g}, {a}])), tf.stack([{rhs}, {rhs}]))",
        "lu_matrix_inverse": f"tf.linalg.lu_matrix_inverse(*tf.linalg.lu({g}))",
        "tridiagonal_matmul": f"tf.linalg.tridiagonal_matmul({tri}, {rhs})",
        "tridiagonal_matmul_sequence": f"tf.linalg.tridiagonal_matmul(tf.unstack({tri}), {rhs}, 'sequence')",
        "tridiagonal_matmul_matrix": f"tf.linalg.tridiagonal_matmul({a}, {rhs}, 'matrix')",
        "tridiagonal_solve": f"tf.linalg.tridiagonal_solve({tri}, {rhs})",
        "tridiagonal_solve_vector": f"tf.linalg.tridiagonal_solve({tri}, tf.constant([1.0, 2.0, 3.0]))",
        "tridiagonal_solve_transpose": f"tf.linalg.tridiagonal_solve({tri}, tf.transpose({rhs}), transpose_rhs=True)",
        "tridiagonal_solve_matrix": f"tf.linalg.tridiagonal_solve({a}, {rhs}, 'matrix')",
        "tridiagonal_solve_bad_format": f"tf.linalg.tridiagonal_solve({tri}, {rhs}, 'banded')",
        "banded_lower": f"tf.linalg.banded_triangular_solve([[1.0, 2.0, 3.0], [0.0, 4.0, 5.0]], {rhs})",
        "banded_upper": f"tf.linalg.banded_triangular_solve([[4.0, 5.0, 0.0], [1.0, 2.0, 3.0]], {rhs}, lower=False)",
        "banded_lower_adjoint": f"tf.linalg.banded_triangular_solve([[1.0, 2.0, 3.0], [0.0, 4.0, 5.0], [0.0, 0.0, 6.0]], "
                                f"{rhs}, adjoint=True)",
        "banded_upper_3": f"tf.linalg.banded_triangular_solve([[7.0, 0.0, 0.0], [4.0, 5.0, 0.0], [1.0, 2.0, 3.0]], "
                          f"{rhs}, lower=False)",
        "eigh_tridiagonal": "tf.linalg.eigh_tridiagonal([1.0, 2.0, 3.0], [0.5, -0.25])",
        "eigh_tridiagonal_select_i": "tf.linalg.eigh_tridiagonal([1.0, 2.0, 3.0, 4.0], [0.5, -0.25, 1.0], select='i', "
                                     "select_range=[1, 2])",
        "eigh_tridiagonal_select_v": "tf.linalg.eigh_tridiagonal([1.0, 2.0, 3.0, 4.0], [0.5, -0.25, 1.0], select='v', "
                                     "select_range=[1.5, 3.5])",
        "eigh_tridiagonal_vectors_abs": "tf.abs(tf.linalg.eigh_tridiagonal(tf.constant([1.0, 2.0, 3.0], tf.float64), "
                                        "tf.constant([0.5, -0.25], tf.float64), eigvals_only=False)[1])",
        "grad_expm": f"grad(lambda x: tf.linalg.expm(x) * [[1.0, 2.0], [3.0, 4.0]], [[0.5, -1.0], [2.0, 0.25]], dtype='float64')",
        "grad_sqrtm": "grad(lambda x: tf.linalg.sqrtm(x) * [[1.0, 2.0], [3.0, 4.0]], [[4.0, 1.0], [1.0, 3.0]], dtype='float64')",
        "grad_lu": "grad(lambda x: tf.linalg.lu(x)[0] * [[1.0, 2.0, 0.5], [3.0, 4.0, -1.0], [0.25, 1.0, 2.0]], "
                   "[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 10.0]], dtype='float64')",
        "grad_lu_solve": "grad(lambda x: tf.linalg.lu_solve(*tf.linalg.lu(x), tf.constant([[1.0], [2.0], [0.5]], tf.float64)), "
                         "[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 10.0]], dtype='float64')",
        "grad_tridiagonal_solve": f"grad(lambda d: tf.linalg.tridiagonal_solve(d, {rhs}), "
                                  "[[1.0, 2.0, 0.0], [4.0, 5.0, 6.0], [0.0, 3.0, 9.0]])",
        "grad_tridiagonal_matmul": f"grad(lambda d: tf.linalg.tridiagonal_matmul(d, {rhs}), "
                                   "[[1.0, 2.0, 0.0], [4.0, 5.0, 6.0], [0.0, 3.0, 9.0]])",
    }
    for name, src in calls.items():
        yield f"tf2/linalg/{name}", "tf.linalg", src


def _complex():
    z = "tf.constant([1.0 + 2.0j, -0.5 + 0.25j, 0.3 - 1.0j, 2.0 + 0.0j])"
    z128 = "tf.constant([1.0 + 2.0j, -0.5 + 0.25j], tf.complex128)"
    m = "tf.constant([[1.0 + 1.0j, 2.0], [0.5j, 1.0 - 0.5j]])"
    for op in ("exp", "math.log", "sqrt", "math.rsqrt", "square", "negative", "math.reciprocal", "sin", "cos",
               "math.tan", "tanh", "math.expm1", "math.log1p", "abs", "sign", "reduce_sum", "reduce_mean"):
        yield f"tf2/complex/{op}", "complex", f"tf.{op}({z})"
        yield f"tf2/complex/{op}/complex128", "complex", f"tf.{op}({z128})"
    calls = {
        "reduce_sum_axis": f"tf.reduce_sum({m}, 0)", "reduce_mean_axis": f"tf.reduce_mean({m}, 1)",
        "matmul": f"tf.matmul({m}, {m})", "matmul_adjoint_a": f"tf.matmul({m}, {m}, adjoint_a=True)",
        "matmul_adjoint_b": f"tf.matmul({m}, {m}, adjoint_b=True)", "matmul_transpose_a": f"tf.matmul({m}, {m}, transpose_a=True)",
        "linalg_matmul_adjoint": f"tf.linalg.matmul({m}, {m}, adjoint_a=True, adjoint_b=True)",
        "divide": f"tf.divide({z}, {z} + 1.0)", "truediv_op": f"{z} / ({z} + 1.0)",
        "div_no_nan": f"tf.math.divide_no_nan({z}, tf.constant([0j, 1.0 + 1.0j, 2.0j, 0j]))",
        "multiply_no_nan": f"tf.math.multiply_no_nan({z}, tf.constant([0j, 1.0 + 1.0j, 2.0j, 0j]))",
        "abs_modulus": f"tf.math.abs({m})",
        "grad_exp": "grad(lambda z: tf.abs(tf.exp(z)) ** 2, [1.0 + 2.0j, -0.5 + 0.25j], dtype='complex64')",
        "grad_mul": "grad(lambda a, b: tf.math.real(a * b * tf.constant([1.0 - 1.0j, 2.0 + 0.5j])), [1.0 + 2.0j, -0.5j], "
                    "[0.5 + 0.5j, 2.0 - 1.0j], dtype='complex64')",
        "grad_div": "grad(lambda a, b: tf.math.imag(a / b), [1.0 + 2.0j, -0.5j], [0.5 + 0.5j, 2.0 - 1.0j], dtype='complex64')",
        "grad_log_sqrt": "grad(lambda z: tf.math.real(tf.math.log(z) + tf.sqrt(z)), [1.0 + 2.0j, -0.5 + 0.25j], dtype='complex64')",
        "grad_tanh_square": "grad(lambda z: tf.math.imag(tf.tanh(tf.square(z))), [0.5 + 0.2j, -0.5 + 0.25j], dtype='complex64')",
        "grad_reciprocal": "grad(lambda z: tf.abs(tf.math.reciprocal(z)), [0.5 + 0.2j, -0.5 + 0.25j], dtype='complex64')",
        "grad_matmul": "grad(lambda a: tf.abs(tf.matmul(a, tf.constant([[1.0 - 1.0j], [2.0 + 0.5j]]))) ** 2, "
                       "[[1.0 + 1.0j, 2.0], [0.5j, 1.0]], dtype='complex64')",
        "grad_matmul_adjoint": "grad(lambda a: tf.math.real(tf.matmul(a, a, adjoint_a=True)), "
                               "[[1.0 + 1.0j, 2.0], [0.5j, 1.0]], dtype='complex64')",
        "grad_reduce_mean": "grad(lambda z: tf.math.real(tf.reduce_mean(z * z)), [1.0 + 2.0j, -0.5 + 0.25j], dtype='complex64')",
        "grad_sin_cos": "grad(lambda z: tf.math.real(tf.sin(z) * tf.cos(z)), [1.0 + 0.5j, -0.5 + 0.25j], dtype='complex64')",
        "reduce_max_complex": f"tf.reduce_max({z})",
        "maximum_complex": f"tf.maximum({z}, {z})",
    }
    for name, src in calls.items():
        yield f"tf2/complex/{name}", "complex", src


def _top_level():
    v = "tf.constant([1.0, 2.0, 3.0, 4.0])"
    m = "tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])"
    calls = {
        "double": "tf.double", "half": "tf.half", "double_cast": f"tf.cast({v}, tf.double)",
        "half_zeros": "tf.zeros([2], tf.half)", "newaxis": f"{m}[:, tf.newaxis].shape",
        "newaxis_value": "tf.newaxis is None",
        "assert_equal_ok": f"tf.assert_equal({v}, {v})", "assert_equal_bad": f"tf.assert_equal({v}, 2.0)",
        "assert_equal_broadcast": "tf.assert_equal(tf.constant([2.0, 2.0]), 2.0)",
        "assert_greater_ok": f"tf.assert_greater({v}, 0.0)", "assert_greater_bad": f"tf.assert_greater({v}, 2.0)",
        "assert_less_ok": f"tf.assert_less({v}, 5.0)", "assert_less_bad": f"tf.assert_less({v}, [5.0, 5.0, 1.0, 5.0])",
        "assert_rank_ok": f"tf.assert_rank({m}, 2)", "assert_rank_bad": f"tf.assert_rank({m}, 3)",
        "Assert_ok": f"tf.Assert(tf.reduce_all({v} > 0), [{v}])", "Assert_bad": f"tf.Assert(tf.reduce_all({v} > 2), ['x', {v}])",
        "map_fn": f"tf.map_fn(lambda x: x * x + 1.0, {v})",
        "map_fn_rows": f"tf.map_fn(lambda r: tf.reduce_sum(r), {m})",
        "map_fn_nested": f"tf.map_fn(lambda t: (t[0] + t[1], t[0] * t[1]), ({v}, {v}))",
        "map_fn_signature": f"tf.map_fn(lambda x: tf.cast(x, tf.int32), {v}, fn_output_signature=tf.int32)",
        "vectorized_map": f"tf.vectorized_map(lambda r: tf.tensordot(r, r, 1), {m})",
        "foldl": f"tf.foldl(lambda a, x: a * x, {v})", "foldl_init": f"tf.foldl(lambda a, x: a - x, {v}, initializer=10.0)",
        "foldr": f"tf.foldr(lambda a, x: a - x, {v})", "foldr_init": f"tf.foldr(lambda a, x: a * 2.0 + x, {v}, initializer=1.0)",
        "foldl_nested": f"tf.foldl(lambda a, x: (a[0] + x, a[1] * x), {v}, initializer=(0.0, 1.0))",
        "scan": f"tf.scan(lambda a, x: a + x, {v})", "scan_init": f"tf.scan(lambda a, x: a * x, {v}, initializer=2.0)",
        "scan_reverse": f"tf.scan(lambda a, x: a + x, {v}, reverse=True)",
        "scan_rows": f"tf.scan(lambda a, r: a + r, {m})",
        "scan_nested": f"tf.scan(lambda a, x: (a[0] + x, a[1] * x), {v}, initializer=(0.0, 1.0))",
        "dynamic_partition": f"tf.dynamic_partition({m}, [1, 0, 1], 2)",
        "dynamic_partition_empty": f"tf.dynamic_partition({v}, [0, 0, 2, 2], 3)",
        "dynamic_partition_bad": f"tf.dynamic_partition({v}, [0, 5, 0, 0], 2)",
        "dynamic_stitch": "tf.dynamic_stitch([[0, 2], [1, 3]], [[1.0, 3.0], [2.0, 4.0]])",
        "dynamic_stitch_rows": "tf.dynamic_stitch([[1], [0, 2]], [[[1.0, 2.0]], [[3.0, 4.0], [5.0, 6.0]]])",
        "dynamic_stitch_duplicates": "tf.dynamic_stitch([[0, 1], [1, 2]], [[1.0, 2.0], [9.0, 3.0]])",
        "histogram_fixed_width_bins": "tf.histogram_fixed_width_bins([-1.0, 0.0, 1.5, 2.0, 5.0, 12.0], [0.0, 5.0], nbins=5)",
        "histogram_fixed_width_bins_int64": "tf.histogram_fixed_width_bins([0.5, 4.5], [0.0, 5.0], nbins=3, dtype=tf.int64)",
        "bitcast_f32_u8": "tf.bitcast(tf.constant([1.0, -2.5]), tf.uint8)",
        "bitcast_u8_f32": "tf.bitcast(tf.constant([[0, 0, 128, 63], [0, 0, 32, 192]], tf.uint8), tf.float32)",
        "bitcast_same": "tf.bitcast(tf.constant([1, -1]), tf.uint32)",
        "bitcast_bad": "tf.bitcast(tf.constant([0, 0, 128], tf.uint8), tf.float32)",
        "reverse_sequence": f"tf.reverse_sequence(tf.reshape(tf.range(12), [3, 4]), [2, 4, 1], seq_axis=1)",
        "reverse_sequence_batch1": f"tf.reverse_sequence(tf.reshape(tf.range(12), [4, 3]), [1, 3, 2], seq_axis=0, batch_axis=1)",
        "timestamp_dtype": "tf.timestamp().dtype", "get_logger": "tf.get_logger().name != ''",
        "inside_function": "tf.inside_function()", "inside_function_traced": "tf.function(lambda: tf.constant(tf.inside_function()))()",
        "get_current_name_scope": "tf.get_current_name_scope()",
        "is_symbolic_tensor": f"tf.is_symbolic_tensor({v})",
        "guarantee_const": f"tf.guarantee_const({v})",
        "recompute_grad": f"tf.recompute_grad(lambda x: x * x)({v})",
        "grad_recompute": "grad(tf.recompute_grad(lambda x: tf.sin(x) * x), [0.5, 1.0])",
        "grad_pass_through": "grad(tf.grad_pass_through(tf.round), [1.4, -0.6])",
        "grad_map_fn": "grad(lambda x: tf.map_fn(lambda e: e * e, x), [1.0, -2.0, 3.0])",
        "grad_scan": "grad(lambda x: tf.scan(lambda a, e: a * e, x), [1.0, -2.0, 3.0])",
        "grad_foldr": "grad(lambda x: tf.foldr(lambda a, e: a * e + 1.0, x), [1.0, -2.0, 3.0])",
        "grad_dynamic_partition": "grad(lambda x: tf.dynamic_partition(x, [1, 0, 1], 2)[1] * [2.0, 3.0], [1.0, -2.0, 3.0])",
        "grad_dynamic_stitch": "grad(lambda x: tf.dynamic_stitch([[0, 1], [1, 2]], [x, x * 2.0]) * [1.0, 2.0, 3.0], [1.0, -2.0])",
        "unconnected_zero": "tf.UnconnectedGradients.ZERO.value", "aggregation_add_n": "tf.AggregationMethod.ADD_N",
        "variable_aggregation": "tf.VariableAggregation.MEAN.value",
        "variable_synchronization": "tf.VariableSynchronization.ON_READ.value",
    }
    for name, src in calls.items():
        yield f"tf2/top/{name}", "tf", src


def _composites():
    rt = "tf.ragged.constant([[1.0, -2.0], [3.0], [], [-0.5, 4.0, 0.25]])"
    rt2 = "tf.ragged.constant([[[1.0, -2.0], [3.0]], [], [[-0.5]]])"
    st = "tf.sparse.SparseTensor([[0, 1], [2, 0], [2, 1]], [1.0, -4.0, 0.25], [3, 2])"
    ops = ["abs", "negative", "square", "sign", "sin", "tanh", "math.tan", "math.atan", "math.expm1", "math.log1p",
           "math.asin", "math.asinh", "math.atanh", "math.sinh", "math.erf", "math.rint", "round", "math.ceil",
           "floor", "nn.relu", "exp", "sigmoid", "cos", "math.reciprocal", "nn.softplus", "math.sqrt"]
    for op in ops:
        arg = "tf.abs(" + rt + ")" if op in ("math.sqrt", "math.log1p") else rt
        yield f"tf2/ragged/{op}", "ragged/sparse dispatch", f"tf.{op}({arg})"
        sarg = f"tf.sparse.map_values(tf.abs, {st})" if op in ("math.sqrt", "math.log1p") else st
        small = f"tf.sparse.map_values(lambda v: v * 0.2, {st})"
        yield f"tf2/sparse/{op}", "ragged/sparse dispatch", f"tf.{op}({small if op in ('math.asin', 'math.atanh') else sarg})"
    calls = {
        "ragged/nested_exp": f"tf.exp({rt2})", "ragged/add_scalar": f"tf.add({rt}, 1.0)",
        "ragged/multiply_ragged": f"tf.multiply({rt}, {rt})", "ragged/maximum": f"tf.maximum({rt}, 0.0)",
        "ragged/subtract_reversed": f"tf.subtract(2.0, {rt})", "ragged/equal": f"tf.equal({rt}, 3.0)",
        "ragged/pow": f"tf.pow({rt}, 2.0)", "ragged/divide": f"tf.divide({rt}, 2.0)",
        "ragged/cast": f"tf.cast({rt}, tf.int32)", "ragged/cast_bool": f"tf.cast({rt}, tf.bool)",
        "sparse_x/cast": f"tf.cast({st}, tf.int32)",
        "ragged/reduce_sum_1": f"tf.reduce_sum({rt}, 1)", "ragged/reduce_sum_0": f"tf.reduce_sum({rt}, 0)",
        "ragged/reduce_sum_all": f"tf.reduce_sum({rt})", "ragged/reduce_max_1": f"tf.reduce_max({rt}, axis=1)",
        "ragged/reduce_min_0": f"tf.reduce_min({rt}, axis=0)", "ragged/reduce_prod_1": f"tf.reduce_prod({rt}, 1)",
        "ragged/reduce_mean_0": f"tf.reduce_mean({rt}, 0)",
        "ragged/reduce_mean_1_nonempty": "tf.reduce_mean(tf.ragged.constant([[1.0, -2.0], [3.0]]), 1)",
        "ragged/reduce_sum_nested": f"tf.reduce_sum({rt2}, 2)",
        "sparse_x/reduce_sum": f"tf.reduce_sum({st})", "sparse_x/exp": f"tf.exp({st})",
        "ragged/dense_operand": f"tf.add({rt}, tf.constant([1.0, 2.0, 3.0, 4.0]))",
        "ragged/grad_exp": "grad(lambda v: tf.reduce_sum(tf.exp(tf.RaggedTensor.from_row_lengths(v, [2, 1])), 1), "
                           "[1.0, -2.0, 0.5])",
        "ragged/grad_reduce_max": "grad(lambda v: tf.reduce_max(tf.RaggedTensor.from_row_lengths(v, [2, 1]) * 2.0, 1), "
                                  "[1.0, -2.0, 0.5])",
    }
    for name, src in calls.items():
        yield f"tf2/{name}", "ragged/sparse dispatch", src


def _function_args():
    rt = "tf.ragged.constant([[1.0, -2.0], [3.0], []])"
    rt_b = "tf.ragged.constant([[0.5], [], [2.0, -3.0, 4.0]])"
    st = "tf.sparse.SparseTensor([[0, 1], [2, 0]], [1.0, -4.0], [3, 2])"
    rspec = "[tf.RaggedTensorSpec([None, None], tf.float32)]"
    sspec = "[tf.SparseTensorSpec([None, 2], tf.float32)]"
    calls = {
        "ragged_to_tensor": f"tf.function(lambda x: (x * 2.0).to_tensor())({rt})",
        "ragged_signature": f"tf.function(lambda x: tf.exp(x).to_tensor(default_value=-1.0), input_signature={rspec})({rt_b})",
        "ragged_signature_flat": f"tf.function(lambda x: tf.reduce_sum(x.flat_values), input_signature={rspec})({rt})",
        "ragged_signature_splits": f"tf.function(lambda x: x.row_splits, input_signature={rspec})({rt_b})",
        "ragged_signature_dense_arg": f"tf.function(lambda x: x.to_tensor(), input_signature={rspec})(tf.ones([2, 2]))",
        "ragged_and_tensor": f"tf.function(lambda x, y: x.to_tensor() + y)({rt}, tf.ones([3, 2]))",
        "sparse_to_dense": f"tf.function(lambda s: tf.sparse.to_dense(s) * 2.0)({st})",
        "sparse_signature": f"tf.function(lambda s: tf.sparse.reduce_sum(s), input_signature={sspec})({st})",
        "sparse_signature_values": f"tf.function(lambda s: s.values + 1.0, input_signature={sspec})({st})",
        "sparse_signature_shape": f"tf.function(lambda s: s.dense_shape, input_signature={sspec})({st})",
        "sparse_signature_wrong_dtype": f"tf.function(lambda s: s.values, input_signature={sspec})("
                                        "tf.sparse.SparseTensor([[0, 1]], [1], [3, 2]))",
        "sparse_matmul": f"tf.function(lambda s, d: tf.sparse.sparse_dense_matmul(s, d))({st}, tf.ones([2, 2]))",
        "grad_ragged_function": "grad(lambda v: tf.function(lambda r: r.to_tensor())(tf.RaggedTensor.from_row_lengths(v, [2, 1])) "
                                "* [[1.0, 2.0], [3.0, 4.0]], [1.0, 2.0, 3.0])",
    }
    for name, src in calls.items():
        yield f"tf2/function_args/{name}", "tf.function composite arguments", src


def _samplers():
    tc = "tf.constant([[1], [3]], tf.int64)"
    calls = {
        "all_candidate_sampler": f"tf.random.all_candidate_sampler({tc}, 1, 4, True)",
        "uniform_shapes": f"[t.shape for t in tf.random.uniform_candidate_sampler({tc}, 1, 3, True, 10, seed=1)]",
        "uniform_expected": f"tf.random.uniform_candidate_sampler({tc}, 1, 3, False, 10, seed=1)[1]",
        "uniform_unique_distinct": f"tf.size(tf.unique(tf.random.uniform_candidate_sampler({tc}, 1, 5, True, 6, seed=2)[0])[0])",
        "uniform_in_range": f"tf.reduce_all(tf.random.uniform_candidate_sampler({tc}, 1, 8, False, 5, seed=3)[0] < 5)",
        "log_uniform_expected_true": f"tf.random.log_uniform_candidate_sampler({tc}, 1, 3, False, 10, seed=1)[1]",
        "log_uniform_dtypes": f"[t.dtype for t in tf.random.log_uniform_candidate_sampler({tc}, 1, 3, True, 10, seed=1)]",
        "fixed_unigram_expected_true": f"tf.random.fixed_unigram_candidate_sampler({tc}, 1, 4, False, 5, "
                                       "unigrams=[1.0, 2.0, 3.0, 1.0, 3.0], seed=1)[1]",
        "fixed_unigram_distortion": f"tf.random.fixed_unigram_candidate_sampler({tc}, 1, 4, False, 5, distortion=0.5, "
                                    "unigrams=[1.0, 2.0, 3.0, 1.0, 3.0], seed=1)[1]",
        "sampler_bad_rank": "tf.random.uniform_candidate_sampler(tf.constant([1, 3], tf.int64), 1, 3, True, 10)",
    }
    for name, src in calls.items():
        yield f"tf2/random/{name}", "tf.random samplers", src


def _keras_ops():
    k = "tf.keras.ops"
    a = "tf.constant([[1.0, -2.0, 3.0, 0.5], [4.0, 0.0, -1.0, 2.0]])"
    b = "tf.constant([[1.0, 2.0, -3.0, 0.5], [0.0, 0.0, 1.0, 2.5]])"
    nanv = "tf.constant([[1.0, nan, 3.0], [nan, 2.0, -1.0]])"
    z = "tf.constant([1.0 + 2.0j, -0.5 + 0.0j], tf.complex64)"
    img = "tf.reshape(tf.range(32.0), [1, 4, 4, 2])"
    calls = {
        "adaptive_average_pool": f"{k}.adaptive_average_pool({img}, (2, 2))",
        "allclose": f"{k}.allclose({a}, {a} + 1e-9)", "allclose_false": f"{k}.allclose({a}, {b})",
        "angle": f"{k}.angle({z})", "conj": f"{k}.conj({z})", "conjugate": f"{k}.conjugate({z})",
        "real": f"{k}.real({z})", "imag": f"{k}.imag({z})", "isreal": f"{k}.isreal({z})",
        "argpartition": f"{k}.sort({k}.argpartition(tf.constant([3.0, 1.0, 2.0, 0.5]), 2)[:2])",
        "bartlett": f"{k}.bartlett(5)", "blackman": f"{k}.blackman(5)", "hanning": f"{k}.hanning(5)",
        "conv_transpose": f"{k}.conv_transpose(tf.ones([1, 3, 3, 2]), tf.reshape(tf.range(24.0) * 0.1, [2, 2, 3, 2]), 2)",
        "copy": f"{k}.copy({a})", "dsplit": f"{k}.dsplit(tf.reshape(tf.range(8.0), [1, 2, 4]), 2)",
        "hsplit": f"{k}.hsplit({a}, 2)", "vsplit": f"{k}.vsplit({a}, 2)",
        "fliplr": f"{k}.fliplr({a})", "flipud": f"{k}.flipud({a})",
        "equal": f"{k}.equal({a}, {b})", "not_equal": f"{k}.not_equal({a}, {b})", "greater": f"{k}.greater({a}, {b})",
        "greater_equal": f"{k}.greater_equal({a}, {b})", "less": f"{k}.less({a}, {b})",
        "less_equal": f"{k}.less_equal({a}, {b})", "isinf": f"{k}.isinf(tf.constant([1.0, inf, -inf, nan]))",
        "isnan": f"{k}.isnan(tf.constant([1.0, inf, nan]))",
        "logical_and": f"{k}.logical_and({a} > 0, {b} > 0)", "logical_or": f"{k}.logical_or({a} > 0, {b} > 0)",
        "logical_xor": f"{k}.logical_xor({a} > 0, {b} > 0)", "logical_not": f"{k}.logical_not({a} > 0)",
        "logdet": f"{k}.logdet(tf.constant([[4.0, 1.0], [1.0, 3.0]]))",
        "nanargmax": f"{k}.nanargmax({nanv}, axis=1)" , "nancumprod": f"{k}.nancumprod({nanv}, axis=1)",
        "nancumsum": f"{k}.nancumsum({nanv}, axis=1)", "nanmin": f"{k}.nanmin({nanv}, axis=1)",
        "nanprod": f"{k}.nanprod({nanv}, axis=0)", "nanstd": f"{k}.nanstd({nanv}, axis=1)",
        "nextafter": f"{k}.nextafter(tf.constant([1.0, -1.0]), tf.constant([2.0, -2.0]))",
        "ones_like": f"{k}.ones_like({a}, dtype='int32')", "rsqrt": f"{k}.rsqrt(tf.constant([4.0, 0.25]))",
        "select": f"{k}.select([{a} > 2, {a} < 0], [{a}, -{a}], 7.0)",
        "vectorize": f"{k}.vectorize(lambda x, y: x * y + 1.0)({a}, {b})",
        "view": f"{k}.view(tf.constant([1.0, -2.0]), 'int32')",
        "math_approx_max_k": f"tf.math.approx_max_k({a}, 2)", "math_approx_min_k": f"tf.math.approx_min_k({a}, 1)",
        "math_is_inf": "tf.math.is_inf(tf.constant([1.0, inf, -inf, nan]))",
        "math_erfcinv": "tf.math.erfcinv(tf.constant([0.1, 0.5, 1.0, 1.5, 1.9]))",
        "math_erfcinv_ends": "tf.math.erfcinv(tf.constant([0.0, 2.0, -0.5, 2.5]))",
        "grad_erfcinv": "grad(tf.math.erfcinv, [0.3, 1.2])",
    }
    for name, src in calls.items():
        yield f"tf2/keras_ops/{name}", "keras.ops and tf.math", src


FAMILIES = (_activations, _initializers, _nn, _linear_operators, _linalg, _complex, _top_level, _composites,
            _function_args, _samplers, _keras_ops)


def all_cases():
    out = []
    for family in FAMILIES:
        out.extend(family())
    return out
