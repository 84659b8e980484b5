"""``RunConfig``: where an Estimator keeps its checkpoints and how often it writes them.

>>> from tensorweave.estimator import RunConfig
>>> c = RunConfig(model_dir="/tmp/m", save_checkpoints_steps=50).replace(keep_checkpoint_max=2)
>>> c.model_dir, c.save_checkpoints_steps, c.save_checkpoints_secs, c.keep_checkpoint_max
('/tmp/m', 50, None, 2)
"""
import copy

__all__ = ["RunConfig"]


class RunConfig:
    """TF1's ``tf.estimator.RunConfig`` for one process (no cluster: ``is_chief`` is always True).

    Checkpoints are written every ``save_checkpoints_steps`` steps or, when that is None, every
    ``save_checkpoints_secs`` seconds (default 600), and at the end of each ``train`` call.
    Setting both raises, as in TF1.
    """

    _UNSET = object()

    def __init__(self, model_dir=None, tf_random_seed=None, save_summary_steps=100, save_checkpoints_steps=_UNSET,
                 save_checkpoints_secs=_UNSET, session_config=None, keep_checkpoint_max=5,
                 keep_checkpoint_every_n_hours=10000, log_step_count_steps=100, train_distribute=None,
                 device_fn=None, protocol=None, eval_distribute=None, experimental_distribute=None,
                 experimental_max_worker_delay_secs=None, session_creation_timeout_secs=7200,
                 checkpoint_save_graph_def=True):
        steps = None if save_checkpoints_steps is RunConfig._UNSET else save_checkpoints_steps
        secs = None if save_checkpoints_secs is RunConfig._UNSET else save_checkpoints_secs
        if steps is not None and secs is not None:
            raise ValueError("RunConfig: save_checkpoints_steps and save_checkpoints_secs cannot both be set.")
        if steps is None and save_checkpoints_secs is RunConfig._UNSET:
            secs = 600
        self.model_dir = model_dir
        self.tf_random_seed = tf_random_seed
        self.save_summary_steps = save_summary_steps
        self.save_checkpoints_steps = steps
        self.save_checkpoints_secs = secs
        self.session_config = session_config
        self.keep_checkpoint_max = keep_checkpoint_max
        self.keep_checkpoint_every_n_hours = keep_checkpoint_every_n_hours
        self.log_step_count_steps = log_step_count_steps
        self.train_distribute = train_distribute
        self.eval_distribute = eval_distribute
        self.device_fn = device_fn
        self.protocol = protocol
        self.session_creation_timeout_secs = session_creation_timeout_secs
        self.checkpoint_save_graph_def = checkpoint_save_graph_def
        self.experimental_max_worker_delay_secs = experimental_max_worker_delay_secs
        self.is_chief = True
        self.master = ""
        self.num_ps_replicas = 0
        self.num_worker_replicas = 1
        self.task_type = "worker"
        self.task_id = 0
        self.cluster_spec = None
        self.global_id_in_cluster = 0
        self.evaluation_master = ""
        self.service = None

    def replace(self, **kwargs):
        """A copy with the given properties changed (TF1 raises on unknown names, so does this)."""
        new = copy.copy(self)
        for key, value in kwargs.items():
            if not hasattr(self, key) or key.startswith("_"):
                raise ValueError(f"RunConfig.replace: {key!r} is not a RunConfig property")
            setattr(new, key, value)
        if kwargs.get("save_checkpoints_steps") is not None and "save_checkpoints_secs" not in kwargs:
            new.save_checkpoints_secs = None
        if kwargs.get("save_checkpoints_secs") is not None and "save_checkpoints_steps" not in kwargs:
            new.save_checkpoints_steps = None
        if new.save_checkpoints_steps is not None and new.save_checkpoints_secs is not None:
            raise ValueError("RunConfig: save_checkpoints_steps and save_checkpoints_secs cannot both be set.")
        return new
