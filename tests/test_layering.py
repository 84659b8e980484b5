"""Layers import downward only: core <- ops (with ragged, sparse) <- kernels <- autodiff <- runtime <- the rest.

The import graph is read from the sources (AST; imports inside functions count too). Every
import that runs up the layers must be listed in KNOWN_UPWARD (the debt recorded when this
check was added, issue 12); a new one fails. Remove entries as the imports are moved down
(the report of issue 12 says how); a listed edge that no longer exists fails too, so the
list only shrinks.
"""
import ast
import os

import pytest

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
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and (getattr(node.func, "attr", None) == "import_module" or getattr(node.func, "id", None) in (
                  "import_module", "__import__"))):
            yield node.args[0].value   # importlib.import_module("tensorweave.keras") is an import too


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


# (importing module, imported package): upward imports still allowed. The 15 that existed when this
# check came in were all removed (issue 12): what a lower layer needs moved down (core/devices.py,
# core/philox.py, kernels/threads.py, ops/indexed_slices.py, the session stack in core/context.py),
# gradients that need the walker register from autodiff/, and the rest calls up through
# core/upcalls.py, which the upper layer fills at import. Keep it empty.
KNOWN_UPWARD = set()


def test_no_new_upward_imports():
    new = sorted(upward_edges() - KNOWN_UPWARD)
    assert not new, ("imports running up the layers (core <- ops <- kernels <- autodiff <- runtime <- the rest): "
                     + "; ".join(f"{a} imports {b}" for a, b in new)
                     + ". Hint: move what the lower layer needs down, or call up through a hook the upper "
                     "layer installs (core/upcalls.py; docs/design/plans-and-runtimes.md, Layering)")


def test_the_allow_list_only_shrinks():
    stale = sorted(KNOWN_UPWARD - upward_edges())
    assert not stale, f"KNOWN_UPWARD lists edges that no longer exist (remove them): {stale}"


def test_upcalls_are_installed_by_their_layers():
    from tensorweave.core import upcalls
    owners = {"constant": "tensorweave.ops.array_ops", "placeholder": "tensorweave.ops.array_ops",
              "stack": "tensorweave.ops.array_ops", "unstack": "tensorweave.ops.array_ops",
              "run_fragment": "tensorweave.runtime.executor", "load_ops": "tensorweave"}
    assert set(owners) == set(upcalls._NAMES)
    assert {n: getattr(upcalls, n).__module__ for n in owners} == owners


def test_a_missing_upcall_names_its_owner():
    from tensorweave.core import upcalls
    call = upcalls._missing("constant", "tensorweave.ops.array_ops")
    with pytest.raises(RuntimeError, match="constant is installed by tensorweave.ops.array_ops"):
        call(1.0)
    with pytest.raises(ValueError, match="unknown call 'konstant'"):
        upcalls.install(konstant=None)


def test_the_check_sees_imports_inside_functions(tmp_path):
    pkg = tmp_path / "tensorweave" / "core"
    pkg.mkdir(parents=True)
    src = pkg / "probe.py"
    src.write_text("import importlib\ndef f():\n    from tensorweave.runtime import executor\n"
                   "    from ..keras import layers\n    importlib.import_module('tensorweave.saving')\n")
    found = set(_imports(str(src), "tensorweave.core.probe"))
    assert {"tensorweave.runtime.executor", "tensorweave.keras.layers", "tensorweave.saving"} <= found
    assert _layer("tensorweave.runtime.executor") > _layer("tensorweave.core.probe")


def test_each_upcall_works_end_to_end():
    import numpy as np
    import tensorweave as tw
    made = []
    outer = tw.constant([10.0, 20.0])

    @tw.function
    def f(x):
        if not made:     # run_fragment: an initial value traced in the function, computed once
            made.append(tw.Variable(tw.ones([2]) * 3.0))
        a, b = x                                              # iterating a symbolic tensor: unstack
        return made[0] + tw.convert_to_tensor([b, a]) + outer  # stack; the eager capture: constant
    np.testing.assert_array_equal(f(tw.constant([1.0, 2.0])).numpy(), [15.0, 24.0])

    calls = []

    @tw.function
    def g(x):
        if not calls:
            calls.append(tw.Variable(x * 2.0))
        return calls[0]
    with pytest.raises(ValueError, match="depends on the function's inputs"):
        g(tw.constant([1.0]))

    graph = tw.Graph()
    with graph.as_default():
        y = tw.constant([1.0, 2.0]) * 2.0
        first, second = y                                     # SymbolicTensor.__iter__: unstack
        with tw.compat.v1.Session(graph=graph).as_default():  # Tensor.eval: the thread's default session
            assert float(second.eval()) == 4.0
    with pytest.raises(ValueError, match="No default session"):
        first.eval()
