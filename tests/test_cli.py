"""The ``tensorweave`` command: the Keras main job and the TF1 graph demo."""
import io
import re
import subprocess
import sys

import pytest

from tensorweave import cli
from tensorweave.examples import softmax_digits


def test_graph_demo_prints_one_line_per_epoch_and_reaches_the_accuracy():
    out = io.StringIO()
    acc = softmax_digits.train_digits(epochs=3, batch_size=32, lr=0.5, out=out)
    lines = out.getvalue().splitlines()
    epoch_lines = [ln for ln in lines if ln.startswith("epoch")]
    assert len(epoch_lines) == 3
    assert re.match(r"epoch\s+1\s+loss \d+\.\d+\s+train accuracy 0\.\d+", epoch_lines[0])
    losses = [float(re.search(r"loss (\S+)", ln).group(1)) for ln in epoch_lines]
    assert losses[-1] < losses[0]
    assert lines[-1].startswith("test accuracy")
    assert acc >= 0.9


def test_main_defaults_to_train_with_options(capsys, tmp_path):
    weights = tmp_path / "w.weights.safetensors"
    assert cli.main(["--model", "mlp", "--epochs", "1", "--batch-size", "256", "--save", str(weights)]) == 0
    text = capsys.readouterr().out
    assert 'Model: "mnist_mlp"' in text and "Total params: 669,706" in text
    assert re.search(r"\n15/15 \u2501{20} \d+s \d+m?s/step - accuracy: 0\.\d{4} - loss: \d\.\d{4} - "
                     r"val_accuracy: 0\.\d{4} - val_loss: \d\.\d{4}\n", text), text
    assert re.search(r"test accuracy 0\.\d{4}", text)
    assert weights.exists()
    with pytest.raises(SystemExit):
        cli.main(["train", "--epochs", "0"])


def test_python_dash_m_tensorweave_help():
    proc = subprocess.run([sys.executable, "-m", "tensorweave", "train", "--help"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0
    for opt in ("--model", "--epochs", "--batch-size"):
        assert opt in proc.stdout
