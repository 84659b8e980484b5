"""TF1's ``tf.logging``: ``set_verbosity(tf.logging.INFO)``, ``tf.logging.info(...)`` and friends,
on Python's ``logging`` (the ``tensorweave`` logger; levels are Python's, as in TF).

>>> import tensorweave.compat.v1 as tf
>>> tf.logging.set_verbosity(tf.logging.ERROR)
>>> tf.logging.get_verbosity() == tf.logging.ERROR
True
>>> tf.logging.set_verbosity(tf.logging.WARN)
"""
import logging as _logging
import sys as _sys

DEBUG, INFO, WARN, ERROR, FATAL = _logging.DEBUG, _logging.INFO, _logging.WARN, _logging.ERROR, _logging.FATAL

__all__ = ["DEBUG", "INFO", "WARN", "ERROR", "FATAL", "TaskLevelStatusMessage", "debug", "error", "fatal", "flush",
           "get_verbosity", "info", "log", "log_every_n", "log_first_n", "log_if", "set_verbosity", "vlog", "warn",
           "warning"]


def _logger():
    return _logging.getLogger("tensorweave")


def log(level, msg, *args, **kwargs):
    _logger().log(level, msg, *args, **kwargs)


def debug(msg, *args, **kwargs):
    _logger().debug(msg, *args, **kwargs)


def info(msg, *args, **kwargs):
    _logger().info(msg, *args, **kwargs)


def warning(msg, *args, **kwargs):
    _logger().warning(msg, *args, **kwargs)


warn = warning


def error(msg, *args, **kwargs):
    _logger().error(msg, *args, **kwargs)


def fatal(msg, *args, **kwargs):
    _logger().fatal(msg, *args, **kwargs)


def vlog(level, msg, *args, **kwargs):
    _logger().log(level, msg, *args, **kwargs)


_counts = {}


def _caller_key():
    frame = _sys._getframe(2)
    return frame.f_code.co_filename, frame.f_lineno


def log_every_n(level, msg, n, *args):
    """Logs on the 1st, (n+1)th, (2n+1)th... call from the same line."""
    key = _caller_key()
    count = _counts.get(key, 0)
    _counts[key] = count + 1
    if count % max(int(n), 1) == 0:
        log(level, msg, *args)


def log_first_n(level, msg, n, *args):
    """Logs only on the first ``n`` calls from the same line."""
    key = _caller_key()
    count = _counts.get(key, 0)
    _counts[key] = count + 1
    if count < n:
        log(level, msg, *args)


def log_if(level, msg, condition, *args):
    if condition:
        log(level, msg, *args)


def TaskLevelStatusMessage(msg):  # noqa: N802 - TF1's name
    error(msg)


def flush():
    for h in _logger().handlers:
        h.flush()


def get_verbosity():
    return _logger().getEffectiveLevel()


def set_verbosity(v):
    _logger().setLevel(v)
