"""TF1's device helpers: ``tf.train.replica_device_setter`` (a device function) and the option
records ``GPUOptions``/``GraphOptions``/``OptimizerOptions`` that ``ConfigProto`` takes.

>>> import tensorweave.compat.v1 as tf
>>> g = tf.Graph()
>>> with g.as_default(), tf.device(tf.train.replica_device_setter(ps_tasks=2)):
...     a, b = tf.Variable(1.0, name="a"), tf.Variable(2.0, name="b")
...     c = a + b
>>> [op.device for op in g.get_operations() if op.type == "VarHandleOp"]
['/job:ps/task:0', '/job:ps/task:1']
>>> c.op.device
'/job:worker'
"""

_VARIABLE_OPS = ("VarHandleOp", "VariableV2", "Variable", "VarIsInitializedOp")


def replica_device_setter(ps_tasks=0, ps_device="/job:ps", worker_device="/job:worker", merge_devices=True,
                          cluster=None, ps_ops=None, ps_strategy=None):
    """A device function: variables round-robin over the ``ps_tasks`` parameter-server tasks, every
    other op on ``worker_device``. With no ``ps_tasks`` (and no ``cluster``), ``None`` (no placement)."""
    if cluster is not None:
        jobs = cluster.get("ps", []) if isinstance(cluster, dict) else getattr(cluster, "job_tasks", lambda j: [])("ps")
        ps_tasks = len(jobs)
    if not ps_tasks:
        return None
    ps_ops = tuple(ps_ops) if ps_ops is not None else _VARIABLE_OPS
    state = {"next": 0}

    def choose(op):
        if op.type in ps_ops:
            if ps_strategy is not None:
                task = ps_strategy(op)
            else:
                task, state["next"] = state["next"], (state["next"] + 1) % ps_tasks
            return f"{ps_device}/task:{task}"
        return worker_device
    return choose


class _Options:
    """A record of TF1 options (``tf.GPUOptions(allow_growth=True)``...): kept, with no effect on CPUs."""

    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.__dict__.items())})"


class GPUOptions(_Options):
    pass


class GraphOptions(_Options):
    pass


class OptimizerOptions(_Options):
    L1, L0, ON_1, OFF = 0, -1, 0, -1
