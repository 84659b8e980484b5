"""A plan as data: what a rank needs to run part of a graph, with no live Python objects.

A :class:`PlanSpec` lists nodes in run order. Each :class:`NodeSpec` names its op type (a
registered op: the kernel is looked up where the plan is bound), its placed device, its
attrs (values of the validated graph format: numbers, strings, dtypes, shapes, arrays,
tuples/lists/dicts of them, nested :class:`PlanSpec` s for ``If``/``While`` bodies and
:class:`ResourceRef` s), its input and output slots and the nodes it waits for. Resources
(variables, random streams) sit in a table on the outermost spec, by kind and name;
random streams carry their seed key (and, when saved, their position).

``saving/plan_io.py`` writes a spec as JSON plus a tensor file and reads it back validated;
``executor.bind(spec, runtime)`` turns it into a runnable :class:`~executor.Plan`. A plan
built in this process keeps, beside its spec, the live objects its references resolved to,
so binding it here costs nothing extra and a variable update is seen by everyone.

Values that are not data (a ``py_function``'s callable, a kernel a user's pass made for this
process only) are held as :class:`LocalValue`: the plan runs here, and ``plan_io`` refuses to
write it, naming the node. The graph passes' own nodes are data: fused loops are registered ops
whose attrs describe the loop, in-place variants a node's ``inplace`` index.

>>> import tensorweave as tw
>>> from tensorweave.runtime import executor
>>> g = tw.Graph()
>>> with g.as_default():
...     y = tw.constant([1.0, 2.0]) * 3.0
>>> spec = executor.build_spec([y], [], [])
>>> [(n.op, n.ins, n.outs) for n in spec.nodes]
[('Mul', (0, 1), 2)]
>>> executor.run_plan(executor.bind(spec), [])[0].tolist()
[3.0, 6.0]
"""

COPY_OP = "_Copy"      # a node that moves a value between devices (attrs: src, dst)


class ResourceRef:
    """Index into the outermost spec's resource table."""

    __slots__ = ("index",)

    def __init__(self, index):
        self.index = int(index)

    def __eq__(self, other):
        return isinstance(other, ResourceRef) and other.index == self.index

    def __hash__(self):
        return hash(("ResourceRef", self.index))

    def __repr__(self):
        return f"ResourceRef({self.index})"


class LocalValue:
    """A value only this process can use (Python code); a spec holding one cannot be shipped."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __repr__(self):
        return f"LocalValue({type(self.value).__name__})"


class NodeSpec:
    """One step: ``op`` on ``device`` reading slots ``ins``, writing ``outs`` (one slot when
    ``single``, else a tuple). ``heavy``: worth its own thread; ``opaque``: may block on
    another node (a Python function, a control-flow body). ``inplace=k``: the op's ``inplace``
    trait writes the result into input ``k`` (the memory pass found it dead). ``kernel`` is a
    :class:`LocalValue` for a kernel made here that no registry knows (None: the registered one)."""

    __slots__ = ("name", "op", "device", "attrs", "ins", "outs", "single", "heavy", "opaque", "traceback",
                 "fused", "kernel", "inplace")

    def __init__(self, name, op, device, attrs, ins, outs, single, heavy=False, opaque=False, traceback=None,
                 fused=None, kernel=None, inplace=None):
        self.name, self.op, self.device, self.attrs = name, op, device, attrs
        self.ins, self.outs, self.single = tuple(ins), outs, single
        self.heavy, self.opaque, self.traceback, self.fused, self.kernel = heavy, opaque, traceback, fused, kernel
        self.inplace = inplace

    @property
    def type(self):
        return self.op

    def out_slots(self):
        return (self.outs,) if self.single else tuple(self.outs)

    def __repr__(self):
        return f"<NodeSpec {self.name} ({self.op}) on {self.device}>"


class PlanSpec:
    """A compiled schedule as data (see the module docstring)."""

    __slots__ = ("nodes", "n_slots", "feed_slots", "fetch_slots", "presets", "deps", "frees", "unread",
                 "readers", "keep", "parallel", "opaque", "resources", "label", "pass_stats")

    def __init__(self, nodes, n_slots, feed_slots, fetch_slots, presets, deps, label="run"):
        self.nodes = nodes
        self.n_slots = n_slots
        self.feed_slots = list(feed_slots)
        self.fetch_slots = list(fetch_slots)
        self.presets = presets        # [(slot, value or ResourceRef)] placed before every run
        self.deps = deps              # per node: indices of the nodes it waits for
        self.frees = None             # per node: slots no one reads afterwards (schedule)
        self.unread = None            # per node: its outputs nobody reads
        self.readers = None           # slot -> number of reading nodes (parallel schedule)
        self.keep = None              # fed and fetched slots
        self.parallel = False
        self.opaque = False
        self.resources = None         # outermost spec only: [{"kind", "name", ...}]
        self.label = label            # what the profiler calls one run
        self.pass_stats = {}

    def walk(self):
        """This spec and every nested one (If/While bodies), outermost first."""
        yield self
        for node in self.nodes:
            for v in node.attrs.values():
                if isinstance(v, PlanSpec):
                    yield from v.walk()

    def __len__(self):
        return len(self.nodes)

    def __repr__(self):
        return f"<PlanSpec {self.label}: {len(self.nodes)} nodes, {self.n_slots} slots>"


class ResourceTable:
    """The resources a spec (and its nested specs) refers to, collected while it is built:
    ``descs`` (data, in the spec) and ``live`` (this process's objects, beside it)."""

    def __init__(self):
        self.descs = []
        self.live = []
        self._index = {}
        self._names = set()

    def ref(self, kind, name, live, **desc):
        i = self._index.get(id(live))
        if i is None:
            base, k = name or kind, 1
            while name is None or name in self._names:
                name = f"{base}_{k}"
                k += 1
            self._names.add(name)
            i = self._index[id(live)] = len(self.descs)
            self.descs.append(dict(desc, kind=kind, name=name))
            self.live.append(live)
        return ResourceRef(i)
