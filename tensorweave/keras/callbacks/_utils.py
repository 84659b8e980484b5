"""Helpers shared by the callbacks: messages, and reading/setting the optimizer's learning rate."""
import numbers

import numpy as np


def print_msg(message):
    """Prints a callback's message on stdout as Keras does (looked up at call time, so a
    redirected or captured stdout receives it), or logs it with interactive logging off."""
    from tensorweave.keras.utils.io_utils import write
    write(message + "\n")


def _optimizer(model, who):
    opt = getattr(model, "optimizer", None)
    if opt is None or not hasattr(opt, "learning_rate"):
        raise ValueError(f'{who}: the optimizer must have a "learning_rate" attribute; compile() the model with '
                         "an optimizer first.")
    return opt


def get_learning_rate(model, who="callback"):
    """The optimizer's current learning rate as a Python float (a schedule's value at the
    current step)."""
    value = _optimizer(model, who).learning_rate
    if hasattr(value, "numpy"):
        value = value.numpy()
    return float(np.asarray(value))


def check_settable(model, who):
    """Raises if the learning rate cannot be changed between epochs.

    Only a number (which becomes a variable on first use) or a variable can be changed: the
    compiled training step reads the variable, so a new value takes effect without a retrace.
    A schedule, a tensor or a callable is baked into the step or owns the value itself.
    """
    from tensorweave.keras.optimizers import schedules
    opt = _optimizer(model, who)
    lr = getattr(opt, "_learning_rate", None)
    if isinstance(lr, schedules.LearningRateSchedule):
        raise TypeError(f"{who} cannot change the learning rate of optimizer '{opt.name}': it was created with a "
                        f"LearningRateSchedule ({type(lr).__name__}), which sets the rate at every step. Hint: "
                        "build the optimizer with a number (e.g. learning_rate=0.001), or use the schedule alone.")
    if lr is not None and not isinstance(lr, float) and not getattr(lr, "_is_variable", False):
        raise TypeError(f"{who} cannot change the learning rate of optimizer '{opt.name}': it is a "
                        f"{type(lr).__name__}, not a number or a variable. Hint: build the optimizer with "
                        "a number (e.g. learning_rate=0.001).")
    return opt


def set_learning_rate(model, value, who="callback"):
    opt = check_settable(model, who)
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        value = float(np.asarray(value))
    opt.learning_rate = float(value)
