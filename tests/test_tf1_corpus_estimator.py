"""TF1 corpus programs of the summaries / metrics / losses / queues / nce / estimator pieces
(``tests/tf1_corpus/{word2vec_nce,queue_softmax_summaries,estimator_premade_dnn,estimator_custom_census}.py``).

Each program's ``main`` returns its first and last loss and its metric; the loss must fall and the
metric must reach what TensorFlow reached on the same file (``TF_REFERENCE``, recorded by running
the file under TensorFlow 2.21's compat.v1 with only the import line changed; for the estimator
programs, which TF 2.21 cannot run, the file's ``equivalent_graph``), less a tolerance for
different random streams (initial weights, shuffles, negative samples).
"""
import importlib.util
import os

import pytest

import tensorweave.compat.v1 as tf

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tf1_corpus")
PROGRAMS = {  # name: (tolerance on the metric, how much the loss must fall: last <= factor * first)
    "word2vec_nce": (0.1, 0.5),
    "queue_softmax_summaries": (0.02, 0.3),
    "estimator_premade_dnn": (0.03, 0.3),
    "estimator_custom_census": (0.03, 0.6),
}


def _load(name):
    spec = importlib.util.spec_from_file_location(f"tf1_corpus_{name}", os.path.join(HERE, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_corpus_program_trains_and_reaches_tensorflows_metric(name):
    program = _load(name)
    tolerance, factor = PROGRAMS[name]
    with tf.Graph().as_default():
        result = program.main()
    assert result["last_loss"] <= factor * result["first_loss"], result
    kind = program.METRIC[1]
    reference = program.TF_REFERENCE["metric"]
    if kind == "higher":
        assert result["metric"] >= reference - tolerance, (result, program.TF_REFERENCE)
    else:
        assert result["metric"] <= reference + tolerance, (result, program.TF_REFERENCE)
