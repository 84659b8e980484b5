"""Every module-level value that changes after import is listed in docs/design/process-state.md with
its scope (import, cache, keyed, thread, runtime, process, open): a new global, or one that moved,
must be written down there with who writes it and what a second rank in the process sees (issue 12:
one runtime per rank).

The sources are read, not imported: a ``global`` assignment in a function, an in-place change from a
function of a module-level container or object (also another module's, through its import alias),
attributes of a module-level class set in a function, and ``threading.local`` instances.
"""
import ast
import functools
import os
import re

import tensorweave

ROOT = os.path.dirname(tensorweave.__file__)
DOC = os.path.join(os.path.dirname(ROOT), "docs", "design", "process-state.md")
SCOPES = {"import", "cache", "keyed", "thread", "runtime", "process", "open"}

MUTATORS = {"append", "extend", "insert", "pop", "popitem", "remove", "clear", "update", "setdefault", "add",
            "discard", "appendleft", "move_to_end", "__setitem__", "sort", "reverse"}
_CONTAINERS = (ast.Dict, ast.List, ast.Set, ast.Call, ast.DictComp, ast.ListComp, ast.SetComp)


def _module_name(root, path):
    rel = os.path.relpath(path, os.path.dirname(root))[:-3].replace(os.sep, ".")
    return rel[:-len(".__init__")] if rel.endswith(".__init__") else rel


def _flat_targets(targets):
    for t in targets:
        if isinstance(t, (ast.Tuple, ast.List)):
            yield from _flat_targets(t.elts)
        elif isinstance(t, ast.Starred):
            yield from _flat_targets([t.value])
        else:
            yield t


def _top_level(tree):
    """name -> value node of the module's top-level assignments; module-level class names."""
    top, classes = {}, {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            classes[node.name] = node
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) else []
        for t in targets:
            if isinstance(t, ast.Name):
                top[t.id] = node.value
    return top, classes


def _aliases(tree):
    """alias -> the tensorweave module it names (import tensorweave.x as a / from tensorweave.x import y)."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("tensorweave") and a.asname:
                    out[a.asname] = a.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tensorweave") and not node.level:
            for a in node.names:
                out[a.asname or a.name] = f"{node.module}.{a.name}"
    return out


def _in_functions(node, inside, declared, visit):
    """Calls ``visit(child, declared globals)`` for every node inside a function body."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            _in_functions(child, True, set(), visit)
            continue
        if isinstance(child, ast.Global):
            declared.update(child.names)
        if inside:
            visit(child, declared)
        _in_functions(child, inside, declared, visit)


def scan(root):
    """{(module, name): kind} for module-level state that changes after import.

    kind: "rebound" (a ``global`` assignment in a function), "mutated" (changed in place from a
    function), "class" (attributes of a module-level class set in a function), "thread-local"."""
    trees = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            if f.endswith(".py"):
                p = os.path.join(dirpath, f)
                trees[_module_name(root, p)] = ast.parse(open(p, encoding="utf-8").read(), p)
    tops = {m: _top_level(t) for m, t in trees.items()}
    found = {}
    for module, tree in trees.items():
        top, classes = tops[module]
        local_classes = {n for n, c in classes.items() if any(
            (isinstance(b, ast.Attribute) and b.attr == "local") or (isinstance(b, ast.Name) and b.id == "local")
            for b in c.bases)}
        for name, value in top.items():
            if isinstance(value, ast.Call):
                fn = value.func
                callee = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else None
                if callee == "local" or callee in local_classes:
                    found[(module, name)] = "thread-local"
        aliases = _aliases(tree)

        def changed(target, declared, module=module, top=top, classes=classes, local_classes=local_classes,
                    aliases=aliases):
            if isinstance(target, ast.Name):
                if target.id in declared and target.id in top:
                    found.setdefault((module, target.id), "rebound")
                return
            if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Attribute):
                target = target.value                     # other.TABLE[k] = v, Cls.cache[k] = v
            base = target.value if isinstance(target, (ast.Subscript, ast.Attribute)) else None
            if not isinstance(base, ast.Name):
                return
            if base.id in aliases and isinstance(target, ast.Attribute):        # another module's global
                owner = aliases[base.id]
                if owner in tops and target.attr in tops[owner][0]:
                    found.setdefault((owner, target.attr), "mutated")
            elif base.id in classes and base.id not in local_classes and isinstance(target, ast.Attribute):
                found.setdefault((module, base.id), "class")
            elif base.id in top and base.id not in declared and isinstance(top[base.id], _CONTAINERS):
                found.setdefault((module, base.id), "mutated")

        def visit(node, declared):
            if isinstance(node, (ast.Assign, ast.Delete)):
                for t in _flat_targets(node.targets):
                    changed(t, declared)
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                changed(node.target, declared)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
                target = node.func.value
                if isinstance(target, ast.Name):
                    if target.id in top and isinstance(top[target.id], _CONTAINERS):
                        found.setdefault((module, target.id), "mutated")
                elif isinstance(target, ast.Attribute):
                    changed(target, declared)

        _in_functions(tree, False, set(), visit)
    return found


def _reads_environment(value):
    """Whether an expression reads the environment (``os.environ``, ``os.getenv``)."""
    return any(isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "os"
               and n.attr in ("environ", "getenv") for n in ast.walk(value))


def switches(root):
    """{(module, name)} of module-level names set from the environment at import: the switches
    (``TW_REMAP_ATTENTION`` -> ``passes.attention:ENABLED``) that benchmarks and tests set or
    monkeypatch for their A/B runs. Their writers are outside the package, so :func:`scan` does not
    see them; each is state a second rank in the process shares, and is listed."""
    found = set()
    for dirpath, _, files in os.walk(root):
        for f in files:
            if f.endswith(".py"):
                p = os.path.join(dirpath, f)
                top, _ = _top_level(ast.parse(open(p, encoding="utf-8").read(), p))
                found.update((_module_name(root, p), name) for name, value in top.items()
                             if value is not None and _reads_environment(value))
    return found


def documented():
    rows = {}
    for line in open(DOC, encoding="utf-8"):
        m = re.match(r"^\| `(tensorweave[\w.]*):(\w+)` \| (\w+) \| (.+?) \| (.*)\|$", line.strip())
        if m:
            rows[(m.group(1), m.group(2))] = m.group(3)
    return rows


@functools.lru_cache(maxsize=1)
def _package_state():
    return scan(ROOT)


def test_every_global_that_changes_after_import_is_documented():
    found, listed = _package_state(), documented()
    missing = sorted(f"{m}:{n} ({k})" for (m, n), k in found.items() if (m, n) not in listed)
    assert not missing, ("module-level state that changes after import, not in docs/design/process-state.md: "
                         + ", ".join(missing) + ". Hint: make it immutable after import, thread-local or part of "
                         "the Runtime; else add a row with its scope, who writes it and what another rank sees")


def test_every_switch_read_from_the_environment_is_documented():
    listed = documented()
    missing = sorted(f"{m}:{n}" for m, n in switches(ROOT) if (m, n) not in listed)
    assert not missing, ("module-level switches read from the environment, not in docs/design/process-state.md: "
                         + ", ".join(missing) + ". Hint: add a row with the variable, who sets it after import "
                         "(benchmarks, tests) and when it is read (per call, when a plan is built)")


def test_the_switch_scan_sees_environment_reads_at_top_level_only(tmp_path):
    pkg = tmp_path / "tensorweave"
    pkg.mkdir()
    (pkg / "probe.py").write_text(
        "import os\n"
        "ENABLED = os.environ.get('TW_X', '1') != '0'\n"
        "_switch = {'on': os.getenv('TW_Y') == '1'}\n"
        "MODE: str = os.environ['TW_Z'] if 'TW_Z' in os.environ else 'auto'\n"
        "OTHER = 3\n"
        "def f():\n    local = os.environ.get('TW_W')\n    return local\n")
    assert switches(str(pkg)) == {("tensorweave.probe", "ENABLED"), ("tensorweave.probe", "_switch"),
                                  ("tensorweave.probe", "MODE")}


def test_the_table_names_existing_globals_with_known_scopes():
    listed = documented()
    assert len(listed) > 50
    assert set(listed.values()) <= SCOPES, set(listed.values()) - SCOPES
    gone = []
    for module, name in listed:
        path = os.path.join(os.path.dirname(ROOT), *module.split("."))
        path = path + ".py" if os.path.exists(path + ".py") else os.path.join(path, "__init__.py")
        tree = ast.parse(open(path, encoding="utf-8").read())
        names = {t.id for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign, ast.ClassDef))
                 for t in ([ast.Name(node.name)] if isinstance(node, ast.ClassDef) else
                           node.targets if isinstance(node, ast.Assign) else [node.target])
                 if isinstance(t, ast.Name)}
        if name not in names:
            gone.append(f"{module}:{name}")
    assert not gone, f"docs/design/process-state.md lists globals that no longer exist: {gone}"


def test_thread_local_state_is_documented_as_per_thread():
    listed = documented()
    wrong = sorted(f"{m}:{n}" for (m, n), k in _package_state().items() if k == "thread-local" and listed.get((m, n)) != "thread")
    assert not wrong, wrong


def test_the_scan_sees_each_kind_of_change(tmp_path):
    pkg = tmp_path / "tensorweave"
    pkg.mkdir()
    (pkg / "other.py").write_text("TABLE = {}\n")
    (pkg / "probe.py").write_text(
        "import threading\n"
        "import tensorweave.other as other\n"
        "FIXED = {1: 2}\nFIXED[3] = 4\n"                  # changed at import only: not state
        "_hook = None\n_items = []\n_conf = {}\n_tls = threading.local()\n"
        "class _Ns:\n    seed = None\n"
        "class _Obj:\n    pass\n_obj = _Obj()\n"
        "def f(h):\n"
        "    global _hook\n    old, _hook = _hook, h\n"
        "    _items.append(h)\n    _conf['k'] = h\n    _Ns.seed = h\n    _obj.x = h\n"
        "    other.TABLE['k'] = h\n")
    found = scan(str(pkg))
    assert found == {("tensorweave.probe", "_hook"): "rebound", ("tensorweave.probe", "_items"): "mutated",
                     ("tensorweave.probe", "_conf"): "mutated", ("tensorweave.probe", "_tls"): "thread-local",
                     ("tensorweave.probe", "_Ns"): "class", ("tensorweave.probe", "_obj"): "mutated",
                     ("tensorweave.other", "TABLE"): "mutated"}
