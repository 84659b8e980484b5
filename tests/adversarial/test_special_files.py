"""Loaders refuse anything that is not a regular file (a FIFO would block them forever, a
device would feed them without end, a directory is not a file), with an error naming it."""
import os

import numpy as np
import pytest

import tensorweave as tw
import tensorweave.saved_model as sm
from .adversarial_helpers import copy_saved_model, keras_file
from tensorweave import cli
from tensorweave.keras.saving import KerasLoadError, load_model
from tensorweave.saving import tensor_file
from tensorweave.saving.validation import LoadError, read_json_file
from tensorweave.train import Checkpoint, CheckpointManager, latest_checkpoint

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")


def _fifo(path):
    if os.path.lexists(path):
        os.remove(path)
    os.mkfifo(path)
    return path


def test_inspect_refuses_a_fifo_tensor_file(tmp_path, capsys):
    path = copy_saved_model(tmp_path)
    _fifo(os.path.join(path, "variables", "variables.safetensors"))
    assert cli.main(["inspect", path]) == 2
    err = capsys.readouterr().err
    assert "variables.safetensors: is a FIFO (named pipe), not a regular file" in err


@pytest.mark.parametrize("name", ["saved_model.json", "fingerprint.json", "variables/variables.safetensors"])
def test_saved_model_load_refuses_fifos(tmp_path, name):
    path = copy_saved_model(tmp_path)
    _fifo(os.path.join(path, *name.split("/")))
    with pytest.raises(ValueError, match="FIFO"):
        sm.load(path, verify_fingerprint=True)


def test_checkpoint_state_file_fifo(tmp_path):
    _fifo(str(tmp_path / "checkpoint"))
    with pytest.raises(ValueError, match="checkpoint: .*FIFO"):
        latest_checkpoint(str(tmp_path))
    with pytest.raises(ValueError, match="FIFO"):
        CheckpointManager(Checkpoint(v=tw.Variable(1.0)), str(tmp_path))


def test_checkpoint_file_fifo(tmp_path):
    _fifo(str(tmp_path / "ckpt-1.safetensors"))
    with pytest.raises(ValueError, match="FIFO"):
        Checkpoint(v=tw.Variable(1.0)).restore(str(tmp_path / "ckpt-1"))


def test_keras_file_fifo(tmp_path, capsys):
    path = _fifo(str(tmp_path / "m.keras"))
    with pytest.raises(KerasLoadError, match="FIFO"):
        load_model(path)
    assert cli.main(["inspect", path]) == 2
    assert "FIFO" in capsys.readouterr().err


def test_npy_input_fifo(tmp_path, capsys):
    path = copy_saved_model(tmp_path)
    fifo = _fifo(str(tmp_path / "x.npy"))
    assert cli.main(["run", path, "--input", f"x={fifo}"]) == 2
    assert "FIFO" in capsys.readouterr().err


@pytest.mark.parametrize("reader", [read_json_file, tensor_file.read_tensors, tensor_file.read_metadata])
def test_devices_and_directories_are_refused(tmp_path, reader):
    for path, kind in (("/dev/zero", "a device"), (str(tmp_path), "a directory")):
        if not os.path.exists(path):
            continue
        with pytest.raises(ValueError, match=f"is {kind}, not a regular file"):
            reader(path)


def test_a_regular_file_still_loads(tmp_path):
    path = copy_saved_model(tmp_path)
    loaded = sm.load(path, verify_fingerprint=True)
    assert loaded.signatures["serving_default"](x=np.array([3.0], np.float32))["y"].numpy().tolist() == [7.5]
    assert isinstance(load_model(keras_file(tmp_path)), tw.keras.Model)
    with pytest.raises(LoadError):
        read_json_file(str(tmp_path / "missing.json"))
