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


class CompileLoss:
    def __init__(self, loss, loss_weights, output_names):
        from tensorweave.keras import losses
        self.output_names = output_names
        self.fns = [None if l is None else losses.get_for_compile(l) for l in _per_output(loss, output_names, "loss")]
        weights = _per_output(loss_weights, output_names, "loss_weights") if loss_weights is not None \
            else [1.0] * len(output_names)
        self.weights = [1.0 if w is None else float(w) for w in weights]

    def __call__(self, y_true, y_pred, sample_weight=None):
        ys = nest.flatten(y_true) if len(self.output_names) > 1 else [y_true]
        ps = nest.flatten(y_pred) if len(self.output_names) > 1 else [y_pred]
        sws = nest.flatten(sample_weight) if len(self.output_names) > 1 and sample_weight is not None \
            else [sample_weight] * len(ps)
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
        ys = nest.flatten(y_true) if multi else [y_true]
        ps = nest.flatten(y_pred) if multi else [y_pred]
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
        multi = len(self.output_names) > 1
        ys = nest.flatten(y_true) if multi else [y_true]
        ps = nest.flatten(y_pred) if multi else [y_pred]
        for i, m in self.metrics:
            m.update_state(ys[i], ps[i], sample_weight=sample_weight)
