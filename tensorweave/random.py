"""``tw.random``: random tensors with TensorFlow's global-seed/op-seed rules."""
from tensorweave.ops.random_ops import *  # noqa: F401,F403
from tensorweave.ops.sampling_ops import (all_candidate_sampler, fixed_unigram_candidate_sampler,  # noqa: F401
                                          log_uniform_candidate_sampler, uniform_candidate_sampler)

from tensorweave.core.signatures import check_namespace as _check_namespace  # noqa: E402
_check_namespace(globals())
