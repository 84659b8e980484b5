"""tw.io: files, gfile, TFRecords and tf.train.Example, checked against bytes written by TensorFlow 2.21.

TensorFlow read the TFRecord files (plain, GZIP, ZLIB) and Examples these functions write, and
parsed them to the same values (see benchmarks-free check in the issue notes); here the reverse
direction is pinned with a file TF wrote.
"""
import os

import numpy as np
import pytest

import tensorweave as tw

# tf.io.TFRecordWriter with two records: an Example {id: int64 [7, -3], x: float [0.5, 1.5, -2], tags: bytes
# [a, bc]} serialised with deterministic=True, then an empty record.
TF_RECORDS = bytes.fromhex(
    "4300000000000000b18525a00a410a150a026964120f1a0d0a0b07fdffffffffffffffff010a110a047461677312090a070a01610a"
    "0262630a150a01781210120e0a0c0000003f0000c03f000000c097df8dae000000000000000029039807d8ea82a2")
TF_EXAMPLE = TF_RECORDS[12:12 + 0x43]


def _example():
    return tw.train.Example(features=tw.train.Features(feature={
        "id": tw.train.Feature(int64_list=tw.train.Int64List(value=[7, -3])),
        "x": tw.train.Feature(float_list=tw.train.FloatList(value=[0.5, 1.5, -2.0])),
        "tags": tw.train.Feature(bytes_list=tw.train.BytesList(value=[b"a", b"bc"]))}))


def test_example_bytes_equal_tensorflows():
    assert _example().SerializeToString(deterministic=True) == TF_EXAMPLE
    back = tw.train.Example.FromString(TF_EXAMPLE)
    assert back == _example()
    assert back.features.feature["tags"].WhichOneof("kind") == "bytes_list"
    assert back.features.feature["id"].float_list.value == []
    assert tw.train.Example().SerializeToString() == b""


def test_example_decoding_rejects_malformed_bytes():
    with pytest.raises(tw.io.example_pb.DecodeError, match="runs past the end"):
        tw.train.Example.FromString(TF_EXAMPLE[:-3])
    with pytest.raises(ValueError, match="Feature: set one of bytes_list, float_list, int64_list"):
        tw.train.Feature(int64_list=tw.train.Int64List(value=[1]), float_list=tw.train.FloatList(value=[1.0]))


def test_tfrecord_writer_matches_tensorflow_and_reads_its_files(tmp_path):
    path = str(tmp_path / "ours.rec")
    with tw.io.TFRecordWriter(path) as w:
        w.write(_example().SerializeToString(deterministic=True))
        w.write(b"")
    assert open(path, "rb").read() == TF_RECORDS
    theirs = tmp_path / "theirs.rec"
    theirs.write_bytes(TF_RECORDS)
    assert [r.numpy() for r in tw.data.TFRecordDataset(str(theirs))] == [TF_EXAMPLE, b""]


@pytest.mark.parametrize("comp", ["GZIP", "ZLIB"])
def test_compressed_round_trip(tmp_path, comp):
    path = str(tmp_path / "c.rec")
    recs = [bytes([i]) * (i * 50) for i in range(5)]
    with tw.io.TFRecordWriter(path, tw.io.TFRecordOptions(compression_type=comp)) as w:
        for r in recs:
            w.write(r)
    assert [r.numpy() for r in tw.data.TFRecordDataset([path], compression_type=comp)] == recs
    with pytest.raises(tw.errors.DataLossError, match="Hint: is the file compressed"):
        list(tw.data.TFRecordDataset(path))


def test_corrupt_record_is_reported(tmp_path):
    bad = bytearray(TF_RECORDS)
    bad[30] ^= 1
    path = tmp_path / "bad.rec"
    path.write_bytes(bytes(bad))
    with pytest.raises(tw.errors.DataLossError, match=r"bad.rec: corrupted record at 0 \(data CRC mismatch\)"):
        list(tw.io.tf_record_iterator(str(path)))


SPEC = {"id": tw.io.FixedLenFeature([2], tw.int64), "x": tw.io.FixedLenFeature([3], tw.float32),
        "tags": tw.io.VarLenFeature(tw.string), "w": tw.io.FixedLenFeature([], tw.float32, default_value=-1.0)}


def test_parse_single_example_and_batch():
    one = tw.io.parse_single_example(TF_EXAMPLE, SPEC)
    assert one["id"].numpy().tolist() == [7, -3] and one["id"].dtype == tw.int64
    assert one["x"].numpy().tolist() == [0.5, 1.5, -2.0] and float(one["w"]) == -1.0
    assert one["tags"].values.numpy().tolist() == [b"a", b"bc"] and one["tags"].dense_shape.numpy().tolist() == [2]
    empty = tw.train.Example(features=tw.train.Features(feature={
        "id": tw.train.Feature(int64_list=tw.train.Int64List(value=[1, 2])),
        "x": tw.train.Feature(float_list=tw.train.FloatList(value=[0, 0, 0]))})).SerializeToString()
    batch = tw.io.parse_example(tw.constant([TF_EXAMPLE, empty]), SPEC)
    assert batch["id"].shape == (2, 2)
    assert batch["tags"].indices.numpy().tolist() == [[0, 0], [0, 1]]
    assert batch["tags"].dense_shape.numpy().tolist() == [2, 2]


def test_parse_errors_name_the_feature():
    with pytest.raises(ValueError, match="Key: id, Index: 0. Data types don't match. Expected type: float, "
                                         "Actual type: int64"):
        tw.io.parse_single_example(TF_EXAMPLE, {"id": tw.io.FixedLenFeature([2], tw.float32)})
    with pytest.raises(ValueError, match=r"Feature: nope \(data type: int64\) is required but could not be found"):
        tw.io.parse_single_example(TF_EXAMPLE, {"nope": tw.io.FixedLenFeature([], tw.int64)})
    with pytest.raises(ValueError, match=r"Values size: 3 but output shape: \[2\]"):
        tw.io.parse_single_example(TF_EXAMPLE, {"x": tw.io.FixedLenFeature([2], tw.float32)})


def test_parse_in_a_dataset_map_and_tw_function(tmp_path):
    path = tmp_path / "r.rec"
    path.write_bytes(TF_RECORDS[:12 + 0x43 + 4])
    ds = tw.data.TFRecordDataset(str(path)).map(lambda r: tw.io.parse_single_example(r, SPEC)["x"])
    assert [x.numpy().tolist() for x in ds] == [[0.5, 1.5, -2.0]]
    f = tw.function(lambda r: tw.io.parse_single_example(r, SPEC)["id"] * 2)
    assert f(tw.constant(TF_EXAMPLE)).numpy().tolist() == [14, -6]


def test_sequence_feature_pads():
    spec = {"id": tw.io.FixedLenSequenceFeature([], tw.int64, allow_missing=True)}
    out = tw.io.parse_example(tw.constant([TF_EXAMPLE, b""]), spec)
    assert out["id"].numpy().tolist() == [[7, -3], [0, 0]]


def test_files_and_gfile(tmp_path):
    p = str(tmp_path / "sub" / "a.bin")
    tw.io.write_file(p, b"\x00\x01\xff\x00")
    data = tw.io.read_file(p)
    assert data.dtype == tw.string and data.numpy() == b"\x00\x01\xff\x00"     # trailing NUL kept
    assert tw.io.decode_raw(data, tw.uint8).numpy().tolist() == [0, 1, 255, 0]
    assert tw.io.decode_base64(tw.io.encode_base64(data)).numpy() == data.numpy()
    assert tw.io.matching_files(str(tmp_path / "sub" / "*.bin")).numpy().tolist() == [p.encode()]
    assert tw.io.match_filenames_once(str(tmp_path / "sub" / "*")).numpy().tolist() == [p.encode()]
    gf = tw.io.gfile
    assert gf.exists(p) and gf.isdir(str(tmp_path / "sub")) and gf.listdir(str(tmp_path)) == ["sub"]
    with gf.GFile(os.path.join(str(tmp_path), "t.txt"), "w") as f:
        f.write("x\ny\n")
    assert list(gf.GFile(os.path.join(str(tmp_path), "t.txt"))) == ["x\n", "y\n"]
    with pytest.raises(tw.errors.NotFoundError, match="No such file"):
        tw.io.read_file(str(tmp_path / "missing"))
    with pytest.raises(tw.errors.FailedPreconditionError, match="already exists"):
        gf.copy(p, p)


def test_bytes_with_trailing_nul_survive_constant():
    assert tw.constant([b"a\x00", b"\x00"]).numpy().tolist() == [b"a\x00", b"\x00"]
    assert tw.constant(b"z\x00").numpy() == b"z\x00"


@pytest.mark.parametrize("value,hexed", [
    (lambda: tw.constant([1, 2], tw.int32), "080312041202080222080100000002000000"),
    (lambda: tw.constant([[1.5], [2.0]]), "08011208120208021202080122080000c03f00000040"),
    (lambda: tw.constant([b"ab", b""]), "0807120412020802420261624200"),
    (lambda: tw.constant(3, tw.int64), "0809120022080300000000000000"),
    (lambda: tw.constant([True, False]), "080a12041202080222020100"),
    (lambda: tw.zeros([0, 3]), "08011206120012020803"),
    (lambda: tw.constant([1.0], tw.bfloat16), "080e1204120208012202803f"),
], ids=["int32", "float32", "string", "scalar", "bool", "empty", "bfloat16"])
def test_serialize_tensor_bytes_equal_tensorflows(value, hexed):
    t = value()
    data = tw.io.serialize_tensor(t)
    assert data.numpy().hex() == hexed                         # TF 2.21's bytes for the same tensor
    back = tw.io.parse_tensor(bytes.fromhex(hexed), t.dtype)
    assert back.dtype == t.dtype and back.numpy().tolist() == t.numpy().tolist()


def test_parse_tensor_errors_and_sparse_serialisation():
    with pytest.raises(TypeError, match="the tensor is int32 but out_type is float32"):
        tw.io.parse_tensor(tw.io.serialize_tensor(tw.constant([1])), tw.float32)
    st = tw.SparseTensor([[0, 1], [1, 0], [1, 2]], [1.0, 2.0, 3.0], [2, 3])
    assert tw.io.serialize_sparse(st).shape == (3,)
    rows = tw.io.serialize_many_sparse(st)
    back = tw.io.deserialize_many_sparse(rows, tw.float32)
    assert back.indices.numpy().tolist() == [[0, 1], [1, 0], [1, 2]] and back.values.numpy().tolist() == [1.0, 2.0, 3.0]


def test_decode_csv_and_compressed_match_tensorflow():
    import gzip
    import zlib
    cols = tw.io.decode_csv(tw.constant(['1,"a,b",2.5', "7,,", "3,x,-1"]),
                            [tw.constant([0], tw.int32), tw.constant(["def"]), tw.constant([9.0])])
    assert [c.numpy().tolist() for c in cols] == [[1, 7, 3], [b"a,b", b"def", b"x"], [2.5, 9.0, -1.0]]
    cols = tw.io.decode_csv(tw.constant(["1;2;3"]), [[0], [0.0]], field_delim=";", select_cols=[0, 2])
    assert [c.numpy().tolist() for c in cols] == [[1], [3.0]]
    with pytest.raises(ValueError, match="field 0 is required but missing in record"):
        tw.io.decode_csv(tw.constant([",x"]), [tw.constant([], tw.int32), tw.constant(["d"])])
    assert tw.io.decode_compressed(tw.constant([zlib.compress(b"hello")]), "ZLIB").numpy().tolist() == [b"hello"]
    assert tw.io.decode_compressed(tw.constant([gzip.compress(b"hi")]), "GZIP").numpy().tolist() == [b"hi"]


def _seq(ctx, steps, var):
    T = tw.train
    return T.SequenceExample(
        context=T.Features(feature={"c": T.Feature(int64_list=T.Int64List(value=[ctx]))}),
        feature_lists=T.FeatureLists(feature_list={
            "s": T.FeatureList(feature=[T.Feature(float_list=T.FloatList(value=s)) for s in steps]),
            "v": T.FeatureList(feature=[T.Feature(int64_list=T.Int64List(value=v)) for v in var])})).SerializeToString()


def test_sequence_examples_match_tensorflow():
    se = _seq(7, [[1.0, 2.0], [3.0, 4.0]], [[1], [2, 3, 4]])
    se2 = _seq(8, [[5.0, 6.0]], [])
    cspec = {"c": tw.io.FixedLenFeature([], tw.int64)}
    sspec = {"s": tw.io.FixedLenSequenceFeature([2], tw.float32), "v": tw.io.VarLenFeature(tw.int64)}
    ctx, seq = tw.io.parse_single_sequence_example(se, cspec, sspec)
    assert int(ctx["c"]) == 7 and seq["s"].numpy().tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert seq["v"].indices.numpy().tolist() == [[0, 0], [1, 0], [1, 1], [1, 2]]
    assert seq["v"].dense_shape.numpy().tolist() == [2, 3]
    ctx, seq, lengths = tw.io.parse_sequence_example([se, se2], cspec, sspec)
    assert ctx["c"].numpy().tolist() == [7, 8]
    assert seq["s"].numpy().tolist() == [[[1.0, 2.0], [3.0, 4.0]], [[5.0, 6.0], [0.0, 0.0]]]
    assert seq["v"].dense_shape.numpy().tolist() == [2, 2, 3] and lengths["s"].numpy().tolist() == [2, 1]


def test_fixed_length_records(tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(b"HD" + b"aaabbbccc" + b"F")
    ds = tw.data.FixedLengthRecordDataset(str(p), 3, header_bytes=2, footer_bytes=1)
    assert [r.numpy() for r in ds] == [b"aaa", b"bbb", b"ccc"]
    with pytest.raises(tw.errors.DataLossError, match="not a multiple of record_bytes=4"):
        list(tw.data.FixedLengthRecordDataset(str(p), 4, header_bytes=2, footer_bytes=1))


def test_tensor_protos_and_specs():
    p = tw.make_tensor_proto([[1, 2]], tw.int64)
    # TF 2.21's bytes for the same proto
    assert p.SerializeToString().hex() == "080912081202080112020802221001000000000000000200000000000000"
    assert tw.make_ndarray(p).tolist() == [[1, 2]] and tw.make_ndarray(tw.make_tensor_proto(1.5, shape=[2])).tolist() == [1.5, 1.5]
    assert tw.SparseTensorSpec([None, 4]).is_compatible_with(tw.SparseTensor([[0, 1]], [1.0], [3, 4]))
    assert tw.RaggedTensorSpec([None, None], tw.int32).is_compatible_with(tw.ragged.constant([[1], [2, 3]]))
    assert tw.as_string(tw.constant([1])).numpy().tolist() == [b"1"]
    z = tw.complex(tw.ones([2, 2]), tw.zeros([2, 2]))
    assert tw.fftnd(z).numpy()[0, 0] == 4 and tw.ifftnd(tw.fftnd(z)).numpy()[1, 1] == 1
    assert tw.irfftnd(tw.rfftnd(tw.ones([2, 4]))).numpy().tolist() == [[1.0] * 4] * 2


def _sparse_example(ix, iy, v):
    T = tw.train
    return T.Example(features=T.Features(feature={
        "ix": T.Feature(int64_list=T.Int64List(value=ix)), "iy": T.Feature(int64_list=T.Int64List(value=iy)),
        "v": T.Feature(float_list=T.FloatList(value=v))})).SerializeToString()


def test_sparse_and_ragged_features_match_tensorflow():
    recs = [_sparse_example([3, 1], [0, 2], [1.0, 2.0]), _sparse_example([], [], []), _sparse_example([0], [1], [5.0])]
    sp = tw.io.parse_example(tw.constant(recs), {"sp": tw.io.SparseFeature(["ix", "iy"], "v", tw.float32, [4, 3])})["sp"]
    assert sp.indices.numpy().tolist() == [[0, 1, 2], [0, 3, 0], [2, 0, 1]]
    assert sp.values.numpy().tolist() == [2.0, 1.0, 5.0] and sp.dense_shape.numpy().tolist() == [3, 4, 3]
    rg = tw.io.parse_example(tw.constant(recs), {"rg": tw.io.RaggedFeature(tw.float32, value_key="v")})["rg"]
    assert rg.to_list() == [[1.0, 2.0], [], [5.0]]
    one = tw.io.parse_single_example(recs[0], {"sp": tw.io.SparseFeature(["ix", "iy"], "v", tw.float32, [4, 3]),
                                               "rg": tw.io.RaggedFeature(tw.float32, value_key="v")})
    assert one["sp"].indices.numpy().tolist() == [[1, 2], [3, 0]] and one["rg"].numpy().tolist() == [1.0, 2.0]
    with pytest.raises(ValueError, match=r"index ix has values outside \[0, 2\)"):
        tw.io.parse_example(tw.constant(recs[:1]), {"sp": tw.io.SparseFeature(["ix", "iy"], "v", tw.float32, [2, 3])})


def test_decode_json_example():
    j = tw.io.decode_json_example(['{"features": {"feature": {"a": {"int64List": {"value": ["1", "-2"]}}, '
                                   '"b": {"bytesList": {"value": ["aGk="]}}}}}'])
    out = tw.io.parse_example(j, {"a": tw.io.VarLenFeature(tw.int64), "b": tw.io.FixedLenFeature([], tw.string)})
    assert out["a"].values.numpy().tolist() == [1, -2] and out["b"].numpy().tolist() == [b"hi"]
    with pytest.raises(ValueError, match="decode_json_example: invalid JSON"):
        tw.io.decode_json_example(["{"])
