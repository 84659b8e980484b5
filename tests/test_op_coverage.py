"""Every registered op has an op-table entry (tests/opinfos), or an explicit reason why not.

An op counts as covered when building the graph of some OpInfo sample (or its gradient)
creates a node of that type. Ops that need state, randomness, Python code or control flow
are tested in their own files; those are listed below with the file. An exception that is
no longer needed is harmless (someone added an entry); a new op with neither fails here.
"""
import json
import os
import subprocess
import sys

import numpy as np

import tensorweave as tw
from test_op_table import ALL_OPS, _graph_dtype, _is_array, _samples

_STATE = "stateful variable op: tests/test_variables.py, tests/test_optimizers.py"
_RANDOM = "random values, no NumPy reference by value: tests/test_random.py"
_PYTHON = "runs Python code: tests/test_graph.py, tests/test_function.py"
_CONTROL = "control flow over traced sub-graphs: tests/test_control_flow.py"
_PLAN = "made only by graph passes inside plans: tests/test_remapping.py, tests/test_graph_passes.py"
_STRINGS = ("string op: the op table is numeric (NumPy references, finite differences); outputs equal to "
            "TensorFlow 2.21's in tests/test_strings.py")

_ASSERT = "raises when its condition is false: TF-differential cases tf2/top/assert_* and Assert_* (tests/tfdiff)"

EXCEPTIONS = {
    "Assert": _ASSERT,
    # a planned graph's per-rank steps: they run on pieces with a communicator, never alone;
    # tests/test_distribute_planner.py checks every planned function against one device
    **dict.fromkeys(["_Boxing", "_Once", "_ToGlobal", "_AllReduceStart", "_AllReduceWait", "_OnceInto", "_ZeroApply",
                     "_VariableRows", "_GatherRows"], "planner-made per-rank steps (distribute/plan_ops.py)"),
    "_ToPlacement": "a move between placements in a planned graph (distribute/plan_placements.py); "
                    "tests/test_plan13_placements.py checks it against one device",
    **dict.fromkeys(["AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp", "ReadVariableOp",
                     "VarHandleOp", "ResourceGather", "ResourceScatterAdd", "ResourceScatterUpdate",
                     "ResourceApplyAdam", "ResourceApplyKerasMomentum", "ResourceApplyAdagradV2",
                     "ResourceApplyKerasRMSprop", "ResourceSparseApplyAdam", "ResourceSparseApplyKerasMomentum",
                     "ResourceSparseApplyAdagradV2", "ResourceSparseApplyKerasRMSprop", "ResourceGroupApplyAdam",
                     "ResourceGroupApplyKerasMomentum", "ResourceGroupApplyAdagradV2",
                     "ResourceGroupApplyKerasRMSprop"], _STATE),
    **dict.fromkeys([f"Resource{k}Apply{n}" for k in ("", "Sparse", "Group") for n in ("Lion", "Adamax", "Nadam")],
                    "stateful variable op (Lion's, Adamax's and Nadam's fused updates): "
                    "tests/test_opt21_fused_updates.py"),
    **dict.fromkeys(["RandomUniform", "RandomStandardNormal", "TruncatedNormal", "RandomUniformInt",
                     "Multinomial", "RandomShuffle", "StatelessRandomUniform", "StatelessRandomNormal",
                     "StatelessTruncatedNormal", "StatelessRandomUniformInt", "StatelessRandomUniformFullInt",
                     "StatelessMultinomial"], _RANDOM),
    **dict.fromkeys(["PyFunc", "EagerPyFunc", "CustomGradient", "PrintV2"], _PYTHON),
    **dict.fromkeys(["If", "StatefulIf", "While", "StatefulWhile", "WhileGrad"], _CONTROL),
    **dict.fromkeys(["FusedMatMul", "FusedConv1D", "FusedConv2D", "FusedConv3D", "FusedReluGradBiasAddGrad",
                     "FusedElementwise", "FusedReduction", "FusedEinsum", "FusedMatMulReluGradBiasAddGrad",
                     "FusedSparseSoftmaxCrossEntropy", "FusedMatMulGroupApplyAdam"], _PLAN),
    **dict.fromkeys(["FusedConv1DBackprop", "FusedConv2DBackprop", "FusedConv3DBackprop", "FusedBatchNormTrainingRelu",
                     "FusedReluGradBatchNormTrainingGrad", "FusedBatchNormTrainingAddRelu",
                     "FusedReluGradBatchNormTrainingGradSelect"], _PLAN),
    **dict.fromkeys(["SbpLocalShape", "SbpLocalConst", "SbpReplaceInput", "SbpSliceOf", "SbpMaskedGather",
                     "SbpMaskedResourceGather", "SbpRowsOnly", "SbpMaskedGatherGrad", "SbpEmbedded",
                     "SbpRandomPiece"],
                    "made only by SBP local hooks on ranks' pieces: tests/test_sbp_checker.py"),
    **dict.fromkeys([f"ResourceScatter{k}V1" for k in ("Add", "Sub", "Mul", "Div", "Min", "Max", "Update")]
                    + [f"ResourceScatterNd{k}V1" for k in ("Add", "Sub", "Update")]
                    + ["CountUpToV1", "VarIsInitializedOp"],
                    "TF1 variable update/query: tests/tfdiff/v1_cases.py against TensorFlow"),
    "NoOp": "no inputs or outputs, nothing to compare: tests/test_graph.py (control dependencies)",
    "IdentityN": "used by tw.custom_gradient and tw.function outputs: tests/test_autodiff.py",
    "PlaceholderWithDefault": "a graph input: tests/test_graph.py",
    **dict.fromkeys(["AsString", "BytesSplit", "ReduceJoin", "RegexFullMatch", "RegexReplace", "StringJoin",
                     "StringLength", "StringLower", "StringSplit", "StringStrip", "StringToHashBucketFast",
                     "StringToHashBucketStrong", "StringToNumber", "StringUpper", "Substr", "UnicodeDecode",
                     "UnicodeEncode", "UnicodeSplit", "UnsortedSegmentJoin"], _STRINGS),
}


def _covered():
    types = set()
    for info in ALL_OPS:
        dtype = _graph_dtype(info)
        for s in _samples(info, dtype):
            g = tw.Graph()
            with g.as_default():
                phs = [tw.placeholder(tw.as_dtype(a.dtype), a.shape) if _is_array(a) else a for a in s.args]
                outs = info.op(*phs, **s.kwargs)
                outs = outs if isinstance(outs, (list, tuple)) else [outs]
                xs = [p for p in phs if isinstance(p, tw.Tensor) and p.dtype.is_floating]
                ys = [o for o in outs if isinstance(o, tw.Tensor) and o.dtype.is_floating]
                if info.grad and xs and ys:
                    # gradient ops (…Grad, and …GradGrad at order 2) are covered by the gradient checks
                    grads = [g for g in tw.gradients(ys, xs) if isinstance(g, tw.Tensor)]
                    if info.grad_order >= 2 and grads:
                        tw.gradients(grads, xs)
            types.update(op.type for op in g.get_operations())
    return types


def _registered_by_tensorweave():
    """The ops ``import tensorweave`` registers (in a fresh process: tests register ops of their own)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(tw.__file__)))
    out = subprocess.run([sys.executable, "-c", "import json, tensorweave\n"
                          "from tensorweave.core.registry import registered_ops\n"
                          "print(json.dumps(sorted(registered_ops())))"],
                         env=dict(os.environ, PYTHONPATH=root), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_every_registered_op_has_an_op_table_entry_or_a_reason():
    registered = _registered_by_tensorweave()
    missing = sorted(registered - _covered() - set(EXCEPTIONS))
    assert not missing, (f"ops without an op-table entry in tests/opinfos: {missing}. Add an OpInfo (NumPy "
                         "reference, dtypes, samples), or, where none can exist, a reason in EXCEPTIONS here")
    unknown = sorted(set(EXCEPTIONS) - registered)
    assert not unknown, f"EXCEPTIONS names ops that are not registered: {unknown}"
    assert all(isinstance(r, str) and r for r in EXCEPTIONS.values())
    np.testing.assert_(len(registered) > 100)
