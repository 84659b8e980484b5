"""Ranks on two real Ray nodes (issue 14, "across nodes"): two ``ray start`` nodes on this
machine (``LocalNodes``: a head and a node that joins it, each its own raylet, object store and
node id, free ports, their own temp dir; Ray in cluster mode gives the nodes the machine's routable
address, token authentication on), started once for the module and stopped in the
fixture's teardown (only their own processes). The drivers run in subprocesses
(``tests/xnode22_driver.py``), so the suite's shared Ray instance in this process is untouched.

- 2 ranks, one per node: every collective gives the in-process bits over the object store (the
  only transport that reaches across), and a data-parallel SGD step gives one process's values;
- 4 ranks, 2 per node: every collective gives the in-process bits over the hierarchy (shared memory
  inside each node, the object store between the leaders), the transport measured among the two
  candidates (hierarchy, object store);
- ``tensorweave launch --address auto`` (``RAY_ADDRESS`` naming the head) runs a script's step
  against the running cluster, and ``ray.init()`` elsewhere does not find it.
Skips only where Ray cannot start here (``tests/ray_start.py``)."""
import json
import os
import subprocess
import sys

import pytest

# not bound to ``ray``: this module needs no Ray instance in the pytest process (tests/ray_shared.py
# starts one for a module with ``ray`` and a module fixture); where the nodes cannot start, the
# fixture asks tests/ray_start.py whether Ray can start here at all, and skips with its reason
pytest.importorskip("ray")

import ray_start  # noqa: E402
from tensorweave.distribute.ray.local_nodes import LocalNodes, node_env  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _env(**extra):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    env.pop("RAY_ADDRESS", None)
    return node_env({**env, **extra})


@pytest.fixture(scope="module")
def nodes():
    try:
        started = LocalNodes(count=2, cpus=2, object_store_mb=200, env=_env())
    except RuntimeError as e:
        if ray_start.start_failure() is not None:
            pytest.skip(ray_start.skip_reason(ray_start.start_failure()))
        raise e
    yield started
    started.stop()


def _run(cmd, env, timeout=300):
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-6000:]
    return out.stdout


@pytest.fixture(scope="module")
def driven(nodes):
    """The facts of one driver process running both layouts (one Ray driver start for both)."""
    out = _run([sys.executable, os.path.join(HERE, "xnode22_driver.py"), nodes.address, "spread", "hier"], _env())
    facts = [json.loads(line) for line in out.strip().splitlines() if line.startswith("{")]
    print(facts)
    return {f["mode"]: f for f in facts}


def test_two_ranks_on_two_nodes_go_through_the_object_store_with_the_in_process_bits(driven):
    facts = driven["spread"]
    assert facts["nodes"] == 2 and facts["per_node"] == [1, 1]
    assert facts["candidates"] == ["object_store"] and facts["transport"] == "object_store"
    assert facts["comm_object_store"] == "InProcessCommunicator"       # over a RayGroup


def test_four_ranks_on_two_nodes_share_memory_inside_each_node(driven):
    facts = driven["hier"]
    assert facts["nodes"] == 2 and facts["per_node"] == [2, 2]
    assert facts["candidates"] == ["hier", "object_store"] and facts["transport"] in facts["candidates"]
    assert facts["comm_hier"] == "HierCommunicator" and facts["local_group"] == ["ShmGroup"] * 4


_SCRIPT = """
import sys
import numpy as np
import ray
import tensorweave as tw
cluster = tw.distribute.current()
nodes = {node for _, _, node in ray.get([w.ping.remote() for w in cluster.workers])}
x = tw.constant(np.arange(8, dtype=np.float32).reshape(4, 2)).to_global(
    placement=tw.placement("cpu", ranks=range(cluster.num_workers)), sbp=tw.sbp.split(0))
step = tw.function(lambda x: tw.reduce_sum(x * x))
print("ranks", cluster.num_workers, "nodes", len(nodes), "step", float(step(x)), "argv", sys.argv[1:])
"""


def test_launch_with_address_auto_runs_a_step_on_the_running_cluster(nodes, tmp_path):
    script = tmp_path / "job.py"
    script.write_text(_SCRIPT)
    out = _run([sys.executable, "-m", "tensorweave", "launch", "--workers", "2", "--spread", "--address", "auto",
                str(script), "--", "x"], _env(RAY_ADDRESS=nodes.address))
    assert "ranks 2 nodes 2 step 140.0 argv ['x']" in out
    # the nodes' "current cluster" file is in their own temp dir: a ray.init() elsewhere would not attach
    assert os.path.isfile(os.path.join(nodes.temp_dir, "ray_current_cluster"))
