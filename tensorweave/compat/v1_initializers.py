"""TF1's initializer classes (``tf.zeros_initializer()``, ``tf.truncated_normal_initializer(stddev=...)``...):
the Keras initializers with TF1's constructor arguments (``dtype``, TF1 defaults) and call
signature (``init(shape, dtype=None, partition_info=None)``).

>>> import tensorweave.compat.v1 as tf
>>> tf.constant_initializer(2.0)([2], tf.float32).numpy().tolist()
[2.0, 2.0]
"""
from tensorweave.core import dtypes as _dt
from tensorweave.keras import initializers as _k


def _tf1(keras_cls, name, params, defaults):
    """A TF1 initializer class over ``keras_cls`` (constructor ``params`` with TF1 ``defaults``)."""
    def __init__(self, *args, dtype=_dt.float32, **kwargs):
        values = dict(defaults)
        values.update(zip(params, args))
        values.update(kwargs)
        self.dtype = _dt.as_dtype(dtype) if dtype is not None else None
        keras_cls.__init__(self, **values)

    def __call__(self, shape, dtype=None, partition_info=None):
        return keras_cls.__call__(self, shape, dtype=dtype if dtype is not None else self.dtype)

    cls = type(name, (keras_cls,), {"__init__": __init__, "__call__": __call__,
                                     "__doc__": f"TF1's ``{name}`` (Keras' {keras_cls.__name__})."})
    return cls


zeros_initializer = _tf1(_k.Zeros, "zeros_initializer", [], {})
ones_initializer = _tf1(_k.Ones, "ones_initializer", [], {})
constant_initializer = _tf1(_k.Constant, "constant_initializer", ["value"], {"value": 0})
random_uniform_initializer = _tf1(_k.RandomUniform, "random_uniform_initializer", ["minval", "maxval", "seed"],
                                  {"minval": 0.0, "maxval": 1.0})
random_normal_initializer = _tf1(_k.RandomNormal, "random_normal_initializer", ["mean", "stddev", "seed"],
                                 {"mean": 0.0, "stddev": 1.0})
truncated_normal_initializer = _tf1(_k.TruncatedNormal, "truncated_normal_initializer", ["mean", "stddev", "seed"],
                                    {"mean": 0.0, "stddev": 1.0})
variance_scaling_initializer = _tf1(_k.VarianceScaling, "variance_scaling_initializer",
                                    ["scale", "mode", "distribution", "seed"],
                                    {"scale": 1.0, "mode": "fan_in", "distribution": "truncated_normal"})
glorot_uniform_initializer = _tf1(_k.GlorotUniform, "glorot_uniform_initializer", ["seed"], {})
glorot_normal_initializer = _tf1(_k.GlorotNormal, "glorot_normal_initializer", ["seed"], {})
orthogonal_initializer = _tf1(_k.Orthogonal, "orthogonal_initializer", ["gain", "seed"], {"gain": 1.0})


# ``tf.initializers.*`` names
zeros, ones, constant = zeros_initializer, ones_initializer, constant_initializer
random_uniform, random_normal, truncated_normal = (random_uniform_initializer, random_normal_initializer,
                                                   truncated_normal_initializer)
variance_scaling, glorot_uniform, glorot_normal = (variance_scaling_initializer, glorot_uniform_initializer,
                                                   glorot_normal_initializer)
orthogonal = orthogonal_initializer


def he_normal(seed=None):
    return _k.HeNormal(seed)


def he_uniform(seed=None):
    return _k.HeUniform(seed)


def lecun_normal(seed=None):
    return _k.LecunNormal(seed)


def lecun_uniform(seed=None):
    return _k.LecunUniform(seed)


identity_initializer = _tf1(_k.Identity, "identity_initializer", ["gain"], {"gain": 1.0})
identity = identity_initializer


class uniform_unit_scaling_initializer(_k.RandomUniform):  # noqa: N801 - TF1's name
    """Uniform in ``[-m, m]`` with ``m = factor * sqrt(3 / input_size)``, ``input_size`` the
    product of all dimensions but the last (TF1's deprecated ``uniform_unit_scaling_initializer``;
    the full variable's shape when partitioned)."""

    def __init__(self, factor=1.0, seed=None, dtype=_dt.float32):
        self.factor, self.dtype = float(factor), _dt.as_dtype(dtype)
        _k.RandomUniform.__init__(self, seed=seed)

    def __call__(self, shape, dtype=None, partition_info=None):
        import math
        full = list(getattr(partition_info, "full_shape", None) or shape)
        input_size = 1.0
        for d in full[:-1]:
            input_size *= float(d)
        limit = math.sqrt(3.0 / max(input_size, 1.0)) * self.factor
        self.minval, self.maxval = -limit, limit
        return _k.RandomUniform.__call__(self, shape, dtype=dtype if dtype is not None else self.dtype)

    def get_config(self):
        return {"factor": self.factor, "seed": self.seed, "dtype": self.dtype.name}


uniform_unit_scaling = uniform_unit_scaling_initializer


# ``tf.initializers.global_variables()`` & co.: the initializer ops under TF1's namespace
def global_variables():
    from tensorweave.ops.variables import global_variables_initializer
    return global_variables_initializer()


def local_variables():
    from tensorweave.ops.variables import local_variables_initializer
    return local_variables_initializer()


def variables(var_list, name="init"):
    from tensorweave.ops.variables import variables_initializer
    return variables_initializer(var_list, name=name)


def tables_initializer(name="init_all_tables"):
    from tensorweave.compat.v1_framework import tables_initializer as init
    return init(name=name)
