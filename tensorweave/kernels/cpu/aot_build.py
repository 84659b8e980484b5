"""Builds the kernels of ``aot_kernels.KERNELS`` ahead of time (install step; see ``aot.py``).

``python -m tensorweave.kernels.cpu.aot_build [--out DIR]`` (``make setup`` and ``make aot`` run
it): numba's ``pycc`` compiles every listed signature into one extension module for this CPU,
with the JIT's settings (NumPy's error model, the GIL released, no fastmath), then a C compiler
links it. The module's name carries a hash of what it was built from; the manifest (JSON: module
file, its SHA-256, per kernel module the digest of its code (``aot.code_digest``: a docstring or
comment edit leaves it, and the build, as they were), library versions and CPU) is
written last and atomically, so a failed or interrupted build leaves the previous build, or
none, in place. Needs numba's ``pycc`` (present, deprecated, in numba 0.68) and a C compiler;
where either is missing the build fails with a message and tensorweave runs as before (kernels
compile on first use).

A minute of CPU on two cores (~15 s of LLVM for the loops, the rest compiling numba's C
helpers); the module is ~1 MB.
"""
import argparse
import contextlib
import hashlib
import importlib
import importlib.machinery
import json
import os
import shutil
import sys
import tempfile
import time
import warnings

from tensorweave.kernels.cpu import aot
from tensorweave.kernels.cpu.aot_kernels import KERNELS

#: the dispatcher options a built loop reproduces; a kernel with others (``parallel``,
#: ``fastmath``, ...) cannot be listed in ``aot_kernels``
REPRODUCED = {"nopython": True, "nogil": True, "error_model": "numpy"}


def _kernel(module, name):
    kernel = getattr(importlib.import_module(module), name)
    options = {k: v for k, v in getattr(kernel, "targetoptions", {}).items() if v is not None}
    if options != REPRODUCED:
        raise ValueError(f"{module}.{name}: cannot be built ahead of time with numba options {options} "
                         f"(only {REPRODUCED})")
    return kernel


@contextlib.contextmanager
def _jit_settings():
    """pycc with the JIT's flags (its defaults hold the GIL and use Python's error model; the
    ``noalias`` of kernels made with ``jit.njit(noalias=True)``) and the JIT's CPU features (pycc
    would take the CPU model's defaults)."""
    from numba.core import codegen
    from numba.pycc import compiler

    class Flags(compiler.Flags):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.release_gil = True
            self.error_model = REPRODUCED["error_model"]

    def compile_extra(typingctx, targetctx, func, args, return_type, flags, *rest, **kwargs):
        if getattr(func, "tw_noalias", False):      # jit.njit(noalias=True): the JIT's flag, this kernel only
            flags = flags.copy()
            flags.noalias = True
        return saved[2](typingctx, targetctx, func, args, return_type, flags, *rest, **kwargs)

    saved = compiler.Flags, codegen.AOTCPUCodegen._customize_tm_features, compiler.compile_extra
    compiler.Flags, compiler.compile_extra = Flags, compile_extra
    codegen.AOTCPUCodegen._customize_tm_features = lambda self: self._get_host_cpu_features()
    try:
        yield
    finally:
        compiler.Flags, codegen.AOTCPUCodegen._customize_tm_features, compiler.compile_extra = saved


def built_modules(kernel):
    """The modules whose code a build of ``kernel`` (a numba dispatcher) carries: its own, and,
    recursively, those defining the numba functions and intrinsics its code names, directly or as
    an attribute of a module it imports (``rnn_gemm.rows``). A change to any of them makes the
    build stale (``aot.Library.fresh``)."""
    import types as pytypes

    import numba
    from numba.core.extending import _Intrinsic
    found, seen, todo = {kernel.py_func.__module__}, set(), [kernel.py_func]
    while todo:
        fn = todo.pop()
        if fn in seen:
            continue
        seen.add(fn)
        names = fn.__code__.co_names
        for name in names:
            obj = fn.__globals__.get(name)
            objs = [obj]
            if isinstance(obj, pytypes.ModuleType):
                objs = [getattr(obj, attr, None) for attr in names]
            for o in objs:
                if isinstance(o, numba.core.dispatcher.Dispatcher):
                    found.add(o.py_func.__module__)
                    todo.append(o.py_func)
                elif isinstance(o, _Intrinsic):
                    found.add(o._defn.__module__)
    return sorted(found)


def _build_id(machine, sources, kernels):
    text = json.dumps([machine, sources, kernels], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def build(directory=aot.DIRECTORY, kernels=KERNELS, verbose=False):
    """Builds ``kernels`` ({module: {kernel: [signature, ...]}}) into ``directory``; returns
    the manifest written."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")            # pycc's deprecation notice
        from numba.pycc import CC
    machine = aot.machine()
    depends = {m: sorted({d for name in table for d in built_modules(_kernel(m, name))} | {m})
               for m, table in kernels.items()}
    sources = {m: aot.code_digest(m) for deps in depends.values() for m in deps}
    sources[aot.BUILDER] = aot.code_digest(aot.BUILDER)   # how it was built is part of what was built
    name = "_tw_aot_" + _build_id(machine, sources, kernels)
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    exports = []
    cc = CC(name, source_module=sys.modules[__name__])
    cc.target_cpu = "host"
    cc.verbose = verbose
    for module, table in sorted(kernels.items()):
        for kernel_name, signatures in sorted(table.items()):
            kernel = _kernel(module, kernel_name)
            for i, signature in enumerate(signatures):
                symbol = f"{module.rsplit('.', 1)[-1]}__{kernel_name.strip('_')}__{i}"
                cc.export(symbol, signature)(kernel.py_func)
                exports.append({"module": module, "kernel": kernel_name, "signature": signature, "symbol": symbol})
    os.makedirs(directory, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tw-aot-", dir=directory) as tmp:
        cc.output_dir, cc.output_file = tmp, name + suffix
        with _jit_settings():
            cc.compile()
        built = os.path.join(tmp, name + suffix)
        manifest = {"format": aot.FORMAT, "module": name, "sha256": aot.sha256_file(built),
                    "machine": machine, "sources": sources, "files": aot.file_digests(sources), "depends": depends,
                    "exports": exports,
                    "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        os.replace(built, os.path.join(directory, name + suffix))
        with open(os.path.join(tmp, aot.MANIFEST), "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=1, sort_keys=True)
        os.replace(os.path.join(tmp, aot.MANIFEST), os.path.join(directory, aot.MANIFEST))
    for entry in os.listdir(directory):      # earlier builds' modules
        if entry.startswith("_tw_aot_") and entry != name + suffix:
            path = os.path.join(directory, entry)
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    return manifest


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=aot.DIRECTORY, help="folder to build into (default: the package's _aot)")
    p.add_argument("--verbose", action="store_true")
    a = p.parse_args(argv)
    t = time.perf_counter()
    try:
        manifest = build(a.out, verbose=a.verbose)
    except Exception as e:  # noqa: BLE001 - any failure: report it; tensorweave still works without
        print(f"tensorweave: ahead-of-time kernels not built ({type(e).__name__}: {e}); kernels will compile "
              f"on first use instead", file=sys.stderr)
        return 1
    print(f"tensorweave: {len(manifest['exports'])} ahead-of-time kernels built into "
          f"{os.path.join(a.out, manifest['module'])} in {time.perf_counter() - t:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
