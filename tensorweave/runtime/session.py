"""``Session``: runs the subgraph that the fetches need (TF1).

>>> import tensorweave.compat.v1 as tf
>>> g = tf.Graph()
>>> with g.as_default():
...     x = tf.placeholder(tf.float32, shape=[None, 2], name="x")
...     y = tf.reduce_sum(x * 2.0, axis=1)
>>> with tf.Session(graph=g) as sess:
...     sess.run({"y": y}, feed_dict={x: [[1.0, 2.0]]})
{'y': array([6.], dtype=float32)}
"""

import numpy as np

from tensorweave.core import nest
from tensorweave.core.context import ctx, get_default_session  # noqa: F401 - tw.compat.v1 name
from tensorweave.core.graph import Operation, SymbolicTensor, get_default_graph
from tensorweave.core.shape import fmt
from tensorweave.core.tensor import EagerTensor
from tensorweave.runtime import executor


class ConfigProto:
    """Session options: ``device_count={"CPU": n}``, ``allow_soft_placement``,
    ``log_device_placement``, ``inter_op_parallelism_threads`` (1 = never concurrent)."""

    def __init__(self, device_count=None, allow_soft_placement=True, log_device_placement=False,
                 inter_op_parallelism_threads=0, intra_op_parallelism_threads=0, **unused):
        self.device_count = dict(device_count or {})
        self.allow_soft_placement = allow_soft_placement
        self.log_device_placement = log_device_placement
        self.inter_op_parallelism_threads = inter_op_parallelism_threads
        self.intra_op_parallelism_threads = intra_op_parallelism_threads


class Session:
    """Runs graph fragments: ``sess.run(fetches, feed_dict)``.

    ``fetches`` may be a tensor, an operation, a variable, a tensor/op name, or a nested
    list/tuple/dict/namedtuple of those; the result has the same structure.
    """

    def __init__(self, target="", graph=None, config=None):
        if target:
            raise NotImplementedError("Session targets other than '' (in-process) come with the Ray runtime")
        self._graph = graph if graph is not None else get_default_graph()
        self._config = config or ConfigProto()
        if self._config.device_count.get("CPU"):
            from tensorweave.core import devices
            devices.ensure_logical_cpu_count(self._config.device_count["CPU"])
        self._closed = False
        self._plans = {}
        self._ctx = None

    @property
    def graph(self):
        return self._graph

    @property
    def graph_def(self):
        return self._graph.as_graph_def()

    # ---- context managers ----------------------------------------------------------------------
    def as_default(self):
        sess = self

        class _Default:
            def __enter__(self):
                ctx.sessions.append(sess)
                self._g = sess._graph.as_default()
                self._g.__enter__()
                return sess

            def __exit__(self, *exc):
                self._g.__exit__(*exc)
                ctx.sessions.remove(sess)
        return _Default()

    def __enter__(self):
        self._ctx = self.as_default()
        return self._ctx.__enter__()

    def __exit__(self, *exc):
        self._ctx.__exit__(*exc)
        self.close()

    def close(self):
        self._closed = True
        self._plans.clear()

    # ---- running --------------------------------------------------------------------------------
    def _element(self, f):
        g = self._graph
        if isinstance(f, str):
            f = g.as_graph_element(f)
        if isinstance(f, SymbolicTensor) and f.op.type == "VarHandleOp":
            f = f.op.attrs["variable"]    # (as TF1: a variable's tensor, 'w:0', fetches its value)
        if getattr(f, "_is_variable", False):
            f = f.value()
        if isinstance(f, EagerTensor):
            return ("const", f.numpy())
        if isinstance(f, SymbolicTensor):
            if f.op.graph is not g:
                raise ValueError(f"Fetch argument {f.name} is not an element of this session's graph.")
            return ("tensor", f)
        if isinstance(f, Operation):
            if f.graph is not g:
                raise ValueError(f"Fetch operation {f.name} is not an element of this session's graph.")
            return ("op", f)
        if hasattr(f, "indices") and hasattr(f, "values"):
            return ("tensor", f.to_dense())
        raise TypeError(f"Fetch argument {f!r} has invalid type {type(f).__name__}; must be a Tensor, "
                        "Operation, Variable, or a name (or a nested structure of these).")

    def _feed(self, key, value):
        g = self._graph
        t = g.as_graph_element(key) if isinstance(key, str) else key
        if getattr(t, "_is_variable", False):
            raise TypeError(f"Cannot feed a variable ({t.name}); feed a tensor or assign the variable.")
        if isinstance(t, Operation):
            if len(t.outputs) != 1:
                raise TypeError(f"Cannot feed operation {t.name}; feed one of its tensors")
            t = t.outputs[0]
        if not isinstance(t, SymbolicTensor) or t.op.graph is not g:
            raise TypeError(f"Cannot interpret feed_dict key {key!r} as a tensor of this session's graph.")
        if isinstance(value, EagerTensor):
            value = value.numpy()
        try:
            arr = np.asarray(value, dtype=t.dtype.np_dtype)
        except (TypeError, ValueError) as e:
            raise TypeError(f"Cannot feed value {value!r} to tensor '{t.name}' of dtype {t.dtype.name}: {e}") from None
        if not t.shape.is_compatible_with(arr.shape):
            raise ValueError(f"Cannot feed value of shape {fmt(arr.shape)} for Tensor '{t.name}', "
                             f"which has shape {fmt(t.shape)}.")
        return t, arr

    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        """Computes ``fetches``; only the ops they need run (placeholders need feeds)."""
        if self._closed:
            raise RuntimeError("Attempted to use a closed Session.")
        flat = nest.flatten(fetches) if nest.is_nested(fetches) else [fetches]
        elems = [self._element(f) for f in flat]
        feeds = [self._feed(k, v) for k, v in (feed_dict or {}).items()]
        fetch_t = []
        slot = {}
        for kind, x in elems:
            if kind == "tensor" and id(x) not in slot:
                slot[id(x)] = len(fetch_t)
                fetch_t.append(x)
        targets = [x for kind, x in elems if kind == "op"]
        feed_t = [t for t, _ in feeds]
        key = (self._graph.version, tuple(map(id, fetch_t)), tuple(map(id, targets)), tuple(map(id, feed_t)))
        planned = getattr(self._graph, "_tw_globals", None)
        if planned is not None:
            # global values in the graph: planned over their ranks (distribute/plan_function.py), for
            # the fed shapes where a placeholder leaves dimensions open (a plan per batch size)
            open_feeds = {t: np.shape(a) for t, a in feeds if not t.shape.is_fully_defined()}
            key += tuple(open_feeds.values())
        plan = self._plans.get(key)
        if plan is None:
            if planned is not None:
                plan = planned.plan_session_run(fetch_t, targets, feed_t, open_feeds)
            else:
                cfg = self._config
                plan = executor.build_plan(fetch_t, targets, feed_t, cfg.allow_soft_placement,
                                           parallel=False if cfg.inter_op_parallelism_threads == 1 else None,
                                           log_placement=bool(cfg.log_device_placement))
            if len(self._plans) > 64:
                self._plans.clear()
            self._plans[key] = plan
        values = plan([a for _, a in feeds])
        out = []
        for kind, x in elems:
            if kind == "tensor":
                out.append(_to_host(values[slot[id(x)]]))
            elif kind == "const":
                out.append(x)
            else:
                out.append(None)
        if nest.is_nested(fetches):
            return nest.pack_sequence_as(fetches, out)
        return out[0]

    def make_callable(self, fetches, feed_list=None, accept_options=False):
        feed_list = list(feed_list or [])

        def call(*args):
            return self.run(fetches, dict(zip(feed_list, args)))
        return call

    def list_devices(self):
        from tensorweave.core import devices
        return devices.list_logical_devices()


def _to_host(v):
    if isinstance(v, np.ndarray):
        return v[()] if v.ndim == 0 else v
    return v


class InteractiveSession(Session):
    """A Session that installs itself as the default (for shells): ``t.eval()`` just works."""

    def __init__(self, target="", graph=None, config=None):
        super().__init__(target, graph, config)
        self._dflt = self.as_default()
        self._dflt.__enter__()

    def close(self):
        if not self._closed and getattr(self, "_dflt", None) is not None:
            try:
                self._dflt.__exit__(None, None, None)
            except ValueError:
                pass
        super().close()
