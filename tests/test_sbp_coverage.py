"""Every registered op has an SBP rule (``sbp_rules.rule_for``), or boxes its inputs to B
(``BOXES_TO_B`` or no rule) for a reason stated here; a new op must choose one.

The rules themselves are checked by brute force in ``tests/test_sbp_checker.py``.
"""
from tensorweave.core.registry import get_op
from tensorweave.core.sbp_rules import rule_for
from test_op_coverage import _registered_by_tensorweave

_SHAPE = "output length depends on the values (no layout of it is known before running): B"
_STRINGS = ("string tensors: text preprocessing runs on B inputs before the model (the collectives move "
            "numeric buffers, not object arrays)")
_PASS = ("made by graph passes inside a rank's plan after SBP planning (runtime/passes run on placed ops): "
         "never meets a global tensor")
_LOCAL = "a rank-local lowering that SBP local hooks make (ops/sbp_local_ops.py): never planned itself"
_CONTROL = ("control flow over traced sub-graphs: B; the ops inside the branches and body have rules of their "
            "own, but planning inside sub-graphs is the interpreter's (not done yet)")
_PYTHON = "runs Python code on whole values: B"
_CHECK = ("a run-time check (raises when its condition is false): its inputs are boxed to B. A split (or "
          "P(min)) condition could be checked piece by piece, but the interpreter runs a stateful op whose "
          "outputs are all B — none, here — on the first rank only, which would then see only its piece")
_V1_STATE = ("TF1 variable updates/queries (compat.v1 graphs): global variables are not in TF1 graphs yet "
             "(the graph planner); B")
NO_RULE = {
    **dict.fromkeys(["Assert"], _CHECK),
    **dict.fromkeys([f"ResourceScatter{k}V1" for k in ("Add", "Sub", "Mul", "Div", "Min", "Max", "Update")]
                    + [f"ResourceScatterNd{k}V1" for k in ("Add", "Sub", "Update")]
                    + ["CountUpToV1", "VarIsInitializedOp"], _V1_STATE),
    "Const": "a constant has no inputs: made whole (B) on each rank",
    "Placeholder": "a graph input: its layout is the feed's (to_global), not inferred",
    "PlaceholderWithDefault": "a graph input: its layout is the feed's",
    "Range": "a sequence made from B scalars: B",
    "VarHandleOp": "no inputs: a handle's layout is its variable's, given when it is created",
    "InvertPermutation": "each output entry depends on the whole permutation: B",
    "NoOp": "no inputs or outputs",
    "PrintV2": "prints the whole value: B",
    **dict.fromkeys(["Where", "Bincount", "UniqueV2", "UniqueSegmentSum"], _SHAPE),
    **dict.fromkeys(["FusedConv1D", "FusedConv2D", "FusedConv3D", "FusedElementwise", "FusedMatMul", "FusedEinsum",
                     "FusedReduction", "FusedReluGradBiasAddGrad", "FusedSparseSoftmaxCrossEntropy",
                     "FusedMatMulGroupApplyAdam", "FusedMatMulReluGradBiasAddGrad"], _PASS),
    **dict.fromkeys(["FusedConv1DBackprop", "FusedConv2DBackprop", "FusedConv3DBackprop", "FusedBatchNormTrainingRelu",
                     "FusedReluGradBatchNormTrainingGrad", "FusedBatchNormTrainingAddRelu",
                     "FusedReluGradBatchNormTrainingGradSelect"], _PASS),
    **dict.fromkeys(["SbpLocalConst", "SbpLocalShape", "SbpMaskedGather", "SbpMaskedResourceGather", "SbpRowsOnly",
                     "SbpMaskedGatherGrad", "SbpReplaceInput", "SbpSliceOf", "SbpEmbedded", "SbpRandomPiece"], _LOCAL),
    **dict.fromkeys(["If", "StatefulIf", "While", "StatefulWhile", "WhileGrad"], _CONTROL),
    **dict.fromkeys(["_Boxing", "_Once", "_ToGlobal", "_AllReduceStart", "_AllReduceWait", "_OnceInto", "_ZeroApply",
                     "_VariableRows", "_GatherRows"],
                    "a planned graph's own (distribute/plan_ops.py): the planner lays out a to_global pin itself "
                    "and makes the per-rank steps on pieces"),
    **dict.fromkeys(["PyFunc", "EagerPyFunc"], _PYTHON),
    **dict.fromkeys(["AsString", "BytesSplit", "ReduceJoin", "RegexFullMatch", "RegexReplace", "StringJoin",
                     "StringLength", "StringLower", "StringSplit", "StringStrip", "StringToHashBucketFast",
                     "StringToHashBucketStrong", "StringToNumber", "StringUpper", "Substr", "UnicodeDecode",
                     "UnicodeEncode", "UnicodeSplit", "UnsortedSegmentJoin", "KerasHashBucket", "KerasTextSplit",
                     "KerasTextStandardize", "KerasVocabularyLookup"], _STRINGS),
}


def test_every_registered_op_has_an_sbp_rule_or_a_reason():
    registered = _registered_by_tensorweave()
    without = {n for n in registered if rule_for(get_op(n)) is None}
    missing = sorted(without - set(NO_RULE))
    assert not missing, (f"ops without an SBP rule: {missing}. Give each a rule (register_op(..., sbp=...), see "
                         "docs/design/sbp-rules.md) or, where none makes sense, sbp=BOXES_TO_B and a reason in "
                         "NO_RULE here")
    stale = sorted(set(NO_RULE) - without)
    assert not stale, f"NO_RULE names ops that have a rule now or are not registered: {stale}"
    assert all(isinstance(r, str) and r for r in NO_RULE.values())
    assert len(registered) - len(without) > 200        # the rules cover the bulk of the ops
