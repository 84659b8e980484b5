"""A cold process running the main job's CNN compiles nothing (issue 18, cold28).

A fresh interpreter trains the main job's model (``make demo``'s CNN) for one epoch of a slice of its
data with validation, and predicts, while a listener on numba's ``numba:compile`` events records
every compile; with the ahead-of-time build current, the list must be empty but for what is never
built by design: loops made from a graph (fused elementwise code) and ``parallel=True`` loops (after
``jit.PARALLEL_AFTER`` large updates). A kernel whose callers' types drift from
``aot_kernels.KERNELS`` shows here by name and argument types.
"""
import json
import os
import subprocess
import sys

import pytest

from tensorweave.kernels.cpu import aot

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_SCRIPT = r"""
import json, threading
from numba.core import event

found = []

class Compiles(event.Listener):
    def on_start(self, ev):
        pass

    def on_end(self, ev):
        fn = ev.data["dispatcher"].py_func
        found.append([fn.__module__, fn.__qualname__, ", ".join(map(str, ev.data["args"]))])

event.register("numba:compile", Compiles())
from tensorweave import keras
from tensorweave.examples import mnist
from tensorweave.kernels.cpu import jit
keras.utils.set_random_seed(0)
(x, y), _ = mnist.load("cnn")
model = mnist.build_model("cnn", keras)
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
model.fit(x[:1280], y[:1280], batch_size=128, epochs=1, validation_split=0.1, verbose=0)
model.predict(x[:1], verbose=0)
jit.wait_for_compiles()
print(json.dumps(found))
"""

#: compiled by design (never built): graph-made loops have no module file; parallel loops need numba's pool
_BY_DESIGN = {("tensorweave.kernels.cpu.training_kernels", "_adam_chunks")}


def _by_design(module, name):
    return module.startswith("<") or (module, name) in _BY_DESIGN


def test_the_main_jobs_cnn_compiles_nothing_in_a_cold_process():
    if aot.library() is None or aot.stale_sources():
        pytest.skip("no current ahead-of-time build in this checkout (`make aot`): a cold process compiles")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, timeout=240,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    compiled = json.loads(out.stdout.strip().splitlines()[-1])
    left = [c for c in compiled if not _by_design(c[0], c[1])]
    assert not left, f"a cold process compiled (module, kernel, argument types): {left}"
