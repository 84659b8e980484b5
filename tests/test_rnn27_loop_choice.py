"""A loop whose twin's compiled kernels (``needs``) are not compiled is answered without typing its
arguments (``loop_choice.choose``, issue 18 session 23): under the ahead-of-time build a recurrent
loop's passes are built into it and never compile on their own, so the answer is never recorded
and every call of the loop (one per span of steps) asked again; typing ~20 arguments cost ~170 µs
a call on the AMD EPYC. The tests count the typing calls, never a time."""
import numpy as np
import pytest

from tensorweave.kernels.cpu import jit, loop_choice
from tensorweave.kernels.cpu import lstm_kernels as lk


def _twin(y):
    y += 1


@jit.njit_twin(_twin)
def _add_one(y):
    for i in range(y.shape[0]):
        y[i] += 1


@pytest.fixture
def typed(monkeypatch):
    """Auto mode, this process's choices forgotten; returns the list of ``compiled`` calls."""
    monkeypatch.setattr(loop_choice, "MODE", "auto")
    loop_choice.reset()
    calls, real = [], loop_choice.compiled

    def compiled(kernel, args):
        calls.append(kernel)
        return real(kernel, args)
    monkeypatch.setattr(loop_choice, "compiled", compiled)
    yield calls
    loop_choice.reset()


def test_uncompiled_needs_answer_the_incumbent_without_typing(typed):
    y = np.zeros(4, np.float32)
    jit.compile_now(_add_one, y)
    fresh = jit.njit(lambda v: v)                   # nothing compiled for it
    for _ in range(3):
        assert loop_choice.choose(_add_one, (y,), needs=(fresh,)) == loop_choice.INCUMBENT
    assert typed == [] and not loop_choice._chosen  # unrecorded: asked again next call, cheaply


def test_compiled_needs_type_the_arguments(typed, monkeypatch):
    monkeypatch.setattr(loop_choice, "measure", lambda kernel, args, clock=None: None)
    y = np.zeros(5, np.float32)
    jit.compile_now(_add_one, y)
    done = jit.njit(lambda v: v)
    done(1)
    assert loop_choice.choose(_add_one, (y,), needs=(done,)) == loop_choice.INCUMBENT
    assert typed == [_add_one]


def test_the_recurrent_loops_declare_their_compiled_passes():
    assert lk._forward_rows.needs and lk._backward_rows.needs
    assert all(hasattr(k, "overloads") for k in lk._forward_rows.needs + lk._backward_rows.needs)
