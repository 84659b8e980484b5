"""``tf.compat.v1.summary``: event files written by FileWriter, read back with TensorBoard's own reader."""
import glob

import numpy as np
import pytest

import tensorweave.compat.v1 as tf

# tf.compat.v1.summary.histogram of [-1, 0, 0.5, 2] in TF 2.21 (parsed back): 9 buckets, these first limits.
TF_HISTO_BUCKETS = 9
# The decoded PNGs of tf.compat.v1.summary.image of (arange(12) - 3).reshape(2, 2, 3, 1) in TF 2.21.
TF_IMAGE_PIXELS = [[[1, 43, 85], [128, 170, 212]], [[95, 127, 159], [191, 223, 255]]]
TF_HISTO_LIMITS_HEAD = [-1.0089710279437536, -0.917246389039776, 0.0, 1e-12]

event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")


def _read(logdir):
    acc = event_accumulator.EventAccumulator(str(logdir), size_guidance={event_accumulator.TENSORS: 0,
                                                                         event_accumulator.IMAGES: 0,
                                                                         event_accumulator.HISTOGRAMS: 0})
    acc.Reload()
    return acc


def test_scalars_histograms_images_text_and_graph_round_trip(tmp_path):
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None])
        with tf.name_scope("train"):
            tf.summary.scalar("loss", tf.reduce_mean(x))
        tf.summary.histogram("values", x)
        tf.summary.image("pics", tf.reshape(x[:12], [2, 2, 3, 1]), max_outputs=2)
        tf.summary.text("note", tf.constant("hello *world*"))
        merged = tf.summary.merge_all()
    writer = tf.summary.FileWriter(str(tmp_path), g)
    data = np.arange(12, dtype=np.float32) - 3.0
    with tf.Session(graph=g) as sess:
        for step in range(3):
            writer.add_summary(sess.run(merged, {x: data + step}), global_step=step)
    writer.close()

    acc = _read(tmp_path)
    tags = acc.Tags()
    assert tags["scalars"] == ["train/loss"]
    assert [(e.step, e.value) for e in acc.Scalars("train/loss")] == [(s, pytest.approx(2.5 + s)) for s in range(3)]
    assert tags["histograms"] == ["values"]
    h = acc.Histograms("values")[1].histogram_value
    assert (h.min, h.max, h.num, h.sum) == (-2.0, 9.0, 12.0, pytest.approx(data.sum() + 12))
    assert sum(h.bucket) == 12
    assert sorted(tags["images"]) == ["pics/image/0", "pics/image/1"]
    img = acc.Images("pics/image/0")[0]
    assert (img.width, img.height) == (3, 2) and img.encoded_image_string.startswith(b"\x89PNG")
    assert tags["tensors"] == ["note"]
    assert acc.Tensors("note")[0].tensor_proto.string_val == [b"hello *world*"]
    assert acc.Graph() is not None and any(n.name.endswith("Placeholder") for n in acc.Graph().node)


def test_histogram_buckets_follow_tensorflow():
    from tensorweave.compat.v1_summary import histogram_proto
    h = histogram_proto(np.array([-1.0, 0.0, 0.5, 2.0]))
    assert [c for c in h.bucket if c] == [1.0, 1.0, 1.0, 1.0]
    assert len(h.bucket) == len(h.bucket_limit) == TF_HISTO_BUCKETS
    np.testing.assert_allclose(h.bucket_limit[:4], TF_HISTO_LIMITS_HEAD, rtol=1e-12)
    assert (h.min, h.max, h.sum, h.sum_squares) == (-1.0, 2.0, 1.5, 5.25)


def test_image_pixels_follow_tensorflow():
    pil = pytest.importorskip("PIL.Image")
    import io
    g = tf.Graph()
    with g.as_default():
        op = tf.summary.image("pics", (np.arange(12, dtype=np.float32) - 3.0).reshape(2, 2, 3, 1), max_outputs=2)
    with tf.Session(graph=g) as sess:
        summary = tf.summary.Summary.FromString(sess.run(op))
    pixels = [np.asarray(pil.open(io.BytesIO(v.image.encoded_image_string))).tolist() for v in summary.value]
    assert pixels == TF_IMAGE_PIXELS


def test_merge_of_chosen_summaries_and_summary_protos(tmp_path):
    g = tf.Graph()
    with g.as_default():
        a = tf.summary.scalar("a", tf.constant(1.0), collections=[])
        b = tf.summary.scalar("b", tf.constant(2), collections=["mine"])
        merged = tf.summary.merge([a, b])
        assert tf.summary.merge_all() is None
        assert tf.get_collection("mine") == [b]
    with tf.Session(graph=g) as sess, tf.summary.FileWriter(str(tmp_path)) as writer:
        writer.add_summary(sess.run(merged), 7)
        writer.add_summary(tf.summary.Summary(value=[tf.summary.Summary.Value(tag="c", simple_value=3.0)]), 8)
    acc = _read(tmp_path)
    assert sorted(acc.Tags()["scalars"]) == ["a", "b", "c"]
    assert acc.Scalars("b")[0].value == 2.0 and acc.Scalars("c")[0].step == 8
    assert len(glob.glob(str(tmp_path / "events.out.tfevents.*"))) == 1


def test_summary_errors_name_the_op():
    g = tf.Graph()
    with g.as_default():
        with pytest.raises(ValueError, match=r"tf.summary.scalar 'loss': the tensor must be a scalar, got shape"):
            tf.summary.scalar("loss", tf.zeros([3]))
        with pytest.raises(ValueError, match=r"tf.summary.image 'im'.*got shape"):
            tf.summary.image("im", tf.zeros([3, 4]))
        with pytest.raises(ValueError, match="expected a string tensor"):
            tf.summary.text("t", tf.zeros([1]))
    w = tf.summary.FileWriter(pytest.importorskip("tempfile").mkdtemp())
    with pytest.raises(TypeError, match="FileWriter.add_summary: expected the value of a summary op"):
        w.add_summary(3.0)
    w.close()
    with pytest.raises(RuntimeError, match="the writer is closed"):
        w.add_summary(b"")


def test_audio_summary_and_summary_iterator(tmp_path):
    import io
    import wave
    g = tf.Graph()
    with g.as_default():
        t = np.linspace(0, 1, 800, dtype=np.float32)
        clips = np.stack([np.sin(2 * np.pi * 220 * t), 0.5 * np.sin(2 * np.pi * 440 * t)])
        op = tf.summary.audio("tone", clips, sample_rate=8000, max_outputs=2)
    with tf.Session(graph=g) as sess, tf.summary.FileWriter(str(tmp_path)) as writer:
        writer.add_summary(sess.run(op), 3)
        path = writer._writer.path
    events = list(tf.train.summary_iterator(path))
    values = [v for e in events for v in e.summary.value]
    assert [v.tag for v in values] == ["tone/audio/0", "tone/audio/1"]
    a = values[1].audio
    assert (a.sample_rate, a.num_channels, a.length_frames, a.content_type) == (8000, 1, 800, "audio/wav")
    with wave.open(io.BytesIO(a.encoded_audio_string)) as w:
        frames = np.frombuffer(w.readframes(800), "<i2")
    np.testing.assert_allclose(frames / 32767.0, clips[1], atol=1e-4)
    assert events[-1].step == 3 and tf.summary.all_v2_summary_ops() == []
