"""The background compiler of ``jit.njit_twin`` kernels (kernels/cpu/jit.py): the compile time it
reports (mutation testing, issue 12: ``background_compile_seconds`` was read by benchmarks only)."""
import itertools
import threading

import numpy as np
import pytest

from tensorweave.kernels.cpu import jit


def _twin(out, x):
    out[0] = x + 1.0


def test_background_compile_seconds_adds_up_the_time_each_job_ran():
    # A compiler of its own with a scripted clock: the count is exact, never a wall-clock bound.
    compiler = jit._Compiler()
    ticks = iter([10.0, 10.5, 20.0, 20.25, 30.0, 30.0])
    compiler.clock = lambda: next(ticks)
    assert compiler.seconds == 0.0
    ran = []
    for k in range(3):
        done = threading.Event()
        assert compiler.submit(lambda k=k, done=done: (ran.append(k), done.set()))
        done.wait()
    compiler.stop()
    assert ran == [0, 1, 2]
    assert compiler.seconds == 0.75          # 0.5 + 0.25 + 0.0: the jobs' own spans, summed


@pytest.mark.skipif(not jit.BACKGROUND, reason="TW_JIT_BACKGROUND=0")
def test_a_background_compile_is_counted_and_its_kernel_then_runs_compiled(monkeypatch):
    @jit.njit_twin(_twin)
    def kernel(out, x):
        out[0] = x + 1.0
    out = np.zeros(1)
    jit.wait_for_compiles()                # a compile an earlier test queued began on the real clock
    ticks = itertools.count()              # a scripted clock: each job spans exactly 1.0, whatever the machine
    monkeypatch.setattr(jit._compiler, "clock", lambda: float(next(ticks)))
    before = jit.background_compile_seconds()
    assert before >= 0
    kernel(out, 1.0)                       # queues the compile, the twin answers
    jit.wait_for_compiles()
    counted = jit.background_compile_seconds() - before
    assert counted >= 1.0 and counted == int(counted)     # this compile's span (and any other queued job's)
    kernel(out, 2.0)
    assert out[0] == 3.0 and len(kernel.signatures) == 1


def _marks(out, x):
    out[0] = -1.0          # a twin that differs, so the test sees which ran


@pytest.mark.skipif(not jit.BACKGROUND, reason="TW_JIT_BACKGROUND=0")
def test_once_the_compiler_stopped_a_cold_kernel_compiles_on_its_callers_thread(monkeypatch):
    stopped = jit._Compiler()                # what the process's compiler is at interpreter exit
    stopped.stop()
    monkeypatch.setattr(jit, "_compiler", stopped)

    @jit.njit_twin(_marks)
    def kernel(out, x):
        out[0] = x * 2.0
    out = np.zeros(1)
    kernel(out, 3.0)
    assert out[0] == 6.0 and len(kernel.signatures) == 1     # compiled here, not handed to the twin


def test_the_background_compiler_never_keeps_the_interpreter_alive():
    """A program that exits while its compile thread waits for work exits (the thread is a daemon;
    ``atexit`` lets a compile under way finish)."""
    import os
    import subprocess
    import sys

    import tensorweave
    code = ("import numpy as np\nfrom tensorweave.kernels.cpu import jit\n"
            "def twin(out, x):\n    out[0] = -1.0\n"
            "@jit.njit_twin(twin)\ndef k(out, x):\n    out[0] = x\n"
            "out = np.zeros(1)\nk(out, 1.0)\njit.wait_for_compiles()\nk(out, 2.0)\nprint(out[0])\n")
    root = os.path.dirname(os.path.dirname(tensorweave.__file__))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == "2.0"
