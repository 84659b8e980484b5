"""Error classes, named as in TensorFlow (``tw.errors.InvalidArgumentError`` ...).

Construction-time problems (shape or dtype mismatches) raise ``InvalidArgumentError``,
which is also a ``ValueError`` and a ``TypeError`` so that code written for either
Python convention catches it.
"""
import os
import sys


# TensorFlow's canonical error codes (``tf.errors.INVALID_ARGUMENT`` ...), the values of ``error_code``.
OK, CANCELLED, UNKNOWN, INVALID_ARGUMENT, DEADLINE_EXCEEDED, NOT_FOUND, ALREADY_EXISTS = range(7)
PERMISSION_DENIED, RESOURCE_EXHAUSTED, FAILED_PRECONDITION, ABORTED, OUT_OF_RANGE = range(7, 12)
UNIMPLEMENTED, INTERNAL, UNAVAILABLE, DATA_LOSS, UNAUTHENTICATED = range(12, 17)


class OpError(Exception):
    """Base class: carries the node (operation) it concerns, when known, and TF's error code.

    Two call forms: ``OpError(message)`` (how tensorweave raises them) and TensorFlow's
    ``OpError(node_def, op, message[, error_code])``, so ``raise tw.errors.InvalidArgumentError(None,
    None, "bad input")`` in a TF program works unchanged.

    >>> str(InvalidArgumentError(None, None, "bad input")), InvalidArgumentError("x").error_code
    ('bad input', 3)
    """

    error_code = UNKNOWN

    def __init__(self, *args, message=None, node_def=None, op=None, error_code=None):
        if len(args) in (3, 4):                      # TensorFlow's positional form
            node_def, op, message, *code = args
            error_code = code[0] if code else error_code
        elif len(args) == 1 and message is None:
            message = args[0]
        elif args:
            raise TypeError(f"{type(self).__name__}() takes a message, or TensorFlow's (node_def, op, "
                            f"message[, error_code]); got {len(args)} positional arguments")
        super().__init__(message)
        self.message = message
        self.op = op
        self.node_def = node_def
        if error_code is not None:
            self.error_code = error_code

    def __str__(self):
        return str(self.message)

    def __reduce__(self):
        # How an error crosses processes (Ray sends a worker's exception to the driver): its
        # message, code and plain attributes (``rank``, notes); ``op`` is a live graph object of
        # the process it was raised in, and ``node_def`` may be one too.
        state = {k: v for k, v in self.__dict__.items() if k not in ("op", "node_def")}
        return _rebuild, (type(self), self.message, self.error_code), state


def _rebuild(cls, message, error_code):
    err = cls.__new__(cls)
    OpError.__init__(err, message, error_code=error_code)
    return err


def _error(name, code, *bases, doc=None):
    cls = type(name, (OpError,) + bases, {"error_code": code, "__doc__": doc or f"TF's ``{name}``.",
                                           "__module__": __name__})
    return cls


# Each class is also the Python exception a user of either convention would catch.
CancelledError = _error("CancelledError", CANCELLED, doc="An operation was cancelled (a closed queue).")
UnknownError = _error("UnknownError", UNKNOWN, RuntimeError)
InvalidArgumentError = _error("InvalidArgumentError", INVALID_ARGUMENT, ValueError, TypeError)
DeadlineExceededError = _error("DeadlineExceededError", DEADLINE_EXCEEDED, TimeoutError)
NotFoundError = _error("NotFoundError", NOT_FOUND, KeyError)   # OpError.__str__: no KeyError quotes
AlreadyExistsError = _error("AlreadyExistsError", ALREADY_EXISTS, FileExistsError)
PermissionDeniedError = _error("PermissionDeniedError", PERMISSION_DENIED, PermissionError)
ResourceExhaustedError = _error("ResourceExhaustedError", RESOURCE_EXHAUSTED, MemoryError)
FailedPreconditionError = _error("FailedPreconditionError", FAILED_PRECONDITION, RuntimeError)
AbortedError = _error("AbortedError", ABORTED, RuntimeError,
                      doc="An operation was aborted (TF1's session recovery loops retry on it).")
OutOfRangeError = _error("OutOfRangeError", OUT_OF_RANGE, IndexError)
UnimplementedError = _error("UnimplementedError", UNIMPLEMENTED, NotImplementedError)
InternalError = _error("InternalError", INTERNAL, RuntimeError)
UnavailableError = _error("UnavailableError", UNAVAILABLE, RuntimeError)
DataLossError = _error("DataLossError", DATA_LOSS, OSError,
                       doc="Unrecoverable data corruption (a TFRecord whose CRC does not match).")
UnauthenticatedError = _error("UnauthenticatedError", UNAUTHENTICATED, PermissionError)
_BY_CODE = {cls.error_code: cls for cls in (
    CancelledError, UnknownError, InvalidArgumentError, DeadlineExceededError, NotFoundError,
    AlreadyExistsError, PermissionDeniedError, ResourceExhaustedError, FailedPreconditionError, AbortedError,
    OutOfRangeError, UnimplementedError, InternalError, UnavailableError, DataLossError, UnauthenticatedError)}


class OperatorNotAllowedInGraphError(TypeError):
    """A Python operation (``bool(tensor)``, iterating a tensor) that a traced graph cannot express."""


def exception_type_from_error_code(error_code):
    """The error class of a TF error code (``tf.compat.v1.errors``)."""
    return _BY_CODE[error_code]


def error_code_from_exception_type(cls):
    """The TF error code of an error class (``tf.compat.v1.errors``)."""
    return cls.error_code


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
