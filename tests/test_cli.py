"""The main job (``python -m tensorweave``): graph-mode softmax regression on digits."""
import io
import re
import subprocess
import sys

import pytest

from tensorweave import cli


def test_train_prints_one_line_per_epoch_and_reaches_the_accuracy():
    out = io.StringIO()
    acc = cli.train_digits(epochs=3, batch_size=32, lr=0.5, out=out)
    lines = out.getvalue().splitlines()
    epoch_lines = [ln for ln in lines if ln.startswith("epoch")]
    assert len(epoch_lines) == 3
    assert re.match(r"epoch\s+1\s+loss \d+\.\d+\s+train accuracy 0\.\d+", epoch_lines[0])
    losses = [float(re.search(r"loss (\S+)", ln).group(1)) for ln in epoch_lines]
    assert losses[-1] < losses[0]
    assert lines[-1].startswith("test accuracy")
    assert acc >= 0.9


def test_main_defaults_to_train_and_parses_options(capsys):
    assert cli.main(["--epochs", "2", "--batch-size", "64", "--lr", "0.5"]) == 0
    text = capsys.readouterr().out
    assert text.count("\nepoch") == 2
    assert "test accuracy" in text
    with pytest.raises(SystemExit):
        cli.main(["train", "--epochs", "0"])


def test_python_dash_m_tensorweave_help():
    proc = subprocess.run([sys.executable, "-m", "tensorweave", "train", "--help"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0
    for opt in ("--epochs", "--batch-size", "--lr"):
        assert opt in proc.stdout
