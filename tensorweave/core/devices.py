"""Devices: names, the logical devices of this process, ``tw.device`` scopes and the placer.

Device strings follow TensorFlow: ``/cpu:0``, ``/device:CPU:1``,
``/job:worker/task:1/device:CPU:0``. The process has a configurable number of logical
CPU devices (all sharing host memory); GPU devices appear when a GPU kernel backend is
loaded.

>>> import tensorweave as tw
>>> tw.DeviceSpec.from_string("/job:worker/task:1/cpu:0").to_string()
'/job:worker/replica:0/task:1/device:CPU:0'
"""
import contextlib
import re
import sys
import threading

from tensorweave.core import errors
from tensorweave.core.context import ctx, executing_eagerly

_DEVICE_RE = re.compile(r"^(?:/job:(?P<job>[^/]+))?(?:/replica:(?P<replica>\d+))?(?:/task:(?P<task>\d+))?"
                        r"(?:/(?:device:)?(?P<type>[A-Za-z_]+):(?P<index>\d+|\*))?$")


class DeviceSpec:
    __slots__ = ("job", "replica", "task", "device_type", "device_index")

    def __init__(self, job=None, replica=None, task=None, device_type=None, device_index=None):
        self.job = job
        self.replica = replica
        self.task = task
        self.device_type = device_type.upper() if device_type else None
        self.device_index = device_index

    @classmethod
    def from_string(cls, spec):
        spec = (spec or "").strip()
        if spec and not spec.startswith("/"):
            spec = "/" + spec
        m = _DEVICE_RE.match(spec)
        if m is None:
            raise ValueError(f"Invalid device string {spec!r}; expected e.g. '/cpu:0', '/device:GPU:1' "
                             "or '/job:worker/task:1/device:CPU:0'")
        idx = m.group("index")
        return cls(m.group("job"), None if m.group("replica") is None else int(m.group("replica")),
                   None if m.group("task") is None else int(m.group("task")), m.group("type"),
                   None if idx in (None, "*") else int(idx))

    def merge_from(self, other):
        return DeviceSpec(other.job or self.job, other.replica if other.replica is not None else self.replica,
                          other.task if other.task is not None else self.task,
                          other.device_type or self.device_type,
                          other.device_index if other.device_index is not None else self.device_index)

    def to_string(self):
        job = self.job or "localhost"
        return (f"/job:{job}/replica:{self.replica or 0}/task:{self.task or 0}/device:"
                f"{self.device_type or 'CPU'}:{self.device_index or 0}")

    def __repr__(self):
        return f"DeviceSpec({self.to_string()!r})"


class LogicalDevice:
    __slots__ = ("name", "device_type")

    def __init__(self, name, device_type):
        self.name = name
        self.device_type = device_type

    def __repr__(self):
        return f"LogicalDevice(name='{self.name}', device_type='{self.device_type}')"


_config = {"CPU": 1, "soft_placement": True, "log_placement": False}
_canon_cache = {}


_config_lock = threading.Lock()


def set_logical_cpu_count(n):
    """Splits this process into ``n`` logical CPU devices (``/cpu:0`` ... ``/cpu:n-1``)."""
    if n < 1:
        raise ValueError("need at least one CPU device")
    with _config_lock:
        _config["CPU"] = int(n)
        _canon_cache.clear()


def ensure_logical_cpu_count(n):
    """At least ``n`` logical CPU devices (never fewer than now); one locked read-and-set,
    so two Sessions asking at once cannot lower each other's count."""
    with _config_lock:
        if int(n) > _config["CPU"]:
            _config["CPU"] = int(n)
            _canon_cache.clear()


def device_count(device_type="CPU"):
    return _config.get(device_type.upper(), 0)


def list_logical_devices(device_type=None):
    out = []
    for t in ("CPU", "GPU"):
        if device_type is None or device_type.upper() == t:
            out += [LogicalDevice(f"/job:localhost/replica:0/task:0/device:{t}:{i}", t)
                    for i in range(device_count(t))]
    return out


def canonical_device(device):
    """The full name of ``device`` (``None`` means the default, CPU:0)."""
    hit = _canon_cache.get(device)
    if hit is not None:
        return hit
    spec = DeviceSpec.from_string(device) if device else DeviceSpec()
    name = spec.to_string()
    _canon_cache[device] = name
    return name


_type_cache = {}


def device_type_of(device):
    """``"CPU"``, ``"GPU"`` ... of a device string (cached: the plan builder asks per node)."""
    if not device:
        return "CPU"
    t = _type_cache.get(device)
    if t is None:
        t = DeviceSpec.from_string(device).device_type or "CPU"
        if len(_type_cache) < 4096:
            _type_cache[device] = t
    return t


def place(requested, opdef, soft=None, counts=None):
    """Chooses the device for an op: the requested one if it exists and has a kernel, else
    (with soft placement) CPU:0. Returns the canonical name. ``counts`` ({device type: n})
    overrides the process's logical device counts (a rank's ``Runtime`` has its own)."""
    soft = _config["soft_placement"] if soft is None else soft
    spec = DeviceSpec.from_string(requested) if requested else DeviceSpec()
    dtype = spec.device_type or "CPU"
    idx = spec.device_index or 0
    n = None if counts is None else counts.get(dtype)
    available = _config.get(dtype, 0) if n is None else n
    ok = idx < available and dtype in opdef.kernels
    if spec.job not in (None, "localhost") and not _remote_known(spec):
        ok = False
    if not ok:
        if not soft:
            why = (f"no {dtype} device with index {idx} (this process has {available})"
                   if idx >= available else f"no {dtype} kernel for op '{opdef.name}'")
            raise errors.InvalidArgumentError(
                f"Cannot assign a device for operation '{opdef.name}': {why}. "
                "Hint: enable soft placement (tw.config.set_soft_device_placement(True)).")
        spec = DeviceSpec(device_type="CPU", device_index=0)
    return spec.to_string()


def _remote_known(spec):
    return False


_eager_placement = {}


def kernel_for(opdef, device):
    """(kernel, device name) for an eager op under ``tw.device(device)``, with soft placement."""
    key = (opdef.name, device, _config["soft_placement"], _config["CPU"])
    hit = _eager_placement.get(key)
    if hit is None:
        placed = place(device, opdef)
        hit = (opdef.kernel(device_type_of(placed)), placed)
        if len(_eager_placement) > 4096:
            _eager_placement.clear()
        _eager_placement[key] = hit
    log_placement(opdef.name, opdef.name, hit[1])
    return hit


def log_placement(op_name, op_type, device, force=False):
    if force or _config["log_placement"]:
        print(f"{op_name}: ({op_type}): {device}", file=sys.stderr)


@contextlib.contextmanager
def device(device_name):
    """Places ops created (or run eagerly) inside on ``device_name``; nested scopes merge."""
    if callable(device_name):
        # A TF1 device function: called with each op created inside, returns its device.
        if not ctx.graph_stack and executing_eagerly():
            raise RuntimeError("tw.device does not support functions when eager execution is enabled")
        ctx.device_functions.append((device_name, ctx.device))
        try:
            yield
        finally:
            ctx.device_functions.pop()
        return
    old = ctx.device
    if device_name is None or device_name == "":
        new = None
    else:
        spec = DeviceSpec.from_string(device_name)
        if old:
            spec = DeviceSpec.from_string(old).merge_from(spec)
        new = spec.to_string() if (spec.device_type or spec.job) else device_name
    ctx.device = new
    try:
        yield
    finally:
        ctx.device = old
