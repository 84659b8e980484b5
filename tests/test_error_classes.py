"""``tw.errors`` matches ``tf.errors``: both constructor forms, error codes, Python base classes."""
import pytest

import tensorweave as tw
from tensorweave.core import errors

# (class name, TF error code, Python exception it must also be) — codes from TensorFlow's error_codes.proto.
CLASSES = [
    ("CancelledError", 1, None), ("UnknownError", 2, RuntimeError),
    ("InvalidArgumentError", 3, ValueError), ("DeadlineExceededError", 4, TimeoutError),
    ("NotFoundError", 5, KeyError), ("AlreadyExistsError", 6, FileExistsError),
    ("PermissionDeniedError", 7, PermissionError), ("ResourceExhaustedError", 8, MemoryError),
    ("FailedPreconditionError", 9, RuntimeError), ("AbortedError", 10, RuntimeError),
    ("OutOfRangeError", 11, IndexError), ("UnimplementedError", 12, NotImplementedError),
    ("InternalError", 13, RuntimeError), ("UnavailableError", 14, RuntimeError),
    ("DataLossError", 15, OSError), ("UnauthenticatedError", 16, PermissionError),
]


@pytest.mark.parametrize("name,code,python_base", CLASSES)
def test_each_class_has_its_code_and_both_constructor_forms(name, code, python_base):
    cls = getattr(tw.errors, name)
    assert issubclass(cls, tw.errors.OpError)
    assert python_base is None or issubclass(cls, python_base)
    assert cls.error_code == code
    assert errors.exception_type_from_error_code(code) is cls
    assert errors.error_code_from_exception_type(cls) == code

    ours = cls("bad input")
    tf_form = cls(None, None, "bad input")
    for e in (ours, tf_form):
        assert str(e) == "bad input" and e.message == "bad input"
        assert e.op is None and e.node_def is None and e.error_code == code
    with pytest.raises(cls, match="^bad input$"):
        raise tf_form


def test_tf_form_with_node_op_and_explicit_code():
    e = tw.errors.OpError("node", "op", "message", 5)
    assert (e.node_def, e.op, e.message, e.error_code) == ("node", "op", "message", 5)
    assert tw.errors.OpError("m").error_code == tw.errors.UNKNOWN == 2
    assert tw.errors.OpError(message="m", op="o").op == "o"


@pytest.mark.parametrize("args", [("a", "b"), ("a", "b", "c", 4, 5)])
def test_other_argument_counts_are_refused(args):
    with pytest.raises(TypeError, match="takes a message, or TensorFlow's"):
        tw.errors.InvalidArgumentError(*args)


def test_canonical_code_constants():
    names = ["OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
             "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
             "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
             "UNAUTHENTICATED"]
    assert [getattr(tw.errors, n) for n in names] == list(range(17))


def test_not_found_prints_without_key_error_quotes():
    assert str(tw.errors.NotFoundError("no such file")) == "no such file"


def test_operator_not_allowed_in_graph_is_a_type_error():
    assert issubclass(tw.errors.OperatorNotAllowedInGraphError, TypeError)


def test_an_error_crossing_processes_keeps_message_code_and_plain_attributes():
    # Ray moves a worker's exception to the driver through ``__reduce_ex__``: what it hands over
    # must be plain data (checked here as JSON), never the live op the error names (here an
    # object holding a weak reference), and must rebuild the same error.
    import json
    import weakref

    from tensorweave.distribute.collective import CollectiveAbortedError

    class LiveOp:
        pass

    live = LiveOp()
    live.ref = weakref.ref(live)
    for cls in (tw.errors.InvalidArgumentError, tw.errors.NotFoundError, CollectiveAbortedError):
        err = cls("collective abandoned", op=live, error_code=13)
        err.rank = 1
        err.add_note("raised on rank 1")
        rebuild, args, state = err.__reduce_ex__(2)
        assert args[0] is cls
        json.dumps([args[1:], state])                # nothing live travels
        back = rebuild(*args)
        back.__dict__.update(state)
        assert type(back) is cls and str(back) == "collective abandoned" and back.args == ("collective abandoned",)
        assert back.error_code == 13 and back.rank == 1 and back.__notes__ == ["raised on rank 1"]
        assert back.op is None and back.node_def is None
