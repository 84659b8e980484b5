"""Tests that kill mutants which survived the area's own tests (session 11 mutation testing of
issue 18's kernels: ``conv_tiles``, ``gemm``'s fast paths, ``rnn_gemm.plan``, ``aot``'s manifest
checks; see docs/design/mutation-testing.md)."""
import numpy as np
import pytest

from tensorweave.kernels.cpu import conv_tiles


def test_a_batch_of_two_is_cut_into_one_image_tiles():
    # the smallest batch that is cut: each tile holds one image's bytes, not the whole budget
    assert conv_tiles.split(2, 16384, 1 << 20, cores=2) == (16384, True)
    assert conv_tiles.split(2, 16384, 1 << 20, cores=1) == (2 * 16384, False)


def _gemm():
    from tensorweave.kernels.cpu import gemm
    if gemm.library() != "mkl":
        pytest.skip("the BLAS path needs MKL")
    return gemm


def test_a_product_into_out_and_a_new_one_share_their_class_key(monkeypatch):
    # matmul's geometry fast path (_product) and its checked path (out given) key one shape class
    # alike, so a class is timed (or looked up) once whichever way its products come
    gemm = _gemm()
    monkeypatch.setitem(gemm._tuning, "on", False)
    monkeypatch.setattr(gemm, "_serial_chosen", {})
    monkeypatch.setattr(gemm, "_geometry", {})
    rng = np.random.default_rng(11)
    a = rng.standard_normal((8, 300)).astype(np.float32)
    b = rng.standard_normal((300, 40)).astype(np.float32)
    assert a.shape[0] * b.shape[1] * a.shape[1] < gemm.serial_work(a.dtype)
    want = a.astype(np.float64) @ b
    out = np.empty((8, 40), np.float32)
    assert gemm.matmul(a, b, out=out) is out
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gemm.matmul(a, b), want, rtol=1e-4, atol=1e-4)
    assert len(gemm._serial_chosen) == 1
    (key,) = gemm._serial_chosen
    assert key == gemm._product(a, b)[-1] and key[-1] == 1


def _manifest(tmp_path, **fields):
    import json

    from tensorweave.kernels.cpu import aot
    manifest = {"format": aot.FORMAT, "module": "_tw_aot_x", "sha256": "0" * 64, "exports": [], "sources": {}}
    manifest.update(fields)
    (tmp_path / aot.MANIFEST).write_text(json.dumps(manifest))
    return aot, str(tmp_path)


@pytest.mark.parametrize("fields", [{"module": "../escape"}, {"sha256": 7}, {"module": 3}])
def test_a_manifest_naming_a_bad_module_or_digest_is_malformed(tmp_path, fields):
    aot, directory = _manifest(tmp_path, **fields)
    with pytest.warns(aot.AOTWarning, match=r"manifest.json is malformed"):
        assert aot.load(directory) is None


@pytest.mark.parametrize("error", [ImportError, OSError])
def test_a_builder_that_cannot_be_read_counts_as_another_builder(tmp_path, monkeypatch, error):
    aot, directory = _manifest(tmp_path, sources={"tensorweave.kernels.cpu.aot_build": "0" * 64})

    def module_source(name):
        raise error(f"no module {name}")
    monkeypatch.setattr(aot, "module_source", module_source)
    with pytest.warns(aot.AOTWarning, match=r"was made by another version of tensorweave.kernels.cpu.aot_build"):
        assert aot.load(directory) is None


def test_unaligned_operands_of_a_remembered_geometry_stay_off_blas(monkeypatch):
    gemm = _gemm()
    rng = np.random.default_rng(11)
    a = rng.standard_normal((8, 300)).astype(np.float32)
    b = rng.standard_normal((300, 40)).astype(np.float32)
    want = a.astype(np.float64) @ b
    dt = np.dtype(np.float32)
    log = []
    for table in (gemm._gemm, gemm._gemm_serial):
        real = table[dt]
        monkeypatch.setitem(table, dt, lambda *args, real=real: (log.append(1), real(*args))[1])
    monkeypatch.setitem(gemm._tuning, "on", False)
    monkeypatch.setattr(gemm, "_openblas", {"found": None})     # MKL on one thread for small products
    monkeypatch.setattr(gemm, "_serial_chosen", {})
    monkeypatch.setattr(gemm, "_geometry", {})
    np.testing.assert_allclose(gemm.matmul(a, b), want, rtol=1e-4, atol=1e-4)
    assert log                                                 # aligned: BLAS
    raw = np.zeros(a.nbytes + 1, np.uint8)
    unaligned = np.frombuffer(raw.data, np.float32, a.size, offset=1).reshape(a.shape)
    unaligned[...] = a
    assert (unaligned.shape, unaligned.strides) == (a.shape, a.strides) and not unaligned.flags.aligned
    log.clear()
    np.testing.assert_allclose(gemm.matmul(unaligned, b), want, rtol=1e-4, atol=1e-4)
    assert not log                                             # same geometry, unaligned: NumPy


def test_a_module_whose_source_cannot_be_found_is_not_fresh(tmp_path):
    from tensorweave.kernels.cpu import aot
    lib = aot.Library(str(tmp_path), {"sources": {"tw_no_such_package.kernels": "0" * 64}, "exports": []}, None)
    with pytest.warns(aot.AOTWarning, match=r"kernels of tw_no_such_package.kernels were built from another"):
        assert lib.fresh("tw_no_such_package.kernels") is False
    assert lib.fresh("tw_no_such_package.kernels") is False          # decided once


def test_an_extension_that_cannot_be_imported_falls_back(tmp_path):
    import importlib.machinery

    from tensorweave.kernels.cpu import aot
    builder = aot.code_digest(aot.BUILDER)
    file = tmp_path / ("_tw_aot_x" + importlib.machinery.EXTENSION_SUFFIXES[0])
    file.write_bytes(b"not a shared object")
    aot, directory = _manifest(tmp_path, sha256=aot.sha256_file(str(file)), sources={aot.BUILDER: builder},
                               machine=aot.machine())
    with pytest.warns(aot.AOTWarning, match=r"_tw_aot_x\S* could not be loaded"):
        assert aot.load(directory) is None


def test_a_loop_plan_for_a_short_wide_or_empty_inner_product(monkeypatch):
    gemm = _gemm()
    if not gemm._gemm_serial:
        pytest.skip("MKL with a per-thread setting is not loaded")
    from tensorweave.kernels.cpu import rnn_gemm
    monkeypatch.setitem(gemm._tuning, "on", False)
    p = rnn_gemm.plan(np.float32, 1, 4, 64)         # m * n < k: still a product worth a plan
    assert p is not None and p.threads == 1
    assert rnn_gemm.plan(np.float32, 4, 4, 0) is None    # an empty inner dimension: the Python path
    assert rnn_gemm.plan(np.float32, 4, 0, 4) is None    # no units


def test_stacks_numpy_keeps_are_computed_by_numpy():
    gemm = _gemm()
    a = np.arange(24, dtype=np.int64).reshape(2, 3, 4)
    b = np.arange(20, dtype=np.int64).reshape(4, 5)
    np.testing.assert_array_equal(gemm.matmul(a, b), np.matmul(a, b))      # no BLAS for integers


def test_the_serial_threshold_compares_the_products_work(monkeypatch):
    gemm = _gemm()
    rng = np.random.default_rng(11)
    a = rng.standard_normal((16, 200)).astype(np.float32)
    b = rng.standard_normal((200, 64)).astype(np.float32)
    dt = np.dtype(np.float32)
    log = []
    for table, name in ((gemm._gemm, "threaded"), (gemm._gemm_serial, "serial")):
        real = table[dt]
        monkeypatch.setitem(table, dt, lambda *args, real=real, name=name: (log.append(name), real(*args))[1])
    monkeypatch.setitem(gemm._tuning, "on", False)
    monkeypatch.setattr(gemm, "_openblas", {"found": None})
    monkeypatch.setattr(gemm, "_serial_chosen", {})
    monkeypatch.setitem(gemm._serial_work, dt, 16 * 200 * 64)     # the work m*n*k is not under the bound
    want = a.astype(np.float64) @ b
    np.testing.assert_allclose(gemm.matmul(a, b), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gemm.matmul(a, b, out=np.empty((16, 64), np.float32)), want, rtol=1e-4, atol=1e-4)
    assert log == ["threaded", "threaded"]
