"""A pipeline reports its last step's wall time (in-process ranks; on Ray workers also each
worker's busy and waiting seconds: test_pipe14_ray_pipeline.py)."""
import importlib
import types

import numpy as np

import tensorweave as tw

# (the package exports a function named pipeline, so the module is reached by its full name)
pipeline_module = importlib.import_module("tensorweave.distribute.pipeline")


def test_last_step_gives_the_step_seconds(monkeypatch):
    s0, s1 = tw.placement("cpu", ranks=[0]), tw.placement("cpu", ranks=[1])
    w = tw.Variable(np.ones((3, 2), np.float32))
    clock = [10.0]

    def stage0(x):
        clock[0] += 0.125                 # a scripted clock: only stage 0's forwards take time
        return tw.matmul(x, w)
    pipe = tw.distribute.pipeline([(stage0, s0), (tw.nn.relu, s1)], micro_batches=2, concurrent=False,
                                  loss=lambda y, p: tw.reduce_mean(tw.square(p - y)))
    assert pipe.last_step is None
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    monkeypatch.setattr(pipeline_module, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    pipe.forward_backward(x, np.zeros((4, 2), np.float32))
    # the span is exact, never measured; stage 0 busy all of it, stage 1 none (tp19: the measured bubble)
    assert pipe.last_step == {"seconds": 0.25, "busy_s": [0.25, 0.0], "measured_idle_fraction": 0.5}
