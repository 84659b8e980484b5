"""``tensorweave inspect`` and ``tensorweave run`` on SavedModels and .keras files."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import tensorweave as tw
import tensorweave.saved_model as sm
from tensorweave import cli, keras


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    w = tw.Variable(np.arange(12, dtype=np.float32).reshape(3, 4), name="dense/kernel")

    class Net:
        def __init__(self):
            self.w = w

        @tw.function(input_signature=[tw.TensorSpec([None, 3], tw.float32, name="x"),
                                      tw.TensorSpec([], tw.int32, name="k")])
        def __call__(self, x, k):
            y = tw.matmul(x, self.w)
            return {"y": y, "top": tw.math.top_k(y, k=2).values * tw.cast(k, tw.float32)}

        @tw.function(input_signature=[tw.TensorSpec([None, 3], tw.float32, name="x")])
        def double(self, x):
            return {"d": x * 2.0}

    net = Net()
    path = str(d / "net")
    sm.save(net, path, signatures={"serving_default": net.__call__, "double": net.double})
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input(shape=(3,), name="feat"), keras.layers.Dense(2, name="out")])
    model.compile(optimizer="adam", loss="mse")
    model.fit(np.ones((4, 3), np.float32), np.zeros((4, 2), np.float32), epochs=1, verbose=0)
    kpath = str(d / "model.keras")
    model.save(kpath)
    np.save(d / "x.npy", np.array([[1.0, 0.0, 2.0], [0.5, 0.5, 0.5]], np.float32))
    np.save(d / "k.npy", np.array(3, np.int32))
    np.save(d / "obj.npy", np.array([{"evil": 1}], dtype=object), allow_pickle=True)
    return {"dir": d, "sm": path, "keras": kpath, "net": net, "model": model}


def test_inspect_saved_model(models, capsys):
    assert cli.main(["inspect", models["sm"]]) == 0
    out = capsys.readouterr().out
    assert re.search(r"fingerprint sha256:[0-9a-f]{64} \(verified\)", out)
    assert re.search(r"serving_default:\n    inputs:\n      k\s+int32\s+\[\]\n      x\s+float32\s+\[\?, 3\]|"
                     r"serving_default:\n    inputs:\n      x\s+float32\s+\[\?, 3\]\n      k\s+int32\s+\[\]", out), out
    assert re.search(r"outputs:\n\s+top\s+float32\s+\[\?, 2\]\n\s+y\s+float32\s+\[\?, 4\]", out), out
    assert "double:" in out and re.search(r"d\s+float32\s+\[\?, 3\]", out)
    assert re.search(r"MatMul\s+1", out) and re.search(r"TopKV2\s+1", out)
    assert re.search(r"dense/kernel:0\s+float32\s+\[3, 4\]\s+48 B\s+trainable", out)
    assert "total: 48 bytes" in out


def test_inspect_keras_file_and_fingerprint_mismatch(models, capsys, tmp_path):
    assert cli.main(["inspect", models["keras"]]) == 0
    out = capsys.readouterr().out
    assert 'Model: Sequential "' in out and "Compiled: optimizer Adam, loss 'mse'" in out
    assert re.search(r"layers/1/vars/0\s+float32\s+\[3, 2\]\s+24 B", out), out
    assert "Optimizer state: 6 variables" in out
    import shutil
    bad = str(tmp_path / "bad")
    shutil.copytree(models["sm"], bad)
    with open(os.path.join(bad, "variables", "variables.safetensors"), "r+b") as f:
        f.seek(-1, 2)
        f.write(b"\x7f")
    assert cli.main(["inspect", bad]) == 0
    assert "MISMATCH" in capsys.readouterr().out


def test_run_prints_outputs(models, capsys):
    d = models["dir"]
    assert cli.main(["run", models["sm"], "--input", f"x={d / 'x.npy'}", "--input", f"k={d / 'k.npy'}"]) == 0
    out = capsys.readouterr().out
    x = np.load(d / "x.npy")
    y = x @ models["net"].w.numpy()
    assert "y: shape (2, 4) float32" in out and "top: shape (2, 2) float32" in out
    assert np.array2string(y, threshold=20, edgeitems=3, max_line_width=100).splitlines()[0] in out
    assert cli.main(["run", models["sm"], "--signature", "double", "--input", f"x={d / 'x.npy'}"]) == 0
    assert "d: shape (2, 3) float32" in capsys.readouterr().out
    assert cli.main(["run", models["keras"], "--input", f"feat={d / 'x.npy'}"]) == 0
    out = capsys.readouterr().out
    pred = models["model"].predict(x, verbose=0)
    assert "out: shape (2, 2) float32" in out and f"{pred.min():.6g}" in out


def test_run_errors_are_clear(models, capsys):
    d = models["dir"]
    assert cli.main(["run", models["sm"], "--input", f"x={d / 'x.npy'}"]) == 2
    assert "missing ['k']" in capsys.readouterr().err
    assert cli.main(["run", models["sm"], "--signature", "nope", "--input", f"x={d / 'x.npy'}"]) == 2
    assert "no signature 'nope'" in capsys.readouterr().err
    assert cli.main(["run", models["sm"], "--input", f"x={d / 'obj.npy'}", "--input", f"k={d / 'k.npy'}"]) == 2
    assert "Object arrays cannot be loaded when allow_pickle=False" in capsys.readouterr().err
    assert cli.main(["inspect", str(d / "missing")]) == 2
    assert "not a SavedModel directory or a .keras file" in capsys.readouterr().err
    assert cli.main(["run", models["sm"], "--input", "x"]) == 2
    assert "expected NAME=FILE.npy" in capsys.readouterr().err


def test_commands_via_subprocess(models):
    d = models["dir"]
    proc = subprocess.run([sys.executable, "-m", "tensorweave", "inspect", models["sm"]], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and "Signatures (2):" in proc.stdout, proc.stderr
    proc = subprocess.run([sys.executable, "-m", "tensorweave", "run", models["sm"],
                           "--input", f"x={d / 'x.npy'}", "--input", f"k={d / 'k.npy'}"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "top: shape (2, 2) float32" in proc.stdout, proc.stderr
    proc = subprocess.run([sys.executable, "-m", "tensorweave", "run", str(d / "missing")], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and "tensorweave: error:" in proc.stderr
    help_text = subprocess.run([sys.executable, "-m", "tensorweave", "--help"], capture_output=True, text=True,
                               timeout=120).stdout
    assert "inspect" in help_text and "run" in help_text
