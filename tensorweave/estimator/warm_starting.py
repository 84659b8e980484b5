"""``WarmStartSettings``: start a new model from another model's checkpoint.

Variables whose names match ``vars_to_warm_start`` (a regular expression, default every trainable
variable; or a list of names) take their value from ``ckpt_to_initialize_from`` (a checkpoint
prefix or a model_dir), under their own name or the one ``var_name_to_prev_var_name`` gives;
the others keep their initial values.
"""
import collections
import os
import re

from tensorweave.core import errors

__all__ = ["WarmStartSettings", "warm_start"]


class WarmStartSettings(collections.namedtuple("WarmStartSettings", [
        "ckpt_to_initialize_from", "vars_to_warm_start", "var_name_to_vocab_info", "var_name_to_prev_var_name"])):
    def __new__(cls, ckpt_to_initialize_from, vars_to_warm_start=".*", var_name_to_vocab_info=None,
                var_name_to_prev_var_name=None):
        if not ckpt_to_initialize_from:
            raise ValueError("WarmStartSettings: ckpt_to_initialize_from must be given")
        if var_name_to_vocab_info:
            raise ValueError("WarmStartSettings: var_name_to_vocab_info (remapping vocabularies) is not supported")
        return super().__new__(cls, ckpt_to_initialize_from, vars_to_warm_start, None,
                               dict(var_name_to_prev_var_name or {}))


def warm_start(session, settings, graph_variables, assign):
    """Assigns the checkpoint's values to the selected ``graph_variables`` (``assign(session, {name: value})``)."""
    from tensorweave.estimator._checkpoint import read_checkpoint
    from tensorweave.train.manager import latest_checkpoint
    if isinstance(settings, str):
        settings = WarmStartSettings(settings)
    path = settings.ckpt_to_initialize_from
    if os.path.isdir(path):
        path = latest_checkpoint(path)
        if path is None:
            raise errors.NotFoundError(f"warm start: no checkpoint in {settings.ckpt_to_initialize_from}")
    values = read_checkpoint(path)
    wanted = settings.vars_to_warm_start
    if isinstance(wanted, str):
        pattern = re.compile(wanted)
        names = [n for n, v in graph_variables.items() if v.trainable and pattern.match(n)]
    else:
        names = list(wanted)
    chosen = {}
    for name in names:
        prev = settings.var_name_to_prev_var_name.get(name, name)
        if prev not in values:
            if settings.var_name_to_prev_var_name.get(name) or not isinstance(wanted, str):
                raise errors.NotFoundError(f"warm start: {prev!r} is not in checkpoint {path}")
            continue
        chosen[name] = values[prev]
    assign(session, chosen)
    return sorted(chosen)
