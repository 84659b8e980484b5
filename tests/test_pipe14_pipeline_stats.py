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
    pipe = tw.distribute.pipeline([(lambda x: tw.matmul(x, w), s0), (tw.nn.relu, s1)], micro_batches=2,
                                  loss=lambda y, p: tw.reduce_mean(tw.square(p - y)))
    assert pipe.last_step is None
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    ticks = iter([10.0, 10.25])           # a scripted clock for the step: the span is exact, never measured
    monkeypatch.setattr(pipeline_module, "time", types.SimpleNamespace(perf_counter=lambda: next(ticks)))
    pipe.forward_backward(x, np.zeros((4, 2), np.float32))
    assert pipe.last_step == {"seconds": 0.25}
