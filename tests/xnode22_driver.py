"""The driver tests/test_xnode22_ray_nodes.py runs in a subprocess (its own Ray driver, so the
suite's shared Ray instance in the pytest process is untouched): ranks on the Ray nodes at
``sys.argv[1]``, checked against in-process ranks; prints one JSON line of facts per layout for
the test, exits non-zero when a check fails.

``spread``: 2 ranks, one per node (``STRICT_SPREAD``): every collective (uneven sizes, the large
paths, send/recv) gives the in-process ranks' bits over the object store (chosen: no two ranks
share a node), and 2 SGD steps of a small data-parallel MLP give one process's values.
``hier``: 4 ranks, 2 per node (``PACK``): every collective gives the in-process bits over the
hierarchy (shared memory inside each node, the object store between the leaders); the transport
connect measured is one of the two candidates."""
import json
import os
import sys

import numpy as np
import ray

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ray14_cases  # noqa: E402
import test_xnode22_hier as cases  # noqa: E402
import tensorweave as tw  # noqa: E402
from tensorweave.distribute.ray import cluster as rc  # noqa: E402

ray.cloudpickle.register_pickle_by_value(ray14_cases)
ray.cloudpickle.register_pickle_by_value(cases)
RNG = np.random.default_rng(22)
X, Y = RNG.standard_normal((10, 6)).astype(np.float32), RNG.standard_normal((10, 3)).astype(np.float32)
INITS = [RNG.standard_normal((6, 8)).astype(np.float32) * 0.4, np.full(8, 0.1, np.float32),
         RNG.standard_normal((8, 3)).astype(np.float32) * 0.4]


def sgd(placement, steps=2):
    step, x, y, params = ray14_cases.sgd_step(placement, X, Y, INITS)
    losses = [float(step(x, y)) for _ in range(steps)]
    return losses, [p.numpy() for p in params]


def check_training(n):
    got = sgd(tw.placement("cpu", ranks=range(n)))
    with tw.distribute.in_process():
        want = sgd(tw.placement("cpu", ranks=[0]))
    np.testing.assert_allclose(got[0], want[0], rtol=2e-5)
    for g, w in zip(got[1], want[1]):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-6)


def check_collectives(cluster, transport):
    got = cluster.run(lambda w: cases.everything(w.comm(transport=transport), w.rank))
    ray14_cases.assert_same(got, cases._flat(cluster.num_workers, cases.everything), writeable=False)
    return cluster.run(lambda w: type(w.comm(transport=transport)).__name__)[0]


def run(address, mode):
    n = (2, "STRICT_SPREAD") if mode == "spread" else (4, "PACK")
    cluster = rc.connect(address=address, num_workers=n[0], strategy=n[1], timeout=60)
    try:
        nodes = [node for _, _, node in ray.get([w.ping.remote() for w in cluster.workers])]
        facts = {"mode": mode, "nodes": len(set(nodes)), "per_node": sorted(nodes.count(v) for v in set(nodes)),
                 "transport": cluster.transport, "candidates": list(rc.candidates(nodes))}
        t = facts["candidates"][0]
        facts[f"comm_{t}"] = check_collectives(cluster, t)
        if mode == "hier":
            facts["local_group"] = cluster.run(lambda w: type(w.comm(transport="hier").group.local).__name__)
            facts["chain"] = cluster.run(lambda w: w.comm(transport="hier").group.chain)[0]
        else:
            check_training(n[0])
    finally:
        rc.shutdown()
    print(json.dumps(facts), flush=True)


if __name__ == "__main__":
    for m in sys.argv[2:]:
        run(sys.argv[1], m)
