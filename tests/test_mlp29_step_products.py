"""``benchmarks/bench_step_products.py`` (issue 18 mlp29) runs on the mlp and reports each of its five
large products in the step and alone, the caller's CPU by op type and per thread; its instruments are
taken back after (the test restores what it wrapped)."""
import os
import sys

from tensorweave.core import registry
from tensorweave.kernels.cpu import gemm
from tensorweave.runtime.passes import ir

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
import bench_step_products  # noqa: E402


def test_the_mlp_step_reports_its_products_ops_and_threads(monkeypatch, capsys):
    for opdef in registry._OPS.values():
        if "CPU" in opdef.kernels:
            monkeypatch.setitem(opdef.kernels, "CPU", opdef.kernels["CPU"])
    monkeypatch.setattr(ir, "_STOCK", {})     # (the passes' stock kernels, as the wrapped ones are met)
    monkeypatch.setattr(gemm, "matmul", gemm.matmul)
    monkeypatch.setattr(gemm, "matmul_then", gemm.matmul_then)
    bench_step_products.main(["--workload", "mlp", "--rounds", "1", "--steps", "1"])
    out = capsys.readouterr().out
    rows = [line.split(" | ")[0].lstrip("| ") for line in out.splitlines() if line.startswith("| ") and "@" in line]
    assert {r.split(":")[0] for r in rows} == {"128x784@784x512", "128x512@512x512", "512x128@128x512",
                                               "784x128@128x512"}
    assert len(rows) >= 5                   # (dW1 twice where the update is fused: "+after")
    assert "FusedMatMul:" in out and "outside them" in out and "voluntary context switches per step" in out


def test_a_product_is_named_by_its_shapes_and_transposes():
    import numpy as np
    a, b = np.ones((4, 6), np.float32), np.ones((4, 5), np.float32)
    assert bench_step_products._name(a.T, b) == "6x4@4x5:TN"
    assert bench_step_products._name(b, b.T) == "4x5@5x4:NT"
