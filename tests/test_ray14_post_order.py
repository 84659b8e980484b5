"""``RayGroup.post``/``take`` keep the order messages were posted in, whatever order the
rendezvous actor (an async Ray actor: its calls are not run in submission order) receives the
posts. No Ray here: a stand-in actor delivers the calls in a scripted order to the real
:class:`Rendezvous`, and a stand-in ``ray`` module passes values through."""
import asyncio
import sys
import types

import numpy as np
import pytest

from tensorweave.distribute.collective import CollectiveTimeoutError
from tensorweave.distribute.ray.group import RayGroup, Rendezvous


class _Ref:
    def __init__(self, value):
        self.value = value


def _fake_ray():
    ray = types.ModuleType("ray")
    ray.put = _Ref
    ray.get = lambda x: [r.value for r in x] if isinstance(x, list) else x.value if isinstance(x, _Ref) else x
    return ray


class _Method:
    def __init__(self, actor, name):
        self.actor, self.name = actor, name

    def remote(self, *args):
        if self.name == "post":            # held back: delivered later in the script's order
            self.actor.held.append(args)
            return None
        return asyncio.run(getattr(self.actor.rdv, self.name)(*args))


class _ScriptedActor:
    """The rendezvous actor as Ray may run it: posts are delivered when ``deliver(order)`` says."""

    def __init__(self, ranks):
        self.rdv = Rendezvous(ranks)
        self.held = []

    def __getattr__(self, name):
        return _Method(self, name)

    def deliver(self, order):
        for i in order:
            self.rdv.post(*self.held[i])
        self.held = []


@pytest.fixture
def group(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", _fake_ray())
    actor = _ScriptedActor((3, 5))
    return RayGroup((3, 5), actor, timeout=0.05), actor


def test_messages_with_one_tag_come_back_in_posted_order_when_the_posts_arrive_reversed(group):
    g, actor = group
    sender, receiver = g.communicator(0), RayGroup((3, 5), actor, timeout=0.05).communicator(1)
    for k in range(4):
        sender.send(np.full(2, k, np.float32), dst=1, tag="F")
    sender.send(np.array([9.0]), dst=1, tag="other")
    actor.deliver([4, 3, 1, 2, 0])          # the last one posted arrives first
    assert [float(receiver.recv(0, tag="F")[0]) for _ in range(4)] == [0.0, 1.0, 2.0, 3.0]
    assert receiver.recv(0, tag="other").tolist() == [9.0]
    assert actor.rdv._mail == {}            # nothing left behind


def test_a_message_taken_before_it_arrives_waits_for_its_number_and_times_out_naming_the_sender(group):
    g, actor = group
    g.post(0, 1, "B", np.array([1.0]))
    g.post(0, 1, "B", np.array([2.0]))
    actor.deliver([1])                      # only the second arrived: the first take must not return it
    with pytest.raises(CollectiveTimeoutError, match=r"ranks \[3\] did not arrive.*"):
        g.take(0, 1, "B")


def test_numbers_are_per_sender_receiver_and_tag():
    async def script():
        rdv = Rendezvous((0, 1, 2))
        rdv.post(2, 1, "t", 0, ["from 2"])
        rdv.post(0, 1, "t", 1, ["second from 0"])
        rdv.post(0, 1, "u", 0, ["u from 0"])
        rdv.post(0, 1, "t", 0, ["first from 0"])
        return [await rdv.take(0, 1, "t", 0, 1.0), await rdv.take(0, 1, "t", 1, 1.0),
                await rdv.take(2, 1, "t", 0, 1.0), await rdv.take(0, 1, "u", 0, 1.0)]
    assert [v[0] for _, v in asyncio.run(script())] == ["first from 0", "second from 0", "from 2", "u from 0"]


def test_a_member_sending_to_itself_counts_its_posts_and_takes_apart(group):
    g, actor = group
    me = g.communicator(1)
    me.send(np.array([1.0]), dst=1, tag=0)
    me.send(np.array([2.0]), dst=1, tag=0)
    actor.deliver([1, 0])
    assert [me.recv(1, tag=0).tolist() for _ in range(2)] == [[1.0], [2.0]]
