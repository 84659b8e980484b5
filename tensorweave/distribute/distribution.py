"""Distributions for Keras: ``tw.distribute.MirroredStrategy`` and Keras 3's ``keras.distribution``
(``DeviceMesh``, ``TensorLayout``, ``LayoutMap``, ``DataParallel``, ``ModelParallel``).

A distribution is a placement (a mesh of ranks, the devices ``"cpu:0"``, ``"cpu:1"``, ...
being ranks 0, 1, ...) and two rules: the SBP of each Keras weight, and the SBP of each
batch. While one is active (``with strategy.scope():``, ``distribution.scope()`` or
``keras.distribution.set_distribution(d)``), a layer's ``add_weight`` makes a global variable
with that weight's SBP, and ``fit``/``evaluate``/``predict`` of a model built under it feed
each batch as a global tensor split along the batch axis of the data-parallel mesh axis.
Everything else follows from global tensors: the gradient of a replicated weight is a
partial sum, boxed (all-reduced) into the update; a sharded weight's update stays on its
shard; optimizer slots take their weight's layout.

Until the graph planner exists, a distributed model's steps run op by op (global eager).

>>> import numpy as np, tensorweave as tw
>>> strategy = tw.distribute.MirroredStrategy(["cpu:0", "cpu:1"])
>>> with strategy.scope():
...     layer = tw.keras.layers.Dense(2, kernel_initializer="ones")
...     layer.build((None, 3))
>>> layer.kernel.sbp, strategy.num_replicas_in_sync
((B,), 2)
"""
import contextlib
import re
import threading

from tensorweave.core.sbp import B, S
from tensorweave.distribute.layout import Placement

_state = threading.local()
_global_default = [None]


def distribution():
    """The active distribution (the innermost scope on this thread, else the one set with
    :func:`set_distribution`), or None."""
    stack = getattr(_state, "stack", None)
    if stack:
        return stack[-1]
    return _global_default[0]


def set_distribution(value):
    """Makes ``value`` (a :class:`Distribution`, or None) the distribution of every thread
    without a scope of its own (Keras 3's ``keras.distribution.set_distribution``)."""
    if value is not None and not isinstance(value, Distribution):
        raise TypeError(f"set_distribution: expected a Distribution or None, got {type(value).__name__}")
    _global_default[0] = value


def _rank_of(device):
    text = str(device).strip().lower().lstrip("/")
    text = text[len("device:"):] if text.startswith("device:") else text
    kind, _, index = text.rpartition(":")
    if kind not in ("cpu", "gpu") or not index.isdigit():
        raise ValueError(f"distribution: device {device!r} is not of the form 'cpu:N' (N: a rank)")
    return int(index)


def list_devices(device_type=None):
    """The devices a mesh can use here: one per logical CPU device of this process
    (``tw.config.set_logical_device_configuration``), named ``"cpu:N"`` (rank N)."""
    from tensorweave.core.devices import device_count
    if device_type not in (None, "cpu", "CPU"):
        return []
    return [f"cpu:{i}" for i in range(max(device_count("CPU"), 1))]


class DeviceMesh:
    """Keras 3's device mesh: ``shape``, ``axis_names`` and ``devices`` (``"cpu:N"`` = rank N)."""

    def __init__(self, shape, axis_names, devices=None):
        shape = tuple(int(s) for s in shape)
        axis_names = tuple(axis_names)
        if len(shape) != len(axis_names):
            raise ValueError(f"DeviceMesh: shape {shape} and axis_names {axis_names} differ in length")
        devices = list(devices) if devices is not None else list_devices()[:_prod(shape)]
        if len(devices) != _prod(shape):
            raise ValueError(f"DeviceMesh: shape {shape} needs {_prod(shape)} devices, got {len(devices)}: {devices}")
        self.shape, self.axis_names, self.devices = shape, axis_names, devices
        import numpy as np
        self.placement = Placement("cpu", np.array([_rank_of(d) for d in devices]).reshape(shape).tolist())

    def __repr__(self):
        return f"<DeviceMesh shape={self.shape} axis_names={list(self.axis_names)}>"


def _prod(shape):
    n = 1
    for s in shape:
        n *= s
    return n


class TensorLayout:
    """Per tensor axis, the mesh axis name it is split over, or None (Keras 3's layout)."""

    def __init__(self, axes, device_mesh=None):
        self.axes = tuple(axes)
        self.device_mesh = device_mesh

    def sbp(self, mesh, rank):
        """The N-D SBP of a tensor of rank ``rank`` laid out so on ``mesh``."""
        axes = self.axes
        if len(axes) != rank:
            raise ValueError(f"TensorLayout {axes} has {len(axes)} axes for a tensor of rank {rank}")
        out = []
        for name in mesh.axis_names:
            dims = [i for i, a in enumerate(axes) if a == name]
            if len(dims) > 1:
                raise ValueError(f"TensorLayout {axes}: mesh axis {name!r} splits more than one tensor axis")
            out.append(S(dims[0]) if dims else B)
        unknown = [a for a in axes if a is not None and a not in mesh.axis_names]
        if unknown:
            raise ValueError(f"TensorLayout {axes}: {unknown} are not axes of the mesh {list(mesh.axis_names)}")
        return tuple(out)

    def __repr__(self):
        return f"TensorLayout({self.axes})"


class LayoutMap:
    """Weight path (exact, else a regular expression searched in the path) -> TensorLayout,
    as Keras 3's: ``layout_map["dense.*kernel"] = (None, "model")``."""

    def __init__(self, device_mesh):
        self.device_mesh = device_mesh
        self._layouts = {}

    def __setitem__(self, key, layout):
        if not isinstance(layout, TensorLayout):
            layout = TensorLayout(layout, self.device_mesh)
        self._layouts[key] = layout

    def __getitem__(self, path):
        if path in self._layouts:
            return self._layouts[path]
        matches = [k for k in self._layouts if re.search(k, path)]
        if len(matches) > 1:
            raise ValueError(f"LayoutMap: weight path {path!r} matches more than one key: {matches}")
        return self._layouts[matches[0]] if matches else None

    def __len__(self):
        return len(self._layouts)

    def __iter__(self):
        return iter(self._layouts)


class Distribution:
    """A mesh, the SBP of each weight (:meth:`weight_sbp`) and of each batch (:meth:`batch_sbp`)."""

    def __init__(self, device_mesh, batch_dim_name=None):
        self.device_mesh = device_mesh
        self.batch_dim_name = batch_dim_name

    @property
    def placement(self):
        return self.device_mesh.placement

    def weight_sbp(self, path, shape):
        return (B,) * len(self.device_mesh.shape)

    def batch_sbp(self, rank):
        """Batches split along axis 0 over the batch mesh axis, replicated over the others."""
        if rank == 0:
            return (B,) * len(self.device_mesh.shape)
        return tuple(S(0) if name == self.batch_dim_name else B for name in self.device_mesh.axis_names)

    @contextlib.contextmanager
    def scope(self):
        stack = getattr(_state, "stack", None)
        if stack is None:
            stack = _state.stack = []
        stack.append(self)
        try:
            yield self
        finally:
            stack.pop()

    def distribute_batch(self, value):
        """``value`` (a tensor or array) as a global tensor laid out as a batch."""
        from tensorweave.core.convert import convert_to_tensor
        t = value if getattr(value, "is_global", False) else convert_to_tensor(value)
        return t.to_global(placement=self.placement, sbp=self.batch_sbp(t.shape.rank or 0))


class DataParallel(Distribution):
    """Weights replicated, batches split over all devices (a 1-D mesh named ``"batch"``)."""

    def __init__(self, device_mesh=None, devices=None):
        if device_mesh is None:
            devices = list(devices) if devices is not None else list_devices()
            device_mesh = DeviceMesh((len(devices),), ("batch",), devices)
        super().__init__(device_mesh, device_mesh.axis_names[0])


class ModelParallel(Distribution):
    """Weights laid out by a :class:`LayoutMap` (unlisted ones replicated), batches split over
    the ``batch_dim_name`` mesh axis."""

    def __init__(self, layout_map=None, batch_dim_name=None, device_mesh=None):
        if layout_map is None:
            raise ValueError("ModelParallel: layout_map is required")
        mesh = device_mesh or layout_map.device_mesh
        super().__init__(mesh, batch_dim_name or mesh.axis_names[0])
        self.layout_map = layout_map

    def weight_sbp(self, path, shape):
        layout = self.layout_map[path]
        if layout is None:
            return super().weight_sbp(path, shape)
        return layout.sbp(self.device_mesh, len(shape))


class MirroredStrategy(DataParallel):
    """``tf.distribute.MirroredStrategy``: synchronous data parallelism over ``devices``
    (``"cpu:N"``/``"/cpu:N"`` = rank N; default: every logical CPU device)."""

    def __init__(self, devices=None, cross_device_ops=None):
        super().__init__(devices=devices)

    @property
    def num_replicas_in_sync(self):
        return self.placement.size

    @property
    def extended(self):
        return self


def weight_layout(path, shape):
    """(placement, sbp) for a new Keras weight under the active distribution, or None."""
    dist = distribution()
    if dist is None:
        return None
    return dist.placement, dist.weight_sbp(path, tuple(shape))
