"""API coverage (issue 16): how much of TF 2.x's and Keras 3's public API tensorweave has and tests.

For each namespace (``tf``, ``tf.nn``, ..., ``keras.models``) the public names are read from
TensorFlow and Keras themselves (``dir()`` without ``_`` names and without submodules). Each
name is then looked up in the matching tensorweave namespace (``tf.X`` -> ``tensorweave.X``,
``keras.X`` -> ``tensorweave.keras.X``) and classed as

* **tested**: present, and exercised by our tests, defined mechanically: the object it names is
  reached by a dotted name, an import or a module alias (``T = tw.train``) in a test file (``tests/**/*.py``, which includes the op
  table ``tests/opinfos``), in a TensorFlow-differential case (``tests/tfdiff/cases.py``, run with
  ``tf = tensorweave``) or in a doctest example of ``tensorweave/`` (doctests run in the
  suite). Paths are resolved through the files' own import aliases (``import tensorweave as tw``,
  ``from tensorweave.keras import layers``), and a name counts when its object is the object a
  tested path reaches (``tw.math.add`` is ``tw.add``), or, for non-callables (dtypes,
  constants), when its own path is used. A test file that uses a tensorweave module and holds the
  name as a string literal (table-driven tests: ``getattr(ops, name)``) also counts;
* **untested**: present (``getattr`` succeeds and is not None) but not exercised as above;
* **missing**: absent.

The script runs in the TensorFlow venv (``~/.cache/tensorweave/bench-tf-venv/bin/python``) and
imports tensorweave from this checkout through ``sys.path``: the tensorweave half runs in a
subprocess with the project's interpreter (``--tw-python``, default ``.venv/bin/python`` here or
in ``/work/main``), since TensorFlow's venv pins dependencies of its own and lacks ours.

Usage: ``python benchmarks/api_coverage.py [--json] [--show-missing NS]``.
"""
import argparse
import ast
import doctest
import json
import os
import subprocess
import sys
import types

# The checkout measured: this one, or another (``TW_COVERAGE_ROOT=/path/to/checkout``).
ROOT = os.environ.get("TW_COVERAGE_ROOT") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

NONE_VALUED = "__none_valued__"
NAMESPACES = ["tf", "tf.nn", "tf.math", "tf.linalg", "tf.random", "tf.image", "tf.signal", "tf.sparse",
              "tf.data", "tf.train", "tf.io", "keras.layers", "keras.losses", "keras.metrics",
              "keras.optimizers", "keras.callbacks", "keras.activations", "keras.initializers",
              "keras.ops", "keras.utils", "keras.models"]


# ---- the TensorFlow half -------------------------------------------------------------------------
def reference_names():
    """{namespace: sorted public non-module names} read from TensorFlow and Keras."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    import tensorflow as tf
    roots = {"tf": tf, "keras": keras}
    out = {}
    for ns in NAMESPACES:
        obj = roots[ns.split(".")[0]]
        for part in ns.split(".")[1:]:
            obj = getattr(obj, part)
        out[ns] = sorted(n for n in dir(obj)
                         if not n.startswith("_") and not isinstance(getattr(obj, n, None), types.ModuleType))
        # names whose value is None in TF itself (tf.newaxis): present when defined, even as None
        out.setdefault(NONE_VALUED, {})[ns] = [n for n in out[ns] if getattr(obj, n, 0) is None]
    return out


# ---- the tensorweave half (runs in the project's interpreter) ------------------------------------
def tw_module_name(ns):
    head, _, rest = ns.partition(".")
    base = "tensorweave" if head == "tf" else "tensorweave.keras"
    return base + ("." + rest if rest else "")


class _Uses(ast.NodeVisitor):
    """Dotted tensorweave paths a piece of code reaches, through its own import aliases."""

    def __init__(self, paths):
        self.alias = {}
        self.paths = paths

    def visit_Import(self, node):
        for a in node.names:
            if a.name.split(".")[0] == "tensorweave":
                self.alias[a.asname or a.name.split(".")[0]] = a.name if a.asname else "tensorweave"
                self.paths.add(a.name)

    def visit_ImportFrom(self, node):
        if node.module and node.module.split(".")[0] == "tensorweave" and not node.level:
            for a in node.names:
                full = f"{node.module}.{a.name}"
                self.alias[a.asname or a.name] = full
                self.paths.add(full)

    def _path(self, node):
        """The tensorweave path of a dotted expression (``tw.train``), or None."""
        chain = []
        while isinstance(node, ast.Attribute):
            chain.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name) and node.id in self.alias:
            return ".".join([self.alias[node.id]] + chain[::-1])
        return None

    def visit_Assign(self, node):
        # `T = tw.train` or `dl = tw.experimental.dlpack`: later `T.Example` is `tensorweave.train.Example`
        path = self._path(node.value)
        if path is not None and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            self.alias[node.targets[0].id] = path
        self.generic_visit(node)

    def visit_Attribute(self, node):
        chain = []
        cur = node
        while isinstance(cur, ast.Attribute):
            chain.append(cur.attr)
            cur = cur.value
        if isinstance(cur, ast.Name) and cur.id in self.alias:
            path = self.alias[cur.id]
            for part in reversed(chain):
                path += "." + part
                self.paths.add(path)
        self.generic_visit(node)

    def visit_Name(self, node):
        if node.id in self.alias:
            self.paths.add(self.alias[node.id])


def _scan(source, paths, preamble="", strings=False):
    try:
        tree = ast.parse(preamble + source)
    except SyntaxError:
        return
    uses = set()
    _Uses(uses).visit(tree)
    paths |= uses
    if strings:
        # Table-driven tests name ops by string (``getattr(ops, name)`` over ``["abs", "add", ...]``): an
        # identifier-like string literal in a file counts as ``<module>.<string>`` for each tensorweave
        # module path the file uses; only paths that resolve to an object count later.
        names = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                 and n.value.isidentifier()}
        paths |= {f"{u}.{n}" for u in uses for n in names}


def _scan_tf_cases(root, paths):
    """The TensorFlow-differential cases (``tests/tfdiff/cases.py``) are expressions over ``tf``
    that ``test_tf_differential.py`` runs with ``tf = tensorweave`` and compares with TF's
    recorded result: each one uses the names it calls."""
    here = os.path.join(root, "tests", "tfdiff")
    if not os.path.exists(os.path.join(here, "cases.py")):
        return
    sys.path.insert(0, here)
    try:
        import cases  # noqa: PLC0415 - the checkout's own case table
        for _cid, _fam, src in cases.all_cases():
            _scan(src, paths, preamble="import tensorweave as tf\n")
    finally:
        sys.path.remove(here)
        for name in ("cases", "kops_cases"):
            sys.modules.pop(name, None)


def used_paths(root):
    """Every tensorweave dotted path used by tests and by doctest examples of the package."""
    paths = set()
    for base, _, files in os.walk(os.path.join(root, "tests")):
        for f in files:
            if f.endswith(".py"):
                with open(os.path.join(base, f), encoding="utf-8") as fh:
                    _scan(fh.read(), paths, strings=True)
    _scan_tf_cases(root, paths)
    parser = doctest.DocTestParser()
    for base, _, files in os.walk(os.path.join(root, "tensorweave")):
        for f in files:
            if not f.endswith(".py"):
                continue
            with open(os.path.join(base, f), encoding="utf-8") as fh:
                text = fh.read()
            try:
                docs = [n for n in ast.walk(ast.parse(text))
                        if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))]
            except SyntaxError:
                continue
            code = []
            for n in docs:
                d = ast.get_docstring(n, clean=True)
                if d and ">>>" in d:
                    code += [ex.source for ex in parser.get_examples(d)]
            if code:
                # A module's examples run with its own globals: its imports count as aliases.
                modname = os.path.relpath(os.path.join(base, f), root)[:-3].replace(os.sep, ".")
                _scan("\n".join(code), paths, preamble="")
                _scan("\n".join(code), paths, preamble=f"import {modname.removesuffix('.__init__')}\n")
    return paths


def _resolve(path):
    import importlib
    parts = path.split(".")
    obj = None
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except Exception:  # noqa: BLE001 - not a module path
            continue
        for p in parts[i:]:
            obj = getattr(obj, p)
        return obj
    raise AttributeError(path)


def classify(names, root):
    sys.path.insert(0, root)
    os.environ.setdefault("TW_QUIET", "1")
    import tensorweave  # noqa: F401
    assert os.path.dirname(os.path.dirname(tensorweave.__file__)) == root, tensorweave.__file__
    paths = used_paths(root)
    tested_ids, tested_paths = set(), set()
    for p in paths:
        try:
            obj = _resolve(p)
        except Exception:  # noqa: BLE001 - a path into something that is not there
            continue
        tested_paths.add(p)
        if callable(obj):
            tested_ids.add(id(obj))
    result = {}
    none_valued = names.pop(NONE_VALUED, {})
    for ns, ref in names.items():
        modname = tw_module_name(ns)
        try:
            mod = _resolve(modname)
        except Exception:  # noqa: BLE001
            mod = None
        rows = {"tested": [], "untested": [], "missing": []}
        for n in ref:
            obj = getattr(mod, n, None) if mod is not None else None
            if obj is None and not (n in none_valued.get(ns, ()) and hasattr(mod, n)):
                rows["missing"].append(n)
            elif f"{modname}.{n}" in tested_paths or (callable(obj) and id(obj) in tested_ids):
                rows["tested"].append(n)
            else:
                rows["untested"].append(n)
        result[ns] = rows
    return result


# ---- driver --------------------------------------------------------------------------------------
def _default_tw_python():
    for cand in (os.path.join(ROOT, ".venv", "bin", "python"), "/work/main/.venv/bin/python"):
        if os.path.exists(cand):
            return cand
    return sys.executable


def table(result):
    lines = [f"{'namespace':<20}{'names':>7}{'tested':>8}{'untested':>10}{'missing':>9}{'tested %':>10}{'present %':>11}"]
    tot = {"tested": 0, "untested": 0, "missing": 0}
    for ns in NAMESPACES:
        r = result[ns]
        c = {k: len(v) for k, v in r.items()}
        n = sum(c.values())
        for k in tot:
            tot[k] += c[k]
        lines.append(f"{ns:<20}{n:>7}{c['tested']:>8}{c['untested']:>10}{c['missing']:>9}"
                     f"{100 * c['tested'] / max(n, 1):>9.1f}%{100 * (n - c['missing']) / max(n, 1):>10.1f}%")
    n = sum(tot.values())
    lines.append(f"{'overall':<20}{n:>7}{tot['tested']:>8}{tot['untested']:>10}{tot['missing']:>9}"
                 f"{100 * tot['tested'] / n:>9.1f}%{100 * (n - tot['missing']) / n:>10.1f}%")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tw-python", default=os.environ.get("TW_PYTHON") or _default_tw_python())
    ap.add_argument("--json", action="store_true", help="print the classification as JSON")
    ap.add_argument("--show", metavar="NS", action="append", default=[],
                    help="list the missing and untested names of a namespace (repeatable)")
    ap.add_argument("--_tw-side", dest="tw_side", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.tw_side:
        json.dump(classify(json.load(sys.stdin), ROOT), sys.stdout)
        return
    names = reference_names()
    proc = subprocess.run([args.tw_python, os.path.abspath(__file__), "--_tw-side"], input=json.dumps(names),
                          capture_output=True, text=True, check=False)
    if proc.returncode:
        sys.exit(f"tensorweave side failed:\n{proc.stderr}")
    result = json.loads(proc.stdout)
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(table(result))
    for ns in args.show:
        print(f"\n{ns} missing: {' '.join(result[ns]['missing'])}")
        print(f"{ns} untested: {' '.join(result[ns]['untested'])}")


if __name__ == "__main__":
    main()
