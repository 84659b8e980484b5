"""Ahead-of-time compiled kernels: checking and attaching what ``aot_build`` installed.

``make setup`` (or ``python -m tensorweave.kernels.cpu.aot_build``) compiles the loops of
``aot_kernels.KERNELS`` into one extension module in this package's ``_aot`` folder, with a
manifest (JSON) naming the module file and its SHA-256, the :func:`code_digest` of every kernel
module it was built from (its code: a docstring or comment edit keeps a build current), the
versions of numba, llvmlite, NumPy and Python, and the CPU (LLVM's name and feature string) it
was built for. When a kernel of that table is defined
(``jit.njit``/``njit_twin``), :func:`attach` puts the built loop into the kernel's numba
dispatcher for each built signature, so a call with those argument types runs it at once (numba's
own type dispatch, in C) instead of compiling.

This is installed code, like any extension module: it is read only from the package's own folder
(never from a user cache), and only after the module file's hash equals the manifest's. Anything
that does not check out falls back to the JIT path of ``jit.py``, with one :class:`AOTWarning`
naming the reason and the command that rebuilds: a module file missing or changed, a manifest that
does not parse, another numba/llvmlite/NumPy/Python or another CPU than the build's (a loop built
for AVX-512 must not run where there is none), and per kernel module, a source changed since the
build (its loops would be stale). No manifest at all means nothing was built: no warning.
``TW_AOT=0`` switches the whole mechanism off.

Same bits: the loops are built by numba from the same functions with the JIT's settings (no
fastmath, NumPy's error model, the GIL released) for the same CPU, so they give the JIT's bits
(``tests/test_cold18_aot.py`` compares them).

>>> from tensorweave.kernels.cpu import aot
>>> aot.load("/nonexistent") is None          # nothing built there: no warning, JIT path
True
"""
import ast
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
import threading
import warnings

from tensorweave.kernels.cpu.aot_kernels import KERNELS

#: where ``aot_build`` writes by default: inside the package, next to this file
DIRECTORY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_aot")
MANIFEST = "manifest.json"
FORMAT = 1
BUILDER = "tensorweave.kernels.cpu.aot_build"
ENABLED = os.environ.get("TW_AOT", "1") != "0"
REBUILD = "rebuild: `make aot`, or `python -m tensorweave.kernels.cpu.aot_build`; `TW_AOT=0` silences this"


class AOTWarning(RuntimeWarning):
    """An ahead-of-time build was found but not used (the JIT path runs instead)."""


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def code_digest(module):
    """SHA-256 of ``module``'s code as the compiler sees it: its syntax tree without docstrings
    (comments and layout never reach the tree), so editing a docstring or a comment of a kernel
    module keeps its build current and editing its code makes the build stale.

    >>> code_digest("tensorweave.kernels.cpu.aot_kernels") == code_digest("tensorweave.kernels.cpu.aot_kernels")
    True
    """
    path = module_source(module)
    with open(path, "rb") as f:
        tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:]
    return hashlib.sha256(ast.dump(tree).encode()).hexdigest()


def current_digest(module, files=None):
    """:func:`code_digest` of ``module`` now. ``files`` (a manifest's: per module the file's SHA-256
    and the digest of its code when built) spares the parse: a file byte for byte the one built from
    has that digest (a SHA-256: ~0.04 ms; a parse ~11 ms, 290 ms for a build's 26 modules at load 4)."""
    known = files.get(module) if isinstance(files, dict) else None
    if isinstance(known, dict) and known.get("sha256") == sha256_file(module_source(module)):
        return known.get("code")
    return code_digest(module)


def file_digests(sources):
    """A manifest's ``files`` (:func:`current_digest`) for its ``sources`` (module: code digest)."""
    return {m: {"sha256": sha256_file(module_source(m)), "code": digest} for m, digest in sources.items()}


def machine():
    """What a build is valid for: library versions and the CPU LLVM compiles for."""
    import llvmlite
    import llvmlite.binding as ll
    import numba
    import numpy
    from numba.core import config
    return {"numba": numba.__version__, "llvmlite": llvmlite.__version__, "numpy": numpy.__version__,
            "python": sys.version.split()[0], "cpu": config.CPU_NAME or ll.get_host_cpu_name(),
            "features": config.CPU_FEATURES or ll.get_host_cpu_features().flatten()}


def module_source(module):
    """Path of a kernel module's source file (the module need not be imported yet)."""
    loaded = sys.modules.get(module)
    if loaded is not None and getattr(loaded, "__file__", None):
        return loaded.__file__
    return importlib.util.find_spec(module).origin


class Library:
    """A checked build: ``loops[(module, kernel)]`` = ``[(signature, built loop), ...]``;
    ``sources[module]`` = the :func:`code_digest` of the module it was built from; ``depends[module]``
    = the modules whose compiled code a kernel module's loops carry (its own, and those defining the
    numba functions and intrinsics they call: ``aot_build.built_modules``)."""

    def __init__(self, directory, manifest, extension):
        self.directory = directory
        self.manifest = manifest
        self.sources = manifest["sources"]
        self.files = manifest.get("files")
        self.depends = manifest.get("depends", {})
        self.loops = {}
        for e in manifest["exports"]:
            self.loops.setdefault((e["module"], e["kernel"]), []).append(
                (e["signature"], getattr(extension, e["symbol"])))
        self._fresh = {}

    def fresh(self, module):
        """Whether ``module``'s source, and the sources of the modules its loops carry code of
        (``depends``), are the ones built (warns once per stale module)."""
        ok = self._fresh.get(module)
        if ok is None:
            stale = []
            for m in self.depends.get(module, [module]):
                try:
                    if current_digest(m, self.files) != self.sources.get(m):
                        stale.append(m)
                except (OSError, AttributeError, ImportError, ValueError, SyntaxError):
                    stale.append(m)
            ok = self._fresh[module] = not stale
            if not ok:
                of = "its source" if stale == [module] else "the source of " + ", ".join(stale)
                warnings.warn(f"tensorweave: ahead-of-time kernels of {module} were built from another version "
                              f"of {of}; its kernels compile on first use instead ({REBUILD})",
                              AOTWarning, stacklevel=2)
        return ok


def stale_sources(directory=DIRECTORY):
    """The modules whose code changed since the build in ``directory`` (:func:`code_digest`;
    sorted; empty when the build is current; None when nothing readable was built there). A
    benchmark records this: with a stale build the first steps of every process compile, and a
    short run times the compiler.

    >>> stale_sources("/nonexistent") is None
    True
    """
    try:
        with open(os.path.join(directory, MANIFEST), encoding="utf-8") as f:
            manifest = json.load(f)
        sources, files = manifest["sources"], manifest.get("files")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    stale = []
    for module, digest in sources.items():
        try:
            current = current_digest(module, files)
        except (OSError, AttributeError, ImportError, ValueError, SyntaxError):
            current = None
        if current != digest:
            stale.append(module)
    return sorted(stale)


def _reject(reason):
    warnings.warn(f"tensorweave: ahead-of-time kernels not used: {reason}; kernels compile on first use "
                  f"instead ({REBUILD})", AOTWarning, stacklevel=3)


def load(directory=DIRECTORY):
    """The checked :class:`Library` built in ``directory``, or None (with an :class:`AOTWarning`
    unless nothing was built there)."""
    path = os.path.join(directory, MANIFEST)
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            return _reject(f"{path} is not a format-{FORMAT} manifest")
        name, digest = manifest["module"], manifest["sha256"]
        exports, sources = manifest["exports"], manifest["sources"]
        if not (isinstance(name, str) and name.isidentifier() and isinstance(digest, str)
                and isinstance(exports, list) and isinstance(sources, dict)):
            return _reject(f"{path} is malformed")
    except (OSError, ValueError, KeyError) as e:
        return _reject(f"{path} could not be read ({e})")
    try:
        same_builder = current_digest(BUILDER, manifest.get("files")) == sources.get(BUILDER)
    except (OSError, ImportError, AttributeError, SyntaxError, ValueError):
        same_builder = False
    if not same_builder:
        return _reject(f"{path} was made by another version of {BUILDER}")
    built, here = manifest.get("machine"), machine()
    if built != here:
        diff = sorted(k for k in here if not isinstance(built, dict) or built.get(k) != here[k])
        return _reject(f"built for another {', '.join(diff)} than this process's")
    file = os.path.join(directory, name + importlib.machinery.EXTENSION_SUFFIXES[0])
    try:
        if sha256_file(file) != digest:
            return _reject(f"{file} does not match the SHA-256 its build recorded")
    except OSError as e:
        return _reject(f"{file} could not be read ({e.strerror})")
    try:
        spec = importlib.util.spec_from_file_location(name, file)
        extension = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(extension)
        return Library(directory, manifest, extension)
    except (ImportError, AttributeError, KeyError, TypeError) as e:
        return _reject(f"{file} could not be loaded ({e})")


_library = {}
_lock = threading.Lock()


def library():
    """This process's checked build of the package (loaded once), or None."""
    with _lock:
        if "value" not in _library:
            _library["value"] = load() if ENABLED else None
        return _library["value"]


def attach(kernel, lib=None):
    """Puts ``lib``'s (default: the package's) built loops of ``kernel`` (a numba dispatcher)
    into its dispatch table; returns the argument types they serve. A later JIT compile of
    such types (a compiled caller needs the kernel's code, or a test compares the two) is
    recorded in ``kernel.overloads`` without replacing the built loop."""
    fn = kernel.py_func
    module, name = fn.__module__, fn.__qualname__
    if name not in KERNELS.get(module, ()) and lib is None:
        return ()
    lib = lib or library()
    if lib is None or (module, name) not in lib.loops or not lib.fresh(module):
        return ()
    from numba.core import sigutils
    served = []
    for signature, loop in lib.loops[(module, name)]:
        args, _ = sigutils.normalize_signature(signature)
        kernel._insert([a._code for a in args], loop, False)
        served.append(tuple(args))
    add_overload = kernel.add_overload

    def add_jit_overload(cres):
        if tuple(cres.signature.args) in served:
            kernel.overloads[tuple(cres.signature.args)] = cres
        else:
            add_overload(cres)
    kernel.add_overload = add_jit_overload
    kernel.aot_signatures = tuple(served)
    return kernel.aot_signatures
