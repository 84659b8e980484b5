"""Loaders on hostile files: no pickle/eval/import on any load path, Lambda layers only with
safe_mode=False, every malformed file a clear ValueError before anything large is allocated,
and hypothesis fuzzers over the SavedModel, Keras and checkpoint loaders."""
import copy
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import textwrap
import zipfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorweave as tw
import tensorweave.saved_model as sm
from tensorweave import keras
from tensorweave.keras.saving import KerasLoadError, load_model
from tensorweave.saving import tensor_file
from tensorweave.saving.validation import LoadError, parse_json

_CACHE = {}


def _base_dir():
    if "dir" not in _CACHE:
        _CACHE["dir"] = tempfile.mkdtemp(prefix="tw-loader-safety-")
    return _CACHE["dir"]


@pytest.fixture(scope="module", autouse=True)
def _remove_base_dir():
    yield
    d = _CACHE.pop("dir", None)
    if d is not None:
        shutil.rmtree(d, ignore_errors=True)


def saved_model_path():
    """A small SavedModel with variables, a While, an If, a large constant and a signature."""
    path = os.path.join(_base_dir(), "sm")
    if not os.path.exists(path):
        w = tw.Variable(np.ones((3, 2), np.float32), name="w")
        table = np.arange(50, dtype=np.float32)

        @tw.function(input_signature=[tw.TensorSpec([None, 3], tw.float32, name="x")])
        def f(x):
            y = tw.matmul(x, w)
            _, y = tw.while_loop(lambda i, v: i < 2, lambda i, v: (i + 1, v * 2.0), (0, y))
            y = tw.cond(tw.reduce_sum(y) > 0, lambda: y + tw.constant(table)[:2], lambda: -y)
            return {"y": y}
        sm.save(f, path)
    return path


def keras_model():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(3, activation="relu"),
                              keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss="mse")
    model.fit(np.ones((4, 4), np.float32), np.zeros((4, 2), np.float32), epochs=1, verbose=0)
    return model


def keras_path():
    path = os.path.join(_base_dir(), "k.keras")
    if not os.path.exists(path):
        keras_model().save(path)
    return path


def _copy_saved_model(tmp_path):
    dst = str(tmp_path / "copy")
    shutil.copytree(saved_model_path(), dst)
    return dst


def _edit_json(path, fn):
    p = os.path.join(path, "saved_model.json")
    doc = json.load(open(p))
    fn(doc)
    with open(p, "w") as f:
        json.dump(doc, f)


def _nodes(doc):
    return doc["functions"][0]["graph"]["nodes"]


def _node(doc, op):
    return next(n for n in _nodes(doc) if n["op"] == op)


# ---- no pickle, no eval, no import by name ------------------------------------------------------------
PATCHED = textwrap.dedent("""
    import builtins, importlib, io, marshal, pickle, sys
    import numpy as np
    import tensorweave, tensorweave.keras, tensorweave.saved_model, tensorweave.keras.saving
    import tensorweave.commands.model_tools, tensorweave.cli
    import tensorweave.data   # loaded on first use (predict's input pipeline): installed code, imported up front
    from tensorweave.saving import saved_model as _sm
    from tensorweave.runtime import executor as _executor
    _sm.register_all_ops()

    import os, numba
    NUMBA_DIR = os.path.dirname(numba.__file__)

    def compiling_kernels():
        # numba compiling a kernel (its own imports, namedtuples, generated wrappers): code
        # of the installed packages, never text from a model file.
        f = sys._getframe(2)
        while f is not None:
            if f.f_code.co_filename.startswith(NUMBA_DIR):
                return True
            f = f.f_back
        return False

    def forbid(name, real=None):
        def f(*a, **k):
            # Python's own import machinery loads .pyc files with marshal and runs modules
            # with exec; that is the interpreter importing installed code, not the loader.
            if real is not None and sys._getframe(1).f_code.co_filename.startswith("<frozen importlib"):
                return real(*a, **k)
            if real is not None and compiling_kernels():
                return real(*a, **k)
            if name == "exec" and sys._getframe(1).f_code is _executor._sequential_runner.__code__:
                # a plan's steps as straight-line Python, made from integer slot numbers only
                # (test_executor_runner_source_holds_no_text_of_the_plan below)
                return real(*a, **k)
            raise RuntimeError("FORBIDDEN " + name)
        return f
    pickle.load = forbid("pickle.load"); pickle.loads = forbid("pickle.loads")
    pickle.Unpickler = forbid("pickle.Unpickler")
    marshal.load = forbid("marshal.load", marshal.load); marshal.loads = forbid("marshal.loads", marshal.loads)
    builtins.eval = forbid("eval", builtins.eval); builtins.exec = forbid("exec", builtins.exec)
    real_import_module = importlib.import_module
    def guarded_import(name, package=None):
        if not name.startswith("tensorweave") and not compiling_kernels():
            raise RuntimeError("FORBIDDEN import_module " + name)
        return real_import_module(name, package)
    importlib.import_module = guarded_import

    sm_path, keras_file, keras_dir, x_npy = sys.argv[1:5]
    loaded = tensorweave.saved_model.load(sm_path, verify_fingerprint=True)
    x = np.load(x_npy, allow_pickle=False)
    print("sm", float(loaded.signatures["serving_default"](x=x)["y"].numpy().sum()))
    m = tensorweave.keras.saving.load_model(keras_file)
    print("keras", m.predict(np.ones((1, 4), np.float32), verbose=0).shape)
    m2 = tensorweave.keras.saving.load_model(keras_dir)
    print("keras-dir", len(m2.weights))
    out = io.StringIO()
    tensorweave.commands.model_tools.inspect_model(sm_path, out)
    tensorweave.commands.model_tools.inspect_model(keras_file, out)
    print("inspect", "Fingerprint" in out.getvalue() or "fingerprint" in out.getvalue())
    print("run", tensorweave.cli.main(["run", sm_path, "--input", "x=" + x_npy]))
""")


def test_loading_uses_no_pickle_marshal_eval_or_imports(tmp_path):
    model = keras_model()
    model.save(str(tmp_path / "kdir"))
    np.save(tmp_path / "x.npy", np.ones((2, 3), np.float32))
    proc = subprocess.run([sys.executable, "-c", PATCHED, saved_model_path(), keras_path(), str(tmp_path / "kdir"),
                           str(tmp_path / "x.npy")], capture_output=True, text=True, timeout=180)
    assert "FORBIDDEN" not in proc.stdout + proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("sm ") and lines[1] == "keras (1, 2)" and lines[2] == "keras-dir 4"
    assert "inspect True" in lines and lines[-1] == "run 0"


def test_executor_runner_source_holds_no_text_of_the_plan():
    """The one ``exec`` a loaded model's call reaches is the executor's runner: its source is made of
    the plan's integer slot numbers only, so a crafted plan (a slot that is not an int, a label)
    cannot put text into it."""
    from types import SimpleNamespace

    from tensorweave.runtime import executor
    step = SimpleNamespace(fn=abs, ins=["0); import os; os.system('x'"], outs=1, single=True)
    plan = SimpleNamespace(steps=[step], feed_slots=[0], fetch_slots=[1], frees=[[]], initial=[None, None],
                           label="x\nimport os")
    with pytest.raises(TypeError):
        executor._sequential_runner(plan)
    step.ins = [0]
    run = executor._sequential_runner(plan)
    assert run([-3.0]) == [3.0]


def test_no_pickle_in_the_loader_sources():
    import tensorweave.commands.model_tools as t1
    import tensorweave.keras.saving as t2
    import tensorweave.saving.graph_io as t3
    import tensorweave.saving.saved_model as t4
    import tensorweave.saving.validation as t5
    for mod in (t1, t2, t3, t4, t5, tensor_file):
        src = open(mod.__file__).read()
        for word in ("import pickle", "cloudpickle", "marshal", "eval(", "exec(", "allow_pickle=True"):
            assert word not in src, (mod.__name__, word)


# ---- Lambda layers and safe_mode -------------------------------------------------------------------------
def _lambda_model(fn):
    return keras.Sequential([keras.Input(shape=(3,)), keras.layers.Lambda(fn, name="lam"), keras.layers.Dense(2)])


@pytest.mark.parametrize("container", ["file.keras", "dir"])
def test_lambda_layers_need_safe_mode_false(tmp_path, container):
    model = _lambda_model(keras.activations.relu)
    path = str(tmp_path / container)
    model.save(path)
    with pytest.raises(KerasLoadError, match=r"layer 'lam' is a Lambda layer.*safe_mode=False"):
        load_model(path)
    loaded = load_model(path, safe_mode=False)     # imports keras.activations by name
    x = np.array([[-1.0, 0.5, 2.0]], np.float32)
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))
    if container == "dir":
        # the SavedModel's graph runs without any Python function at all
        out = sm.load(path).signatures["serving_default"](x)
        np.testing.assert_array_equal(list(out.values())[0].numpy(), model.predict(x, verbose=0))


def test_lambda_of_a_lambda_needs_custom_objects(tmp_path):
    model = _lambda_model(lambda t: t * 3.0)
    path = str(tmp_path / "m.keras")
    model.save(path)
    with pytest.raises(KerasLoadError, match="safe_mode"):
        load_model(path)
    with pytest.raises(KerasLoadError, match=r"cannot be imported by name; pass it in custom_objects"):
        load_model(path, safe_mode=False)
    loaded = load_model(path, safe_mode=False, custom_objects={"lam": lambda t: t * 3.0})
    x = np.ones((1, 3), np.float32)
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))


def test_op_layers_from_keras_tensor_arithmetic_are_lambda_like(tmp_path):
    a = keras.Input(shape=(3,))
    b = keras.layers.Dense(3)(a)
    model = keras.Model(a, keras.layers.Dense(1)(a + b))
    path = str(tmp_path / "op.keras")
    model.save(path)
    with pytest.raises(KerasLoadError, match="OpLambda layer.*safe_mode"):
        load_model(path)
    loaded = load_model(path, safe_mode=False)
    x = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))


def test_safe_mode_false_imports_only_what_is_named(tmp_path):
    model = _lambda_model(keras.activations.relu)
    path = str(tmp_path / "m.keras")
    model.save(path)
    data = _read_zip(path)
    cfg = json.loads(data["config.json"])
    cfg["config"]["layers"][0]["config"]["function"] = {"module": "os", "qualname": "no_such_function"}
    _write_zip(path, dict(data, **{"config.json": json.dumps(cfg)}))
    with pytest.raises(KerasLoadError, match="safe_mode"):
        load_model(path)
    with pytest.raises(KerasLoadError, match="cannot import os.no_such_function"):
        load_model(path, safe_mode=False)


# ---- SavedModel: crafted malformed files ------------------------------------------------------------------
def _mutations():
    def unknown_op(d):
        _node(d, "MatMul")["op"] = "EvilOp"

    def later_input(d):
        _node(d, "MatMul")["inputs"][0] = _nodes(d)[-1]["name"] + ":0"

    def bad_index(d):
        _node(d, "MatMul")["inputs"][0] = "x:7"

    def wrong_kind(d):
        _node(d, "Placeholder")["attrs"]["shape"] = {"dtype": "float32"}

    def unknown_dtype(d):
        _node(d, "Placeholder")["attrs"]["dtype"] = {"dtype": "float128"}

    def absurd_shape(d):
        _node(d, "Placeholder")["attrs"]["shape"] = {"shape": [2 ** 62, 3]}

    def extra_attr(d):
        _node(d, "MatMul")["attrs"]["evil"] = 1

    def private_attr(d):
        _node(d, "If")["attrs"]["_then_fn"] = "os.system"

    def pickle_tag(d):
        _node(d, "MatMul")["attrs"]["transpose_a"] = {"pickle": "gASVAAAA"}

    def variable_elsewhere(d):
        _node(d, "Placeholder")["attrs"]["node_name"] = {"variable": 0}

    def function_elsewhere(d):
        _node(d, "MatMul")["attrs"]["transpose_b"] = _node(d, "If")["attrs"]["_then"]

    def bad_capture_index(d):
        _node(d, "If")["attrs"]["_then_idx"] = [99]

    def version(d):
        d["version"] = 99

    def asset_escape(d):
        d["assets"] = {"vocab": "../../etc/passwd"}

    def signature_index(d):
        d["signatures"]["serving_default"]["function"] = 5

    def variable_shape(d):
        d["variables"][0]["shape"] = [2 ** 50]

    def inline_tensor_size(d):
        _node(d, "Const")["attrs"]["value"] = {"tensor": {"dtype": "float32", "shape": [10 ** 6], "values": [1.0]}}

    def dup_node(d):
        _nodes(d).append(copy.deepcopy(_nodes(d)[0]))

    def matmul_inputs(n):
        def edit(d):
            mm = _node(d, "MatMul")
            mm["inputs"] = (mm["inputs"] * 2)[:n]
        return edit

    def inline_shape(shape):
        def edit(d):
            _node(d, "Const")["attrs"]["value"] = {"tensor": {"dtype": "float32", "shape": shape, "values": [1.0]}}
        return edit

    def structure(value):
        def edit(d):
            d["functions"][0]["structured_outputs"] = value
        return edit

    return {"unknown op type 'EvilOp'": unknown_op, "not defined before this node": later_input,
            "has only 1 output": bad_index, "expects \\['shape'\\]": wrong_kind, "unknown dtype 'float128'": unknown_dtype,
            "invalid dimension": absurd_shape, "takes no attr 'evil'": extra_attr, "has no saved attr '_then_fn'": private_attr,
            "unknown attr value tag 'pickle'": pickle_tag, "variable is not allowed": variable_elsewhere,
            "value of kind 'function'": function_elsewhere, "out of range": bad_capture_index,
            "version 99 is not supported": version, "not a plain file name": asset_escape,
            "function index = 5": signature_index, "invalid dimension 1125899906842624": variable_shape,
            "at most 4096 elements": inline_tensor_size, "duplicate node name": dup_node,
            # an inline constant's shape is fully known
            "tensor shape must be fully known": inline_shape(None),
            "tensor shape \\[None\\] has an invalid dimension None \\(dimensions are integers in \\[0, [0-9]+\\]\\)":
                inline_shape([None]),
            # arity of a Python kernel (MatMul's takes a, b and its attrs)
            "has 3 inputs, but op MatMul takes 2$": matmul_inputs(3),
            "has 1 inputs, but op MatMul takes 2$": matmul_inputs(1),
            # structured outputs: keys as JSON allows them in dicts of tensors, indices in range
            "string or int key$": structure({"dict": [[1.5, {"tensor": 0}]]}),
            "with a string or int key": structure({"dict": [[True, {"tensor": 0}]]}),
            "duplicate key 'y'": structure({"dict": [["y", {"tensor": 0}], ["y", {"tensor": 0}]]}),
            "output index = 1 is outside \\[0, 0\\]": structure({"list": [{"tensor": 1}]}),
            "'value' must be a JSON scalar": structure({"tuple": [{"value": [1]}]}),
            "unknown structured_outputs tag 'set'": structure({"set": []})}


@pytest.mark.parametrize("message", sorted(_mutations()))
def test_saved_model_rejects_crafted_json(tmp_path, message):
    path = _copy_saved_model(tmp_path)
    _edit_json(path, _mutations()[message])
    with pytest.raises(LoadError, match=message):
        sm.load(path)


@pytest.mark.parametrize("text, message", [
    (b"{not json", "not valid JSON"), (b'{"format": NaN}', "NaN is not allowed"),
    (b"[" * 100000 + b"]" * 100000, "nested too deeply|deeper than"), (b"\xff\xfe", "not valid JSON"),
    (b"[]", "must be an object"), (b'{"format": "tensorweave.saved_model", "version": 1}', "missing field"),
])
def test_saved_model_rejects_bad_json_text(tmp_path, text, message):
    path = _copy_saved_model(tmp_path)
    with open(os.path.join(path, "saved_model.json"), "wb") as f:
        f.write(text)
    with pytest.raises(LoadError, match=message):
        sm.load(path)
    with pytest.raises(LoadError, match="over the limit"):
        parse_json(b"[1, 2, 3]", "small.json", max_bytes=4)


def _raw_tensor_file(header, data=b""):
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data


@pytest.mark.parametrize("payload, message", [
    (b"", "truncated"),
    (struct.pack("<Q", 1 << 40) + b"{}", "header claims"),
    (_raw_tensor_file({"variables/0": {"dtype": "F32", "shape": [3, 2], "data_offsets": [0, 24]}}, b"\0" * 8),
     "outside the 8 data bytes"),
    (_raw_tensor_file({"variables/0": {"dtype": "F32", "shape": [3, 2], "data_offsets": [0, 24]},
                       "constants/0": {"dtype": "F32", "shape": [50], "data_offsets": [8, 208]}}, b"\0" * 208),
     "overlap"),
    (_raw_tensor_file({"variables/0": {"dtype": "F128", "shape": [3, 2], "data_offsets": [0, 24]}}, b"\0" * 24),
     "unknown dtype"),
    (_raw_tensor_file({"variables/0": {"dtype": "F32", "shape": [2 ** 62, 2 ** 62], "data_offsets": [0, 24]}},
                      b"\0" * 24), "declares shape"),
    (_raw_tensor_file({"variables/0": {"dtype": "F32", "shape": [-3, 2], "data_offsets": [0, 24]}}, b"\0" * 24),
     "invalid shape"),
])
def test_saved_model_rejects_bad_tensor_files(tmp_path, payload, message):
    path = _copy_saved_model(tmp_path)
    with open(os.path.join(path, "variables", "variables.safetensors"), "wb") as f:
        f.write(payload)
    with pytest.raises(ValueError, match=message):
        sm.load(path)


def test_saved_model_rejects_tensors_that_disagree_with_the_json(tmp_path):
    path = _copy_saved_model(tmp_path)
    p = os.path.join(path, "variables", "variables.safetensors")
    tensors = tensor_file.read_tensors(p)
    tensors["variables/0"] = np.zeros((2, 3), np.float32)
    tensor_file.write_tensors(p, tensors)
    with pytest.raises(LoadError, match="has shape \\[2, 3\\]"):
        sm.load(path)
    tensors["variables/0"] = np.zeros((3, 2), np.float32)
    tensors["evil"] = np.zeros(1, np.float32)
    tensor_file.write_tensors(p, tensors)
    with pytest.raises(LoadError, match="not declared"):
        sm.load(path)


# ---- Keras files: crafted malformed files -----------------------------------------------------------------
def _read_zip(path):
    with zipfile.ZipFile(path) as z:
        return {n: z.read(n) for n in z.namelist()}


def _write_zip(path, members, compression=zipfile.ZIP_STORED):
    with zipfile.ZipFile(path, "w", compression=compression) as z:
        for n, data in members.items():
            z.writestr(n, data)


def test_keras_zip_members_are_validated(tmp_path):
    data = _read_zip(keras_path())
    p = str(tmp_path / "m.keras")
    _write_zip(p, dict(data, **{"../../evil.py": b"import os"}))
    with pytest.raises(KerasLoadError, match="unexpected member"):
        load_model(p)
    _write_zip(p, {k: v for k, v in data.items() if k != "config.json"})
    with pytest.raises(KerasLoadError, match="missing member"):
        load_model(p)
    _write_zip(p, dict(data, **{"model.weights.safetensors": b"\0" * (8 << 20)}), zipfile.ZIP_DEFLATED)
    with pytest.raises(KerasLoadError, match="zip bomb"):
        load_model(p)
    whole = open(keras_path(), "rb").read()
    open(p, "wb").write(whole[: len(whole) // 2])
    with pytest.raises(KerasLoadError, match="not a .keras file|corrupt|truncated|not a valid"):
        load_model(p)
    open(p, "wb").write(b"PK\x03\x04" + b"\0" * 100)
    with pytest.raises(KerasLoadError):
        load_model(p)


def test_keras_config_asking_for_huge_weights_fails_before_allocating(tmp_path):
    data = _read_zip(keras_path())
    cfg = json.loads(data["config.json"])
    cfg["config"]["layers"][0]["config"]["units"] = 10 ** 9      # a 16 GB kernel
    p = str(tmp_path / "huge.keras")
    _write_zip(p, dict(data, **{"config.json": json.dumps(cfg)}))
    with pytest.raises(KerasLoadError, match="more than the saved weights hold"):
        load_model(p)


def test_keras_weights_that_do_not_match_are_rejected(tmp_path):
    data = _read_zip(keras_path())
    raw = io.BytesIO(data["model.weights.safetensors"])
    tmp = str(tmp_path / "w.safetensors")
    open(tmp, "wb").write(raw.getvalue())
    tensors = tensor_file.read_tensors(tmp)
    tensors["weights/layers/1/vars/0"] = np.zeros((4, 2), np.float32)    # was (4, 3)
    p = str(tmp_path / "bad.keras")
    _write_zip(p, dict(data, **{"model.weights.safetensors": tensor_file.encode(tensors)}))
    with pytest.raises(KerasLoadError, match="in the model but float32 \\(4, 2\\) in the file|float32 \\(4, 2\\)"):
        load_model(p)
    cfg = json.loads(data["config.json"])
    cfg["class_name"] = "os.system"
    _write_zip(p, dict(data, **{"config.json": json.dumps(cfg)}))
    with pytest.raises(KerasLoadError, match="not a valid name|Unknown layer class"):
        load_model(p)


# ---- fuzzers ------------------------------------------------------------------------------------------------
def _paths(x, prefix=()):
    out = [prefix]
    if isinstance(x, dict):
        for k, v in x.items():
            out.extend(_paths(v, prefix + (k,)))
    elif isinstance(x, list):
        for i, v in enumerate(x):
            out.extend(_paths(v, prefix + (i,)))
    return out


def _replace(doc, path, value, delete):
    if not path:
        return value
    doc = copy.deepcopy(doc)
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return doc


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2 ** 70, 2 ** 70) | st.sampled_from([0, 1, -1, 2 ** 31, 2 ** 63])
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12)
    | st.sampled_from(["float32", "int64", "Placeholder", "MatMul", "If", "StatefulWhile", "VarHandleOp", "Const",
                       "x:0", "MatMul:0", "variables/0", "constants/0", "Lambda", "Dense", "Sequential"]),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(
        st.sampled_from(["tuple", "dtype", "shape", "tensor", "tensor_ref", "function", "variable", "slice", "x",
                         "class_name", "config", "name", "units"]), children, max_size=2),
    max_leaves=8)

FUZZ = settings(max_examples=120, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _mutate(doc, data):
    """One to three random edits: a value anywhere in the JSON replaced or deleted."""
    for _ in range(data.draw(st.integers(1, 3))):
        paths = _paths(doc)
        path = paths[data.draw(st.integers(0, len(paths) - 1))]
        doc = _replace(doc, path, data.draw(JSON_VALUES), data.draw(st.booleans()) and bool(path))
    return doc


@FUZZ
@given(data=st.data())
def test_fuzz_saved_model_json(data):
    base = saved_model_path()
    mutated = _mutate(json.load(open(os.path.join(base, "saved_model.json"))), data)
    d = tempfile.mkdtemp(dir=_base_dir())
    try:
        os.makedirs(os.path.join(d, "variables"))
        os.link(os.path.join(base, "variables", "variables.safetensors"),
                os.path.join(d, "variables", "variables.safetensors"))
        with open(os.path.join(d, "saved_model.json"), "w") as f:
            json.dump(mutated, f)
        try:
            sm.load(d)
        except ValueError:
            pass
    finally:
        shutil.rmtree(d)


def _flip(blob, data):
    blob = bytearray(blob)
    kind = data.draw(st.sampled_from(["flip", "truncate", "insert", "set"]))
    # A position drawn independently of the length keeps the draws reproducible for files whose
    # length varies between runs (a state file with timestamps).
    pos = data.draw(st.integers(0, 1 << 24)) % max(len(blob), 1)
    if kind == "flip" and blob:
        blob[pos] ^= data.draw(st.integers(1, 255))
    elif kind == "truncate":
        del blob[pos:]
    elif kind == "insert":
        blob[pos:pos] = data.draw(st.binary(min_size=1, max_size=16))
    elif blob:
        blob[pos:pos + 8] = struct.pack("<Q", data.draw(st.sampled_from([0, 7, 2 ** 31, 2 ** 63, len(blob)])))
    return bytes(blob)


@FUZZ
@given(data=st.data())
def test_fuzz_saved_model_bytes(data):
    base = saved_model_path()
    d = tempfile.mkdtemp(dir=_base_dir())
    try:
        shutil.copytree(base, os.path.join(d, "m"))
        target = data.draw(st.sampled_from(["saved_model.json", os.path.join("variables", "variables.safetensors")]))
        p = os.path.join(d, "m", target)
        blob = open(p, "rb").read()
        open(p, "wb").write(_flip(blob, data))
        try:
            sm.load(os.path.join(d, "m"))
        except ValueError:
            pass
    finally:
        shutil.rmtree(d)


@FUZZ
@given(data=st.data())
def test_fuzz_keras_config(data):
    members = _read_zip(keras_path())
    mutated = _mutate(json.loads(members["config.json"]), data)
    fd, p = tempfile.mkstemp(suffix=".keras", dir=_base_dir())
    os.close(fd)
    try:
        _write_zip(p, dict(members, **{"config.json": json.dumps(mutated)}))
        try:
            load_model(p)
        except ValueError:
            pass
    finally:
        os.remove(p)


@FUZZ
@given(data=st.data())
def test_fuzz_keras_bytes(data):
    members = _read_zip(keras_path())
    fd, p = tempfile.mkstemp(suffix=".keras", dir=_base_dir())
    os.close(fd)
    try:
        if data.draw(st.booleans()):
            name = data.draw(st.sampled_from(sorted(members)))
            _write_zip(p, dict(members, **{name: _flip(members[name], data)}))
        else:
            open(p, "wb").write(_flip(open(keras_path(), "rb").read(), data))
        try:
            load_model(p)
        except ValueError:
            pass
    finally:
        os.remove(p)


def _checkpoint_api():
    try:
        import tensorweave.train as train
    except ImportError:
        return None
    return getattr(train, "Checkpoint", None)


@pytest.mark.skipif(_checkpoint_api() is None, reason="tw.train.Checkpoint is not available yet")
@FUZZ
@given(data=st.data())
def test_fuzz_checkpoint_files(data):
    import warnings
    from tensorweave.train import latest_checkpoint
    Checkpoint = _checkpoint_api()
    d = tempfile.mkdtemp(dir=_base_dir())
    try:
        v = tw.Variable(np.arange(6, dtype=np.float32).reshape(2, 3))
        step = tw.Variable(3, dtype=tw.int64)
        prefix = Checkpoint(v=v, step=step).save(os.path.join(d, "ckpt"))
        files = sorted((os.path.join(r, f) for r, _, fs in os.walk(d) for f in fs), key=os.path.basename)
        target = data.draw(st.sampled_from(files))     # the tensor file or the "checkpoint" state file
        blob = open(target, "rb").read()
        open(target, "wb").write(_flip(blob, data))
        fresh = Checkpoint(v=tw.Variable(np.zeros((2, 3), np.float32)), step=tw.Variable(0, dtype=tw.int64))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")     # "values not used" when a name was flipped
            for load in (lambda: latest_checkpoint(d), lambda: fresh.restore(prefix)):
                try:
                    load()
                except ValueError:
                    pass
    finally:
        shutil.rmtree(d)


def test_tensor_file_entries_out_of_offset_order(tmp_path):
    """Other writers may list entries in any order: the overlap check sorts spans by offset, so
    a valid file with its header out of offset order loads, and an overlap is still found."""
    a, b, c = (np.arange(3, dtype=np.float32) + k for k in (0, 10, 20))
    data = b.tobytes() + c.tobytes() + a.tobytes()        # a is stored last, listed first
    header = {"a": {"dtype": "F32", "shape": [3], "data_offsets": [24, 36]},
              "c": {"dtype": "F32", "shape": [3], "data_offsets": [12, 24]},
              "b": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]}}
    path = tmp_path / "t.safetensors"
    path.write_bytes(_raw_tensor_file(header, data))
    out = tensor_file.read_tensors(str(path))
    for name, want in (("a", a), ("b", b), ("c", c)):
        np.testing.assert_array_equal(out[name], want)
    header["b"]["data_offsets"] = [20, 32]                   # overlaps c and a, listed between them
    header["b"]["shape"] = [3]
    path.write_bytes(_raw_tensor_file(header, data))
    with pytest.raises(tensor_file.TensorFileError, match="overlap"):
        tensor_file.read_tensors(str(path))
