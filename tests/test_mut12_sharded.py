"""Sharded checkpoints of global variables (train/_sharded.py): an index and an object graph that
disagree are refused with errors naming what differs (mutation testing, issue 12: the branches
of ``Source`` that no test reached)."""
import json
import os
import re

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core import errors
from tensorweave.train import Checkpoint

TWO = tw.placement("cpu", ranks=[0, 1])
S0 = tw.sbp.split(0)


def _saved(tmp_path, name="c"):
    w = tw.Variable(np.arange(6.0, dtype=np.float32).reshape(3, 2), placement=TWO, sbp=S0)
    prefix = Checkpoint(w=w).write(str(tmp_path / name))
    return prefix, os.path.join(prefix + ".sharded", "index.json")


def _edit_graph(index_path, edit):
    index = json.loads(open(index_path).read())
    graph = json.loads(index["metadata"]["object_graph"])
    edit(graph)
    index["metadata"]["object_graph"] = json.dumps(graph)
    open(index_path, "w").write(json.dumps(index))


def _target():
    return tw.Variable(np.zeros((3, 2), np.float32), placement=TWO, sbp=S0)


@pytest.mark.parametrize("change", ["graph names another tensor", "index has one more", "index has four more"])
def test_index_and_object_graph_with_different_tensors_are_refused_naming_them(tmp_path, change):
    prefix, index_path = _saved(tmp_path)
    if change == "graph names another tensor":    # consistent in itself, but its tensor is "zz", the index's "w"
        def edit(graph):
            graph["crc32"]["zz"] = graph["crc32"].pop("w")
            graph["nodes"][1]["tensor"] = "zz"
        _edit_graph(index_path, edit)
        named = "['w', 'zz']"
    else:
        index = json.loads(open(index_path).read())
        extra = ["ghost"] if change == "index has one more" else ["g0", "g1", "g2", "g3"]
        for key in extra:
            index["variables"][key] = index["variables"]["w"]
        open(index_path, "w").write(json.dumps(index))
        named = str(extra[:3])                     # the first three are named
    with pytest.raises(ValueError, match=re.escape(f"the index's variables do not match the object graph ({named})")):
        Checkpoint(w=_target()).read(prefix)


def test_object_graph_saying_another_dtype_or_shape_than_the_index_is_refused(tmp_path):
    prefix, index_path = _saved(tmp_path)

    def edit(graph):
        for node in graph["nodes"]:
            if node["kind"] == "variable":
                node["shape"] = [2, 3]
    _edit_graph(index_path, edit)
    with pytest.raises(ValueError, match=r"tensor 'w' is float32\[3, 2\] in the index, the object graph says "
                                         r"float32\[2, 3\]"):
        Checkpoint(w=_target()).read(prefix)


def test_list_and_load_variable_of_a_sharded_checkpoint(tmp_path):
    prefix, _ = _saved(tmp_path)
    assert tw.train.list_variables(prefix) == [("w", [3, 2])]
    with pytest.raises(errors.NotFoundError, match="Key nothing not found"):
        tw.train.load_variable(prefix, "nothing")
    np.testing.assert_array_equal(tw.train.load_variable(prefix, "w"), np.arange(6.0, dtype=np.float32).reshape(3, 2))


def test_a_sharded_directory_of_another_format_is_refused_even_with_an_object_graph(tmp_path):
    prefix, index_path = _saved(tmp_path)
    index = json.loads(open(index_path).read())
    index["metadata"]["format"] = "keras.weights"
    open(index_path, "w").write(json.dumps(index))
    with pytest.raises(ValueError, match=r"a sharded checkpoint, but not of a tw.train.Checkpoint \(format "
                                         r"'keras.weights'\)"):
        Checkpoint(w=_target()).read(prefix)
