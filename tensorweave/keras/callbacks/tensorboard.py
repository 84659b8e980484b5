"""``TensorBoard``: writes training logs for TensorBoard, without TensorFlow.

Event files are written with the ``tensorboard`` package's record framing and protocol
buffers (``pip install tensorboard``, or the ``tensorweave[tensorboard]`` extra); TensorFlow
is never imported, even when it is installed (tensorboard's own ``EventFileWriter`` would
import it through ``tensorboard.compat.tf``, so the file is opened here). The layout and
tags are Keras': ``<log_dir>/train`` and ``<log_dir>/validation`` each hold an
``events.out.tfevents.*.v2`` file; per epoch, ``epoch_loss``, ``epoch_accuracy``, ...,
``epoch_learning_rate`` (train) and ``epoch_loss``, ... (validation, from the ``val_`` logs);
per batch with ``update_freq``, ``batch_loss``, ...; after each validation run,
``evaluation_loss_vs_iterations``, ... at the optimizer's step; with ``histogram_freq``,
``<weight name>/histogram``; with ``write_graph``, the training step's op graph and the
model's layer graph ("keras" tag). Then ``tensorboard --logdir <log_dir>``.

>>> import os, tempfile
>>> import numpy as np
>>> from tensorweave import keras
>>> keras.utils.set_random_seed(0)
>>> model = keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(1)])
>>> model.compile(optimizer="sgd", loss="mse")
>>> log_dir = tempfile.mkdtemp()
>>> _ = model.fit(np.ones((8, 3)), np.ones((8, 1)), epochs=2, validation_split=0.25, verbose=0,
...               callbacks=[keras.callbacks.TensorBoard(log_dir)])
>>> sorted(os.listdir(log_dir))
['train', 'validation']
"""
import json
import os
import socket
import threading
import time
import warnings

import numpy as np

from tensorweave.keras.callbacks.callback import Callback

_uid_lock = threading.Lock()
_uid = [0]


def _require_tensorboard():
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        raise ImportError("The TensorBoard callback writes event files with the `tensorboard` package, which is "
                          "not installed. Hint: pip install tensorboard (or tensorweave[tensorboard]).") from None


class EventFileWriter:
    """Appends ``Event`` protocol buffers to a new ``events.out.tfevents.*`` file in ``logdir``.

    Writes synchronously (each record is framed with its length and masked CRC-32C, the
    TFRecord format TensorBoard reads) and flushes on :meth:`flush` / :meth:`close`.
    """

    def __init__(self, logdir, filename_suffix=".v2"):
        from tensorboard.compat.proto import event_pb2
        from tensorboard.summary.writer.record_writer import RecordWriter
        os.makedirs(logdir, exist_ok=True)
        with _uid_lock:
            uid = _uid[0]
            _uid[0] += 1
        self.path = os.path.join(logdir, f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}."
                                         f"{os.getpid()}.{uid}{filename_suffix}")
        self._file = open(self.path, "wb")
        self._writer = RecordWriter(self._file)
        self._lock = threading.Lock()
        self.add_event(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2"))
        self.flush()

    def add_event(self, event):
        data = event.SerializeToString()
        with self._lock:
            self._writer.write(data)

    def add_summary(self, values, step):
        from tensorboard.compat.proto import event_pb2, summary_pb2
        self.add_event(event_pb2.Event(wall_time=time.time(), step=int(step),
                                       summary=summary_pb2.Summary(value=list(values))))

    def scalar(self, tag, value, step):
        """A TF2-style scalar: a float32 tensor with the "scalars" plugin's metadata."""
        from tensorboard.compat.proto import summary_pb2
        from tensorboard.plugins.scalar import metadata
        from tensorboard.util import tensor_util
        self.add_summary([summary_pb2.Summary.Value(
            tag=tag, metadata=metadata.create_summary_metadata(display_name="", description=""),
            tensor=tensor_util.make_tensor_proto(np.float32(value)))], step)

    def histogram(self, tag, values, step, buckets=30):
        """A TF2-style histogram: a float64 ``[k, 3]`` tensor of (left edge, right edge, count)."""
        from tensorboard.compat.proto import summary_pb2
        from tensorboard.plugins.histogram import metadata
        from tensorboard.util import tensor_util
        values = np.asarray(values, np.float64).ravel()
        values = values[np.isfinite(values)]
        if values.size == 0:
            table = np.zeros((0, 3))
        else:
            lo, hi = float(values.min()), float(values.max())
            if lo == hi:  # one value: a unit-wide range around it
                lo, hi = lo - 0.5, hi + 0.5
            counts, edges = np.histogram(values, bins=buckets, range=(lo, hi))
            table = np.stack([edges[:-1], edges[1:], counts.astype(np.float64)], axis=1)
        self.add_summary([summary_pb2.Summary.Value(
            tag=tag, metadata=metadata.create_summary_metadata(display_name="", description=""),
            tensor=tensor_util.make_tensor_proto(table))], step)

    def text_tensor(self, tag, text, step, plugin_name, content=b""):
        from tensorboard.compat.proto import summary_pb2
        from tensorboard.util import tensor_util
        md = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(
            plugin_name=plugin_name, content=content))
        self.add_summary([summary_pb2.Summary.Value(
            tag=tag, metadata=md, tensor=tensor_util.make_tensor_proto(np.array(text, dtype=object)))], step)

    def graph(self, graph_def):
        from tensorboard.compat.proto import event_pb2
        self.add_event(event_pb2.Event(wall_time=time.time(), graph_def=graph_def.SerializeToString()))

    def flush(self):
        with self._lock:
            if not self._file.closed:
                self._file.flush()

    def close(self):
        with self._lock:
            if not self._file.closed:
                self._file.flush()
                os.fsync(self._file.fileno())
                self._file.close()


def _graph_def(graph):
    """A ``GraphDef`` proto of a tensorweave graph, for TensorBoard's Graphs tab."""
    from tensorboard.compat.proto import graph_pb2, tensor_shape_pb2

    def tensor_ref(t):
        # TensorFlow's convention: output 0 is named by its op alone.
        return t.op.name if t.value_index == 0 else f"{t.op.name}:{t.value_index}"

    g = graph_pb2.GraphDef()
    for op in graph.get_operations():
        node = g.node.add(name=op.name, op=op.type, device=op.device or "")
        node.input.extend([tensor_ref(t) for t in op.inputs] + ["^" + c.name for c in op.control_inputs])
        shapes = node.attr["_output_shapes"].list.shape
        for out in op.outputs:
            dims = out.shape.as_list() if out.shape.rank is not None else None
            if dims is None:
                shapes.add(unknown_rank=True)
            else:
                shapes.add(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=-1 if d is None else d) for d in dims])
    return g


def _keras_model_json(model):
    """The model's layers in the JSON layout of TensorBoard's Keras graph view, or None."""
    kind = type(model).__name__
    if kind not in ("Sequential", "Functional"):
        return None
    config = dict(model.get_config())
    layers = []
    for layer in config.get("layers", []):
        layer = dict(layer)
        if "inbound_nodes" in layer:
            # Keras 3 spells an inbound tensor as {"config": {"keras_history": [layer, node, index]}}.
            layer["inbound_nodes"] = [{"args": [{"class_name": "__keras_tensor__",
                                                 "config": {"keras_history": list(ref)}} for ref in node]}
                                      for node in layer["inbound_nodes"]]
        layers.append(layer)
    config["layers"] = layers
    return json.dumps({"class_name": kind, "config": config})


class TensorBoard(Callback):
    """Writes scalars, histograms and graphs for TensorBoard.

    Args (Keras 3):
        log_dir: the run's folder. Default "logs".
        histogram_freq: write histograms of the weights every this many epochs (0: never).
        write_graph: write the training step's op graph (after the first batch; not with
            ``run_eagerly``) and the model's layer graph. Default True.
        write_images: not supported; a warning says so.
        write_steps_per_second: also log ``steps_per_second`` per epoch (and
            ``batch_steps_per_second`` with batch updates).
        update_freq: "epoch", "batch", or an integer N: also write ``batch_*`` scalars every
            N training batches (step = batches trained in this fit).
        profile_batch, embeddings_freq, embeddings_metadata: not supported; nonzero values
            give a warning and are ignored.
    """

    def __init__(self, log_dir="logs", histogram_freq=0, write_graph=True, write_images=False,
                 write_steps_per_second=False, update_freq="epoch", profile_batch=0, embeddings_freq=0,
                 embeddings_metadata=None):
        super().__init__()
        _require_tensorboard()
        self.log_dir = os.fspath(log_dir)
        self.histogram_freq = histogram_freq
        self.write_graph = write_graph
        self.write_images = write_images
        self.write_steps_per_second = write_steps_per_second
        if update_freq == "batch":
            update_freq = 1
        if update_freq != "epoch" and (not isinstance(update_freq, int) or isinstance(update_freq, bool)
                                       or update_freq < 1):
            raise ValueError(f"Unrecognized update_freq: {update_freq!r}. Expected 'epoch', 'batch' or a positive "
                             "integer")
        self.update_freq = update_freq
        for name, value in (("write_images", write_images), ("profile_batch", profile_batch),
                            ("embeddings_freq", embeddings_freq)):
            if value:
                warnings.warn(f"TensorBoard: {name}={value!r} is not supported by tensorweave and is ignored.",
                              stacklevel=2)
        self.profile_batch = profile_batch
        self.embeddings_freq = embeddings_freq
        self.embeddings_metadata = embeddings_metadata
        self._train_dir = os.path.join(self.log_dir, "train")
        self._val_dir = os.path.join(self.log_dir, "validation")
        self._writers = {}
        self._global_train_batch = 0
        self._should_write_train_graph = False
        self._training = False
        self._epoch_start = self._batch_start = 0.0
        self._epoch_start_iterations = 0

    # Writers are made on first use, so a run without validation gets no validation folder.
    def _writer(self, which):
        if which not in self._writers:
            self._writers[which] = EventFileWriter(self._train_dir if which == "train" else self._val_dir)
        return self._writers[which]

    def _close_writers(self):
        for w in self._writers.values():
            w.close()
        self._writers = {}

    def _iterations(self):
        opt = getattr(self.model, "optimizer", None)
        if opt is None or not hasattr(opt, "iterations"):
            return None
        return int(np.asarray(opt.iterations.numpy()))

    # ---- hooks ----------------------------------------------------------------------------------
    def on_train_begin(self, logs=None):
        self._training = True
        self._global_train_batch = 0
        self._should_write_train_graph = bool(self.write_graph)
        if self.write_graph:
            self._write_keras_model_summary()

    def on_train_end(self, logs=None):
        self._training = False
        self._close_writers()

    def on_epoch_begin(self, epoch, logs=None):
        if self.write_steps_per_second:
            self._epoch_start = time.perf_counter()
            self._epoch_start_iterations = self._iterations() or 0

    def on_train_batch_begin(self, batch, logs=None):
        self._global_train_batch += 1
        if self.write_steps_per_second:
            self._batch_start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        if self._should_write_train_graph:
            self._should_write_train_graph = False
            self._write_train_graph()
        if self.update_freq == "epoch" or self._global_train_batch % self.update_freq:
            return
        w = self._writer("train")
        step = self._global_train_batch
        if self.write_steps_per_second:
            w.scalar("batch_steps_per_second", 1.0 / max(time.perf_counter() - self._batch_start, 1e-9), step)
        for name, value in (logs or {}).items():
            if np.ndim(value) == 0:
                w.scalar("batch_" + name, value, step)

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        train_logs = {k: v for k, v in logs.items() if not k.startswith("val_")}
        val_logs = {k[4:]: v for k, v in logs.items() if k.startswith("val_")}
        if getattr(self.model, "optimizer", None) is not None and hasattr(self.model.optimizer, "learning_rate"):
            from tensorweave.keras.callbacks._utils import get_learning_rate
            train_logs["learning_rate"] = get_learning_rate(self.model)
        if self.write_steps_per_second:
            steps = (self._iterations() or 0) - self._epoch_start_iterations
            train_logs["steps_per_second"] = steps / max(time.perf_counter() - self._epoch_start, 1e-9)
        for which, part in (("train", train_logs), ("val", val_logs)):
            if part:
                w = self._writer(which)
                for name, value in part.items():
                    if np.ndim(value) == 0:
                        w.scalar("epoch_" + name, value, epoch)
                w.flush()
        if self.histogram_freq and epoch % self.histogram_freq == 0:
            self._log_weights(epoch)

    def on_test_end(self, logs=None):
        step = self._iterations()
        if step is None or not logs:
            return
        w = self._writer("val")
        for name, value in logs.items():
            if np.ndim(value) == 0:
                w.scalar(f"evaluation_{name}_vs_iterations", value, step)
        w.flush()
        if not self._training:  # a standalone evaluate(): nothing closes the files later
            self._close_writers()

    # ---- content ----------------------------------------------------------------------------
    def _log_weights(self, epoch):
        w = self._writer("train")
        for layer in self.model.layers:
            for weight in layer.weights:
                w.histogram(weight.name.replace(":", "_") + "/histogram", weight.numpy(), epoch)
        w.flush()

    def _write_keras_model_summary(self):
        # A visualisation must never stop training: a model whose config can't be
        # serialized simply gets no layer graph.
        try:
            text = _keras_model_json(self.model)
        except Exception as e:  # noqa: BLE001
            warnings.warn(f"TensorBoard: could not serialize model '{self.model.name}' for the graph view: {e}",
                          stacklevel=2)
            return
        if text is not None:
            self._writer("train").text_tensor("keras", text, 0, plugin_name="graph_keras_model", content=b"1")

    def _write_train_graph(self):
        fn = getattr(self.model, "_train_fn", None)
        concrete = list((getattr(fn, "_cache", None) or {}).values())
        if not concrete:  # run_eagerly: no graph
            return
        self._writer("train").graph(_graph_def(concrete[-1].graph))
