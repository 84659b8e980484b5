"""A group whose members sit on several nodes, some of them together: shared memory inside each
node, the object store only between nodes (the ``"hier"`` transport of ``connect``).

:class:`HierGroup` is one member's view and gives the ``exchange``/``post``/``take`` primitives
:class:`~tensorweave.distribute.collective.InProcessCommunicator` is written against, so every
collective runs over it unchanged, with the in-process ranks' bits. It is made of three groups,
each anything with those primitives (``ShmGroup`` and ``RayGroup`` on Ray; ``InProcessGroup`` in
the unit tests): ``local``, the members on this member's node; ``leaders``, the first member of
each node; ``everyone``, for messages between nodes.

An exchange is three rounds: every member's value to its node (``local``), each node's values
between the leaders (``leaders``: one object per node crosses the network instead of one per
member), every node's values back from the leader (``local``). A point-to-point message goes
through ``local`` when both ends share a node, else through ``everyone``.
:meth:`HierCommunicator.all_reduce` of a large array moves less still where each node's members
are consecutive ranks (how ``PACK`` places them): node ``k``'s leader adds its members' arrays, in
rank order, to the sum of the nodes before it (posted to it by node ``k - 1``'s leader), the last
node's leader posts the total to the others, and each leader hands it to its node — one array
crosses between two nodes each way, and the additions are the in-process ranks' (rank order:
the same bits).

>>> import numpy as np
>>> from concurrent.futures import ThreadPoolExecutor
>>> from tensorweave.distribute.collective import InProcessGroup
>>> comms = in_process_hier(["a", "a", "b", "b"])
>>> with ThreadPoolExecutor(4) as pool:
...     list(pool.map(lambda c: c.all_gather([c.rank]).tolist(), comms))
[[0, 1, 2, 3], [0, 1, 2, 3], [0, 1, 2, 3], [0, 1, 2, 3]]
"""
import numpy as np

from tensorweave.core import errors
from tensorweave.distribute.collective import _REDUCE, SMALL_BYTES, InProcessCommunicator, InProcessGroup


def layout(nodes):
    """``(members per node, leaders)`` of a group whose member ``j`` is on node ``nodes[j]``:
    nodes in the order of their first member, members in rank order, a node's leader its first.

    >>> layout(["b", "a", "b", "c"])
    ([[0, 2], [1], [3]], [0, 1, 3])
    """
    per_node = {}
    for j, node in enumerate(nodes):
        per_node.setdefault(node, []).append(j)
    groups = list(per_node.values())
    return groups, [g[0] for g in groups]


def consecutive(groups):
    """Whether the nodes hold consecutive members in node order (``[[0, 1], [2, 3]]``): then a
    chain of partial sums node after node adds in rank order.

    >>> consecutive([[0, 1], [2, 3]]), consecutive([[0, 2], [1, 3]])
    (True, False)
    """
    return [j for g in groups for j in g] == list(range(sum(map(len, groups))))


class HierGroup:
    """Member ``index`` of ``ranks`` (global ids), member ``j`` on node ``nodes[j]``. ``local``:
    the group of this node's members (member ``local_index``; None when alone on its node);
    ``leaders``: the leaders' group (member ``leader_index``; None unless this member leads);
    ``everyone``: a group of all members, for :meth:`post`/:meth:`take` between nodes."""

    def __init__(self, ranks, index, nodes, local, leaders, everyone, timeout=None):
        self.ranks = tuple(int(r) for r in ranks)
        self.index = int(index)
        self.timeout = timeout
        self.groups, self.leader_ranks = layout(nodes)
        self.node = next(k for k, g in enumerate(self.groups) if index in g)
        self.members = self.groups[self.node]
        self.local_index = self.members.index(index)
        self.leader_index = self.node if self.local_index == 0 else None
        self.local, self.leaders, self.everyone = local, leaders, everyone
        self.chain = consecutive(self.groups)

    @property
    def size(self):
        return len(self.ranks)

    @property
    def is_leader(self):
        return self.leader_index is not None

    def communicator(self, index=None):
        return HierCommunicator(self, self.index)

    def abort(self, reason):
        for g in (self.local, self.leaders, self.everyone):
            if g is not None:
                g.abort(reason)

    def close(self):
        if self.local is not None and hasattr(self.local, "close"):
            self.local.close()

    # ---- the rounds -------------------------------------------------------------------------------
    def local_exchange(self, kind, value, timeout=None):
        """Every member of this node's ``value`` (in rank order)."""
        if self.local is None:
            return [value]
        return self.local.exchange(self.local_index, kind, value, timeout)

    def from_leader(self, kind, value, timeout=None):
        """The leader's ``value`` on every member of its node (the others pass None)."""
        return self.local_exchange(kind, value if self.is_leader else None, timeout)[0]

    def exchange(self, index, kind, value, timeout=None):
        """Every member's ``value`` for its next call ``kind``, in member order (see the module)."""
        here = self.local_exchange(kind, value, timeout)
        per_node = None
        if self.is_leader:
            per_node = self.leaders.exchange(self.leader_index, kind, list(here), timeout)
        per_node = self.from_leader(kind + "/nodes", per_node, timeout)
        out = [None] * self.size
        for members, values in zip(self.groups, per_node):
            for j, v in zip(members, values):
                out[j] = v
        return out

    def _here(self, j):
        """Whether member ``j`` is reached through this node's group."""
        return self.local is not None and j in self.members

    def post(self, src, dst, tag, value):
        if self._here(dst):
            self.local.post(self.members.index(src), self.members.index(dst), tag, value)
        else:
            self.everyone.post(src, dst, tag, value)

    def take(self, src, dst, tag, timeout=None):
        if self._here(src):
            return self.local.take(self.members.index(src), self.members.index(dst), tag, timeout)
        return self.everyone.take(src, dst, tag, timeout)

    # ---- the chained all-reduce -------------------------------------------------------------------
    def chain_reduce(self, values, x, op, timeout=None):
        """(A leader.) The reduction of every member's array in rank order, given this node's
        ``values`` (``(shape, dtype, op, array)`` of each member): the earlier nodes' partial sum
        from the previous leader, this node's arrays added, passed on; the last node's total
        comes back from its leader."""
        k, last = self.node, len(self.groups) - 1
        if k == 0:
            acc = np.array(values[0][3])
            rest = values[1:]
        else:
            acc = np.array(self.leaders.take(k - 1, k, "hier_all_reduce", timeout))
            if acc.shape != x.shape or acc.dtype != x.dtype:
                raise errors.InvalidArgumentError(
                    f"all_reduce: ranks {[self.ranks[j] for j in self.groups[k - 1]]} gave {list(acc.shape)} "
                    f"{acc.dtype} but rank {self.ranks[self.index]} gave {list(x.shape)} {x.dtype}")
            rest = values
        for v in rest:
            _REDUCE[op](acc, v[3], out=acc)
        if k < last:
            self.leaders.post(k, k + 1, "hier_all_reduce", acc)
            return self.leaders.take(last, k, "hier_all_reduce_total", timeout)
        for j in range(last):
            self.leaders.post(last, j, "hier_all_reduce_total", acc)
        return acc


class HierCommunicator(InProcessCommunicator):
    """A member of a :class:`HierGroup`: the in-process collectives over its exchange, and an
    all-reduce above ``SMALL_BYTES`` chained node after node (see the module) where the nodes
    hold consecutive ranks."""

    def all_reduce(self, x, op="sum"):
        x = np.asarray(x)
        g = self.group
        if self.size == 1 or x.nbytes <= SMALL_BYTES or not g.chain:
            return super().all_reduce(x, op)
        values = g.local_exchange("all_reduce_chain", (x.shape, x.dtype, op, x), self.timeout)
        for j, (shape, dtype, o, _) in zip(g.members, values):
            if (shape, dtype, o) != (x.shape, x.dtype, op):
                raise errors.InvalidArgumentError(
                    f"all_reduce: rank {self.ranks[j]} gave shape {list(shape)} {dtype} ({o}) but rank "
                    f"{self.rank} gave {list(x.shape)} {x.dtype} ({op})")
        total = g.chain_reduce(values, x, op, self.timeout) if g.is_leader else None
        return np.array(g.from_leader("all_reduce_chain/total", total, self.timeout))

    def __repr__(self):
        return f"<HierCommunicator rank {self.rank} ({self.index} of {list(self.ranks)}, node {self.group.node})>"


def in_process_hier(nodes, ranks=None, timeout=None):
    """Communicators of a :class:`HierGroup` of in-process ranks (threads), member ``j`` on
    ``nodes[j]``: each node's group, the leaders' and everyone's are :class:`InProcessGroup` s
    (a test of the hierarchy's logic without Ray)."""
    ranks = tuple(range(len(nodes))) if ranks is None else tuple(ranks)
    groups, leaders = layout(nodes)
    local = [InProcessGroup([ranks[j] for j in g], timeout) if len(g) > 1 else None for g in groups]
    top, everyone = InProcessGroup([ranks[j] for j in leaders], timeout), InProcessGroup(ranks, timeout)
    out = []
    for j in range(len(nodes)):
        k = next(k for k, g in enumerate(groups) if j in g)
        out.append(HierGroup(ranks, j, nodes, local[k], top if j == leaders[k] else None, everyone,
                             timeout).communicator())
    return out


def on_ray(groups_id, ranks, index, timeout=None):
    """Member ``index``'s :class:`HierGroup` of the Ray rank actors ``ranks`` (called on each of
    them, as ``RankWorker.comm`` makes its groups): the members tell each other their node over a
    :class:`RayGroup` of all (kept for messages between nodes), then each node's members make
    their shared-memory group and the leaders theirs. Their rendezvous actors and segments are
    named under ``groups_id`` (the cluster's: its shutdown and aborts reach them), apart from the
    groups a step makes of the same ranks itself (``-ha``, ``-hl``, ``-hx``)."""
    import ray

    from tensorweave.distribute.ray.cluster import _rendezvous, shm_prefix
    from tensorweave.distribute.ray.group import RayGroup
    ranks = tuple(ranks)
    everyone = RayGroup(ranks, _rendezvous(f"{groups_id}-ha", ranks), timeout)
    nodes = everyone.exchange(index, "hier_setup", ray.get_runtime_context().get_node_id())
    groups, leaders = layout(nodes)
    members = next(g for g in groups if index in g)
    local = top = None
    if len(members) > 1:
        sub = tuple(ranks[j] for j in members)
        local = RayGroup(sub, _rendezvous(f"{groups_id}-hl", sub), timeout).shm_group(
            members.index(index), shm_prefix(f"{groups_id}-hl", sub))
    if index == members[0]:
        sub = tuple(ranks[j] for j in leaders)
        top = RayGroup(sub, _rendezvous(f"{groups_id}-hx", sub), timeout)
    return HierGroup(ranks, index, nodes, local, top, everyone, timeout)
