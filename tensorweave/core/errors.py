"""Error classes, named as in TensorFlow (``tw.errors.InvalidArgumentError`` ...).

Construction-time problems (shape or dtype mismatches) raise ``InvalidArgumentError``,
which is also a ``ValueError`` and a ``TypeError`` so that code written for either
Python convention catches it.
"""
import os
import sys


class OpError(Exception):
    """Base class: carries the node (operation) it concerns, when known."""

    def __init__(self, message, node_def=None, op=None):
        super().__init__(message)
        self.message = message
        self.op = op
        self.node_def = node_def


class InvalidArgumentError(OpError, ValueError, TypeError):
    pass


class NotFoundError(OpError, KeyError):
    def __str__(self):  # KeyError would quote the message
        return self.message


class FailedPreconditionError(OpError, RuntimeError):
    pass


class UnimplementedError(OpError, NotImplementedError):
    pass


class InternalError(OpError, RuntimeError):
    pass


class OutOfRangeError(OpError, IndexError):
    pass


class ResourceExhaustedError(OpError, MemoryError):
    pass


class UnknownError(OpError, RuntimeError):
    pass


class AbortedError(OpError, RuntimeError):
    """An operation was aborted (TF1's session recovery loops retry on it)."""


class DataLossError(OpError, OSError):
    """Unrecoverable data corruption (a TFRecord whose CRC does not match)."""


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# The standard library's own frames (contextlib's ``__enter__``, functools wrappers, threading) sit
# between tensorweave frames and the user's; a source line there tells the user nothing.
_STDLIB_DIR = os.path.dirname(os.__file__) + os.sep
_SITE_DIRS = (_STDLIB_DIR + "site-packages", _STDLIB_DIR + "dist-packages")


def user_frame(skip_package=True):
    """Returns ``"file.py:LINE"`` of the innermost caller outside tensorweave (or ``None``).

    Standard-library frames are passed over too; one is returned only when no frame outside
    tensorweave and the standard library exists (code run from a thread's ``run``, say).
    """
    f = sys._getframe(1)
    fallback = None
    while f is not None:
        fname = f.f_code.co_filename
        if not (skip_package and fname.startswith(_PACKAGE_DIR)) and not fname.startswith("<frozen"):
            in_stdlib = fname.startswith(_STDLIB_DIR) and not fname.startswith(_SITE_DIRS)
            if not in_stdlib:
                return f"{fname}:{f.f_lineno}"
            fallback = fallback or f"{fname}:{f.f_lineno}"
        f = f.f_back
    return fallback
