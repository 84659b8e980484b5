"""``tw.config``: devices, soft placement, placement logging, threading.

>>> import tensorweave as tw
>>> [d.name for d in tw.config.list_logical_devices("CPU")][:1]
['/job:localhost/replica:0/task:0/device:CPU:0']
"""
from tensorweave.core import devices as _devices
from tensorweave.kernels import threads as _threads
from tensorweave.core.devices import LogicalDevice, list_logical_devices  # noqa: F401


class LogicalDeviceConfiguration:
    """One logical device carved out of a physical one (memory_limit is accepted, unused on CPU)."""

    def __init__(self, memory_limit=None, experimental_priority=None):
        self.memory_limit = memory_limit


class PhysicalDevice:
    def __init__(self, name, device_type):
        self.name = name
        self.device_type = device_type

    def __repr__(self):
        return f"PhysicalDevice(name='{self.name}', device_type='{self.device_type}')"


def list_physical_devices(device_type=None):
    out = []
    if device_type is None or device_type.upper() == "CPU":
        out.append(PhysicalDevice("/physical_device:CPU:0", "CPU"))
    return out


def set_logical_device_configuration(device, logical_devices):
    """Splits the physical CPU into ``len(logical_devices)`` logical CPUs (``/cpu:0`` ...)."""
    if device.device_type != "CPU":
        raise ValueError(f"Only CPU devices can be split here, got {device.device_type}")
    _devices.set_logical_cpu_count(len(logical_devices))


def get_logical_device_configuration(device):
    return [LogicalDeviceConfiguration() for _ in range(_devices.device_count(device.device_type))]


def set_soft_device_placement(enabled):
    """With soft placement an op asked for a missing device (or one without its kernel) runs on CPU:0."""
    _devices._config["soft_placement"] = bool(enabled)


def get_soft_device_placement():
    return _devices._config["soft_placement"]


def set_log_device_placement(enabled):
    """Print (to stderr) the device each op is placed on."""
    _devices._config["log_placement"] = bool(enabled)


class threading:  # noqa: N801 - mirrors tf.config.threading
    """Thread counts (``0``: derived from the cores). Intra-op: BLAS and numba threads in
    one op. Inter-op: heavy ops the executor runs side by side (see kernels/threads.py)."""
    _inter = [0]
    _intra = [0]

    @staticmethod
    def set_inter_op_parallelism_threads(n):
        threading._inter[0] = int(n)
        _threads.set_inter_op_slots(n)

    @staticmethod
    def get_inter_op_parallelism_threads():
        return threading._inter[0]

    @staticmethod
    def set_intra_op_parallelism_threads(n):
        threading._intra[0] = int(n)
        _threads.set_intra_op_threads(n)

    @staticmethod
    def get_intra_op_parallelism_threads():
        return threading._intra[0]


class experimental:  # noqa: N801 - mirrors tf.config.experimental
    @staticmethod
    def set_memory_growth(device, enable):
        pass

    list_physical_devices = staticmethod(list_physical_devices)


class optimizer:  # noqa: N801 - mirrors tf.config.optimizer
    """Graph passes applied when a plan is built (``tensorweave/runtime/passes``).

    >>> import tensorweave as tw
    >>> tw.config.optimizer.set_experimental_options({"elementwise_fusion": False})
    >>> tw.config.optimizer.get_experimental_options()["elementwise_fusion"]
    False
    >>> tw.config.optimizer.set_experimental_options({"elementwise_fusion": True})
    """

    @staticmethod
    def set_experimental_options(options):
        """Switches passes on/off by name (see ``get_experimental_options``); affects plans built later."""
        from tensorweave.runtime import passes
        passes.set_options(dict(options))

    @staticmethod
    def get_experimental_options():
        from tensorweave.runtime import passes
        return passes.get_options()

    @staticmethod
    def set_jit(enabled):
        """Elementwise fusion (numba loops) on or off."""
        optimizer.set_experimental_options({"elementwise_fusion": bool(enabled)})

    @staticmethod
    def get_jit():
        return optimizer.get_experimental_options()["elementwise_fusion"]
