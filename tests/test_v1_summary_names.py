"""``tf.compat.v1.summary`` protos and writers read back from the event files: session logs, run
metadata, tensor summaries with their description, the shared writer cache."""
import glob

import numpy as np
import pytest

pytest.importorskip("tensorboard")
import tensorweave.compat.v1 as tf  # noqa: E402


def _events(logdir):
    (path,) = glob.glob(f"{logdir}/events.out.tfevents*")
    return list(tf.train.summary_iterator(path))


def test_session_log_run_metadata_and_tensor_summary_round_trip(tmp_path):
    g = tf.Graph()
    with g.as_default():
        desc = tf.summary.SummaryDescription(type_hint="matrix")
        t = tf.summary.tensor_summary("weights", tf.constant([[1.0, 2.0]]), summary_description=desc)
        assert tf.summary.get_summary_description(t.op).type_hint == "matrix"
        assert tf.summary.get_summary_description(t).type_hint == "matrix"
        with pytest.raises(ValueError, match="not a tensor_summary op"):
            tf.summary.get_summary_description(tf.constant(1.0).op)
        with tf.Session() as sess:
            value = sess.run(t)
    writer = tf.summary.FileWriterCache.get(str(tmp_path))
    assert tf.summary.FileWriterCache.get(str(tmp_path)) is writer
    writer.add_session_log(tf.summary.SessionLog(status=tf.summary.SessionLog.START), global_step=1)
    writer.add_summary(value, global_step=2)
    writer.add_event(tf.summary.Event(step=3, summary=tf.summary.Summary(
        value=[tf.summary.Summary.Value(tag="x", simple_value=0.5)])))
    writer.add_run_metadata(b"meta-bytes", "step3", global_step=3)
    tf.summary.FileWriterCache.clear()
    events = _events(tmp_path)
    by_step = {(e.step, e.WhichOneof("what")): e for e in events}
    assert by_step[(1, "session_log")].session_log.status == tf.summary.SessionLog.START
    tensor = by_step[(2, "summary")].summary.value[0]
    assert tensor.tag == "weights" and list(tensor.tensor.tensor_shape.dim[1].size for _ in [0]) == [2]
    assert by_step[(3, "summary")].summary.value[0].simple_value == 0.5
    meta = by_step[(3, "tagged_run_metadata")].tagged_run_metadata
    assert isinstance(meta, tf.summary.TaggedRunMetadata) and meta.tag == "step3" and meta.run_metadata == b"meta-bytes"
    np.testing.assert_allclose(np.frombuffer(tensor.tensor.tensor_content, np.float32), [1.0, 2.0])
