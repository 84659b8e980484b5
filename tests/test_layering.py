"""Layers import downward only: core <- ops (with ragged, sparse) <- kernels <- autodiff <- runtime <- the rest.

The import graph is read from the sources (AST; imports inside functions count too). Every
import that runs up the layers must be listed in KNOWN_UPWARD (the debt recorded when this
check was added, issue 12); a new one fails. Remove entries as the imports are moved down
(the report of issue 12 says how); a listed edge that no longer exists fails too, so the
list only shrinks.
"""
import ast
import os

import tensorweave

ROOT = os.path.dirname(tensorweave.__file__)
# ragged/ and sparse/ are the composite tensor types and their ops (TF keeps them in python/ops/):
# they belong to the ops layer, so they too may import only core and ops.
LAYERS = {"core": 0, "ops": 1, "ragged": 1, "sparse": 1, "kernels": 2, "autodiff": 3, "runtime": 4}
TOP = 5   # distribute, keras, saving, train, data, compat, onnx, commands, examples, top-level modules


def _layer(module):
    parts = module.split(".")
    if parts[0] != "tensorweave":
        return None
    if len(parts) == 1:
        return TOP                    # "import tensorweave" is the whole public API
    return LAYERS.get(parts[1], TOP)


def _package(module):
    parts = module.split(".")
    return ".".join(parts[:2])


def _module_name(path):
    rel = os.path.relpath(path, os.path.dirname(ROOT))[:-3].replace(os.sep, ".")
    return rel[:-len(".__init__")] if rel.endswith(".__init__") else rel


def _imports(path, module):
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    is_pkg = path.endswith("__init__.py")
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[:len(base) - node.level + (1 if is_pkg else 0)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            yield target
            for a in node.names:       # "from tensorweave.runtime import executor" names a module
                yield f"{target}.{a.name}"


def upward_edges():
    edges = set()
    for dirpath, _, files in os.walk(ROOT):
        for f in files:
            if not f.endswith(".py"):
                continue
            path = os.path.join(dirpath, f)
            module = _module_name(path)
            mine = _layer(module)
            for target in _imports(path, module):
                theirs = _layer(target)
                if theirs is not None and theirs > mine and mine < TOP:
                    edges.add((module, _package(target)))
    return edges


# (importing module, imported package): the upward imports that existed when this check came in.
KNOWN_UPWARD = {
    ("tensorweave.core.convert", "tensorweave.ops"),        # constant / stack to convert values
    ("tensorweave.core.graph", "tensorweave.ops"),          # constant / placeholder made by the graph
    ("tensorweave.core.tensor", "tensorweave.ops"),         # array_ops for tensor methods
    ("tensorweave.ops.variables", "tensorweave.runtime"),       # executor (initial values)
}


def test_no_new_upward_imports():
    new = sorted(upward_edges() - KNOWN_UPWARD)
    assert not new, ("imports running up the layers (core <- ops <- kernels <- autodiff <- runtime <- the rest): "
                     + "; ".join(f"{a} imports {b}" for a, b in new)
                     + ". Hint: move what the lower layer needs down, or call up through a registered hook "
                     "(docs/design/plans-and-runtimes.md, Layering)")


def test_the_check_sees_imports_inside_functions(tmp_path):
    pkg = tmp_path / "tensorweave" / "core"
    pkg.mkdir(parents=True)
    src = pkg / "probe.py"
    src.write_text("def f():\n    from tensorweave.runtime import executor\n    from ..keras import layers\n")
    found = set(_imports(str(src), "tensorweave.core.probe"))
    assert {"tensorweave.runtime.executor", "tensorweave.keras.layers"} <= found
    assert _layer("tensorweave.runtime.executor") > _layer("tensorweave.core.probe")
