"""Nothing of a SavedModel may be a symbolic link: a linked ``variables/`` directory or
``saved_model.json`` could make the loader, or the fingerprint, read any file of the
machine (``/proc/kcore`` ...)."""
import os
import shutil

import pytest

import tensorweave.saved_model as sm
from .adversarial_helpers import copy_saved_model
from tensorweave.keras.saving import KerasLoadError, load_model
from tensorweave.saving import saved_model as sm_impl
from tensorweave.saving.validation import LoadError


def _link_out(path, name, tmp_path):
    """Moves ``name`` out of the export and leaves a symbolic link to it in its place."""
    target = str(tmp_path / ("outside-" + name.replace("/", "_")))
    shutil.move(os.path.join(path, name), target)
    os.symlink(target, os.path.join(path, name))


@pytest.mark.parametrize("name", ["variables", "saved_model.json", "variables/variables.safetensors",
                                  "fingerprint.json"])
def test_links_out_of_the_export_are_refused(tmp_path, name):
    path = copy_saved_model(tmp_path)
    _link_out(path, name, tmp_path)
    with pytest.raises(LoadError, match=f"{name} is .*a symbolic link"):
        sm.load(path, verify_fingerprint=True)
    with pytest.raises(LoadError, match="symbolic link"):
        sm_impl.read_info(path)


def test_fingerprint_does_not_follow_a_linked_directory(tmp_path):
    path = copy_saved_model(tmp_path)
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "variables.safetensors").write_bytes(b"not yours")
    shutil.rmtree(os.path.join(path, "variables"))
    os.symlink(str(secret), os.path.join(path, "variables"))
    with pytest.raises(LoadError, match=r"variables is a symbolic link \(reading variables/variables.safetensors\)"):
        sm_impl.fingerprint_of(path)


@pytest.mark.parametrize("name, reading", [
    ("saved_model.json", ""), ("variables/variables.safetensors", ""),
    ("variables", " \\(reading variables/variables.safetensors\\)")])
def test_the_link_is_named_with_what_was_being_read(tmp_path, name, reading):
    path = copy_saved_model(tmp_path)
    _link_out(path, name, tmp_path)
    with pytest.raises(LoadError, match=f"^{path}: {name} is a symbolic link{reading}; the files of a SavedModel "
                                        "must be inside its directory$"):
        sm_impl.fingerprint_of(path)


def test_keras_load_of_a_saved_model_refuses_links(tmp_path):
    from tensorweave import keras
    model = keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(2)])
    path = str(tmp_path / "kdir")
    model.save(path)
    _link_out(path, "variables", tmp_path)
    with pytest.raises(KerasLoadError, match="symbolic link"):
        load_model(path)


def test_the_export_directory_itself_may_be_a_link(tmp_path):
    # The user chose that link; only what is inside the export is the file's to decide.
    path = copy_saved_model(tmp_path)
    link = str(tmp_path / "link")
    os.symlink(path, link)
    assert sorted(sm.load(link).signatures) == ["serving_default"]
