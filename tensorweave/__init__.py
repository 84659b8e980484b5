"""tensorweave: dataflow graphs, eager execution and automatic differentiation in Python.

>>> import tensorweave as tw
>>> x = tw.constant([[1.0, 2.0], [3.0, 4.0]])
>>> with tw.GradientTape() as tape:
...     tape.watch(x)
...     y = tw.reduce_sum(x * x)
>>> tape.gradient(y, x).numpy().tolist()
[[2.0, 4.0], [6.0, 8.0]]
"""
__version__ = "0.1.0"

# --- core ---------------------------------------------------------------------------------------
from tensorweave.core.dtypes import (DType, as_dtype, bfloat16, float16, float32, float64, int8, int16,
                                     int32, int64, complex64, complex128, resource, string, uint8, uint16, uint32, uint64, variant)
from tensorweave.core.dtypes import bool_ as bool  # noqa: A001 - TF's name
from tensorweave.core.shape import TensorShape
from tensorweave.core.tensor import EagerTensor, Tensor
from tensorweave.core.tensor_spec import TensorSpec
from tensorweave.core.graph import (Graph, Operation, get_default_graph, get_static_value, name_scope,
                                    reset_default_graph)
from tensorweave.core.context import (executing_eagerly, init_scope)
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.registry import (register_op, register_kernel, register_gradient, get_op,
                                       NOT_DIFFERENTIABLE)
from tensorweave.core.dispatch import raw_op
from tensorweave.core import errors, nest

# --- ops (importing registers them) -----------------------------------------------------------
from tensorweave.ops.array_ops import (
    constant, placeholder, placeholder_with_default, identity, stop_gradient, shape, size, rank, reshape,
    broadcast_to, fill, zeros, ones, zeros_like, ones_like, stack, unstack, concat, split, expand_dims,
    squeeze, transpose, gather, unsorted_segment_sum, newaxis)
from tensorweave.ops.math_ops import (
    add, subtract, multiply, divide, truediv, floordiv, floormod, mod, pow, maximum, minimum,
    squared_difference, negative, abs, sign, exp, log, log1p, expm1, sqrt, rsqrt, square, reciprocal,
    sin, cos, tan, atan, tanh, sigmoid, erf, floor, ceil, round, where, clip_by_value, less, less_equal,
    greater, greater_equal, equal, not_equal, logical_and, logical_or, logical_not, logical_xor,
    is_nan, is_finite, is_inf, cast, saturate_cast, add_n, matmul, div_no_nan)
from tensorweave.ops.reduce_ops import (
    reduce_sum, reduce_mean, reduce_max, reduce_min, reduce_prod, reduce_any, reduce_all,
    reduce_logsumexp, reduce_variance, reduce_std, argmax, argmin, count_nonzero)
from tensorweave.ops.variables import Variable, variable_creator_scope
from tensorweave.ops import state_ops as _state_ops  # noqa: F401
from tensorweave.ops import fused_ops as _fused_ops  # noqa: F401 - plan-only ops the passes make
from tensorweave.ops import sbp_local_ops as _sbp_local_ops  # noqa: F401 - ops SBP local hooks lower to
from tensorweave.ops.control_flow import cond, while_loop, case, switch_case
from tensorweave.ops.control_flow_ops import group, no_op, control_dependencies, tuple_ as tuple  # noqa: A001
from tensorweave.ops import overloads as _overloads  # noqa: F401
from tensorweave.ops.indexing_ops import *  # noqa: F401,F403
from tensorweave.ops.sort_ops import *  # noqa: F401,F403
from tensorweave.ops.linalg_ops import *  # noqa: F401,F403
from tensorweave.ops.math_ops import atan2, truncatediv, truncatemod  # noqa: F401 - TF2 top-level names
from tensorweave.ops.special_ops import acos, acosh, asin, asinh, atanh, cosh, sinh  # noqa: F401
from tensorweave.ops.segment_ops import unique, unique_with_counts  # noqa: F401
from tensorweave.ops.array_ops import strided_slice  # noqa: F401
from tensorweave.ops.misc_ops import *  # noqa: F401,F403
from tensorweave.ops.nn_extra_ops import (approx_top_k, batch_to_space,  # noqa: F401
                                          required_space_to_batch_paddings, space_to_batch, space_to_batch_nd)
from tensorweave.ops.matrix_function_ops import eig, eigvals, matrix_square_root  # noqa: F401
from tensorweave.ops.check_ops import *  # noqa: F401,F403
from tensorweave.ops.functional_ops import *  # noqa: F401,F403
from tensorweave.ops.partition_ops import *  # noqa: F401,F403
from tensorweave.ops import nn_ops as _nn_ops, random_ops as _random_ops, training_ops as _training_ops  # noqa: F401
from tensorweave.ops.complex_ops import complex, conj, real, imag  # noqa: A004
from tensorweave.ops import fft_ops as _fft_ops  # noqa: F401
from tensorweave.ops import text_ops as _text_ops  # noqa: F401 - Keras text preprocessing ops
from tensorweave.kernels import cpu as _cpu_kernels  # noqa: F401

# --- process settings: idle BLAS workers sleep, freed step memory is reused --------------------
from tensorweave.kernels.cpu import gemm as _gemm
from tensorweave.kernels import threads as _threads
from tensorweave.runtime import host_memory as _host_memory
_gemm.load()   # before threads takes stock of the BLAS libraries
_threads.quiet_idle_blas_workers()
_host_memory.configure_from_environment()

# --- autodiff ---------------------------------------------------------------------------------
from tensorweave.autodiff.tape import GradientTape
from tensorweave.autodiff.gradients import gradients
from tensorweave.ops.indexed_slices import IndexedSlices
from tensorweave.autodiff.custom_gradient import custom_gradient
from tensorweave.ops.script_ops import py_function, numpy_function
from tensorweave.ops.logging_ops import print_ as print  # noqa: A001 - TF's name

# --- runtime ----------------------------------------------------------------------------------
from tensorweave.core.devices import device, DeviceSpec
from tensorweave.runtime.function import function
from tensorweave.runtime.session import Session, InteractiveSession

# --- op functions explain a wrong call (unknown keyword...) by the op's name ------------------
from tensorweave.core.signatures import check_namespace as _check_namespace
_check_namespace(globals())

# --- namespaces built only on the layers above -----------------------------------------------
from tensorweave import bitwise, config, math, nn, random  # noqa: E402,F401
from tensorweave import dtypes  # noqa: E402,F401
# Op namespaces keras' op dispatch wraps when it loads (tw.strings.length(keras.Input(...)) is a layer
# call): loaded with the ops, so that holds whichever is touched first (a few ms).
from tensorweave import signal, strings  # noqa: E402,F401
from tensorweave.ops.fft_ops import fftnd, ifftnd, irfftnd, rfftnd  # noqa: E402,F401
from tensorweave.ops.string_ops import as_string  # noqa: E402,F401
from tensorweave.framework_extras import *  # noqa: E402,F401,F403

# --- loaded on first use (PEP 562) --------------------------------------------------------------
# ``import tensorweave`` loads the layers (core, ops, kernels, autodiff, runtime: every op, kernel,
# gradient and upcall is registered when it returns) and nothing above them: a Ray worker or a
# script that never touches Keras does not pay for it. ``tw.NAME`` imports the module on first
# use; ``dir(tw)`` lists these names too. (docs/design/process-state.md)
_LAZY = {
    # name: (module, attribute of it, or None for the module itself)
    **{m: (f"tensorweave.{m}", None) for m in (
        "compat", "data", "distribute", "estimator", "experimental", "image", "io", "keras", "linalg", "onnx",
        "profiler", "ragged", "saved_model", "sbp", "sparse", "train")},
    "placement": ("tensorweave.distribute", "placement"),   # OneFlow's tw.placement("cpu", ranks=[0, 1])
    "SparseTensor": ("tensorweave.sparse", "SparseTensor"),
    "RaggedTensor": ("tensorweave.ragged", "RaggedTensor"),
    "RaggedTensorSpec": ("tensorweave.sparse.specs", "RaggedTensorSpec"),
    "SparseTensorSpec": ("tensorweave.sparse.specs", "SparseTensorSpec"),
    "make_ndarray": ("tensorweave.io.tensor_proto", "make_ndarray"),
    "make_tensor_proto": ("tensorweave.io.tensor_proto", "make_tensor_proto"),
    "Module": ("tensorweave.module", "Module"),
}
# ``from tensorweave import *`` (compat.v1 builds on it): every public name, less the namespaces
# that were always loaded on first use only (TF1 code reaches them as tf.keras, tf.data ...) and
# ``compat`` (compat.v1 has its own ``tf.compat``: as_bytes, forward_compatible ...).
__all__ = sorted({n for n in globals() if not n.startswith("_")} | set(_LAZY)
                 - {"compat", "data", "estimator", "experimental", "image", "keras", "onnx", "profiler", "saved_model", "train"})

# Ops that modules loaded on first use register: a lookup (a graph or plan file naming one, in a
# fresh process) or an enumeration of the registry loads them first.
_OP_MODULES = {
    **dict.fromkeys([f"ResourceScatter{k}V1" for k in ("Add", "Sub", "Mul", "Div", "Min", "Max", "Update")]
                    + [f"ResourceScatterNd{k}V1" for k in ("Add", "Sub", "Update")]
                    + ["CountUpToV1", "VarIsInitializedOp"], "tensorweave.compat.v1_state_ops"),
    "UniqueSegmentSum": "tensorweave.keras.optimizers.sparse_ops",
    "StringToHashBucket": "tensorweave.compat.v1_string_hash",
    **dict.fromkeys(["_AllReduceStart", "_AllReduceWait", "_Boxing", "_GatherRows", "_Once", "_OnceInto", "_ToGlobal",
                     "_VariableRows", "_ZeroApply"], "tensorweave.distribute.plan_ops"),
    "_ToPlacement": "tensorweave.distribute.plan_placements",
}


def _load_ops(name=None):
    import importlib
    for module in ([_OP_MODULES[name]] if name in _OP_MODULES else [] if name is not None
                   else sorted(set(_OP_MODULES.values()))):
        importlib.import_module(module)


from tensorweave.core import upcalls as _upcalls  # noqa: E402
_upcalls.install(load_ops=_load_ops)


def __getattr__(name):
    target = _LAZY.get(name)
    if target is not None:
        import importlib
        module, attr = target
        value = importlib.import_module(module)
        value = value if attr is None else getattr(value, attr)
        globals()[name] = value
        return value
    if name.endswith("_initializer"):   # tf.random_normal_initializer & co. (the Keras initializers)
        from tensorweave.keras.initializers import TF_NAMES
        if name in TF_NAMES:
            return TF_NAMES[name]
    raise AttributeError(f"module 'tensorweave' has no attribute '{name}'")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
