"""Crafted numbers, sizes and structures: every one ends in the loader's own error naming the
file and the entry, never an OverflowError, TypeError, RecursionError or MemoryError."""
import json
import os
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorweave as tw
import tensorweave.saved_model as sm
from .adversarial_helpers import copy_saved_model
from tensorweave import cli
from tensorweave.saving import saved_model as sm_impl
from tensorweave.saving import tensor_file
from tensorweave.saving.validation import LoadError, parse_json
from tensorweave.train import latest_checkpoint


def _edit(path, fn):
    p = os.path.join(path, "saved_model.json")
    doc = json.load(open(p))
    fn(doc)
    with open(p, "w") as f:
        json.dump(doc, f)


def _nodes(doc):
    return doc["functions"][0]["graph"]["nodes"]


def _const_values(doc, values):
    node = next(n for n in _nodes(doc) if n["op"] == "Const" and "tensor" in n["attrs"]["value"])
    node["attrs"]["value"]["tensor"].update(values=values, shape=[len(values)])
    return node["name"]


def test_huge_integer_constant(tmp_path, capsys):
    path = copy_saved_model(tmp_path)
    holder = {}
    _edit(path, lambda d: holder.setdefault("name", _const_values(d, [10 ** 400])))
    with pytest.raises(LoadError, match=f"node '{holder['name']}' \\(Const\\).*out of range for float32"):
        sm.load(path)
    np.save(tmp_path / "x.npy", np.ones(2, np.float32))
    assert cli.main(["run", path, "--input", f"x={tmp_path / 'x.npy'}"]) == 2
    assert "out of range for float32" in capsys.readouterr().err


def test_non_finite_json_numbers_are_rejected(tmp_path):
    for text in (b"[1e999]", b"[-1e999]", b'{"a": 1E400}'):
        with pytest.raises(LoadError, match="out of range \\(JSON numbers must be finite\\)"):
            parse_json(text, "x.json")
    path = copy_saved_model(tmp_path)
    p = os.path.join(path, "saved_model.json")
    text = open(p).read().replace('"version":1', '"version":1e999', 1)
    open(p, "w").write(text)
    with pytest.raises(LoadError, match="saved_model.json: not valid JSON .*1e999"):
        sm.load(path)


def test_a_node_with_more_inputs_than_its_op_takes(tmp_path):
    path = copy_saved_model(tmp_path)

    def add_input(doc):
        mul = next(n for n in _nodes(doc) if n["op"] == "Mul")
        mul["inputs"].append(mul["inputs"][0])
    _edit(path, add_input)
    with pytest.raises(LoadError, match="\\(Mul\\): has 3 inputs, but op Mul takes 2"):
        sm.load(path)


def test_nodes_that_are_not_a_list_in_inspect(tmp_path, capsys):
    path = copy_saved_model(tmp_path)
    _edit(path, lambda d: d["functions"][0]["graph"].update(nodes=5))
    assert cli.main(["inspect", path]) == 2
    assert "saved_model.json functions[0] graph: nodes must be a list, got 5" in capsys.readouterr().err
    with pytest.raises(LoadError, match="nodes must be a list"):
        sm_impl.read_info(path)


def _tensor_file(path, entries, data=b""):
    raw = json.dumps(entries).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + data)


@pytest.mark.parametrize("shape, data, message", [
    ([1] * 97, b"\0" * 4, "entry 'w' has rank 97 \\(at most 64 dimensions\\)"),
    ([2 ** 70, 0], b"", "entry 'w' has shape \\[1180591620717411303424, 0\\], too large"),
    ([2 ** 40, 2 ** 40], b"", "entry 'w' declares shape"),
])
def test_tensor_file_shapes_numpy_cannot_hold(tmp_path, shape, data, message):
    path = str(tmp_path / "t.safetensors")
    _tensor_file(path, {"w": {"dtype": "F32", "shape": shape, "data_offsets": [0, len(data)]}}, data)
    with pytest.raises(tensor_file.TensorFileError, match=f"t.safetensors: {message}"):
        tensor_file.read_tensors(path)


def test_npy_input_claiming_terabytes(tmp_path, capsys):
    path = copy_saved_model(tmp_path)
    npy = tmp_path / "huge.npy"
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776,), }"
    header += " " * (-(len(header) + 11) % 64) + "\n"
    npy.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + b"\0" * 64)
    assert cli.main(["run", path, "--input", f"x={npy}"]) == 2
    err = capsys.readouterr().err
    assert f"--input x: {npy}: the header declares (1099511627776,) float32 (4398046511104 bytes)" in err


def test_deeply_nested_state_file(tmp_path):
    (tmp_path / "checkpoint").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="checkpoint: invalid checkpoint state file: not JSON .*nested"):
        latest_checkpoint(str(tmp_path))


def test_huge_timestamp_in_state_file(tmp_path):
    (tmp_path / "checkpoint").write_text(json.dumps({
        "format": "tensorweave.checkpoint_state", "version": 1, "model_checkpoint_path": "ckpt-1",
        "all_model_checkpoint_paths": ["ckpt-1"], "all_model_checkpoint_timestamps": [10 ** 400],
        "last_preserved_timestamp": 0}))
    with pytest.raises(ValueError, match="one finite number per path"):
        latest_checkpoint(str(tmp_path))


_NUMBERS = st.one_of(st.integers(min_value=-(10 ** 500), max_value=10 ** 500),
                     st.floats(allow_nan=False, allow_infinity=False), st.booleans(), st.none(),
                     st.text(max_size=5), st.lists(st.integers(), max_size=3))


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_fuzz_numbers_in_attrs(tmp_path_factory, data):
    """Any JSON value in any attr of any node: success or a ValueError, nothing else."""
    path = copy_saved_model(tmp_path_factory.mktemp("fuzz"))
    holder = {}

    def mutate(doc):
        nodes = _nodes(doc)
        node = data.draw(st.sampled_from(nodes))
        where = data.draw(st.sampled_from(["attr", "const"]))
        value = data.draw(_NUMBERS)
        if where == "const" and node["op"] == "Const" and "tensor" in node["attrs"]["value"]:
            node["attrs"]["value"]["tensor"]["values"] = [value]
        elif node["attrs"]:
            node["attrs"][data.draw(st.sampled_from(sorted(node["attrs"])))] = value
        holder["node"] = node["name"]
    _edit(path, mutate)
    try:
        loaded = sm.load(path)
        loaded.signatures["serving_default"](x=np.ones(2, np.float32))
    except ValueError:
        pass
    except tw.errors.OpError:
        pass                       # running a valid-but-odd graph may fail in a kernel, clearly


def test_tensor_file_extent_boundary(tmp_path):
    """The largest extent NumPy can hold (2**63 - 1 bytes) loads (as an empty array); one more
    byte is the reader's error, not NumPy's."""
    path = str(tmp_path / "t.safetensors")
    _tensor_file(path, {"w": {"dtype": "U8", "shape": [2 ** 63 - 1, 0], "data_offsets": [0, 0]}})
    assert tensor_file.read_tensors(path)["w"].shape == (2 ** 63 - 1, 0)
    _tensor_file(path, {"w": {"dtype": "U8", "shape": [2 ** 63, 0], "data_offsets": [0, 0]}})
    with pytest.raises(tensor_file.TensorFileError, match="entry 'w' has shape \\[9223372036854775808, 0\\], too large"):
        tensor_file.read_tensors(path)


def test_tensor_file_header_nested_too_deeply(tmp_path):
    path = str(tmp_path / "t.safetensors")
    raw = b"[" * 100_000 + b"]" * 100_000
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
    with pytest.raises(tensor_file.TensorFileError, match="t.safetensors: header is not valid JSON \\(RecursionError"):
        tensor_file.read_metadata(path)


@pytest.mark.parametrize("raw, why", [(b"{not json", "JSONDecodeError"), (b'{"w": NaN}', "ValueError"),
                                      (b'{"w": 1e999}', "ValueError"), (b"\xff\xfe{}", "UnicodeDecodeError")])
def test_tensor_file_header_that_is_not_strict_json(tmp_path, raw, why):
    path = str(tmp_path / "t.safetensors")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
    with pytest.raises(tensor_file.TensorFileError, match=f"t.safetensors: header is not valid JSON \\({why}"):
        tensor_file.read_metadata(path)


def test_tensor_file_rank_limit_is_numpys(tmp_path):
    path = str(tmp_path / "t.safetensors")
    _tensor_file(path, {"w": {"dtype": "F32", "shape": [1] * 64, "data_offsets": [0, 4]}}, b"\0" * 4)
    assert tensor_file.read_tensors(path)["w"].ndim == 64
    _tensor_file(path, {"w": {"dtype": "F32", "shape": [1] * 65, "data_offsets": [0, 4]}}, b"\0" * 4)
    with pytest.raises(tensor_file.TensorFileError, match="rank 65 \\(at most 64"):
        tensor_file.read_tensors(path)


def test_json_file_size_is_checked_before_reading(tmp_path):
    from tensorweave.saving.validation import read_json_file
    path = tmp_path / "big.json"
    path.write_text("[" + "0," * 49 + "0]")
    with pytest.raises(LoadError, match="big.json: 101 bytes of JSON is over the limit of 10"):
        read_json_file(str(path), max_bytes=10)


def test_out_of_range_literal_is_quoted_shortened():
    text = "1" * 60 + "e999"
    with pytest.raises(LoadError, match=f"the number {'1' * 40} is out of range"):
        parse_json(f"[{text}]".encode(), "x.json")


def test_state_file_with_an_unknown_field(tmp_path):
    (tmp_path / "checkpoint").write_text(json.dumps({
        "format": "tensorweave.checkpoint_state", "version": 1, "model_checkpoint_path": "ckpt-1",
        "all_model_checkpoint_paths": ["ckpt-1"], "all_model_checkpoint_timestamps": [1.0],
        "last_preserved_timestamp": 0, "surprise": 1}))
    with pytest.raises(ValueError, match="must be an object with exactly"):
        latest_checkpoint(str(tmp_path))


def test_json_file_of_exactly_the_limit_is_read(tmp_path):
    from tensorweave.saving.validation import read_json_file
    path = tmp_path / "edge.json"
    path.write_text("[1,2,3,45]")                     # 10 bytes
    assert read_json_file(str(path), max_bytes=10) == [1, 2, 3, 45]


@pytest.mark.parametrize("pending", ['"ckpt-1"', '[""]', '["a\\u0000b"]', "[1]"])
def test_state_file_pending_deletions_are_validated(tmp_path, pending):
    (tmp_path / "checkpoint").write_text(
        '{"format": "tensorweave.checkpoint_state", "version": 1, "model_checkpoint_path": "ckpt-1", '
        '"all_model_checkpoint_paths": ["ckpt-1"], "all_model_checkpoint_timestamps": [1e300], '
        f'"last_preserved_timestamp": 0, "pending_deletions": {pending}}}')
    with pytest.raises(ValueError, match="pending_deletions must be a list of non-empty strings"):
        latest_checkpoint(str(tmp_path))
    text = (tmp_path / "checkpoint").read_text()
    (tmp_path / "checkpoint").write_text(text.replace(f'"pending_deletions": {pending}', '"pending_deletions": []'))
    assert latest_checkpoint(str(tmp_path)) is None         # valid (a timestamp of 1e300 too); no file


def test_checkpoint_state_defaults():
    from tensorweave.train._io import CheckpointState
    state = CheckpointState("ckpt-1", ["ckpt-1"])
    assert state.last_preserved_timestamp == 0.0 and state.pending_deletions == []
    assert state.all_model_checkpoint_timestamps == [0.0]
