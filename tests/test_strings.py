"""tw.strings: results equal TensorFlow 2.21's on the same inputs (recorded here), graph mode, errors."""
import pytest

import tensorweave as tw

S = [b"  Hello World ", b"a,b,,c", "naïve Ünï".encode()]


def _l(x):
    if hasattr(x, "to_list"):
        return x.to_list()
    v = x.numpy()
    return v.tolist() if hasattr(v, "tolist") else v


@pytest.mark.parametrize("fn,want", [
    (lambda s: tw.strings.length(s), [14, 6, 12]),
    (lambda s: tw.strings.length(s, unit="UTF8_CHAR"), [14, 6, 9]),
    (lambda s: tw.strings.lower(s)[2], "naïve Ünï".encode()),       # ASCII only by default
    (lambda s: tw.strings.upper(s, encoding="utf-8")[2], "NAÏVE ÜNÏ".encode()),
    (lambda s: tw.strings.strip(s)[0], b"Hello World"),
    (lambda s: tw.strings.regex_replace(s, r"(l+)", r"<\1>")[0], b"  He<ll>o Wor<l>d "),
    (lambda s: tw.strings.regex_replace(s, "o", "0", replace_global=False)[0], b"  Hell0 World "),
    (lambda s: tw.strings.regex_full_match(s, r".*,.*"), [False, True, False]),
    (lambda s: tw.strings.substr(s, 1, 3), [b" He", b",b,", b"a\xc3\xaf"]),
    (lambda s: tw.strings.substr(s, -3, 2), [b"ld", b",,", b"n\xc3"]),
    (lambda s: tw.strings.substr(s, 0, 3, unit="UTF8_CHAR")[2], "naï".encode()),
    (lambda s: tw.strings.join([s, tw.constant(b"!")], separator="-")[1], b"a,b,,c-!"),
    (lambda s: tw.strings.split(s), [[b"Hello", b"World"], [b"a,b,,c"], ["naïve".encode(), "Ünï".encode()]]),
    (lambda s: tw.strings.split(s, sep=",")[1], [b"a", b"b", b"", b"c"]),
    (lambda s: tw.strings.split(s, sep=",", maxsplit=1)[1], [b"a", b"b,,c"]),
    (lambda s: tw.strings.unicode_decode(s, "UTF-8")[2], [110, 97, 239, 118, 101, 32, 220, 110, 239]),
    (lambda s: tw.strings.unicode_split(s[2:], "UTF-8")[0][2], "ï".encode()),
], ids=["length", "length_chars", "lower", "upper_utf8", "strip", "regex_replace", "regex_replace_once",
        "regex_full_match", "substr", "substr_negative", "substr_chars", "join", "split", "split_sep",
        "split_maxsplit", "unicode_decode", "unicode_split"])
def test_matches_tensorflow(fn, want):
    assert _l(fn(tw.constant(S))) == want


def test_numbers_and_formatting_match_tensorflow():
    assert _l(tw.strings.to_number(tw.constant(["1.5", "-2", "3e2"]))) == [1.5, -2.0, 300.0]
    assert _l(tw.strings.to_number(tw.constant(["12", "-7"]), tw.int64)) == [12, -7]
    assert _l(tw.strings.as_string(tw.constant([1.5, -2.25]))) == [b"1.500000", b"-2.250000"]
    assert _l(tw.strings.as_string(tw.constant([True, False]))) == [b"true", b"false"]
    assert _l(tw.strings.as_string(tw.constant([1.23456]), precision=2)) == [b"1.23"]
    assert _l(tw.strings.as_string(tw.constant([12345.678]), scientific=True)) == [b"1.234568e+04"]
    assert _l(tw.strings.as_string(tw.constant([7]), width=4, fill="0")) == [b"0007"]
    assert _l(tw.strings.format("x={} y={}", [tw.constant([1, 2, 3, 4, 5, 6, 7]), tw.constant(2.5)])) == \
        b"x=[1 2 3 ... 5 6 7] y=2.5"
    assert _l(tw.strings.format("m={}", tw.constant([[1, 2], [3, 4]]))) == b"m=[[1 2]\n [3 4]]"


def test_joins_encodes_ngrams_match_tensorflow():
    m = tw.constant([[b"a", b"b"], [b"c", b"d"]])
    assert _l(tw.strings.reduce_join(m)) == b"abcd"
    assert _l(tw.strings.reduce_join(m, axis=1, separator=",")) == [b"a,b", b"c,d"]
    assert _l(tw.strings.reduce_join(m, axis=0, keepdims=True)) == [[b"ac", b"bd"]]
    assert _l(tw.strings.unicode_encode(tw.ragged.constant([[104, 105], [252]]), "UTF-8")) == [b"hi", b"\xc3\xbc"]
    assert _l(tw.strings.unicode_encode(tw.constant([104, 105]), "UTF-8")) == b"hi"
    assert _l(tw.strings.bytes_split(tw.constant([b"ab", b""]))) == [[b"a", b"b"], []]
    assert _l(tw.strings.ngrams(tw.ragged.constant([[b"a", b"b", b"c"], [b"d"]]), 2)) == [[b"a b", b"b c"], []]
    assert _l(tw.strings.ngrams(tw.constant([b"a", b"b", b"c"]), [1, 3])) == [b"a", b"b", b"c", b"a b c"]
    assert _l(tw.strings.unsorted_segment_join(tw.constant([b"a", b"b", b"c"]), [1, 0, 1], 3, separator="+")) == \
        [b"b", b"a+c", b""]
    assert _l(tw.strings.unicode_transcode(tw.constant(["héllo".encode()]), "UTF-8", "UTF-16-BE")) == \
        [b"\x00h\x00\xe9\x00l\x00l\x00o"]


def test_str_elements_stay_str():
    assert _l(tw.strings.upper(tw.constant(["ab", "c"]))) == ["AB", "C"]
    assert _l(tw.strings.split(tw.constant(["x y"]))) == [["x", "y"]]


def test_graph_mode_and_dataset_map():
    g = tw.Graph()
    with g.as_default():
        s = tw.placeholder(tw.string, [None])
        n = tw.strings.length(tw.strings.lower(s))
        parts = tw.strings.split(s)
        assert n.shape.as_list() == [None] and n.dtype == tw.int32
    with tw.Session(graph=g) as sess:
        lens, vals = sess.run([n, parts.values], {s: [b"AB", b"c d"]})
    assert lens.tolist() == [2, 3] and vals.tolist() == [b"AB", b"c", b"d"]
    ds = tw.data.Dataset.from_tensor_slices([b"1", b"22"]).map(lambda x: tw.strings.to_number(x, tw.int32) * 2)
    assert [int(v) for v in ds] == [2, 44]


def test_indexing_a_string_tensor_gives_a_scalar_string():
    s = tw.constant([b"a\x00", b"b"])
    assert s[0].dtype == tw.string and s[0].numpy() == b"a\x00"


def test_errors():
    with pytest.raises(TypeError, match="tw.strings.lower expects a string tensor, got int32"):
        tw.strings.lower(tw.constant([1]))
    with pytest.raises(tw.errors.InvalidArgumentError, match="StringToNumberOp could not correctly convert string: x1"):
        tw.strings.to_number(tw.constant(["x1"]))
    with pytest.raises(ValueError, match="2 placeholders in the template but 1 inputs"):
        tw.strings.format("{} {}", [tw.constant(1)])


def test_to_hash_bucket_strong_matches_tensorflow():
    s = tw.constant([b"", b"a", b"hello world", b"0123456789abcdef!", "ünï".encode()])
    assert tw.strings.to_hash_bucket_strong(s, 2 ** 62, [1, 2]).numpy().tolist() == \
        [443797209252341627, 546566331822570742, 1015233985318741638, 4152670757500164988, 2719411293463564235]
    assert tw.strings.to_hash_bucket_strong(s, 1000, [0x0706050403020100, 0x0F0E0D0C0B0A0908]).numpy().tolist() == \
        [353, 994, 2, 677, 462]
    with pytest.raises(ValueError, match="key must be two integers"):
        tw.strings.to_hash_bucket_strong(s, 10, [1])


def test_to_hash_bucket_fast_matches_tensorflow():
    # FarmHash64 has separate code paths for lengths 0, 1-3, 4-7, 8-16, 17-32, 33-64 and > 64
    s = tw.constant([b"", b"a", b"hello world", b"x" * 40, b"y" * 100, "ünï".encode()])
    assert tw.strings.to_hash_bucket_fast(s, 1000003).numpy().tolist() == \
        [377723, 291400, 234754, 326595, 299856, 383593]
    assert tw.strings.to_hash_bucket_fast(tw.constant([b"z" * 20, b"abcd"]), 1000003).numpy().tolist() == [354014, 267500]
    with pytest.raises(ValueError, match="num_buckets must be positive"):
        tw.strings.to_hash_bucket_fast(s, 0)
