"""``saving.atomic`` on plain directories: the swap, its fallback and recovery, the crash hook,
and the clean-up of temporaries that only dead writers held (fast; no model is saved)."""
import ctypes
import errno
import os
import socket
import stat
import subprocess
import sys

import pytest

from tensorweave.saving import atomic

LINUX = sys.platform.startswith("linux")


def _tree(path, text):
    os.mkdir(path)
    with open(os.path.join(path, "f"), "w") as f:
        f.write(text)
    return str(path)


def _text(path):
    with open(os.path.join(path, "f")) as f:
        return f.read()


def _entries(parent):
    return sorted(os.listdir(parent))


@pytest.fixture
def durable_events(monkeypatch):
    """Records the renames and the directory fsyncs, in order."""
    events = []
    real_fsync, real_rename = os.fsync, os.rename

    def fsync(fd):
        events.append("fsync-dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync-file")
        return real_fsync(fd)

    def rename(src, dst):
        events.append("rename")
        return real_rename(src, dst)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", rename)
    return events


# ---- the crash hook --------------------------------------------------------------------------------------
CHILD = r"""
import importlib.util, sys
spec = importlib.util.spec_from_file_location("atomic_under_test", sys.argv[1])
atomic = importlib.util.module_from_spec(spec)
spec.loader.exec_module(atomic)
for stage in sys.argv[2:]:
    atomic.crash_point(stage)
    print(stage, flush=True)
"""


def _run_stages(spec, stages):
    env = dict(os.environ)
    env.pop(atomic.CRASH_ENV, None)
    if spec is not None:
        env[atomic.CRASH_ENV] = spec
    r = subprocess.run([sys.executable, "-c", CHILD, atomic.__file__, *stages], env=env,
                       capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout.split()


@pytest.mark.parametrize("spec, stages, expected", [
    (None, ["a", "b"], (0, ["a", "b"])),                    # no variable: inert
    ("", ["a", "b"], (0, ["a", "b"])),
    ("b", ["a", "b", "c"], (atomic.CRASH_EXIT_CODE, ["a"])),   # first time by default
    ("b:2", ["b", "a", "b", "b"], (atomic.CRASH_EXIT_CODE, ["b", "a"])),
    ("b:3", ["a", "b", "b"], (0, ["a", "b", "b"])),         # never reached the third time
    ("ab", ["a", "b"], (0, ["a", "b"])),                    # names match whole, not by prefix
])
def test_crash_point_exits_the_nth_time_its_stage_is_reached(spec, stages, expected):
    assert _run_stages(spec, stages) == expected


# ---- fsync_dir ------------------------------------------------------------------------------------------
def test_fsync_dir_syncs_the_directory_and_ignores_what_cannot_be_opened(tmp_path, durable_events):
    atomic.fsync_dir(str(tmp_path))
    assert durable_events == ["fsync-dir"]
    atomic.fsync_dir(str(tmp_path / "missing"))      # no error
    assert durable_events == ["fsync-dir"]


def test_fsync_dir_ignores_a_failing_fsync_and_closes_its_descriptor(tmp_path, monkeypatch):
    opened, closed = [], []
    real_open, real_close = os.open, os.close

    def fsync(fd):
        raise OSError(errno.EINVAL, "fsync not supported")

    def open_(*args, **kwargs):
        fd = real_open(*args, **kwargs)
        opened.append(fd)
        return fd

    def close(fd):
        closed.append(fd)
        return real_close(fd)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(os, "close", close)
    atomic.fsync_dir(str(tmp_path))
    assert opened and opened == closed


# ---- exchange ---------------------------------------------------------------------------------------------
@pytest.mark.skipif(not LINUX, reason="renameat2 is Linux's")
def test_exchange_swaps_two_directories(tmp_path):
    a, b = _tree(tmp_path / "a", "A"), _tree(tmp_path / "b", "B")
    assert atomic.exchange(a, b) is True
    assert (_text(a), _text(b)) == ("B", "A")


@pytest.mark.skipif(not LINUX, reason="renameat2 is Linux's")
def test_exchange_reports_a_missing_name_as_oserror(tmp_path):
    a = _tree(tmp_path / "a", "A")
    with pytest.raises(OSError) as e:
        atomic.exchange(a, str(tmp_path / "missing"))
    assert e.value.errno == errno.ENOENT and e.value.filename == a
    assert _text(a) == "A"


@pytest.mark.skipif(not LINUX, reason="renameat2 is Linux's")
def test_exchange_of_relative_names(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _tree(tmp_path / "a", "A"), _tree(tmp_path / "b", "B")
    assert atomic.exchange("a", "b") is True
    assert (_text("a"), _text("b")) == ("B", "A")


def _failing_renameat2(err):
    def renameat2(*args):
        ctypes.set_errno(err)
        return -1
    return renameat2


@pytest.mark.parametrize("err", [errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP])
def test_exchange_unsupported_by_the_kernel_or_file_system_is_false(tmp_path, monkeypatch, err):
    """An old kernel (ENOSYS) or a file system without the flag (EINVAL, EOPNOTSUPP): the
    caller falls back, and replace_dir still replaces."""
    monkeypatch.setattr(atomic, "_renameat2", _failing_renameat2(err))
    a, b = _tree(tmp_path / ".m.tmp-1", "new"), _tree(tmp_path / "m", "old")
    assert atomic.exchange(a, b) is False
    atomic.replace_dir(a, b)
    assert _entries(tmp_path) == ["m"] and _text(b) == "new"


def test_exchange_other_errors_are_raised(tmp_path, monkeypatch):
    monkeypatch.setattr(atomic, "_renameat2", _failing_renameat2(errno.EACCES))
    with pytest.raises(PermissionError):
        atomic.exchange(str(tmp_path / "a"), str(tmp_path / "b"))


@pytest.mark.parametrize("libc", ["without renameat2", "not loadable"])
def test_exchange_is_false_with_a_c_library_without_renameat2(tmp_path, monkeypatch, libc):
    def cdll(*args, **kwargs):
        if libc == "not loadable":
            raise OSError("no C library")
        return object()
    monkeypatch.setattr(atomic, "_renameat2", None)
    monkeypatch.setattr(ctypes, "CDLL", cdll)
    a, b = _tree(tmp_path / "a", "A"), _tree(tmp_path / "b", "B")
    assert atomic.exchange(a, b) is False
    assert atomic.exchange(a, b) is False           # (the answer is remembered)
    assert (_text(a), _text(b)) == ("A", "B")


def test_exchange_is_false_without_renameat2(tmp_path, monkeypatch):
    monkeypatch.setattr(atomic, "_renameat2", False)      # as where the C library has none
    a, b = _tree(tmp_path / "a", "A"), _tree(tmp_path / "b", "B")
    assert atomic.exchange(a, b) is False
    assert (_text(a), _text(b)) == ("A", "B")


# ---- replace_dir ------------------------------------------------------------------------------------------
def test_replace_dir_into_a_free_name_is_one_durable_rename(tmp_path, durable_events):
    new = _tree(tmp_path / ".m.tmp-1", "new")
    atomic.replace_dir(new, str(tmp_path / "m"))
    assert _entries(tmp_path) == ["m"] and _text(str(tmp_path / "m")) == "new"
    assert durable_events == ["rename", "fsync-dir"]


@pytest.mark.skipif(not LINUX, reason="renameat2 is Linux's")
def test_replace_dir_swaps_then_removes_the_old_directory(tmp_path, monkeypatch, durable_events):
    target, new = _tree(tmp_path / "m", "old"), _tree(tmp_path / ".m.tmp-1", "new")
    seen = []

    def at(stage):      # the state of the parent at each crash stage
        seen.append((stage, _text(target), _text(new), list(durable_events)))
    monkeypatch.setattr(atomic, "crash_point", at)
    atomic.replace_dir(new, target, "x_")
    # The swap is made durable before the old copy (now under the temporary name) goes.
    assert seen == [("x_swapped", "new", "old", ["fsync-dir"])]
    assert _entries(tmp_path) == ["m"] and _text(target) == "new"


def test_replace_dir_fallback_renames_aside_then_in(tmp_path, monkeypatch, durable_events):
    monkeypatch.setattr(atomic, "exchange", lambda a, b: False)
    target, new = _tree(tmp_path / "m", "old"), _tree(tmp_path / ".m.tmp-77", "new")
    aside = str(tmp_path / ".m.old-77")
    seen = []

    def at(stage):
        seen.append((stage, _entries(tmp_path), list(durable_events)))
    monkeypatch.setattr(atomic, "crash_point", at)
    atomic.replace_dir(new, target)
    assert seen == [
        ("saved_model_old_aside", [".m.old-77", ".m.tmp-77"], ["rename", "fsync-dir"]),
        ("saved_model_swapped", [".m.old-77", "m"], ["rename", "fsync-dir", "rename", "fsync-dir"]),
    ]
    assert _entries(tmp_path) == ["m"] and _text(target) == "new" and not os.path.exists(aside)


def test_a_kill_on_the_fallback_path_is_recovered(tmp_path, monkeypatch):
    """Killed between the two renames: the path is empty, the old export aside; recovery puts
    it back, and the aside prefix belongs to that target only."""
    monkeypatch.setattr(atomic, "exchange", lambda a, b: False)

    class Killed(Exception):
        pass

    def crash(stage):
        if stage == "saved_model_old_aside":
            raise Killed
    monkeypatch.setattr(atomic, "crash_point", crash)
    target, new = _tree(tmp_path / "m", "old"), _tree(tmp_path / ".m.tmp-5", "new")
    _tree(tmp_path / ".mm.old-1", "another target's")
    with pytest.raises(Killed):
        atomic.replace_dir(new, target)
    assert not os.path.exists(target)
    assert atomic.aside_copies(target) == [str(tmp_path / ".m.old-5")]
    assert atomic.recover_dir(target, lambda p: True) is True
    assert _text(target) == "old"
    assert _entries(tmp_path) == [".m.tmp-5", ".mm.old-1", "m"]


# ---- aside copies and their recovery -----------------------------------------------------------------------
def _aside(parent, suffix, text, mtime):
    p = _tree(parent / f".m.old-{suffix}", text)
    os.utime(p, ns=(mtime, mtime))
    return p


def test_aside_copies_newest_first_directories_only(tmp_path):
    older = _aside(tmp_path, "a", "1", 1_000_000_000)
    newer = _aside(tmp_path, "b", "2", 2_000_000_000)
    (tmp_path / ".m.old-file").write_text("not a directory")
    os.symlink(older, tmp_path / ".m.old-link")
    _tree(tmp_path / "m.old-x", "no leading dot")
    target = str(tmp_path / "m")
    assert atomic.aside_copies(target) == [newer, older]
    assert atomic.aside_copies(str(tmp_path / "missing" / "m")) == []


def test_recover_dir_puts_back_the_newest_complete_copy(tmp_path):
    older = _aside(tmp_path, "a", "old", 1_000_000_000)
    _aside(tmp_path, "b", "torn", 2_000_000_000)
    _aside(tmp_path, "c", "older still", 500_000_000)
    target = str(tmp_path / "m")
    checked = []

    def complete(p):
        checked.append(os.path.basename(p))
        return _text(p) != "torn"
    assert atomic.recover_dir(target, complete) is True
    assert _text(target) == "old" and not os.path.exists(older)
    assert _entries(tmp_path) == ["m"]              # the others were older versions: removed
    assert checked == [".m.old-b", ".m.old-a"]


def test_recover_dir_keeps_an_existing_target(tmp_path):
    _tree(tmp_path / "m", "current")
    _aside(tmp_path, "a", "old", 1_000_000_000)
    assert atomic.recover_dir(str(tmp_path / "m"), lambda p: True) is False
    assert _entries(tmp_path) == ["m"] and _text(str(tmp_path / "m")) == "current"


def test_recover_dir_without_a_complete_copy_restores_nothing(tmp_path):
    _aside(tmp_path, "a", "torn", 1_000_000_000)
    assert atomic.recover_dir(str(tmp_path / "m"), lambda p: False) is False
    assert _entries(tmp_path) == []


def test_recover_dir_makes_the_rename_durable(tmp_path, durable_events):
    _aside(tmp_path, "a", "old", 1_000_000_000)
    atomic.recover_dir(str(tmp_path / "m"), lambda p: True)
    assert durable_events == ["rename", "fsync-dir"]


# ---- temporaries of killed writers -----------------------------------------------------------------------------
def test_lock_temporary_is_exclusive_until_unlocked(tmp_path):
    p = _tree(tmp_path / ".m.tmp-1", "x")
    fd = atomic.lock_temporary(p)
    assert isinstance(fd, int)
    assert atomic.lock_temporary(p) is None          # held: a second writer cannot take it
    atomic.unlock(fd)
    fd2 = atomic.lock_temporary(p)
    assert isinstance(fd2, int)
    atomic.unlock(fd2)
    atomic.unlock(None)


@pytest.fixture(params=["sorted", "reversed"])
def listing_order(request, monkeypatch):
    """Lists directories in a fixed order, either way: an entry that the clean-up skips (live,
    linked, foreign, unopenable) must not end it, whichever entries come after."""
    real_listdir = os.listdir
    monkeypatch.setattr(os, "listdir", lambda d: sorted(real_listdir(d), reverse=request.param == "reversed"))


def test_remove_stale_removes_only_unlocked_temporaries_with_its_prefixes(tmp_path, listing_order):
    _tree(tmp_path / ".a-dead-dir", "x")
    (tmp_path / ".b-dead-file").write_text("x")
    live = _tree(tmp_path / ".a-live", "x")
    _tree(tmp_path / "keep", "x")
    (tmp_path / "x.a-not-a-prefix").write_text("x")
    outside = _tree(tmp_path / "outside", "x")
    os.symlink(outside, tmp_path / ".a-link")
    fd = atomic.lock_temporary(live)
    try:
        atomic.remove_stale(str(tmp_path), [".a-", ".b-"])
    finally:
        atomic.unlock(fd)
    assert _entries(tmp_path) == [".a-link", ".a-live", "keep", "outside", "x.a-not-a-prefix"]
    assert _text(outside) == "x"
    atomic.remove_stale(str(tmp_path / "missing"), [".a-"])     # no error


def test_remove_stale_skips_what_it_cannot_open(tmp_path, listing_order):
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(tmp_path / ".a-socket"))        # open() of a socket fails (ENXIO)
        _tree(tmp_path / ".a-dead", "x")
        atomic.remove_stale(str(tmp_path), [".a-"])
    finally:
        sock.close()
    assert _entries(tmp_path) == [".a-socket"]


@pytest.mark.timeout(60)
def test_remove_stale_removes_a_dead_fifo_without_blocking(tmp_path):
    os.mkfifo(tmp_path / ".a-fifo")
    _tree(tmp_path / ".a-dead", "x")
    atomic.remove_stale(str(tmp_path), [".a-"])
    assert _entries(tmp_path) == []


# ---- clean-up that fails (a file that cannot be removed) ------------------------------------------------------
@pytest.fixture
def first_unlink_fails(monkeypatch):
    """The first file removal raises (as for an immutable or busy file); later ones work."""
    real_unlink, failed = os.unlink, []

    def unlink(path, *args, **kwargs):
        if not failed:
            failed.append(path)
            raise PermissionError(errno.EPERM, "Operation not permitted", path)
        return real_unlink(path, *args, **kwargs)
    monkeypatch.setattr(os, "unlink", unlink)
    monkeypatch.setattr(os, "remove", unlink)
    return failed


def _two_files(path):
    os.mkdir(path)
    for name in ("a", "b"):
        (path / name).write_text(name)
    return str(path)


def test_remove_stale_goes_on_past_what_it_cannot_remove(tmp_path, first_unlink_fails):
    dead = _two_files(tmp_path / ".a-dead")
    atomic.remove_stale(str(tmp_path), [".a-"])
    assert first_unlink_fails and len(os.listdir(dead)) == 1     # only the file that failed is left


def test_remove_stale_survives_an_unremovable_file(tmp_path, first_unlink_fails, listing_order):
    (tmp_path / ".a-1").write_text("x")
    (tmp_path / ".a-2").write_text("x")
    atomic.remove_stale(str(tmp_path), [".a-"])
    assert len(_entries(tmp_path)) == 1


@pytest.mark.parametrize("swap", ["renameat2", "fallback"])
def test_replace_dir_succeeds_when_the_old_copy_cannot_all_be_removed(tmp_path, monkeypatch, swap,
                                                                      first_unlink_fails):
    """The new directory is in place: a failure to delete the old one does not fail the save."""
    if swap == "fallback":
        monkeypatch.setattr(atomic, "exchange", lambda a, b: False)
    elif not LINUX:
        pytest.skip("renameat2 is Linux's")
    target = _two_files(tmp_path / "m")
    new = _tree(tmp_path / ".m.tmp-1", "new")
    atomic.replace_dir(new, target)
    assert first_unlink_fails and _text(target) == "new"


def test_recover_dir_succeeds_when_an_older_copy_cannot_all_be_removed(tmp_path, first_unlink_fails):
    _aside(tmp_path, "a", "newest", 2_000_000_000)
    older = _two_files(tmp_path / ".m.old-b")
    os.utime(older, ns=(1_000_000_000, 1_000_000_000))
    assert atomic.recover_dir(str(tmp_path / "m"), lambda p: True) is True
    assert first_unlink_fails and _text(str(tmp_path / "m")) == "newest"
