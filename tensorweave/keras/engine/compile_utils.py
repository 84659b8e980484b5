"""What ``compile`` turns its arguments into: the total loss (one or several outputs, with
weights) and the metrics, created once the shapes of the first batch are known."""
from tensorweave.core import nest


def _per_output(spec, output_names, what):
    """Maps a compile argument to a list with one entry per output."""
    n = len(output_names)
    if isinstance(spec, dict):
        unknown = set(spec) - set(output_names)
        if unknown:
            raise ValueError(f"Unknown output name(s) {sorted(unknown)} in `{what}`; outputs: {output_names}")
        return [spec.get(name) for name in output_names]
    if isinstance(spec, (list, tuple)) and n > 1:
        if len(spec) != n:
            raise ValueError(f"`{what}` has {len(spec)} entries for {n} outputs")
        return list(spec)
    if n > 1 and what == "metrics":
        return [spec] * n
    if n > 1 and spec is not None and what == "loss":
        return [spec] * n
    return [spec] + [None] * (n - 1)


def _split_by_output(values, output_names, what, y_pred=False):
    """One entry per output: a dict is matched by output name (never by key order), a list or
    tuple by position; a single value belongs to a single output."""
    n = len(output_names)
    if isinstance(values, dict):
        if n == 1 and output_names[0] not in values and not y_pred:
            if len(values) != 1:
                raise ValueError(f"`{what}` is a dict with keys {sorted(values)}, but the model has one output "
                                 f"named {output_names[0]!r}")
            return list(values.values())
        unknown = set(values) - set(output_names)
        if unknown:
            raise ValueError(f"`{what}` has key(s) {sorted(unknown)} that match no model output; the outputs are "
                             f"{output_names}. Hint: name the output layers (name=...) as the keys")
        return [values.get(name) for name in output_names]
    if n == 1:
        return [values]
    if values is None:
        return [None] * n
    flat = list(values) if isinstance(values, (list, tuple)) else nest.flatten(values)
    if len(flat) != n:
        raise ValueError(f"`{what}` has {len(flat)} entries for {n} outputs {output_names}")
    return flat


class CompileLoss:
    def __init__(self, loss, loss_weights, output_names):
        from tensorweave.keras import losses
        self.output_names = output_names
        self.fns = [None if l is None else losses.get_for_compile(l) for l in _per_output(loss, output_names, "loss")]
        weights = _per_output(loss_weights, output_names, "loss_weights") if loss_weights is not None \
            else [1.0] * len(output_names)
        self.weights = [1.0 if w is None else float(w) for w in weights]

    def __call__(self, y_true, y_pred, sample_weight=None):
        ys = _split_by_output(y_true, self.output_names, "y")
        ps = _split_by_output(y_pred, self.output_names, "y_pred", y_pred=True)
        sws = _split_by_output(sample_weight, self.output_names, "sample_weight") \
            if isinstance(sample_weight, (dict, list, tuple)) else [sample_weight] * len(ps)
        total = None
        parts = []
        for fn, w, y, p, sw in zip(self.fns, self.weights, ys, ps, sws):
            if fn is None:
                parts.append(None)
                continue
            value = fn(y, p, sample_weight=sw)
            parts.append(value)
            term = value * w if w != 1.0 else value
            total = term if total is None else total + term
        if total is None:
            raise ValueError("No loss to compute: compile() was given no loss for any output")
        return total, parts


class CompileMetrics:
    """The compiled metrics; string names such as "accuracy" are resolved from the first batch."""

    def __init__(self, metrics, output_names, loss_fns):
        self.spec = _per_output(metrics, output_names, "metrics") if metrics is not None else [None] * len(output_names)
        self.output_names = output_names
        self.loss_fns = loss_fns
        self.metrics = None   # [(output index, Metric)]

    def build(self, y_true, y_pred):
        from tensorweave.keras import metrics as M
        multi = len(self.output_names) > 1
        ys = _split_by_output(y_true, self.output_names, "y")
        ps = _split_by_output(y_pred, self.output_names, "y_pred", y_pred=True)
        self.metrics = []
        for i, (spec, y, p) in enumerate(zip(self.spec, ys, ps)):
            for m in nest.flatten(spec) if spec is not None else []:
                metric = M.get_for_compile(m, self.loss_fns[i], getattr(y, "shape", None), p.shape)
                if multi:
                    metric.name = f"{self.output_names[i]}_{metric.name}"
                self.metrics.append((i, metric))

    def update_state(self, y_true, y_pred, sample_weight=None):
        if self.metrics is None:
            self.build(y_true, y_pred)
        ys = _split_by_output(y_true, self.output_names, "y")
        ps = _split_by_output(y_pred, self.output_names, "y_pred", y_pred=True)
        sws = _split_by_output(sample_weight, self.output_names, "sample_weight") \
            if isinstance(sample_weight, (dict, list, tuple)) else [sample_weight] * len(ps)
        for i, m in self.metrics:
            m.update_state(ys[i], ps[i], sample_weight=sws[i])


class CompiledLossAPI:
    """``model.compiled_loss``: the compiled loss plus ``regularization_losses``, tracked by the
    model's "loss" metric (tf.keras 2's LossesContainer)."""

    def __init__(self, model):
        self._model = model

    def __call__(self, y_true, y_pred, sample_weight=None, regularization_losses=None):
        import tensorweave as tw
        model = self._model
        total = None
        if model._compile_loss is not None:
            total, parts = model._compile_loss(y_true, y_pred, sample_weight)
            for tracker, part in zip(model._output_loss_trackers, parts):
                if part is not None:
                    tracker.update_state(part)
        for extra in regularization_losses or []:
            extra = tw.convert_to_tensor(extra)
            total = extra if total is None else total + tw.cast(extra, total.dtype)
        if total is None:
            raise ValueError(f"Model '{model.name}' was compiled without a loss and no regularization_losses "
                             "were given")
        model._loss_tracker.update_state(total)
        return total

    @property
    def metrics(self):
        return [self._model._loss_tracker] + list(self._model._output_loss_trackers)


class CompiledMetricsAPI:
    """``model.compiled_metrics``: ``update_state``, ``reset_state`` and ``metrics``."""

    def __init__(self, model):
        self._model = model

    def update_state(self, y_true, y_pred, sample_weight=None):
        cm = self._model._compile_metrics
        if cm is not None:
            cm.update_state(y_true, y_pred, sample_weight)

    def reset_state(self):
        for m in self.metrics:
            m.reset_state()

    @property
    def metrics(self):
        cm = self._model._compile_metrics
        return [m for _, m in cm.metrics] if cm is not None and cm.metrics is not None else []
