"""Where Keras' messages go: the terminal (interactive logging, the default) or Python's
``logging`` (logger ``"tensorweave.keras"``, level INFO) after ``disable_interactive_logging()``,
as in Keras, for jobs whose stdout is a log file. Progress bars and callback messages use it.

>>> disable_interactive_logging(); is_interactive_logging_enabled()
False
>>> enable_interactive_logging(); is_interactive_logging_enabled()
True
"""
import logging
import sys

_enabled = [True]
logger = logging.getLogger("tensorweave.keras")


def enable_interactive_logging():
    """Messages and progress bars go to stdout (redrawn in place on a terminal)."""
    _enabled[0] = True


def disable_interactive_logging():
    """Messages and progress bars go to ``logging`` (one record per line), not stdout."""
    _enabled[0] = False


def is_interactive_logging_enabled():
    return _enabled[0]


def write(text, stream=None):
    """Writes ``text`` to ``stream`` (stdout by default) or, with interactive logging off, logs
    its lines."""
    if is_interactive_logging_enabled():
        stream = stream if stream is not None else sys.stdout
        stream.write(text)
        stream.flush()
        return
    for line in text.replace("\r", "\n").split("\n"):
        if line.strip():
            logger.info(line)


def print_msg(message):
    write(message + "\n")
