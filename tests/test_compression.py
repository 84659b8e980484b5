"""Gradient compression on boxing edges (in-process ranks): fp16/bf16 casts and int8 with error
feedback against float64 references, the error-feedback bound over many steps, the uncompressed
path untouched, and clear errors."""
import ml_dtypes
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core.sbp import B, P, S
from tensorweave.distribute import compression as cz
from tensorweave.distribute.boxing import box, plan_boxing
from tensorweave.distribute.collective import InProcessGroup
from tensorweave.distribute.layout import Placement
from tensorweave.distribute.ranks import World


def _pieces(n=3, shape=(5, 2100), seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(n)]


@pytest.mark.parametrize("name", ["fp16", "bf16", "int8"])
def test_a_codec_round_trip_is_within_its_quantum(name):
    x = _pieces(1, (3, 2500))[0] * np.float32(3)
    x[0, :7] = 0.0
    codec = cz.get(name)
    payload = codec.encode(x)
    back = codec.decode(payload, x.dtype, x.shape)
    assert back.shape == x.shape and back.dtype == x.dtype
    assert cz.payload_bytes(payload) == codec.wire_bytes(x.size)
    if name == "int8":
        flat = x.reshape(-1)
        blocks = -(-flat.size // cz.BLOCK)
        padded = np.zeros(blocks * cz.BLOCK, np.float32)
        padded[:flat.size] = flat
        step = np.repeat(np.abs(padded.reshape(blocks, -1)).max(1) / 127, cz.BLOCK)[:flat.size]
        assert np.all(np.abs(back.reshape(-1) - flat) <= step / 2 * (1 + 1e-6))     # round to nearest
        assert payload[0].dtype == np.int8 and payload[1].size == blocks
    else:
        wire = np.float16 if name == "fp16" else ml_dtypes.bfloat16
        np.testing.assert_array_equal(back, x.astype(wire).astype(np.float32))


@pytest.mark.parametrize("dst", [(B,), (S(0),), (S(1),)])
@pytest.mark.parametrize("name,tol", [("fp16", 2e-3), ("bf16", 2e-2), ("int8", 3e-2)])
def test_compressed_boxing_of_a_partial_sum_is_close_to_the_exact_one(dst, name, tol):
    pieces = _pieces()
    plan = plan_boxing((5, 2100), "float32", Placement("cpu", [0, 1, 2]), (P,), dst)
    exact = box(pieces, plan)
    got = box(pieces, plan, compression=name)
    total = np.sum(np.asarray(pieces, np.float64), axis=0)
    scale = np.abs(total).max()
    for a, b in zip(exact, got):
        assert a.shape == b.shape and a.dtype == b.dtype
        assert np.abs(a - b).max() <= tol * scale
    if dst == (B,):      # every rank decodes and sums in rank order: the same bits everywhere
        for b in got[1:]:
            np.testing.assert_array_equal(b, got[0])


def test_without_compression_boxing_is_unchanged_bit_for_bit():
    pieces = _pieces(2, (4, 70))
    for dst in [(B,), (S(1),)]:
        plan = plan_boxing((4, 70), "float32", Placement("cpu", [0, 1]), (P,), dst)
        for a, b in zip(box(pieces, plan), box(pieces, plan, compression=None)):
            np.testing.assert_array_equal(a, b)
    # steps that reduce nothing, and integer partial sums, never compress
    ints = [np.arange(6, dtype=np.int64).reshape(2, 3) * (i + 1) for i in range(2)]
    plan = plan_boxing((2, 3), "int64", Placement("cpu", [0, 1]), (P,), (B,))
    np.testing.assert_array_equal(box(ints, plan, compression="int8")[0], ints[0] + ints[1])
    gather = plan_boxing((4, 70), "float32", Placement("cpu", [0, 1]), (S(0),), (B,))
    halves = [pieces[0][:2], pieces[0][2:]]
    np.testing.assert_array_equal(box(halves, gather, compression="int8")[0], pieces[0])


def test_error_feedback_keeps_the_accumulated_error_bounded():
    # the same gradient every step: with error feedback the sum of what was applied stays
    # within one quantum of the true sum; without it the rounding error grows with the steps
    world = World()
    group = world.group([0, 1])
    rng = np.random.default_rng(1)
    g = [rng.standard_normal(3000).astype(np.float32) * 1e-2 for _ in range(2)]
    g[0][0] = 1.0                                   # one large value: its block's step is coarse
    steps = 40
    totals = {}
    for feedback in (True, False):
        codecs = [cz.Int8Compression(error_feedback=feedback) for _ in range(2)]
        acc = np.zeros(3000, np.float64)
        for _ in range(steps):
            outs = world.run([0, 1], lambda i: cz.all_reduce(group.communicator(i), g[i], codecs[i], key="g"))
            np.testing.assert_array_equal(outs[0], outs[1])
            acc += outs[0]
        totals[feedback] = np.abs(acc - steps * (g[0].astype(np.float64) + g[1])).max()
    quantum = 1.0 / 127
    assert totals[True] < quantum and totals[False] > 5 * quantum, totals


def test_exact_parts_travel_uncompressed_and_mismatches_are_named():
    group = InProcessGroup([0, 1])
    codecs = [cz.get("bf16"), cz.get("bf16")]
    world = World()

    def on_rank(i):
        return cz.all_reduce(group.communicator(i), np.full(4, 1.001, np.float32), codecs[i],
                             exact=np.array([1e8 + i, 3.0]))
    (s, exact), _ = world.run([0, 1], on_rank)
    np.testing.assert_array_equal(exact, [2e8 + 1, 6.0])
    assert s.dtype == np.float32 and np.all(s == np.float32(1.0) * 2)      # 1.001 rounds to 1 in bfloat16
    bad = InProcessGroup([0, 1])

    def mismatched(i):            # every rank notices (none waits for a result that cannot come)
        try:
            cz.all_reduce(bad.communicator(i), np.ones(4 - i, np.float32), cz.get("int8"))
        except tw.errors.InvalidArgumentError as e:
            return str(e)
    assert world.run([0, 1], mismatched) == [
        "compressed all_reduce: rank 1 gave shape [3] float32 (int8) but rank 0 gave [4] float32 (int8)",
        "compressed all_reduce: rank 0 gave shape [4] float32 (int8) but rank 1 gave [3] float32 (int8)"]
    with pytest.raises(TypeError, match="only float arrays are compressed, got int32"):
        cz.all_reduce(InProcessGroup([0]).communicator(0), np.ones(3, np.int32), cz.get("fp16"))


def test_codec_objects_and_options_are_checked():
    with pytest.raises(ValueError, match=r"compression must be None, 'none', one of \('fp16', 'bf16', 'int8'\)"):
        cz.get("fp8")
    with pytest.raises(ValueError, match="compression must be"):
        cz.get("uint8")
    assert cz.get(None) is None and cz.get("none") is None
    proto = cz.Int8Compression(error_feedback=False)
    proto._residuals["k"] = np.ones(2)
    copy = cz.get(proto)
    assert type(copy) is cz.Int8Compression and not copy.error_feedback and copy._residuals == {}
    with pytest.raises(ValueError, match="name must be one of"):
        cz.CastCompression("fp8")
    with pytest.raises(ValueError, match="bytes_per_pack must be a non-negative int"):
        cz.CommunicationOptions(bytes_per_pack=-1)
    with pytest.raises(ValueError, match="implementation must be AUTO, RING or NCCL"):
        cz.CommunicationOptions(implementation="MPI")
    opts = tw.distribute.experimental.CommunicationOptions(
        implementation=tw.distribute.experimental.CommunicationImplementation.RING, compression="fp16")
    assert opts.implementation == "RING" and opts.compression == "fp16"
