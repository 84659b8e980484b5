"""The recurrent step loops built ahead of time (issue 18, rnn18 session 12): a cold process's first
lstm and gru training steps run them without compiling anything of those kernels; a build records the
sources of every module whose code its loops carry (``aot_build.built_modules``: the loops call
into ``rnn_gemm``, ``gemm`` and ``rnn_activations``), and a change to any of those makes the
build stale (JIT path, one warning naming the module). The built loops' bits against the JIT's are
checked with every other built signature in ``test_cold18_aot.py`` (cases in ``rnn18_aot_cases``)."""
import copy
import json
import os
import subprocess
import sys

import pytest

from tensorweave.kernels.cpu import aot, aot_build, aot_kernels
from tensorweave.kernels.cpu import lstm_kernels as lstm

LSTM = "tensorweave.kernels.cpu.lstm_kernels"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("module", [LSTM, "tensorweave.kernels.cpu.gru_kernels",
                                    "tensorweave.kernels.cpu.simple_rnn_kernels"])
def test_the_recurrent_loops_are_listed_for_both_float_dtypes(module):
    table = aot_kernels.KERNELS[module]
    assert sorted(table) == ["_backward_rows", "_forward_rows"]
    for signatures in table.values():
        assert [("float32" in s, "float64" in s) for s in signatures] == [(True, False), (False, True)]


def test_built_modules_follow_module_attributes_and_passed_loops():
    got = aot_build.built_modules(lstm._forward_rows)
    assert got == sorted({LSTM, "tensorweave.kernels.cpu.rnn_gemm", "tensorweave.kernels.cpu.gemm",
                          "tensorweave.kernels.cpu.rnn_activations"})
    from tensorweave.kernels.cpu import nn_loops
    assert aot_build.built_modules(nn_loops.bias_act) == ["tensorweave.kernels.cpu.nn_loops"]


def _library():
    lib = aot.library()
    if lib is None or (LSTM, "_forward_rows") not in lib.loops:
        pytest.skip("no ahead-of-time build of the LSTM loops in this checkout (`make aot`)")
    return lib


def test_a_changed_callee_module_makes_the_lstm_build_stale():
    lib = _library()
    assert set(lib.depends[LSTM]) == set(aot_build.built_modules(lstm._forward_rows))
    stale = copy.copy(lib)
    stale.sources = dict(lib.sources, **{"tensorweave.kernels.cpu.rnn_activations": "0" * 64})
    stale._fresh = {}
    kernel = aot_build._kernel(LSTM, "_forward_rows")
    fresh = copy.copy(kernel)
    with pytest.warns(aot.AOTWarning, match=r"kernels of tensorweave.kernels.cpu.lstm_kernels were built from another "
                                            r"version of the source of tensorweave.kernels.cpu.rnn_activations"):
        assert not stale.fresh(LSTM)
    assert lib.fresh(LSTM)
    assert aot.attach(fresh, stale) == ()


_COLD_STEP = """
import json, numpy as np, sys
sys.path.insert(0, "benchmarks")
import tensorweave as tw
from tensorweave.kernels.cpu import gru_kernels, lstm_kernels
from peers import _keras_model
for workload in ("lstm", "gru"):
    model, loss = _keras_model(tw.keras, tw.keras.layers, workload)
    model.compile(optimizer=tw.keras.optimizers.Adam(1e-3), loss=loss)
    x = np.random.default_rng(0).integers(0, 20000, (4, 80)).astype(np.int32)
    model.train_on_batch(x, np.ones((4, 1), np.float32))
loops = ("_forward_rows", "_backward_rows", "_forward_loop", "_backward_loop")
names = [(lstm_kernels, n) for n in loops + ("_forward_step", "_backward_step")] + [
    (gru_kernels, n) for n in loops + ("_forward_gates", "_forward_state", "_backward_gates")]
print(json.dumps({m.__name__ + "." + n: len(getattr(m, n).overloads) for m, n in names}))
"""


def test_cold_lstm_and_gru_training_steps_compile_nothing_of_their_kernels():
    _library()
    env = dict(os.environ, PYTHONPATH=ROOT, TW_JIT_BACKGROUND="0")
    out = subprocess.run([sys.executable, "-c", _COLD_STEP], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    compiled = json.loads(out.stdout.strip().splitlines()[-1])
    assert compiled == dict.fromkeys(compiled, 0), compiled
