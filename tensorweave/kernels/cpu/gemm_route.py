"""Which route a 2-D product takes through ``gemm.matmul`` in this process, named as the tuning
cache names it: for reports (``benchmarks/bench_gemm_backends.py``, ``bench_core.py``), never on a
product's path.

Why a module of its own: ``gemm.py``'s source keys the ahead-of-time kernels built from it and
from the modules that call MKL from compiled loops (``aot.py`` hashes whole files), so report
code there would leave them stale at every change of a report. The route itself is not repeated
here: ``gemm.route`` is what ``gemm._run_2d`` dispatches on, and this names its class and backend.

>>> import numpy as np
>>> from tensorweave.kernels.cpu import gemm_route
>>> gemm_route.decision(np.ones((2, 2)), np.ones((2, 2))) is None      # too small: NumPy's
True
"""
from tensorweave.kernels.cpu import gemm, gemm_tuning, thin_layout


def decision(a, b):
    """``(cache class, backend, settled)``: how ``gemm.matmul`` runs ``a @ b`` (2-D) now.

    The class is the tuning cache's name of the route (``gemm.route``): ``serial:<class>`` on one
    thread (small, or a one-thread share of the cores), ``thincold:<class>,p<n>`` (``thinvar:``
    over a variable's weight) for a thin product that may take ``n`` threads, ``<class>`` under
    ``TW_BLAS_TUNE=1``, ``threads:<class>,p<n>`` when split over ``n`` threads or left to MKL's (by a timing), ``""`` where threaded products
    are not split (``TW_GEMM_SPLIT=0``, a forced ``TW_BLAS``: MKL's threads). ``backend`` is None
    until a product of the class has run in this process; ``settled``: the class's entry was timed
    on a quiet machine with median and fastest call agreeing, so it is kept on disk (a class not
    timed because the machine was busy has no entry). None where the product stays in NumPy (under
    ``gemm.MIN_WORK``, a dtype MKL does not take, no MKL)."""
    geometry = gemm._product(a, b)
    if geometry is False:
        return None
    op_a, op_b, m, n, k, seen = geometry
    base = gemm_tuning.shape_class(m, n, k, a.dtype.name, op_a[0] == gemm._TRANS, op_b[0] == gemm._TRANS)
    way = gemm.route(a.dtype, m, n, k)
    if way == "mkl":
        return "", "mkl", True
    if way == "one":
        cls, got = "serial:" + base, gemm._serial_chosen.get(seen)
    elif way == "tuned":
        cls, got = base, gemm._chosen.get(seen)
    elif way == "thin":
        parts = gemm.split_parts()
        var = op_b[0] == gemm._NO_TRANS and thin_layout.applies(b)
        cls = gemm._thin_class(m, n, k, a.dtype.name, op_a, op_b, parts, var)
        got = gemm._thin_chosen.get(seen + (parts, var))
    else:
        parts = gemm.split_parts()
        var = m < gemm.MIN_PART and op_b[0] == gemm._NO_TRANS and thin_layout.applies(b)
        cls = f"{way}{'var' if var else ''}:{base},p{parts}"
        got = gemm._split_chosen.get(seen + ((parts, "T") if var else (parts,)))
    entry = gemm.tuner().choices.get(cls)
    return cls, got, entry is not None and entry.get("settled", True) is True
