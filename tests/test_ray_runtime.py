"""Ranks as Ray actors: the same collectives and boxing as the in-process ranks, errors that
name the rank, timeouts that name the missing ranks, a loopback-only local instance."""
import os
import re
import select
import subprocess
import sys

import numpy as np
import pytest

ray = pytest.importorskip("ray")

from tensorweave.core import errors  # noqa: E402
from tensorweave.core.sbp import B, P, Partial, S  # noqa: E402
from tensorweave.distribute.boxing import plan_boxing, run_boxing_on_rank  # noqa: E402
from tensorweave.distribute.collective import CollectiveAbortedError, CollectiveTimeoutError  # noqa: E402
from tensorweave.distribute.layout import Placement, assemble, split_to_pieces  # noqa: E402
from tensorweave.distribute.ranks import World  # noqa: E402
from tensorweave.distribute.ray import cluster as ray_cluster  # noqa: E402
from tensorweave.distribute.ray.group import RayGroup  # noqa: E402

N = 3
# The workers cannot import this test module: its functions travel by value, as a script's do.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _segments(cluster_id):
    return [n for n in os.listdir("/dev/shm") if n.startswith(f"tw-{cluster_id}")] if os.path.isdir("/dev/shm") else []


@pytest.fixture(scope="module")
def cluster():
    c = ray_cluster.connect(num_workers=N, timeout=60)
    yield c
    ray_cluster.shutdown()
    assert _segments(c.cluster_id) == []          # shutdown leaves nothing in /dev/shm


def _collectives(worker, transport=None):
    """Every collective once, with shard sizes that differ between ranks."""
    comm, i = worker.comm(transport=transport), worker.rank
    x = np.arange(6, dtype=np.float64).reshape(2, 3) * (i + 1)
    uneven = np.full((i + 1, 2), float(i))
    out = {"sum": comm.all_reduce(x), "max": comm.all_reduce(-x, "max"), "big": comm.all_reduce(
        np.full(20000, float(i + 1))), "rs": comm.reduce_scatter(np.arange(7.0) * (i + 1)),
        "ag": comm.all_gather(uneven), "a2a": comm.all_to_all([np.full(j + 1, 10 * i + j) for j in range(comm.size)],
                                                             axis=0),
        "bc": comm.broadcast(x if i == 1 else None, root=1)}
    if i == 0:
        comm.send(np.array([7, 8]), 2, tag=5)
    if i == 2:
        out["recv"] = comm.recv(0, tag=5)
    comm.barrier()
    return out


@pytest.mark.parametrize("transport", ["object_store", "shm"])
def test_ray_collectives_equal_the_in_process_ones(cluster, transport):
    on_ray = cluster.run(_collectives, transport)
    world = World()
    group = world.group(list(range(N)))

    class _Fake:
        def __init__(self, i):
            self.rank = i

        def comm(self, transport=None):
            return group.communicator(self.rank)
    in_process = world.run(list(range(N)), lambda i: _collectives(_Fake(i)))
    assert len(on_ray) == N
    for a, b in zip(on_ray, in_process):
        assert a.keys() == b.keys()
        for k in a:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    np.testing.assert_array_equal(on_ray[0]["ag"], np.repeat([0.0, 1.0, 2.0], [1, 2, 3])[:, None] * [1, 1])
    np.testing.assert_array_equal(on_ray[2]["recv"], [7, 8])


@pytest.mark.parametrize("src,dst", [((P,), (B,)), ((P,), (S(0),)), ((S(0),), (B,)), ((S(0),), (S(1),)),
                                     ((B,), (S(1),)), ((S(1),), (P,)), ((Partial("max"),), (S(0),))])
def test_boxing_runs_on_ray_workers(cluster, src, dst):
    placement = Placement("cpu", list(range(N)))
    x = np.random.default_rng(0).standard_normal((5, 4))       # 5 rows over 3 ranks: uneven
    plan = plan_boxing(x.shape, x.dtype, placement, src, dst)
    pieces = split_to_pieces(x, placement, src)

    def step(worker, plan, pieces):
        return run_boxing_on_rank(plan, worker.rank, pieces[worker.rank], worker.comm)
    out = cluster.run(step, plan, pieces)
    np.testing.assert_allclose(assemble(out, x.shape, placement, dst), x, rtol=1e-12)
    for got, want in zip(out, split_to_pieces(x, placement, dst)):
        assert got.shape == want.shape


@pytest.mark.parametrize("transport", ["object_store", "shm"])
def test_a_rank_that_raises_surfaces_as_its_own_type_and_the_others_do_not_hang(cluster, transport):
    def step(worker, cluster_id):
        # a group of its own: an abort leaves the group unusable
        group = RayGroup((0, 1, 2), ray_cluster._rendezvous(cluster_id + "-raise-" + transport, (0, 1, 2)), 60)
        comm = group.shm_group(worker.rank, ray_cluster.shm_prefix(cluster_id + "-raise", (0, 1, 2))).communicator() \
            if transport == "shm" else group.communicator(worker.rank)
        comm.barrier()
        if worker.rank == 1:
            raise KeyError("no such feature column 'age'")
        return comm.all_reduce(np.ones(3))   # ranks 0 and 2 wait for rank 1
    c = ray_cluster.current()
    with pytest.raises(KeyError, match="age") as info:
        c.run(step, c.cluster_id)
    assert info.value.rank == 1
    assert any("rank 1" in n for n in getattr(info.value, "__notes__", []))


@pytest.mark.parametrize("transport", ["object_store", "shm"])
def test_timeouts_name_the_ranks_that_did_not_arrive(cluster, transport):
    # a fresh group: a failed collective leaves its group unusable (the world group is the fixture's)
    def step(worker, cluster_id):
        ranks = (0, 1, 2) if transport == "object_store" else (0, 1)
        group = RayGroup(ranks, ray_cluster._rendezvous(cluster_id + "-timeout-" + transport, ranks), timeout=1.0)
        if worker.rank == 2:
            return "skipped"
        if transport == "shm":      # rank 1 sets up the group, then never calls the collective
            comm = group.shm_group(worker.rank, ray_cluster.shm_prefix(cluster_id + "-timeout", ranks)).communicator()
            if worker.rank == 1:
                return "idle"
        else:
            comm = group.communicator(worker.rank)
        try:
            comm.all_gather(np.ones(1))
        except CollectiveTimeoutError as e:
            return str(e), e.missing
        except CollectiveAbortedError as e:      # the other waiter's timeout fired first
            return str(e), None
    c = ray_cluster.current()
    out = c.run(step, c.cluster_id)
    if transport == "shm":
        assert out[1:] == ["idle", "skipped"] and out[0][1] == (1,)
        assert "ranks [1] did not arrive within 1 s" in out[0][0]
        return
    assert out[2] == "skipped"
    assert any(missing is not None for _, missing in out[:2])     # someone's own timeout fired
    for rank, (msg, missing) in enumerate(out[:2]):
        if missing is None:     # abandoned: the message is the first timeout's, naming rank 2
            assert "abandoned: a timeout (all_gather" in msg and re.search(r"ranks \[(\d, )?2\] did not arrive", msg)
            continue
        # rank 2 never joins; whether the other rank had arrived yet depends on scheduling
        assert 2 in missing and rank not in missing
        assert f"ranks {list(missing)} did not arrive within 1 s" in msg


def test_mismatched_collectives_are_an_error_naming_both_calls(cluster):
    def step(worker, cluster_id):
        group = RayGroup((0, 1), ray_cluster._rendezvous(cluster_id + "-mismatch", (0, 1)), timeout=30)
        comm = group.communicator(worker.rank)
        try:
            comm.all_gather(np.ones(1)) if worker.rank == 0 else comm.barrier()
        except (errors.InternalError, CollectiveAbortedError) as e:
            return type(e).__name__, str(e)
    c = ray_cluster.current()
    out = c.run(step, c.cluster_id, ranks=[0, 1])
    texts = " ".join(t for _, t in out)
    assert "InternalError" in {k for k, _ in out}
    assert "called barrier while rank 0 called all_gather" in texts or \
        "called all_gather while rank 1 called barrier" in texts


def test_local_instance_is_loopback_only_with_token_auth(cluster):
    nodes = [n for n in ray.nodes() if n["Alive"]]
    assert {n["NodeManagerAddress"] for n in nodes} == {"127.0.0.1"}
    assert ray.get_runtime_context().gcs_address.startswith("127.0.0.1:")
    assert ray.get(cluster.workers[0].call.remote(lambda w: ray.util.get_node_ip_address(), ())) == "127.0.0.1"
    assert os.environ.get("RAY_AUTH_MODE") == "token"
    pids = {pid for _, pid, _ in ray.get([w.ping.remote() for w in cluster.workers])}
    assert len(pids) == N and os.getpid() not in pids          # one process per rank
    # rank actors are the job's compute: not at the niceness Ray gives background workers (15)
    assert cluster.run(lambda w: os.nice(0)) == [os.nice(0)] * N


def test_connect_validates_its_arguments(cluster):
    with pytest.raises(ValueError, match="num_workers must be a positive int"):
        ray_cluster.connect(num_workers=0)
    with pytest.raises(ValueError, match="strategy must be"):
        ray_cluster.connect(num_workers=2, strategy="RANDOM")
    with pytest.raises(errors.FailedPreconditionError, match="already connected"):
        ray_cluster.connect(num_workers=2)


def test_rendezvous_actors_outlive_their_creator_and_go_with_the_cluster(cluster):
    def names():
        return {n if isinstance(n, str) else n["name"] for n in ray.util.list_named_actors()}
    ray.get(ray_cluster._rendezvous("zz-gone", (0, 1)).abort.remote("test"))   # made here, handle dropped
    assert "tw-rdv-zz-gone-0_1" in names()                  # detached: still there for the other members
    handle = ray.get_actor("tw-rdv-zz-gone-0_1")
    # ray.kill reaches the actor through the GCS, a call goes to it directly: a call made before the
    # kill lands may still be served (seen in a fresh-clone CI), so the test waits for the actor's
    # process to end (a pidfd becomes readable when it exits) before it calls
    exited = os.pidfd_open(ray.get(handle.__ray_call__.remote(lambda actor: os.getpid())))
    try:
        ray_cluster._kill_rendezvous("zz-gone")
        assert select.select([exited], [], [], 120)[0] == [exited]
    finally:
        os.close(exited)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(handle.abort.remote("after"), timeout=120)


def test_values_stay_on_workers_between_calls(cluster):
    def put(worker):
        worker.store["w"] = np.full(2, float(worker.rank))

    def get(worker):
        return worker.store["w"].sum()
    cluster.run(put)
    assert cluster.run(get) == [0.0, 2.0, 4.0]



_SCRIPT = """
import sys
import numpy as np
import tensorweave as tw
cluster = tw.distribute.current()
got = cluster.run(lambda w: w.comm().all_reduce(np.array([float(w.rank)])).tolist())
assert cluster.transport == "shm", cluster.transport
print("ranks", cluster.num_workers, "sum", got[0][0], "argv", sys.argv[1:], "transport", cluster.transport)
sys.exit(3 if sys.argv[1:] == ["--fail"] else 0)
"""


def test_launch_runs_a_script_against_the_workers(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(_SCRIPT)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), os.environ.get("PYTHONPATH")) if p))
    cmd = [sys.executable, "-m", "tensorweave", "launch", "--workers", "2", "--transport", "shm", str(script), "--",
           "--fail"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert "ranks 2 sum 1.0 argv ['--fail'] transport shm" in out.stdout, out.stderr[-2000:]
    assert out.returncode == 3


def test_transport_is_measured_or_forced(cluster, monkeypatch):
    assert cluster.transport in ray_cluster.TRANSPORTS
    # probed once per number of ranks (other modules' clusters in this process may have added theirs)
    assert ray_cluster._probe_cache.get(N) == cluster.transport or os.environ.get("TW_RAY_TRANSPORT")
    assert cluster.run(lambda w: w.comm().group.__class__.__name__)[0] == \
        {"shm": "ShmGroup", "object_store": "RayGroup", "hier": "HierGroup"}[cluster.transport]
    monkeypatch.setenv("TW_RAY_TRANSPORT", "object_store")
    assert ray_cluster._choose_transport(cluster, ["a"] * N) == "object_store"
    monkeypatch.delenv("TW_RAY_TRANSPORT")
    assert ray_cluster._choose_transport(cluster, ["a", "b", "c"]) == "object_store"   # no two share a node
    monkeypatch.setenv("TW_RAY_TRANSPORT", "nccl")
    with pytest.raises(ValueError, match="TW_RAY_TRANSPORT must be one of"):
        ray_cluster._choose_transport(cluster, ["a"] * N)


@pytest.mark.parametrize("transport", ["shm", "object_store"])
def test_a_worker_killed_during_a_collective_is_named_and_its_segments_go(cluster, transport):
    # rank 2 dies (kill -9) between two collectives and is replaced afterwards
    def step(worker, cluster_id):
        ranks = (0, 2)
        group = RayGroup(ranks, ray_cluster._rendezvous(f"{cluster_id}-death-{transport}", ranks), timeout=60)
        index = ranks.index(worker.rank)
        comm = group.shm_group(index, ray_cluster.shm_prefix(cluster_id, ranks)).communicator() \
            if transport == "shm" else group.communicator(index)
        comm.all_reduce(np.ones(5))
        if worker.rank == 2:
            os.kill(os.getpid(), 9)
        comm.all_reduce(np.ones(5))
    with pytest.raises((CollectiveAbortedError, ray.exceptions.RayActorError)) as info:
        cluster.run(step, cluster.cluster_id, ranks=[0, 2])
    # whichever the driver saw first: rank 2's death, or rank 0's abort that names rank 2
    assert info.value.rank == 2 or "rank 2" in str(info.value)
    prefix = ray_cluster.shm_prefix(cluster.cluster_id, (0, 2))
    assert [n for n in _segments(cluster.cluster_id) if n.startswith(prefix) and "-r2-" in n] == []
    cluster.restart_worker(2)
    assert cluster.run(lambda w: float(w.comm().all_reduce(np.ones(1))[0])) == [3.0] * N
