"""Issue 14's cluster sentences that the Ray test files do not pin (audit, session 12), checked
without starting Ray: what ``connect`` asks Ray for — a local instance with the dashboard off on
127.0.0.1, an attach for ``"auto"``/``"ray://..."``, one placement-group bundle of
``resources_per_worker`` per rank with the chosen strategy — and the transport chosen by
measurement (the slower rank's probe decides; shared memory only when it is faster)."""
import pytest

pytest.importorskip("ray")

from tensorweave.distribute.ray import cluster as ray_cluster  # noqa: E402


class _Stop(Exception):
    """Raised by the fakes once they have seen what connect asked for (nothing is started)."""


class _FakeRay:
    def __init__(self, initialized):
        self.initialized, self.init_kwargs = initialized, None

    def is_initialized(self):
        return self.initialized

    def init(self, **kwargs):
        self.init_kwargs = kwargs
        raise _Stop


@pytest.fixture
def fake_ray(monkeypatch):
    def make(initialized=False):
        fake = _FakeRay(initialized)
        monkeypatch.setattr(ray_cluster, "_ray", lambda: fake)
        monkeypatch.setattr(ray_cluster, "_current", None)
        monkeypatch.setattr(ray_cluster, "_loopback_only", lambda ray: None)
        monkeypatch.setenv("RAY_worker_niceness", "0")
        return fake
    return make


def test_a_local_instance_has_no_dashboard_and_listens_on_loopback(fake_ray):
    fake = fake_ray()
    with pytest.raises(_Stop):
        ray_cluster.connect(num_workers=3, resources_per_worker={"CPU": 1})
    kw = fake.init_kwargs
    assert kw["include_dashboard"] is False
    assert kw["_node_ip_address"] == "127.0.0.1"
    assert "address" not in kw                      # a new instance, not an attach
    assert kw["num_cpus"] >= 3                      # room for one actor per rank


@pytest.mark.parametrize("address", ["auto", "ray://head:10001"])
def test_an_address_attaches_to_that_cluster(fake_ray, address):
    fake = fake_ray()
    with pytest.raises(_Stop):
        ray_cluster.connect(address=address, num_workers=2)
    assert fake.init_kwargs["address"] == address
    assert "include_dashboard" not in fake.init_kwargs   # an attach starts nothing


@pytest.mark.parametrize("strategy", ["PACK", "SPREAD"])
def test_one_bundle_of_the_workers_resources_per_rank_in_the_strategy(fake_ray, monkeypatch, strategy):
    import importlib
    pg_module = importlib.import_module("ray.util.placement_group")     # the module (ray.util's name is the function)
    fake_ray(initialized=True)
    seen = {}

    def placement_group(bundles, strategy):
        seen.update(bundles=bundles, strategy=strategy)
        raise _Stop
    monkeypatch.setattr(pg_module, "placement_group", placement_group)
    with pytest.raises(_Stop):
        ray_cluster.connect(num_workers=3, resources_per_worker={"CPU": 2, "memory": 10}, strategy=strategy)
    assert seen == {"bundles": [{"CPU": 2, "memory": 10}] * 3, "strategy": strategy}


class _ProbeCluster:
    """``cluster.run`` of the probe: each rank's seconds per transport, as given."""

    def __init__(self, seconds, shm_ok=True):
        self.seconds, self.shm_ok = seconds, shm_ok
        self.num_workers = len(seconds["shm"])
        self.probes = []

    def run(self, fn, *args):
        if fn is ray_cluster._probe_step:
            transport = args[0]
            self.probes.append(transport)
            return list(self.seconds[transport])
        return [self.shm_ok] * self.num_workers          # shm.available() on each rank


@pytest.fixture
def fresh_probe(monkeypatch):
    monkeypatch.delenv("TW_RAY_TRANSPORT", raising=False)
    monkeypatch.setattr(ray_cluster, "_probe_cache", {})


@pytest.mark.parametrize("seconds,want", [
    ({"shm": [0.001, 0.002], "object_store": [0.004, 0.005]}, "shm"),
    ({"shm": [0.006, 0.007], "object_store": [0.004, 0.005]}, "object_store"),
    # the slowest rank decides: shm is faster on rank 0 but its rank 1 waits longest
    ({"shm": [0.001, 0.009], "object_store": [0.005, 0.005]}, "object_store"),
])
def test_the_transport_is_the_faster_on_the_probe(fresh_probe, seconds, want):
    cluster = _ProbeCluster(seconds)
    assert ray_cluster._choose_transport(cluster, ["node"] * 2) == want
    assert sorted(cluster.probes) == ["object_store", "shm"]          # both measured
    again = _ProbeCluster({"shm": [1.0, 1.0], "object_store": [0.0, 0.0]})
    assert ray_cluster._choose_transport(again, ["node"] * 2) == want  # once per process and rank count
    assert again.probes == []


def test_no_probe_where_shared_memory_cannot_work(fresh_probe):
    fast_shm = {"shm": [0.001, 0.001], "object_store": [0.5, 0.5]}
    no_dev_shm = _ProbeCluster(fast_shm, shm_ok=False)
    assert ray_cluster._choose_transport(no_dev_shm, ["node"] * 2) == "object_store"
    two_nodes = _ProbeCluster(fast_shm)
    assert ray_cluster._choose_transport(two_nodes, ["a", "b"]) == "object_store"
    assert no_dev_shm.probes == two_nodes.probes == []


@pytest.mark.parametrize("hier,want", [(0.001, "hier"), (0.009, "object_store")])
def test_ranks_on_several_nodes_sharing_some_measure_the_hierarchy_against_the_object_store(fresh_probe, hier, want):
    cluster = _ProbeCluster({"shm": [0.0] * 3, "hier": [hier] * 3, "object_store": [0.005] * 3})
    assert ray_cluster._choose_transport(cluster, ["a", "b", "a"]) == want
    assert sorted(cluster.probes) == ["hier", "object_store"]               # never shm across nodes
    one_per_node = _ProbeCluster({"shm": [0.0] * 3, "hier": [0.0] * 3, "object_store": [0.5] * 3})
    assert ray_cluster._choose_transport(one_per_node, ["a", "b", "c"]) == "object_store"
    assert ray_cluster._choose_transport(_ProbeCluster({"shm": [0.0] * 3, "hier": [0.0] * 3, "object_store": [
        0.5] * 3}, shm_ok=False), ["a", "b", "a"]) == "object_store"        # no /dev/shm: no hierarchy
    assert one_per_node.probes == []


class _Connected:
    def __init__(self, n):
        self.num_workers = n


def test_the_cluster_resolver_uses_the_connected_cluster_or_connects_as_asked(monkeypatch):
    from tensorweave.distribute.ray.multi_worker import RayClusterResolver
    asked = []

    def connect(address, num_workers, resources_per_worker=None):
        asked.append((address, num_workers, resources_per_worker))
        return _Connected(num_workers)
    monkeypatch.setattr(ray_cluster, "connect", connect)
    monkeypatch.setattr(ray_cluster, "current", lambda: None)
    made = RayClusterResolver("auto", num_workers=4, resources_per_worker={"CPU": 2}).cluster()
    assert asked == [("auto", 4, {"CPU": 2})] and made.num_workers == 4
    assert RayClusterResolver().cluster().num_workers == 1 and asked[-1] == (None, 1, None)

    there = _Connected(2)
    monkeypatch.setattr(ray_cluster, "current", lambda: there)
    assert RayClusterResolver().cluster() is there and RayClusterResolver(num_workers=2).cluster() is there
    with pytest.raises(ValueError, match=r"3 workers asked for, but the connected cluster has 2.*shutdown\(\) first"):
        RayClusterResolver(num_workers=3).cluster()
    assert len(asked) == 2                                     # a connected cluster is never replaced


def test_launch_connects_as_asked_runs_the_script_once_and_always_shuts_down(monkeypatch, tmp_path, capsys):
    import tensorweave.distribute.ray as ray_pkg
    from tensorweave.cli import main
    calls = []
    monkeypatch.setattr(ray_pkg, "connect", lambda **kw: calls.append(("connect", kw)))
    monkeypatch.setattr(ray_pkg, "shutdown", lambda: calls.append(("shutdown",)))
    script = tmp_path / "job.py"
    script.write_text("import sys\nprint('ran', sys.argv[1:])\nif '--fail' in sys.argv:\n    raise SystemExit(3)\n")
    code = main(["launch", "--workers", "3", "--address", "auto", "--cpus-per-worker", "2", "--spread",
                 "--transport", "object_store", str(script), "--", "x", "--fail"])
    assert code == 3 and "ran ['x', '--fail']" in capsys.readouterr().out
    assert calls == [("connect", {"address": "auto", "num_workers": 3, "resources_per_worker": {"CPU": 2.0},
                                  "strategy": "SPREAD", "transport": "object_store"}), ("shutdown",)]
    calls.clear()
    script.write_text("raise ValueError('boom')\n")
    with pytest.raises(ValueError, match="boom"):
        main(["launch", "--workers", "2", str(script)])
    assert calls == [("connect", {"address": None, "num_workers": 2, "resources_per_worker": {"CPU": 1.0},
                                  "strategy": "PACK", "transport": None}), ("shutdown",)]


class _FakeActor:
    """A rank actor of the fake Ray: each method's ``.remote`` returns its result at once."""

    def __init__(self, rank, ray):
        self.rank, self.ray = rank, ray

    def __getattr__(self, method):
        results = {"ping": (self.rank, 0, "node"), "close": None, "set_transport": None}

        class _Method:
            @staticmethod
            def remote(*args):
                self.ray.calls.append((method, self.rank))
                return results[method]
        return _Method


class _RunningFakeRay(_FakeRay):
    """A fake Ray on which ``connect`` and ``shutdown`` run to the end (no process is started)."""

    def __init__(self, initialized):
        super().__init__(initialized)
        self.calls, self.util = [], type("util", (), {"list_named_actors": staticmethod(lambda **kw: [])})

    def init(self, **kwargs):
        self.init_kwargs, self.initialized = kwargs, True

    def shutdown(self):
        self.calls.append(("shutdown",))
        self.initialized = False

    def remote(self, cls):
        ray = self

        class _Options:
            def options(self, **kw):
                return type("spawner", (), {"remote": staticmethod(lambda rank, *a: _FakeActor(rank, ray))})
        return _Options()

    def get(self, refs, timeout=None):
        return refs

    def kill(self, actor):
        self.calls.append(("kill", actor.rank))


@pytest.mark.parametrize("running", [False, True], ids=["started", "attached"])
def test_shutdown_stops_ray_only_where_connect_started_it(fake_ray, monkeypatch, running):
    """``connect`` on a process without Ray starts one and ``shutdown`` stops it; with Ray running
    (a user's, or the test suite's shared instance: tests/ray_shared.py) it attaches and
    ``shutdown`` removes its actors and placement group only. The real-Ray check of the same
    (test_audit12_mwms_rows) meets the suite's shared instance, so it takes the second branch."""
    import importlib
    fake = _RunningFakeRay(running)
    monkeypatch.setattr(ray_cluster, "_ray", lambda: fake)
    monkeypatch.setattr(ray_cluster, "_current", None)
    monkeypatch.setattr(ray_cluster, "_loopback_only", lambda ray: None)
    monkeypatch.setenv("RAY_worker_niceness", "0")
    pg_module = importlib.import_module("ray.util.placement_group")
    strategies = importlib.import_module("ray.util.scheduling_strategies")
    removed = []
    pg = type("pg", (), {"ready": lambda self: None})()
    monkeypatch.setattr(pg_module, "placement_group", lambda bundles, strategy: pg)
    monkeypatch.setattr(pg_module, "remove_placement_group", removed.append)
    monkeypatch.setattr(strategies, "PlacementGroupSchedulingStrategy", lambda group, index: (group, index))
    cluster = ray_cluster.connect(num_workers=2, transport="object_store")
    assert cluster._started_ray is (not running) and (fake.init_kwargs is None) is running
    assert ray_cluster.current() is cluster and fake.initialized
    ray_cluster.shutdown()
    assert ray_cluster.current() is None and removed == [pg]
    assert ("kill", 0) in fake.calls and ("kill", 1) in fake.calls
    assert (("shutdown",) in fake.calls) is (not running) and fake.initialized is running


def test_the_shared_instance_starts_again_where_a_test_stopped_it(monkeypatch):
    """tests/ray_shared.py starts one instance per test process; where a module stops it (the Ray
    members module's teardown did until session 21), the next Ray test starts it again: else every
    later module's ``connect`` would start and stop an instance of its own."""
    import sys

    import ray_shared
    fake = _RunningFakeRay(False)
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.setattr(ray_cluster, "_loopback_only", lambda ray: None)
    monkeypatch.setattr(ray_shared, "_state", {})
    monkeypatch.setenv("RAY_worker_niceness", "0")
    assert ray_shared.start() and fake.init_kwargs["num_cpus"] == ray_shared.CPUS
    fake.init_kwargs = None
    assert ray_shared.start() and fake.init_kwargs is None          # running: nothing started
    fake.shutdown()                                                  # a module stopped it
    assert ray_shared.start() and fake.init_kwargs is not None
    ray_shared.stop()
    assert not fake.initialized and ray_shared._state == {"started": False}
