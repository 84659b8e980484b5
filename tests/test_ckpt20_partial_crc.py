"""Partial-shard reads are checksummed: a rank that reads only some rows (or columns) of
another layout's shard checks the CRC-32 of every block of that shard it reads (the index
records one per 1 MiB block), so a flipped byte in its range raises an error naming the file,
the variable and the region, while a flip elsewhere in the shard does not stop it."""
import json
import os

import numpy as np
import pytest

from tensorweave.core.sbp import B, S
from tensorweave.distribute.layout import Placement, split_to_pieces
from tensorweave.saving import checksum, sharded, tensor_file
from tensorweave.saving import validation as V

ROWS, COLS = 1024, 512          # 2 MiB of float32: two 1 MiB shards over 2 ranks, ...


def _save(tmp_path, rows=ROWS, cols=COLS):
    w = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32)
    two = Placement("cpu", [0, 1])
    path = sharded.save(tmp_path / "ckpt", {"w": sharded.ShardedValue(w.shape, w.dtype, two, (S(0),),
                                                                      split_to_pieces(w, two, (S(0),)))})
    return w, path


def _flip(path, fname, key, byte):
    """Flips one byte of tensor ``key``'s data in ``fname``."""
    header, _ = tensor_file.read_header(os.path.join(path, fname))
    target = os.path.join(path, fname)
    with open(target, "rb") as f:
        start = 8 + int.from_bytes(f.read(8), "little") + header[key]["data_offsets"][0]
    with open(target, "r+b") as f:
        f.seek(start + byte)
        b = f.read(1)
        f.seek(start + byte)
        f.write(bytes([b[0] ^ 0x10]))


def test_large_shards_record_a_crc_per_block_that_combines_to_the_whole(tmp_path):
    w, path = _save(tmp_path)
    shard = sharded.read_index(path)["variables"]["w"]["shards"][0]
    assert "chunk_crc32" not in shard          # 1 MiB: one block, the shard's own CRC-32
    w, path = _save(tmp_path / "big", rows=ROWS * 4)                     # 4 MiB per shard: 4 blocks
    shard = sharded.read_index(path)["variables"]["w"]["shards"][1]
    assert shard["chunk_bytes"] == sharded.CHUNK_BYTES
    piece = w[ROWS * 2:]
    assert shard["crc32"] == checksum.crc32(piece)
    assert shard["chunk_crc32"] == [checksum.crc32(piece.reshape(-1)[i:i + (1 << 18)]) for i in range(0, piece.size, 1 << 18)]


def test_a_flipped_byte_in_the_rows_a_rank_reads_fails_with_file_variable_and_region(tmp_path):
    w, path = _save(tmp_path, rows=ROWS * 4)        # shards of 2048 rows = 4 MiB = 4 blocks (512 rows each)
    _flip(path, "shards-rank1.safetensors", "w", (100 * COLS + 3) * 4)    # shard row 100: block 0
    three = Placement("cpu", [0, 1, 2])             # rows 0..1366 / 1366..2731 / 2731..4096
    # rank 2 of 3 reads shard-1 rows 683..2048 (blocks 1-3): the flip at shard row 100 is not there
    assert np.array_equal(sharded.restore(path, "w", three, (S(0),), ranks=[2])[0], w[2731:])
    # rank 1 reads rows 1366..2731 of the variable: shard 0's last rows and shard 1's rows 0..683 (flip)
    with pytest.raises(V.LoadError) as e:
        sharded.restore(path, "w", three, (S(0),), ranks=[1])
    msg = str(e.value)
    assert "variable 'w'" in msg and "shards-rank1.safetensors" in msg
    assert "region start=[2048, 0] stop=[2731, 512]" in msg and "CRC-32 block 0 of 4" in msg


def test_a_column_read_checks_the_blocks_it_spans(tmp_path):
    w, path = _save(tmp_path)
    _flip(path, "shards-rank0.safetensors", "w", (100 * COLS + 400) * 4)   # column 400 of row 100
    with pytest.raises(V.LoadError, match=r"reading region start=\[0, 0\] stop=\[512, 256\]"):
        sharded.restore(path, "w", Placement("cpu", [0, 1]), (S(1),), ranks=[0])


def test_a_small_shard_read_in_part_is_checked_whole(tmp_path):
    w, path = _save(tmp_path, rows=8, cols=4)       # no blocks recorded: the shard's own CRC-32
    assert "chunk_crc32" not in sharded.read_index(path)["variables"]["w"]["shards"][0]
    assert np.array_equal(sharded.restore(path, "w", Placement("cpu", [0, 1, 2]), (S(0),))[1], w[3:6])
    _flip(path, "shards-rank1.safetensors", "w", 15)
    with pytest.raises(V.LoadError, match=r"'w'.*shards-rank1.safetensors.*block 0 of 1"):
        sharded.restore(path, "w", Placement("cpu", [0, 1, 2]), (S(0),), ranks=[1])
    # the whole-shard read (saved layout) keeps its own check
    with pytest.raises(V.LoadError, match="fails its CRC-32"):
        sharded.restore(path, "w", Placement("cpu", [0, 1]), (S(0),), ranks=[1])


def test_the_index_refuses_a_block_list_that_does_not_fit_the_shard(tmp_path):
    w, path = _save(tmp_path, rows=ROWS * 4)
    where = os.path.join(path, sharded.INDEX)
    doc = json.load(open(where))
    doc["variables"]["w"]["shards"][0]["chunk_crc32"].pop()
    with open(where, "w") as f:
        json.dump(doc, f)
    with pytest.raises(V.LoadError, match="has 3 CRC-32 blocks of 1048576 bytes"):
        sharded.read_index(path)


def test_the_broadcast_layout_reads_a_verified_copy(tmp_path):
    w, path = _save(tmp_path)
    got = sharded.restore(path, "w", Placement("cpu", [[0, 1], [2, 3]]), (B, S(1)))
    assert all(np.array_equal(g, w[:, (i % 2) * 256:(i % 2 + 1) * 256]) for i, g in enumerate(got))
