"""An ahead-of-time build is keyed by its modules' code, not their files (issue 18, session 25 rows29).

The manifest recorded each kernel module's file SHA-256, so editing a docstring made the build
stale and every cold process compiled that module's kernels again. It now records
``aot.code_digest``: the syntax tree without docstrings (comments never reach it). A docstring or
comment edit keeps the build current; a code edit, in the kernel's module or in a helper module whose
compiled function the kernel calls, makes it stale."""
import importlib
import sys
import textwrap
import warnings

import numpy as np
import pytest

from tensorweave.kernels.cpu import aot, aot_build

KERNEL = '''\
"""Kernels of a test package."""
from tensorweave.kernels.cpu.jit import njit

from {pkg} import helper


class Scale:
    """A class's docstring."""
    factor = 1


@njit
def scaled(x, out):
    """``out = helper.twice(x) + 1``."""
    for i in range(x.shape[0]):
        out[i] = helper.twice(x[i]) + 1    # one more
'''
HELPER = '''\
"""A helper the kernel calls."""
from tensorweave.kernels.cpu.jit import njit


@njit
def twice(v):
    """Two of ``v``."""
    return v * 2
'''


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A package of two modules on ``sys.path`` (``kernels`` calls ``helper``); its name is unique to the test."""
    pkg = f"tw_rows29_pkg_{tmp_path.name.replace('-', '_')}"
    root = tmp_path / pkg
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "kernels.py").write_text(KERNEL.format(pkg=pkg))
    (root / "helper.py").write_text(HELPER)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield pkg, root
    for name in [m for m in sys.modules if m == pkg or m.startswith(pkg + ".")]:
        del sys.modules[name]


def _edit(path, old, new):
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


@pytest.mark.parametrize("old, new, same", [
    ('"""``out = helper.twice(x) + 1``."""', '"""Adds one to twice ``x``: a new docstring."""', True),
    ('"""Kernels of a test package."""', '"""Kernels.\n\nLonger now."""', True),
    ("# one more", "# one more, as the caller wants", True),
    ("@njit\ndef scaled", "\n\n@njit\ndef scaled", True),                       # layout
    ('"""A class\'s docstring."""', '"""Another docstring of the class."""', True),
    ("    factor = 1", "    factor = 2", False),
    ("helper.twice(x[i]) + 1", "helper.twice(x[i]) + 2", False),
    ("out[i] = ", "out[i] = -", False),
    ('"""``out = helper.twice(x) + 1``."""', '"""``out = helper.twice(x) + 1``."""\n    x = x[1:]', False),
])
def test_the_digest_follows_the_code_and_not_its_docstrings_or_comments(package, old, new, same):
    pkg, root = package
    before = aot.code_digest(f"{pkg}.kernels")
    _edit(root / "kernels.py", old, new)
    assert (aot.code_digest(f"{pkg}.kernels") == before) is same


def test_a_string_statement_after_the_docstring_is_code(package):
    pkg, root = package
    before = aot.code_digest(f"{pkg}.helper")
    _edit(root / "helper.py", "    return v * 2", '    "not a docstring"\n    return v * 2')
    assert aot.code_digest(f"{pkg}.helper") != before


@pytest.fixture
def built(package, tmp_path):
    """A build of the package's kernel (a few seconds of CPU, mostly the C compiler)."""
    pytest.importorskip("setuptools")
    pkg, root = package
    directory = str(tmp_path / "aot")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", aot.AOTWarning)
        try:
            manifest = aot_build.build(directory, {f"{pkg}.kernels": {"scaled": ["void(float32[::1], float32[::1])"]}})
        except Exception as e:  # noqa: BLE001 - no C compiler or pycc here
            pytest.skip(f"cannot build ahead of time here: {e}")
    return pkg, root, directory, manifest


def _served(pkg, directory):
    """Whether a fresh dispatcher of the kernel gets the built loop (and gives its bits without compiling)."""
    lib = aot.load(directory)
    kernel = importlib.import_module(f"{pkg}.kernels").scaled
    kernel = type(kernel)(kernel.py_func, kernel.locals, kernel.targetoptions)
    if not aot.attach(kernel, lib):
        return False
    x, out = np.arange(5, dtype=np.float32), np.zeros(5, np.float32)
    kernel(x, out)
    assert not kernel.overloads and out.tolist() == [1.0, 3.0, 5.0, 7.0, 9.0]
    return True


def test_the_build_records_every_module_its_loops_carry(built):
    pkg, _, _, manifest = built
    assert manifest["depends"] == {f"{pkg}.kernels": [f"{pkg}.helper", f"{pkg}.kernels"]}
    assert manifest["sources"][f"{pkg}.helper"] == aot.code_digest(f"{pkg}.helper")
    assert manifest["sources"][aot.BUILDER] == aot.code_digest(aot.BUILDER)


def test_docstring_and_comment_edits_keep_the_build_current(built):
    pkg, root, directory, _ = built
    _edit(root / "kernels.py", '"""``out = helper.twice(x) + 1``."""', '"""Twice ``x``, plus one (reworded)."""')
    _edit(root / "kernels.py", "# one more", "# and one")
    _edit(root / "helper.py", '"""Two of ``v``."""', '"""``v`` doubled."""')
    with warnings.catch_warnings():
        warnings.simplefilter("error", aot.AOTWarning)
        assert aot.stale_sources(directory) == []
        assert _served(pkg, directory)


@pytest.mark.parametrize("module, old, new", [("kernels", "+ 1", "+ 3"), ("helper", "v * 2", "v * 4")])
def test_a_code_edit_in_the_kernel_or_a_helper_it_calls_makes_the_build_stale(built, module, old, new):
    pkg, root, directory, _ = built
    _edit(root / f"{module}.py", old, new)
    assert aot.stale_sources(directory) == [f"{pkg}.{module}"]
    with pytest.warns(aot.AOTWarning, match=rf"kernels of {pkg}.kernels were built from another version of "
                                            rf"(its source|the source of {pkg}.helper)"):
        assert not _served(pkg, directory)


def test_a_module_that_no_longer_parses_is_stale(built):
    pkg, root, directory, _ = built
    _edit(root / "helper.py", "return v * 2", "return v *")
    assert aot.stale_sources(directory) == [f"{pkg}.helper"]


def test_an_unchanged_file_is_checked_by_its_bytes_without_a_parse(built, monkeypatch):
    pkg, root, directory, manifest = built
    assert manifest["files"][f"{pkg}.helper"] == {"sha256": aot.sha256_file(str(root / "helper.py")),
                                                  "code": manifest["sources"][f"{pkg}.helper"]}

    def parse(module):
        raise AssertionError(f"{module} parsed")
    monkeypatch.setattr(aot, "code_digest", parse)
    assert aot.stale_sources(directory) == []
    assert _served(pkg, directory)
    _edit(root / "helper.py", '"""Two of ``v``."""', '"""Doubled."""')      # bytes changed: parsed again
    with pytest.raises(AssertionError, match=rf"{pkg}.helper parsed"):
        aot.stale_sources(directory)


def test_the_recorded_digest_of_a_file_decides_only_for_that_files_bytes(package):
    pkg, root = package
    module = f"{pkg}.helper"
    digest = aot.code_digest(module)
    files = {module: {"sha256": aot.sha256_file(str(root / "helper.py")), "code": "recorded"}}
    assert aot.current_digest(module, files) == "recorded"
    for other in ({module: {"sha256": "0" * 64, "code": "recorded"}}, {}, None, [], {module: "recorded"}):
        assert aot.current_digest(module, other) == digest


def test_a_builder_whose_source_does_not_parse_counts_as_another_builder(built, tmp_path, monkeypatch):
    pkg, _, directory, _ = built
    broken = tmp_path / "aot_build.py"
    broken.write_text("def build(:\n")
    real = aot.module_source
    monkeypatch.setattr(aot, "module_source", lambda m: str(broken) if m == aot.BUILDER else real(m))
    with pytest.warns(aot.AOTWarning, match=r"was made by another version of tensorweave.kernels.cpu.aot_build"):
        assert aot.load(directory) is None
