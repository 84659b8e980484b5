"""The source line an error or ``explain`` names is the user's, not a standard-library frame."""
import os

from tensorweave.core import errors

_FAKE_PACKAGE_FILE = os.path.join(errors._PACKAGE_DIR, "tensorweave", "_user_frame_fake.py")

# Stands for tensorweave code that runs inside a context manager (as Keras optimizers do):
# frames are fake-package generator -> contextlib.__enter__ -> fake-package caller -> the test.
_SOURCE = """
import contextlib
from tensorweave.core import errors

@contextlib.contextmanager
def scope(found):
    found.append(errors.user_frame())
    yield

def run(found):
    with scope(found):
        pass
"""


def _fake_module():
    namespace = {}
    exec(compile(_SOURCE, _FAKE_PACKAGE_FILE, "exec"), namespace)
    return namespace


def test_user_frame_passes_over_standard_library_frames():
    found = []
    line = _line_of_this_call() + 1
    _fake_module()["run"](found)
    assert found == [f"{__file__}:{line}"]


def test_user_frame_falls_back_to_a_standard_library_frame_when_nothing_else_exists():
    # A call whose only non-package callers are in the standard library still names one.
    import threading

    found = []
    thread = threading.Thread(target=_fake_module()["run"], args=(found,))
    thread.start()
    thread.join()
    assert found[0] is not None and found[0].startswith(errors._STDLIB_DIR)


def _line_of_this_call():
    import sys

    return sys._getframe(1).f_lineno
