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


FAMILIES = (_activations, _initializers)


def all_cases():
    out = []
    for family in FAMILIES:
        out.extend(family())
    return out
