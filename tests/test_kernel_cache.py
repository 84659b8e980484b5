"""kernels/cpu/kernel_cache.py: numba kernels cached on disk in a directory private to the user,
loaded by the next process; refused elsewhere; invalidated when a kernel source changes."""
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

from tensorweave.kernels.cpu import jit, kernel_cache, nn_loops

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# One compiled kernel in a fresh process; prints numba's cache statistics for it.
_CHILD = """
import json, numpy as np
from tensorweave.kernels.cpu import nn_loops
g = np.arange(12.0).reshape(3, 4); acc = np.zeros(4)
nn_loops.column_sums(g, acc)
s = nn_loops.column_sums.stats
print(json.dumps({"hits": sum(s.cache_hits.values()), "misses": sum(s.cache_misses.values()),
                  "path": s.cache_path, "acc": acc.tolist()}))
"""


def _child(cache):
    env = dict(os.environ, TW_KERNEL_CACHE=str(cache), PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def fresh(monkeypatch):
    """The module's once-per-process decisions, reset (and restored after the test)."""
    monkeypatch.setattr(kernel_cache, "_state", {"checked": False, "dir": None})
    monkeypatch.setattr(kernel_cache, "_stamps", {})
    monkeypatch.setattr(kernel_cache, "_ready", set())


def test_a_second_process_loads_what_the_first_compiled(tmp_path):
    cache = tmp_path / "kernels"
    first = _child(cache)
    second = _child(cache)
    assert first["misses"] == 1 and first["hits"] == 0
    assert second["hits"] == 1 and second["misses"] == 0
    assert first["acc"] == second["acc"] == [12.0, 15.0, 18.0, 21.0]
    assert first["path"].startswith(str(cache))
    assert oct(os.stat(cache).st_mode & 0o777) == "0o700"


def test_off_by_default_no_pickle_is_loaded_unless_asked(fresh, monkeypatch):
    monkeypatch.delenv("TW_KERNEL_CACHE", raising=False)
    assert kernel_cache.directory() is None


def test_one_means_the_user_cache_directory(tmp_path, fresh, monkeypatch):
    monkeypatch.setenv("TW_KERNEL_CACHE", "1")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert kernel_cache.directory() == str(tmp_path / "tensorweave" / "kernels")


def test_switched_off_nothing_is_cached(tmp_path, fresh, monkeypatch):
    monkeypatch.setenv("TW_KERNEL_CACHE", "0")
    assert kernel_cache.directory() is None
    fn = jit.njit(nn_loops.column_sums.py_func)
    assert not kernel_cache.enable(fn, nn_loops.column_sums.py_func)


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX permissions")
def test_a_directory_others_can_write_is_refused(tmp_path, fresh, monkeypatch):
    cache = tmp_path / "kernels"
    cache.mkdir(mode=0o700)
    os.chmod(cache, 0o777)
    monkeypatch.setenv("TW_KERNEL_CACHE", str(cache))
    with pytest.warns(RuntimeWarning, match="group/other permissions"):
        assert kernel_cache.directory() is None


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX permissions")
def test_a_symbolic_link_and_an_open_parent_are_refused(tmp_path):
    target = tmp_path / "real"
    target.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(target)
    assert "not a directory" in kernel_cache.unsafe(str(link))
    open_parent = tmp_path / "open"
    open_parent.mkdir()
    os.chmod(open_parent, 0o777)
    (open_parent / "kernels").mkdir(mode=0o700)
    assert "parent is writable" in kernel_cache.unsafe(str(open_parent / "kernels"))
    os.chmod(open_parent, 0o777 | 0o1000)        # sticky, as /tmp: others cannot replace our entry
    assert kernel_cache.unsafe(str(open_parent / "kernels")) is None


def test_an_unwritable_location_compiles_in_process(tmp_path, fresh, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("TW_KERNEL_CACHE", str(blocker / "kernels"))    # cannot be created
    assert kernel_cache.directory() is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fn = jit.njit(nn_loops.column_sums.py_func)
        acc = np.zeros(2)
        fn(np.ones((3, 2)), acc)
    np.testing.assert_array_equal(acc, [3.0, 3.0])


def test_the_stamp_follows_every_kernel_source(tmp_path, fresh, monkeypatch):
    kernels = tmp_path / "cpu"
    kernels.mkdir()
    (kernels / "a.py").write_text("x = 1\n")
    (kernels / "b.py").write_text("y = 1\n")
    monkeypatch.setattr(kernel_cache, "_KERNELS", str(kernels))
    before = kernel_cache._stamp(str(kernels / "a.py"))
    (kernels / "b.py").write_text("y = 22\n")                # another module a kernel may inline
    kernel_cache._stamps.clear()
    assert kernel_cache._stamp(str(kernels / "a.py")) != before


def test_only_top_level_tensorweave_functions_are_cacheable():
    assert kernel_cache.cacheable(nn_loops.column_sums.py_func)
    k = 2

    def closure(a):
        return a * k
    assert not kernel_cache.cacheable(closure)
    assert not kernel_cache.cacheable(json.dumps)              # not tensorweave's
    ns = {}
    exec("def generated(a):\n    return a\n", ns)
    assert not kernel_cache.cacheable(ns["generated"])
