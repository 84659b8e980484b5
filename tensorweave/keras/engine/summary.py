"""``model.summary()``: Keras' table of layers, output shapes and parameter counts."""
import numpy as np

from tensorweave.core import nest


def _count(weights):
    return int(sum(np.prod(w.shape.as_list()) for w in weights))


def _bytes(weights):
    return int(sum(np.prod(w.shape.as_list()) * w.dtype.size for w in weights))


def _fmt_bytes(n):
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.2f} {unit}"
        n /= 1024.0
    return f"{n:.2f} GB"


def _shape_text(layer, model):
    outs = []
    for node in getattr(layer, "_inbound_nodes", []):
        if node.outputs is not None:
            outs = [t.shape for t in nest.flatten(node.outputs)]
    if not outs:
        return "?"
    text = ", ".join(str(s) for s in outs)
    return text if len(outs) == 1 else f"[{text}]"


def print_summary(model, line_length=None, print_fn=None):
    from tensorweave.keras.engine.input_layer import InputLayer
    print_fn = print_fn or print
    kind = type(model).__name__
    layers = [l for l in getattr(model, "layers", []) if kind == "Functional" or not isinstance(l, InputLayer)]
    rows = []
    for layer in layers:
        params = _count(layer.weights) if layer.built else 0
        rows.append((f"{layer.name} ({type(layer).__name__})", _shape_text(layer, model), f"{params:,}"))
    widths = [max(31, *(len(r[0]) + 2 for r in rows)) if rows else 31,
              max(24, *(len(r[1]) + 2 for r in rows)) if rows else 24, 15]
    head = ("Layer (type)", "Output Shape", "Param #")

    def line(l, m, r, fill):
        return l + m.join(fill * w for w in widths) + r

    def row(cells, sep="\u2502"):
        a, b, c = cells
        return sep + f" {a:<{widths[0] - 2}} " + sep + f" {b:<{widths[1] - 2}} " + sep + f" {c:>{widths[2] - 2}} " + sep

    out = [f'Model: "{model.name}"',
           line("\u250f", "\u2533", "\u2513", "\u2501"),
           row(head, "\u2503"),
           line("\u2521", "\u2547", "\u2529", "\u2501")]
    for i, r in enumerate(rows):
        out.append(row(r))
        if i < len(rows) - 1:
            out.append(line("\u251c", "\u253c", "\u2524", "\u2500"))
    out.append(line("\u2514", "\u2534", "\u2518", "\u2500"))
    weights = model.weights
    trainable = model.trainable_weights
    non_trainable = model.non_trainable_weights
    out.append(f" Total params: {_count(weights):,} ({_fmt_bytes(_bytes(weights))})")
    out.append(f" Trainable params: {_count(trainable):,} ({_fmt_bytes(_bytes(trainable))})")
    out.append(f" Non-trainable params: {_count(non_trainable):,} ({_fmt_bytes(_bytes(non_trainable))})")
    opt = getattr(model, "optimizer", None)
    if opt is not None and getattr(opt, "built", False) and getattr(opt, "variables", None):
        ov = [v for v in opt.variables]
        out.append(f" Optimizer params: {_count(ov):,} ({_fmt_bytes(_bytes(ov))})")
    print_fn("\n".join(out))
