"""CPU kernels on NumPy/BLAS. File names mirror ``tensorweave/ops``."""
