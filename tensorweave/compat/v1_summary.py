"""``tf.compat.v1.summary``: summary ops that serialize ``Summary`` protos, and the ``FileWriter``.

A summary op (``scalar``, ``histogram``, ``image``, ``text``, ``tensor_summary``) is a graph node
whose value is a serialized ``Summary`` protocol buffer (a string tensor); it is added to the
``summaries`` collection, which ``merge_all`` merges into one op. ``FileWriter.add_summary``
appends the run result to a TensorBoard event file, in TF1's layout: scalars as
``simple_value``, histograms as ``HistogramProto`` over TF's default exponential buckets, images
as PNG. The protos and the file framing come from the ``tensorboard`` package (the
``tensorweave[tensorboard]`` extra); the event file writer is the Keras ``TensorBoard``
callback's.

>>> import tempfile
>>> import tensorweave.compat.v1 as tf
>>> g = tf.Graph()
>>> with g.as_default():
...     x = tf.placeholder(tf.float32, [])
...     _ = tf.summary.scalar("x", x)
...     merged = tf.summary.merge_all()
>>> writer = tf.summary.FileWriter(tempfile.mkdtemp(), graph=g)
>>> with tf.Session(graph=g) as sess:
...     for step in range(3):
...         writer.add_summary(sess.run(merged, {x: step * 0.5}), step)
>>> writer.close()
"""
import os
import struct
import threading
import time
import weakref
import zlib

import numpy as np

from tensorweave.core import dtypes as _dt
from tensorweave.core.convert import convert_to_tensor
from tensorweave.core.graph import get_default_graph, name_scope
from tensorweave.core.context import executing_eagerly
from tensorweave.ops.script_ops import numpy_function

__all__ = ["FileWriter", "FileWriterCache", "histogram", "image", "merge", "merge_all", "scalar", "tensor_summary",
           "text", "get_summary_description"]

SUMMARIES = "summaries"
_PROTOS = {"Summary": "summary_pb2", "SummaryDescription": "summary_pb2", "Event": "event_pb2",
           "SessionLog": "event_pb2", "TaggedRunMetadata": "event_pb2"}


def __getattr__(name):
    # The proto classes (tf.summary.Summary, ...) load tensorboard only when a program asks for them.
    if name in _PROTOS:
        return getattr(_proto(_PROTOS[name]), name)
    raise AttributeError(f"module 'tensorweave.compat.v1.summary' has no attribute {name!r}")


def _proto(module):
    try:
        import importlib
        return importlib.import_module(f"tensorboard.compat.proto.{module}")
    except ImportError:
        raise ImportError("tf.summary writes TensorBoard protocol buffers with the `tensorboard` package, which "
                          "is not installed. Hint: pip install tensorboard (or tensorweave[tensorboard]).") from None


# ---- the summary ops --------------------------------------------------------------------------------
def _summary_op(kind, name, tensor, serialize, collections, family):
    _proto("summary_pb2")  # fail at graph construction, not in the session, when tensorboard is missing
    tensor = convert_to_tensor(tensor)
    with name_scope(f"{family}/{name}" if family else name) as scope:
        tag = scope.rstrip("/")
        if family:
            tag = f"{family}/{tag}"
        op = numpy_function(lambda v: np.array(serialize(tag, v), dtype=object), [tensor], _dt.string, name=kind)
    for c in (collections if collections is not None else [SUMMARIES]):
        get_default_graph().add_to_collection(c, op)
    return op


def _value(tag, **fields):
    from tensorboard.compat.proto import summary_pb2
    return summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, **fields)]).SerializeToString()


def scalar(name, tensor, collections=None, family=None):
    """A ``Summary`` with one ``simple_value``; ``tensor`` must be a real number scalar."""
    t = convert_to_tensor(tensor)
    if t.shape.rank is not None and t.shape.rank != 0:
        raise ValueError(f"tf.summary.scalar '{name}': the tensor must be a scalar, got shape {t.shape}. "
                         f"Hint: reduce it first (tf.reduce_mean).")
    if not (t.dtype.is_floating or t.dtype.is_integer or t.dtype == _dt.bool_):
        raise TypeError(f"tf.summary.scalar '{name}': expected a real number, got dtype {t.dtype.name}")
    return _summary_op("ScalarSummary", name, t, lambda tag, v: _value(tag, simple_value=float(v)),
                       collections, family)


def _default_bucket_limits():
    pos = []
    v = 1e-12
    while v < 1e20:
        pos.append(v)
        v *= 1.1
    pos.append(np.finfo(np.float64).max)
    return np.array([-x for x in reversed(pos)] + [0.0] + pos)


_BUCKET_LIMITS = _default_bucket_limits()


def histogram_proto(values):
    """TF1's ``HistogramProto`` of ``values``: min, max, sums and counts over the default exponential
    buckets, runs of empty buckets collapsed into one (as TensorFlow's ``Histogram::EncodeToProto``)."""
    from tensorboard.compat.proto import summary_pb2
    values = np.asarray(values, np.float64).ravel()
    proto = summary_pb2.HistogramProto()
    if values.size:
        proto.min, proto.max = float(values.min()), float(values.max())
        proto.num = float(values.size)
        proto.sum = float(values.sum())
        proto.sum_squares = float(np.dot(values, values))
    counts = np.bincount(np.searchsorted(_BUCKET_LIMITS, values, side="right"), minlength=len(_BUCKET_LIMITS))
    counts = counts[:len(_BUCKET_LIMITS)].astype(np.float64)
    i, n = 0, len(counts)
    while i < n:
        end, count = _BUCKET_LIMITS[i], counts[i]
        i += 1
        if count <= 0:
            while i < n and counts[i] <= 0:
                end, count = _BUCKET_LIMITS[i], counts[i]
                i += 1
        proto.bucket_limit.append(float(end))
        proto.bucket.append(float(count))
    return proto


def histogram(name, values, collections=None, family=None):
    """A ``Summary`` with a ``HistogramProto`` of every element of ``values``."""
    def serialize(tag, v):
        v = np.asarray(v, np.float64)
        if not np.all(np.isfinite(v)):
            raise ValueError(f"tf.summary.histogram '{tag}': NaN or Inf in the values (shape {v.shape}).")
        return _value(tag, histo=histogram_proto(v))
    return _summary_op("HistogramSummary", name, values, serialize, collections, family)


def _to_uint8(img):
    """TF1's image-summary scaling, per image: non-negative floats so the largest is 255; with negatives,
    0 at 128 and the largest magnitude at 1 or 255 (then truncated, as TensorFlow casts)."""
    if img.dtype == np.uint8:
        return img
    x = img.astype(np.float32)
    finite = x[np.isfinite(x)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 0.0)
    if lo < 0:
        top = max(abs(lo), abs(hi))
        scale, offset = (0.0 if top < 1e-6 else 127.0 / top), 128.0
    else:
        scale, offset = (0.0 if hi < 1e-6 else 255.0 / hi), 0.0
    out = np.clip(x * np.float32(scale) + np.float32(offset), 0, 255)
    out = np.where(np.isfinite(out), out, 0).astype(np.uint8)
    if finite.size != x.size:  # TensorFlow paints a pixel with NaN/Inf in its bad color (red)
        out[~np.isfinite(x).all(axis=-1)] = [255, 0, 0, 255][:out.shape[-1]]
    return out


def encode_png(pixels):
    """PNG bytes of a uint8 ``[height, width, channels]`` array (1, 2, 3 or 4 channels), no filtering."""
    h, w, c = pixels.shape
    color = {1: 0, 2: 4, 3: 2, 4: 6}[c]
    raw = b"".join(b"\x00" + pixels[row].tobytes() for row in range(h))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, color, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))


def image(name, tensor, max_outputs=3, collections=None, family=None):
    """Up to ``max_outputs`` PNG images from a ``[batch, height, width, channels]`` tensor (1, 3 or 4 channels);
    tags ``<name>/image/<i>`` (``<name>/image`` when there is one)."""
    t = convert_to_tensor(tensor)
    if t.shape.rank is not None and (t.shape.rank != 4 or t.shape[-1] not in (None, 1, 3, 4)):
        raise ValueError(f"tf.summary.image '{name}': expected [batch, height, width, channels] with 1, 3 or 4 "
                         f"channels, got shape {t.shape}")
    from tensorboard.compat.proto import summary_pb2

    def serialize(tag, v):
        v = np.asarray(v)[:max_outputs]
        values = []
        for i, img in enumerate(v):
            png = encode_png(_to_uint8(img))
            values.append(summary_pb2.Summary.Value(
                tag=f"{tag}/image" if len(v) == 1 else f"{tag}/image/{i}",
                image=summary_pb2.Summary.Image(height=img.shape[0], width=img.shape[1], colorspace=img.shape[2],
                                                encoded_image_string=png)))
        return summary_pb2.Summary(value=values).SerializeToString()
    return _summary_op("ImageSummary", name, t, serialize, collections, family)


def _tensor_value(tag, v, plugin_name, content=b""):
    from tensorboard.compat.proto import summary_pb2
    from tensorboard.util import tensor_util
    md = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(
        plugin_name=plugin_name, content=content))
    return _value(tag, metadata=md, tensor=tensor_util.make_tensor_proto(v))


def text(name, tensor, collections=None):
    """A string tensor for TensorBoard's Text dashboard (markdown)."""
    t = convert_to_tensor(tensor)
    if t.dtype != _dt.string:
        raise ValueError(f"tf.summary.text '{name}': expected a string tensor, got dtype {t.dtype.name}")
    return _summary_op("TextSummary", name, t, lambda tag, v: _tensor_value(tag, np.asarray(v, dtype=object), "text"),
                       collections, None)


def tensor_summary(name, tensor, summary_description=None, collections=None, summary_metadata=None,
                   family=None, display_name=None):
    """The whole tensor, serialized as a ``TensorProto`` (no plugin); ``summary_description`` (a
    ``SummaryDescription``) is kept with the op for :func:`get_summary_description`."""
    op = _summary_op("TensorSummaryV2", name, tensor, lambda tag, v: _tensor_value(tag, np.asarray(v), ""),
                     collections, family)
    if summary_description is not None and not executing_eagerly():
        _DESCRIPTIONS.setdefault(op.graph, {})[op.op.name] = summary_description.SerializeToString()
    return op


_DESCRIPTIONS = weakref.WeakKeyDictionary()   # graph -> {tensor_summary op name: SummaryDescription bytes}


def get_summary_description(node_def):
    """The ``SummaryDescription`` a ``tensor_summary`` op was made with (``node_def``: the op, its
    output, or ``op.node_def``); ``ValueError`` for any other op."""
    summary_pb2 = _proto("summary_pb2")
    op = getattr(node_def, "op", node_def)
    if not getattr(op, "name", "").endswith("TensorSummaryV2"):
        raise ValueError(f"Can't get_summary_description on {getattr(op, 'name', type(op).__name__)}: "
                         "it is not a tensor_summary op")
    return summary_pb2.SummaryDescription.FromString(_DESCRIPTIONS.get(op.graph, {}).get(op.name, b""))


def encode_wav(samples, sample_rate):
    """16-bit PCM WAV bytes of float ``[frames, channels]`` samples in [-1, 1] (clipped)."""
    import io
    import wave
    pcm = (np.clip(samples, -1.0, 1.0) * 32767.0).astype("<i2")
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(pcm.shape[1])
        w.setsampwidth(2)
        w.setframerate(int(sample_rate))
        w.writeframes(pcm.tobytes())
    return buf.getvalue()


def audio(name, tensor, sample_rate, max_outputs=3, collections=None, family=None):
    """Up to ``max_outputs`` WAV clips from a float ``[batch, frames]`` or ``[batch, frames, channels]``
    tensor in [-1, 1]; tags ``<name>/audio/<i>`` (``<name>/audio`` when there is one)."""
    t = convert_to_tensor(tensor)
    if t.shape.rank is not None and t.shape.rank not in (2, 3):
        raise ValueError(f"tf.summary.audio '{name}': expected [batch, frames] or [batch, frames, channels], got "
                         f"shape {t.shape}")
    rate = float(sample_rate)
    from tensorboard.compat.proto import summary_pb2

    def serialize(tag, v):
        v = np.asarray(v, np.float32)[:max_outputs]
        values = []
        for i, clip in enumerate(v):
            clip = clip[:, None] if clip.ndim == 1 else clip
            values.append(summary_pb2.Summary.Value(
                tag=f"{tag}/audio" if len(v) == 1 else f"{tag}/audio/{i}",
                audio=summary_pb2.Summary.Audio(sample_rate=rate, num_channels=clip.shape[1],
                                                length_frames=clip.shape[0], content_type="audio/wav",
                                                encoded_audio_string=encode_wav(clip, rate))))
        return summary_pb2.Summary(value=values).SerializeToString()
    return _summary_op("AudioSummary", name, t, serialize, collections, family)


def all_v2_summary_ops():
    """The TF2-style summary ops of the default graph: none are made through ``compat.v1``, so an empty list."""
    return get_default_graph().get_collection("_SUMMARY_V2")


def summary_iterator(path):
    """Yields the ``Event`` protos of an event file (``tf.compat.v1.train.summary_iterator``)."""
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
    from tensorboard.compat.proto import event_pb2
    for record in RawEventFileLoader(path).Load():
        yield event_pb2.Event.FromString(record)


def _merge_bytes(*serialized):
    from tensorboard.compat.proto import summary_pb2
    out = summary_pb2.Summary()
    for s in serialized:
        out.MergeFromString(bytes(np.asarray(s, dtype=object).item()))
    return np.array(out.SerializeToString(), dtype=object)


def merge(inputs, collections=None, name=None):
    """One serialized ``Summary`` holding the values of every input summary."""
    _proto("summary_pb2")
    inputs = [convert_to_tensor(i) for i in inputs]
    for i in inputs:
        if i.dtype != _dt.string:
            raise TypeError(f"tf.summary.merge: every input must be a summary (string tensor), got {i}")
    op = numpy_function(_merge_bytes, inputs, _dt.string, name=name or "Merge/MergeSummary")
    for c in collections or ():
        get_default_graph().add_to_collection(c, op)
    return op


def merge_all(key=SUMMARIES, scope=None, name=None):
    """``merge`` of the collection ``key`` (default: every summary op made); None when it is empty."""
    ops = get_default_graph().get_collection(key, scope)
    return merge(ops, name=name) if ops else None


# ---- the writer -------------------------------------------------------------------------------------
class FileWriter:
    """Writes ``Event`` records (summaries, the graph, session logs) to ``logdir`` for TensorBoard.

    ``add_summary`` takes what a session run of a summary op returned (bytes) or a ``Summary``
    proto. Writes are synchronous; ``flush_secs`` and ``max_queue`` are accepted for TF1
    compatibility and the file is flushed on ``flush``/``close``.
    """

    def __init__(self, logdir, graph=None, max_queue=10, flush_secs=120, graph_def=None, filename_suffix=None,
                 session=None):
        from tensorweave.keras.callbacks.tensorboard import EventFileWriter, _require_tensorboard
        _require_tensorboard()
        self._logdir = os.fspath(logdir)
        self._suffix = filename_suffix or ""
        self._make = EventFileWriter
        self._writer = EventFileWriter(self._logdir, filename_suffix=self._suffix)
        self._closed = False
        if graph is not None or graph_def is not None:
            self.add_graph(graph, graph_def=graph_def)

    def get_logdir(self):
        return self._logdir

    def _event(self, **fields):
        from tensorboard.compat.proto import event_pb2
        return event_pb2.Event(wall_time=time.time(), **fields)

    def add_event(self, event):
        if self._closed:
            raise RuntimeError("FileWriter.add_event: the writer is closed. Hint: call reopen() first.")
        self._writer.add_event(event)

    def add_summary(self, summary, global_step=None):
        """Appends a summary (serialized bytes, as a session run returns, or a ``Summary`` proto)."""
        from tensorboard.compat.proto import summary_pb2
        if isinstance(summary, (bytes, np.ndarray, np.bytes_)):
            summary = summary_pb2.Summary.FromString(bytes(np.asarray(summary, dtype=object).item()))
        elif not isinstance(summary, summary_pb2.Summary):
            raise TypeError(f"FileWriter.add_summary: expected the value of a summary op (bytes) or a "
                            f"tf.summary.Summary, got {type(summary).__name__}")
        self.add_event(self._event(summary=summary, step=int(global_step or 0)))

    def add_graph(self, graph, global_step=None, graph_def=None):
        from tensorweave.compat.v1_graph_def import GraphDef, import_graph_def
        from tensorweave.core.graph import Graph
        from tensorweave.keras.callbacks.tensorboard import _graph_def
        ours = graph_def if isinstance(graph_def, GraphDef) else graph if isinstance(graph, GraphDef) else None
        if ours is not None:    # TF1's FileWriter(logdir, sess.graph_def): TensorBoard reads its own GraphDef
            graph, graph_def = Graph(), None
            with graph.as_default():
                import_graph_def(ours, name="")
        gd = graph_def if graph_def is not None else _graph_def(graph)
        self.add_event(self._event(graph_def=gd.SerializeToString(), step=int(global_step or 0)))

    def add_session_log(self, session_log, global_step=None):
        self.add_event(self._event(session_log=session_log, step=int(global_step or 0)))

    def add_run_metadata(self, run_metadata, tag, global_step=None):
        from tensorboard.compat.proto import event_pb2
        data = run_metadata if isinstance(run_metadata, bytes) else run_metadata.SerializeToString()
        self.add_event(self._event(tagged_run_metadata=event_pb2.TaggedRunMetadata(tag=tag, run_metadata=data),
                                   step=int(global_step or 0)))

    def flush(self):
        self._writer.flush()

    def close(self):
        self._writer.close()
        self._closed = True

    def reopen(self):
        """After ``close``, continues in a new event file in the same ``logdir``."""
        if self._closed:
            self._writer = self._make(self._logdir, filename_suffix=self._suffix)
            self._closed = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class FileWriterCache:
    """One shared ``FileWriter`` per log directory (TF1's ``tf.summary.FileWriterCache``)."""

    _cache = {}
    _lock = threading.Lock()

    @staticmethod
    def get(logdir):
        with FileWriterCache._lock:
            w = FileWriterCache._cache.get(logdir)
            if w is None:
                w = FileWriterCache._cache[logdir] = FileWriter(logdir)
            return w

    @staticmethod
    def clear():
        with FileWriterCache._lock:
            for w in FileWriterCache._cache.values():
                w.close()
            FileWriterCache._cache.clear()
