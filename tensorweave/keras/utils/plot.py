"""``plot_model`` / ``model_to_dot``: the model's layers as a Graphviz graph, through pydot and
Graphviz when they are installed (an ImportError saying what to install otherwise)."""


def _pydot():
    try:
        import pydot
    except ImportError:
        raise ImportError("You must install pydot (`pip install pydot`) and install graphviz "
                          "(see instructions at https://graphviz.gitlab.io/download/) for `plot_model` to work.") from None
    return pydot


def model_to_dot(model, show_shapes=False, show_dtype=False, show_layer_names=True, rankdir="TB", dpi=200, **kwargs):
    """A ``pydot.Dot`` with one node per layer and one edge per layer call of a functional model."""
    pydot = _pydot()
    dot = pydot.Dot(graph_type="digraph", rankdir=rankdir, dpi=dpi)
    for layer in model.layers:
        label = f"{layer.name} ({type(layer).__name__})" if show_layer_names else type(layer).__name__
        if show_shapes:
            try:
                label += f"\\n{layer.output_shape}"
            except AttributeError:
                pass
        dot.add_node(pydot.Node(str(id(layer)), label=label, shape="record"))
    names = {id(layer) for layer in model.layers}
    for layer in model.layers:
        for node in layer._inbound_nodes:
            for t in node.input_tensors:
                src = t.node.layer if t.node is not None else None
                if src is not None and id(src) in names:
                    dot.add_edge(pydot.Edge(str(id(src)), str(id(layer))))
    return dot


def plot_model(model, to_file="model.png", show_shapes=False, show_dtype=False, show_layer_names=True,
               rankdir="TB", dpi=200, **kwargs):
    dot = model_to_dot(model, show_shapes=show_shapes, show_dtype=show_dtype, show_layer_names=show_layer_names,
                       rankdir=rankdir, dpi=dpi)
    extension = to_file.rsplit(".", 1)[-1] if "." in to_file else "png"
    try:
        dot.write(to_file, format=extension)
    except (FileNotFoundError, OSError) as e:
        raise ImportError(f"plot_model could not run Graphviz ({e}). Install graphviz "
                          "(https://graphviz.gitlab.io/download/) so that its `dot` program is on PATH.") from None
    return to_file
