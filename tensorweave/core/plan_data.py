"""What an op's ``bind`` hook may hand to a plan besides plain attr values.

A plan is data (``runtime/plan_spec.py``): op types, attrs, slots, dependencies. Some ops
need more than their attrs to run: an ``If``/``While`` runs sub-graphs, a random op draws
from a stream that outlives one run, a variable op reads a ``Variable``. Their
``OpDef.bind(op)`` hooks return these markers instead of live objects, so the plan builder
(a higher layer) can turn them into data: a :class:`SubGraph` becomes a nested plan spec,
a :class:`Resource` becomes a reference into the plan's resource table (a variable by name,
a random stream by seed key and position). When the plan is bound in the process that
built it, references resolve to the same live objects; on another rank they resolve
through that rank's ``Runtime``.

>>> SubGraph("g", outputs=["y"], inputs=["x"]).inputs
['x']
>>> Resource("random_stream", "seed(1, 2)", live=None).kind
'random_stream'
"""


class SubGraph:
    """A request for a nested plan: run ``outputs`` of ``graph`` fed with ``inputs``
    (then the graph's captures), ending with ``targets``. The kernel receives a runnable
    plan: ``plan(feed_values) -> [fetched values]``."""

    __slots__ = ("graph", "outputs", "inputs", "targets")

    def __init__(self, graph, outputs, inputs=(), targets=None):
        self.graph = graph
        self.outputs = list(outputs)
        self.inputs = list(inputs)
        last = getattr(graph, "_last_stateful", None)
        self.targets = list(targets) if targets is not None else ([last] if last is not None else [])


class Resource:
    """A stateful object a kernel uses (a variable, a random stream), by kind and name.

    ``live`` is the object in this process; the plan keeps only ``kind`` and ``name`` and
    resolves the reference when it is bound (``kind`` decides how its state is shipped)."""

    __slots__ = ("kind", "name", "live")

    KINDS = ("variable", "random_stream")

    def __init__(self, kind, name, live):
        if kind not in self.KINDS:
            raise ValueError(f"unknown resource kind {kind!r}; expected one of {self.KINDS}")
        self.kind = kind
        self.name = name
        self.live = live
