"""Ranks as Ray actors: the same collectives and boxing as the in-process ranks, errors that
name the rank, timeouts that name the missing ranks, a loopback-only local instance."""
import os
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

N = 3
# The workers cannot import this test module: its functions travel by value, as a script's do.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def cluster():
    c = ray_cluster.connect(num_workers=N, timeout=60)
    yield c
    ray_cluster.shutdown()


def _collectives(worker):
    """Every collective once, with shard sizes that differ between ranks."""
    comm, i = worker.comm(), worker.rank
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


def test_ray_collectives_equal_the_in_process_ones(cluster):
    on_ray = cluster.run(_collectives)
    world = World()
    group = world.group(list(range(N)))

    class _Fake:
        def __init__(self, i):
            self.rank = i

        def comm(self):
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


def test_a_rank_that_raises_surfaces_as_its_own_type_and_the_others_do_not_hang(cluster):
    def step(worker):
        if worker.rank == 1:
            raise KeyError("no such feature column 'age'")
        return worker.comm().all_reduce(np.ones(3))   # ranks 0 and 2 wait for rank 1
    with pytest.raises(KeyError, match="age") as info:
        cluster.run(step)
    assert info.value.rank == 1
    assert any("rank 1" in n for n in getattr(info.value, "__notes__", []))


def test_timeouts_name_the_ranks_that_did_not_arrive():
    # a fresh group: a failed collective leaves its group unusable (the world group is the fixture's)
    from tensorweave.distribute.ray.group import RayGroup

    def step(worker, cluster_id):
        group = RayGroup((0, 1, 2), ray_cluster._rendezvous(cluster_id + "-timeout", (0, 1, 2)), timeout=1.0)
        if worker.rank == 2:
            return "skipped"
        try:
            group.communicator(worker.rank).all_gather(np.ones(1))
        except CollectiveTimeoutError as e:
            return str(e), e.missing
    c = ray_cluster.current()
    out = c.run(step, c.cluster_id)
    assert out[2] == "skipped"
    for rank, (msg, missing) in enumerate(out[:2]):
        # rank 2 never joins; whether the other rank had arrived yet depends on scheduling
        assert 2 in missing and rank not in missing
        assert f"ranks {list(missing)} did not arrive within 1 s" in msg


def test_mismatched_collectives_are_an_error_naming_both_calls():
    from tensorweave.distribute.ray.group import RayGroup

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
    pids = {pid for _, pid in ray.get([w.ping.remote() for w in cluster.workers])}
    assert len(pids) == N and os.getpid() not in pids          # one process per rank


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
    ray_cluster._kill_rendezvous("zz-gone")
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
print("ranks", cluster.num_workers, "sum", got[0][0], "argv", sys.argv[1:])
sys.exit(3 if sys.argv[1:] == ["--fail"] else 0)
"""


def test_launch_runs_a_script_against_the_workers(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(_SCRIPT)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), os.environ.get("PYTHONPATH")) if p))
    cmd = [sys.executable, "-m", "tensorweave", "launch", "--workers", "2", str(script), "--", "--fail"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert "ranks 2 sum 1.0 argv ['--fail']" in out.stdout, out.stderr[-2000:]
    assert out.returncode == 3
