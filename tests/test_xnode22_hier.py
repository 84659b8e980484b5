"""The hierarchical group (``distribute/ray/hier.py``) on in-process ranks: members on "nodes"
(each node's group, the leaders' and everyone's are InProcessGroups), every collective against
the flat in-process group's bits, for nodes holding consecutive ranks (the chained all-reduce),
interleaved ranks, uneven nodes and nodes of one rank. Nothing here starts Ray."""
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from ray14_cases import assert_same, large_collectives
from tensorweave.distribute.collective import SMALL_BYTES, InProcessGroup
from tensorweave.distribute.layout import balanced_bounds
from tensorweave.distribute.ray.cluster import candidates
from tensorweave.distribute.ray.hier import HierCommunicator, consecutive, in_process_hier, layout

LAYOUTS = {"consecutive": ["a", "a", "b", "b"], "interleaved": ["a", "b", "a", "b"],
           "uneven": ["a", "a", "a", "b"], "singles": ["a", "b", "b"], "three": ["x", "x", "y", "z", "z"]}


def small_collectives(comm, i):
    """Every collective on small values with uneven pieces, point to point in a ring (each pair
    crosses a node or not depending on the layout)."""
    n = comm.size
    rng = np.random.default_rng(10 + i)
    x = rng.standard_normal((7, 3)).astype(np.float32)
    comm.send(x[:i + 1], (i + 1) % n, tag=5)
    comm.send(np.arange(i, dtype=np.int32), (i + 2) % n, tag="t")
    out = {"sum": comm.all_reduce(x), "min": comm.all_reduce(x, "min"),
           "rs": comm.reduce_scatter(x), "rs1": comm.reduce_scatter(x, axis=1),
           "ag": comm.all_gather(x[:i]), "ag1": comm.all_gather(x[:, :1] + i, axis=1),
           "a2a": comm.all_to_all([np.full((j + i, 2), 10.0 * i + j) for j in range(n)], axis=0),
           "a2a_list": comm.all_to_all([np.full(j, i, np.int8) for j in range(n)]),
           "bcast": comm.broadcast(x * 2 if i == n - 1 else None, root=n - 1),
           "ring": comm.recv((i - 1) % n, tag=5), "ring2": comm.recv((i - 2) % n, tag="t")}
    comm.barrier()
    bucket = comm.all_reduce_start([x, x[:, 0].astype(np.float64), np.full((SMALL_BYTES // 4,), i, np.float32)])
    out["bucket"], out["bucket_f64"], out["bucket_large"] = bucket.wait()
    rows = np.zeros((7, 2))
    lo, hi = balanced_bounds(7, n)[i]
    rows[lo:hi] = i + 1
    comm.all_gather_rows([rows])
    out["rows"] = rows
    return out


def everything(comm, i):
    return {**small_collectives(comm, i), **large_collectives(comm, i)}


def _threads(comms, fn):
    with ThreadPoolExecutor(len(comms)) as pool:
        return list(pool.map(lambda i: fn(comms[i], i), range(len(comms))))


def _flat(n, fn):
    group = InProcessGroup(range(n), timeout=30)
    return _threads([group.communicator(i) for i in range(n)], fn)


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_every_collective_gives_the_flat_groups_bits(name):
    nodes = LAYOUTS[name]
    comms = in_process_hier(nodes, timeout=30)
    assert all(isinstance(c, HierCommunicator) for c in comms)
    assert comms[0].group.chain == (name in ("consecutive", "uneven", "singles", "three"))
    assert_same(_threads(comms, everything), _flat(len(nodes), everything), writeable=False)


def test_the_chained_all_reduce_crosses_nodes_once_each_way():
    # 4 ranks on 2 nodes: one partial sum from node a's leader to node b's, the total back
    posted = []
    comms = in_process_hier(["a", "a", "b", "b"], timeout=30)
    top = comms[0].group.leaders
    post = top.post

    def counting(src, dst, tag, value):
        posted.append((src, dst, tag, np.asarray(value).nbytes))
        post(src, dst, tag, value)
    top.post = counting
    x = [np.full(SMALL_BYTES, 1.0 + i, np.float32) / 3 for i in range(4)]
    got = _threads(comms, lambda c, i: c.all_reduce(x[i]))
    want = _flat(4, lambda c, i: c.all_reduce(x[i]))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert posted == [(0, 1, "hier_all_reduce", SMALL_BYTES * 4), (1, 0, "hier_all_reduce_total", SMALL_BYTES * 4)]
    assert comms[1].group.everyone._mail == {}              # nothing between nodes but the leaders'


def test_a_shape_that_differs_inside_a_node_is_named():
    comms = in_process_hier(["a", "a"], timeout=5)
    sizes = [SMALL_BYTES, SMALL_BYTES + 1]
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(comms[i].all_reduce, np.ones(sizes[i], np.float32)) for i in range(2)]
        errors = [f.exception() for f in futures]
    assert all("all_reduce: rank" in str(e) and "gave shape" in str(e) for e in errors), errors


def test_layout_and_candidates():
    assert layout(["b", "a", "b", "c"]) == ([[0, 2], [1], [3]], [0, 1, 3])
    assert consecutive([[0, 1], [2]]) and not consecutive([[1], [0]])
    assert candidates(["n"] * 3) == ("shm", "object_store")
    assert candidates(["n", "m", "n"]) == ("hier", "object_store")
    assert candidates(["n", "m"]) == candidates(["n"]) == candidates(["n", "n"], shm_ok=False) == ("object_store",)
