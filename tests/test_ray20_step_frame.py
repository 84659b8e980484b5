"""Issue 14 (ray20, session 16): the step channel's binary frames (``ray/step_frame.py``) round-trip
every allowed dtype and shape (0-d, empty, strided, byte-swapped) and the fixed set of plain values;
a bad magic, a truncated, oversized or trailing frame, an unknown dtype, tag or function id are
rejected with FrameError; pickle bytes in a frame are rejected and never run; a rank's exception
comes back as its own type (a fixed set) or as a RemoteError naming it. No Ray here."""
import pickle
import struct

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.distribute.collective import CollectiveAbortedError
from tensorweave.distribute.ray import step_frame as sf

RNG = np.random.default_rng(2016)
SHAPES = [(), (0,), (3,), (2, 0, 3), (2, 3), (1, 2, 3, 4)]


def _roundtrip(values, fns=None, fn_id=None):
    frame = sf.encode(sf.KIND_REQUEST, 5, 9, 2, tuple(values), fn_id)
    head = sf.parse_header(frame[:sf.HEADER.size])
    assert (head.kind, head.step, head.gen, head.fn, head.count) == (sf.KIND_REQUEST, 5, 9, 2, len(values))
    return sf.decode(head, bytearray(frame[sf.HEADER.size:]), fns)


def _sample(dtype, shape):
    if dtype.kind == "b":
        return np.array(RNG.integers(0, 2, shape), bool)
    if dtype.kind in "iu":
        return np.array(RNG.integers(0, 100, shape), dtype)
    x = RNG.standard_normal(shape) * 10
    return np.array(x + 0.5j * x if dtype.kind == "c" else x).astype(dtype)      # 0-d: an array, not a scalar


@pytest.mark.parametrize("name", sorted(sf.DTYPES))
def test_every_allowed_dtype_and_shape_round_trips_writable_and_aligned(name):
    dtype = sf.DTYPES[name]
    arrays = [_sample(dtype, s) for s in SHAPES]
    got = _roundtrip(arrays)
    for a, b in zip(arrays, got):
        assert b.dtype == a.dtype and b.shape == a.shape
        assert b.tobytes() == a.tobytes()                              # the bits
        assert b.flags.writeable and b.ctypes.data % 16 == 0 or b.size == 0


def test_strided_swapped_scalars_and_plain_values_round_trip():
    base = np.arange(24, dtype=np.float64).reshape(4, 6)
    strided, swapped = base[::2, ::-3], np.arange(5, dtype=">i4")
    values = [strided, swapped, np.float32(2.5), np.int64(-7), None, True, False, -(1 << 63), 2.25, "ünï", b"\x00x",
              (1, [2.0, (None, "a")]), [], ()]
    got = _roundtrip(values)
    np.testing.assert_array_equal(got[0], strided)
    assert got[1].dtype == np.dtype("<i4") and got[1].tolist() == list(range(5))
    assert type(got[2]) is np.float32 and got[2] == 2.5 and type(got[3]) is np.int64 and got[3] == -7
    assert got[4:] == values[4:] and [type(v) for v in got[4:]] == [type(v) for v in values[4:]]


def _fn(worker):
    return worker


def test_functions_travel_as_registered_ids_only():
    ids = {}
    got = _roundtrip([_fn, (_fn,)], fns={4: _fn}, fn_id=lambda f: ids.setdefault(f, 4))
    assert got == [_fn, (_fn,)] and ids == {_fn: 4}
    with pytest.raises(sf.Unencodable, match="function"):
        sf.encode(sf.KIND_REQUEST, 1, 0, 0, (_fn,))                    # no registry: not sendable
    with pytest.raises(sf.FrameError, match="function id 4 was not registered"):
        _roundtrip([_fn], fns={}, fn_id=lambda f: 4)


@pytest.mark.parametrize("value", [{1, 2}, object(), np.array([object()]), 1 << 64, np.zeros(2, "datetime64[s]"),
                                   np.zeros(2, [("a", "f4")]), 1j, "deep"])
def test_values_outside_the_fixed_set_are_unencodable(value):
    if isinstance(value, str):
        for _ in range(sf.MAX_DEPTH + 2):
            value = [value]
    with pytest.raises(sf.Unencodable):
        sf.encode(sf.KIND_REQUEST, 1, 0, 0, (value,))


def _frame(*values):
    return sf.encode(sf.KIND_ANSWER, 3, 0, 0, values)


def _parse(frame, fns=None):
    head = sf.parse_header(frame[:sf.HEADER.size])
    return sf.decode(head, bytearray(frame[sf.HEADER.size:]), fns)


def _with_header(frame, **fields):
    names = ("magic", "version", "kind", "flags", "step", "gen", "fn", "count", "body_len")
    values = dict(zip(names, sf.HEADER.unpack(frame[:sf.HEADER.size])))
    values.update(fields)
    return sf.HEADER.pack(*(values[n] for n in names)) + frame[sf.HEADER.size:]


@pytest.mark.parametrize("broken, match", [
    (lambda f: b"XXXX" + f[4:], "bad magic"),
    (lambda f: f[:sf.HEADER.size - 1], "truncated"),
    (lambda f: f[:-1], "its header says"),
    (lambda f: _with_header(f[:-1], body_len=len(f) - sf.HEADER.size - 1), "truncated"),     # the last value short
    (lambda f: _with_header(f, body_len=sf.MAX_FRAME_BYTES + 1), "oversized"),
    (lambda f: _with_header(f, version=2), "version 2"),
    (lambda f: _with_header(f, kind=9), "unknown kind"),
    (lambda f: _with_header(f, count=1000), "1000 values in"),
    (lambda f: _with_header(f, count=1), "bytes after its 1 values"),
    (lambda f: _with_header(f, body_len=len(f) - sf.HEADER.size + 1) + b"\x00", "bytes after"),
    (lambda f: f.replace(b"float32", b"object\x00"), "dtype b'object\\\\x00' is not on the list"),
    (lambda f: f.replace(b"\x10\x00\x00\x00\x00\x00\x00\x00", b"\x11\x00\x00\x00\x00\x00\x00\x00", 1),
     "17 bytes for a float32 array of shape"),
])
def test_malformed_frames_are_rejected(broken, match):
    frame = _frame(np.arange(4, dtype=np.float32), "tail")
    _parse(frame)                                              # the intact frame reads
    with pytest.raises(sf.FrameError, match=match):
        _parse(broken(frame))


def test_an_unknown_tag_and_a_too_deep_nesting_are_rejected():
    body = b"Z"
    head = sf.HEADER.pack(sf.MAGIC, sf.VERSION, sf.KIND_ANSWER, 0, 1, 0, 0, 1, len(body))
    with pytest.raises(sf.FrameError, match="unknown value tag b'Z'"):
        _parse(head + body)
    deep = b"(" + struct.pack("<I", 1)
    body = deep * (sf.MAX_DEPTH + 2) + b"N"
    head = sf.HEADER.pack(sf.MAGIC, sf.VERSION, sf.KIND_ANSWER, 0, 1, 0, 0, 1, len(body))
    with pytest.raises(sf.FrameError, match="nested deeper"):
        _parse(head + body)


class _Marker:
    ran = []

    def __reduce__(self):
        return _Marker.ran.append, ("ran",)


def test_pickle_bytes_in_a_frame_are_rejected_and_never_run():
    payload = pickle.dumps(_Marker())
    with pytest.raises(sf.FrameError, match="bad magic"):
        _parse(payload.ljust(sf.HEADER.size, b"."))
    head = sf.HEADER.pack(sf.MAGIC, sf.VERSION, sf.KIND_REQUEST, 0, 1, 0, 0, 1, len(payload))
    with pytest.raises(sf.FrameError, match="unknown value tag"):
        _parse(head + payload)
    assert _Marker.ran == []


def _raised(e):
    try:
        raise e
    except BaseException as caught:  # noqa: BLE001 - its traceback is what error_values reads
        return caught


@pytest.mark.parametrize("error, kind", [
    (KeyError("rank 1's own error"), KeyError),
    (tw.errors.InvalidArgumentError("not in [0, 3) for 'GatherV2'"), tw.errors.InvalidArgumentError),
    (CollectiveAbortedError("rank 1 raised KeyError"), CollectiveAbortedError),
    (ZeroDivisionError("division by zero"), ZeroDivisionError),
])
def test_errors_come_back_as_their_own_type_with_rank_and_line(error, kind):
    e = _raised(error)
    e.add_note("a note of the rank's")
    values = _roundtrip(sf.error_values(e, 3))
    back = sf.exception_of(tuple(values))
    assert type(back) is kind and back.rank == 3
    assert str(back) == str(error)
    assert back.remote_line == f"{__file__}:{_raised.__code__.co_firstlineno + 2}"
    assert back.__notes__[0] == "a note of the rank's" and "rank 3: raised at" in back.__notes__[1]


def test_an_unknown_error_type_is_a_remote_error_naming_it():
    class Strange(Exception):
        pass
    back = sf.exception_of(tuple(_roundtrip(sf.error_values(_raised(Strange("odd")), 1))))
    assert type(back) is sf.RemoteError and back.remote_type == "Strange" and str(back) == "Strange: odd"
    assert isinstance(back, tw.errors.UnknownError)
    with pytest.raises(sf.FrameError, match="7"):
        sf.exception_of(("KeyError", "x"))
    with pytest.raises(sf.FrameError, match="malformed"):
        sf.exception_of((1, "x", 0, None, None, (), None))
