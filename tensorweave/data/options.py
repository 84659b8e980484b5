"""``tw.data.Options``: TF's per-pipeline options (``dataset.with_options``, ``dataset.options()``).

Options are plain settings objects: every field starts *unset* (``None``: the default applies),
setting one checks its type as TF does (``TypeError``; an unknown name is an
``AttributeError``), and ``a.merge(b)`` is a new object where what ``b`` sets wins (as
``ds.with_options(a).with_options(b)`` and ``Dataset.zip`` of datasets carrying ``a`` and
``b``: the later one wins). What tensorweave does with them:

- ``experimental_distribute.auto_shard_policy`` (:class:`AutoShardPolicy`): how
  ``MultiWorkerMirroredStrategy`` splits the pipeline over its workers (``data/sharding.py``);
- ``deterministic`` / ``experimental_deterministic``: tensorweave's parallel ``map`` always
  keeps the order (TF allows, never requires, reordering when it is False);
- ``threading.*``, ``experimental_optimization.*``, ``autotune.*``, ``experimental_slack`` ...:
  accepted and kept (there is no graph rewriter for them to steer; the pipeline already runs
  batches as array operations and parallel maps on a thread pool).

>>> import tensorweave as tw
>>> import tensorweave.data
>>> options = tw.data.Options()
>>> options.experimental_distribute.auto_shard_policy = tw.data.experimental.AutoShardPolicy.DATA
>>> ds = tw.data.Dataset.range(4).with_options(options)
>>> ds.options().experimental_distribute.auto_shard_policy
<AutoShardPolicy.DATA: 2>
>>> ds.options().deterministic is None
True
"""
import enum

from tensorweave.data.transforms import _IndexView


class AutoShardPolicy(enum.IntEnum):
    """How a distributed pipeline is split over workers (TF's values).

    OFF: every worker sees every element. AUTO: FILE when the pipeline reads files, else DATA.
    FILE: each worker reads its own files (``files[i::n]``). DATA: each worker runs the whole
    pipeline and keeps its share of the elements. HINT: ``shard(SHARD_HINT, SHARD_HINT)`` in the
    pipeline becomes ``shard(num_workers, worker_index)``."""
    OFF = -1
    AUTO = 0
    FILE = 1
    DATA = 2
    HINT = 3


class ExternalStatePolicy(enum.IntEnum):
    """What a checkpoint of an iterator does with state it cannot save (TF's names; accepted)."""
    WARN = 0
    IGNORE = 1
    FAIL = 2


class AutotuneAlgorithm(enum.IntEnum):
    DEFAULT = 0
    HILL_CLIMB = 1
    GRADIENT_DESCENT = 2
    MAX_PARALLELISM = 3
    STAGE_BASED = 4


class _Field:
    """One option: its type(s) and a one-line meaning (``None`` always means "unset")."""

    def __init__(self, types, doc, nested=None):
        self.types, self.doc, self.nested = types, doc, nested


def _type_name(types):
    return " or ".join(t.__name__ for t in types)


class OptionsBase:
    """Fields declared in ``_fields``; nested option groups are created, never unset."""
    _fields = {}
    _aliases = {}

    def __init__(self):
        values = {}
        for name, field in self._fields.items():
            values[name] = field.nested() if field.nested is not None else None
        object.__setattr__(self, "_values", values)

    def __getattr__(self, name):
        name = type(self)._aliases.get(name, name)
        values = self.__dict__.get("_values")
        if values is None or name not in values:
            raise AttributeError(f"{type(self).__name__} has no option {name!r}")
        return values[name]

    def __setattr__(self, name, value):
        name = self._aliases.get(name, name)
        field = self._fields.get(name)
        if field is None:
            raise AttributeError(f"Cannot set the property {name} on {type(self).__name__}. Known options: "
                                 f"{sorted(self._fields)}")
        if field.nested is not None:
            if not isinstance(value, field.nested):
                raise TypeError(f"Property \"{name}\" must be of type {field.nested.__name__}, got: {value!r}")
        elif value is not None:
            ok = isinstance(value, field.types)
            if bool not in field.types and isinstance(value, bool):
                ok = False             # True is an int in Python, not for an int option
            if not ok:
                raise TypeError(f"Property \"{name}\" of {type(self).__name__} must be of type "
                                f"{_type_name(field.types)}, got: {value!r} (type: {type(value).__name__})")
        self._values[name] = value

    def __eq__(self, other):
        return type(self) is type(other) and self._values == other._values

    def __ne__(self, other):
        return not self == other

    __hash__ = None

    def __repr__(self):
        items = ", ".join(f"{k}={v!r}" for k, v in self._values.items()
                          if v is not None and not (isinstance(v, OptionsBase) and v == type(v)()))
        return f"{type(self).__name__}({items})"

    def merge(self, options):
        """A new object: these options, with every option ``options`` sets winning."""
        return merge_options(self, options)


def merge_options(*options_list):
    """Merges options of one type left to right: a later set (not None) value wins."""
    if not options_list:
        raise ValueError("merge_options: needs at least one options object")
    kind = type(options_list[0])
    out = kind()
    for opts in options_list:
        if type(opts) is not kind:
            raise TypeError(f"merge_options: all options must be {kind.__name__}, got {type(opts).__name__}")
        for name, value in opts._values.items():
            if isinstance(value, OptionsBase):
                out._values[name] = merge_options(out._values[name], value)
            elif value is not None:
                out._values[name] = value
    return out


def _group(name, fields, aliases=None, doc=""):
    return type(name, (OptionsBase,), {"_fields": fields, "_aliases": aliases or {}, "__doc__": doc})


_B, _I, _F = (bool,), (int,), (int, float)

DistributeOptions = _group("DistributeOptions", {
    "auto_shard_policy": _Field((AutoShardPolicy,), "how a distributed pipeline is split over workers"),
    "num_devices": _Field(_I, "the number of devices a pipeline's elements go to (accepted)"),
}, doc="``options.experimental_distribute``: the auto-shard policy.")

OptimizationOptions = _group("OptimizationOptions", {
    name: _Field(_B, "a tf.data graph rewrite (accepted)") for name in (
        "apply_default_optimizations", "filter_fusion", "filter_parallelization", "inject_prefetch",
        "map_and_batch_fusion", "map_and_filter_fusion", "map_fusion", "map_parallelization",
        "noop_elimination", "parallel_batch", "seq_interleave_prefetch", "shuffle_and_repeat_fusion")
}, doc="``options.experimental_optimization``: tf.data's graph rewrites (accepted).")

ThreadingOptions = _group("ThreadingOptions", {
    "max_intra_op_parallelism": _Field(_I, "threads one op may use (accepted)"),
    "private_threadpool_size": _Field(_I, "the pipeline's own thread pool size (accepted)"),
}, doc="``options.threading``: the pipeline's threads (accepted).")

AutotuneOptions = _group("AutotuneOptions", {
    "enabled": _Field(_B, "autotuning on or off (accepted)"),
    "cpu_budget": _Field(_I, "cores autotuning may use (accepted)"),
    "ram_budget": _Field(_I, "bytes autotuning may use (accepted)"),
    "autotune_algorithm": _Field((AutotuneAlgorithm,), "the algorithm (accepted)"),
    "initial_parallelism": _Field(_I, "(accepted)"),
    "min_parallelism": _Field(_I, "(accepted)"),
}, doc="``options.autotune`` (accepted).")

Options = _group("Options", {
    "autotune": _Field((), "", nested=AutotuneOptions),
    "dataset_name": _Field((str,), "a name for the pipeline"),
    "deterministic": _Field(_B, "False allows reordering (tensorweave keeps the order)"),
    "experimental_distribute": _Field((), "", nested=DistributeOptions),
    "experimental_external_state_policy": _Field((ExternalStatePolicy,), "(accepted)"),
    "experimental_optimization": _Field((), "", nested=OptimizationOptions),
    "experimental_slack": _Field(_B, "(accepted)"),
    "experimental_symbolic_checkpoint": _Field(_B, "(accepted)"),
    "experimental_warm_start": _Field(_B, "(accepted)"),
    "framework_type": _Field((list,), "(accepted)"),
    "threading": _Field((), "", nested=ThreadingOptions),
}, aliases={"experimental_deterministic": "deterministic", "experimental_threading": "threading"},
    doc="``tw.data.Options``: a pipeline's options (see the module).")


class OptionsDataset(_IndexView):
    """``dataset.with_options(options)``: the same elements, carrying ``options``."""

    def __init__(self, input, options):
        super().__init__([input])
        self._input, self._options = input, options

    def _cardinality(self):
        return self._input._cardinality()

    def _element(self, i):
        return self._input._element(i)

    def _take(self, idx):
        return self._input._take(idx)

    def _generic_iter(self):
        return self._input._make_iter()


def with_options(dataset, options):
    """``dataset.with_options(options)`` (checks the type)."""
    if not isinstance(options, Options):
        raise TypeError(f"with_options: options must be a tw.data.Options, got {type(options).__name__}. "
                        "Hint: options = tw.data.Options(); options.<field> = ...")
    return OptionsDataset(dataset, options)


def options_of(dataset):
    """The options of ``dataset`` and its inputs, merged: inputs first (in order), then the
    node's own, so the option set last along the pipeline wins (TF's rule)."""
    found = []

    def visit(ds, seen):
        if id(ds) in seen:
            return
        seen.add(id(ds))
        for d in ds._inputs:
            visit(d, seen)
        own = getattr(ds, "_options", None)
        if isinstance(own, Options):
            found.append(own)
    visit(dataset, set())
    return merge_options(Options(), *found)
