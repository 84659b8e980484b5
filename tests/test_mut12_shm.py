"""Shared-memory segments (distribute/shm.py) when mapping fails: a segment this process created is
removed, one it only opened (a peer's) is left to its owner (mutation testing, issue 12)."""
import os
import uuid

import pytest

from tensorweave.distribute import shm

pytestmark = pytest.mark.skipif(not shm.available(), reason="no /dev/shm")


def test_a_segment_that_cannot_be_mapped_is_removed_only_by_its_creator():
    name = "tw-test-" + uuid.uuid4().hex[:10] + "-seg"
    path = os.path.join(shm.SHM_DIR, name)
    with pytest.raises(ValueError):         # an empty file cannot be mapped
        shm._Segment(name, size=0)
    assert not os.path.exists(path)         # created here: removed
    open(path, "wb").close()                # a peer's empty segment
    try:
        with pytest.raises(ValueError):
            shm._Segment(name)
        assert os.path.exists(path)         # opened, not created: left to its owner
    finally:
        os.unlink(path)
    seg = shm._Segment(name, size=4096)
    try:
        assert seg.size == 4096 and shm._Segment(name).size == 4096
    finally:
        seg.close()
        seg.unlink()
    assert not os.path.exists(path)
