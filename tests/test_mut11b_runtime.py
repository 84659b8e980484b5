"""Tests that kill mutants which survived the area's own tests (session 11 mutation testing of
issue 18's runtime fast paths: ``Function``'s repeated-call key and the executor's generated
sequential runner; see docs/design/mutation-testing.md)."""
import numpy as np

import tensorweave as tw


def test_eager_tensors_a_function_closes_over_are_constants_not_captures():
    # why _call_checked's loop over graph.captures is not observable from an eager call: an eager
    # tensor used while tracing becomes a constant of the graph (graph.capture), so the function's
    # graph has no captures to feed
    c = tw.constant(np.array([1.0, 2.0], np.float32))
    d = tw.constant(np.array([10.0, 20.0], np.float32))

    @tw.function
    def f(x):
        return x * c + d
    x = np.ones(2, np.float32)
    first = f(x).numpy().tolist()
    assert first == [11.0, 22.0]
    again = f(x)                                    # the repeated-call key's path
    assert type(again.numpy()) is np.ndarray and again.numpy().tolist() == first
    assert f(tw.constant(x + 1)).numpy().tolist() == [12.0, 24.0]
    (cf,) = f._cache.values()
    assert cf.graph.captures == []


def test_outs_pads_and_cuts_a_multi_output_steps_values():
    from tensorweave.runtime import executor
    assert executor._outs([1], 3) == (1, None, None)
    assert executor._outs(iter([1, 2, 3]), 2) == (1, 2)
    assert executor._outs((1, 2), 2) == (1, 2)


def test_a_parallel_plan_on_one_inter_op_slot_runs_the_generated_runner(monkeypatch):
    from tensorweave.runtime import executor

    @tw.function
    def f(x):
        return tw.exp(x) + tw.sin(x)
    x = tw.constant(np.zeros(2, np.float32))
    f(x)
    (cf,) = f._cache.values()
    plan = cf._plan
    plan.parallel, plan.opaque, plan.runner = True, False, None
    monkeypatch.setattr(executor.threads, "inter_op_slots", lambda: 1)
    np.testing.assert_allclose(f(x).numpy(), [1.0, 1.0])
    assert callable(plan.runner)                     # one slot: the sequential runner, not the pool
    plan.runner = None
    monkeypatch.setattr(executor.threads, "inter_op_slots", lambda: 2)
    np.testing.assert_allclose(f(x).numpy(), [1.0, 1.0])
    assert plan.runner is None                       # two slots: the parallel schedule
