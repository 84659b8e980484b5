"""explain on a ZeRO-1 weight the in-process ranks keep in one buffer (zero_update.share_storage):
a ``shared_view`` moving 0 bytes, with the bytes per-rank copies would move and a note; the
plan's total bytes leave it out. With per-rank copies (SHARED_ZERO_STORAGE off) the all-gather
and its bytes as before."""
import importlib
import re

import numpy as np

import tensorweave as tw
from tensorweave.distribute import planner

explain_mod = importlib.import_module("tensorweave.distribute.explain")


def _sgd_step(p, seed=0):
    rng = np.random.default_rng(seed)
    w = tw.Variable(rng.standard_normal((32, 8)).astype(np.float32), placement=p, sbp=tw.sbp.broadcast)
    x = tw.constant(rng.standard_normal((12, 32)).astype(np.float32)).to_global(placement=p, sbp=tw.sbp.split(0))
    opt = tw.keras.optimizers.SGD(0.1)

    @tw.function
    def step(x):
        with tw.GradientTape() as tape:
            loss = tw.reduce_sum(tw.matmul(x, w) ** 2)
        opt.apply_gradients([(tape.gradient(loss, w), w)])
        return loss
    return step, x


def test_the_shared_weight_is_a_view_moving_nothing(monkeypatch):
    monkeypatch.setattr(planner, "ZERO_FIXED_BYTES", 0)       # a small weight: ZeRO-1 chosen whatever its size
    p = tw.placement("cpu", ranks=[0, 1, 2])
    step, x = _sgd_step(p)
    e = tw.distribute.explain(step, x)
    d = e.to_dict()
    (view,) = [c for c in d["collectives"] if c.get("zero")]
    assert (view["kind"], view["bytes"], view["gather_bytes"], view["shape"]) == ("shared_view", 0, 2 * 32 * 8 * 4,
                                                                                 [32, 8])
    assert view["note"] == explain_mod.SHARED_VIEW_NOTE
    (scatter,) = [c for c in d["collectives"] if c["kind"] == "reduce_scatter"]
    assert d["bytes_moved"] == e.total_bytes == sum(c["bytes"] for c in d["collectives"]) == scatter["bytes"] + sum(
        c["bytes"] for c in d["collectives"] if c is not scatter and c is not view)
    line = next(ln for ln in e.text().splitlines() if ln.strip().startswith("shared_view"))
    assert re.search(r"shared_view +mesh axis 0  \(S\(0\),\) -> \(B,\) +0 B  float32\[32, 8\] weight .* \(ZeRO-1\) "
                     r"\(2\.0 KiB as per-rank copies; in-process ranks keep this weight in one buffer", line), line


def test_per_rank_copies_show_the_gather_and_its_bytes(monkeypatch):
    monkeypatch.setattr(planner, "ZERO_FIXED_BYTES", 0)
    monkeypatch.setattr(planner, "ZERO_GATHER_WEIGHT", 0)       # ZeRO-1 still chosen with copies
    monkeypatch.setattr(planner, "SHARED_ZERO_STORAGE", False)
    p = tw.placement("cpu", ranks=[0, 1])
    step, x = _sgd_step(p, 1)
    d = tw.distribute.explain(step, x).to_dict()
    (gather,) = [c for c in d["collectives"] if c.get("zero")]
    assert (gather["kind"], gather["bytes"]) == ("all_gather", 32 * 8 * 4)
    assert "note" not in gather and "gather_bytes" not in gather
    assert d["bytes_moved"] >= gather["bytes"]


def test_only_in_process_ranks_share(monkeypatch):
    p = tw.placement("cpu", ranks=[0, 1])
    assert explain_mod._shares_zero_storage(p)
    monkeypatch.setattr(planner, "SHARED_ZERO_STORAGE", False)
    assert not explain_mod._shares_zero_storage(p)
    monkeypatch.setattr(planner, "SHARED_ZERO_STORAGE", True)
    from tensorweave.distribute.ray import pieces
    monkeypatch.setattr(pieces, "cluster_for", lambda placement: object())   # a connected Ray cluster
    assert not explain_mod._shares_zero_storage(p)
