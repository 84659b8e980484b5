"""CPU kernels on NumPy/BLAS. File names mirror ``tensorweave/ops``; every module here is
imported (and so registered) when tensorweave is imported."""
import importlib
import pkgutil

for _m in pkgutil.iter_modules(__path__):
    if _m.name.endswith("_kernels"):
        importlib.import_module(f"{__name__}.{_m.name}")
