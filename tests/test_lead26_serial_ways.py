"""The one-thread threshold's walk times every threaded way a product may take, not MKL's own
threads alone (issue 18, session 22: on an AMD EPYC MKL's threads lost to one thread at every rung
while the rows split won, and the walk settled at its ladder's top). No timing thresholds: the
timed calls 'take' scripted seconds."""
import numpy as np
import pytest

from tensorweave.kernels.cpu import gemm, gemm_tuning

needs_serial = pytest.mark.skipif(not gemm._gemm_serial, reason="MKL with a per-thread setting is not loaded")


def _script(monkeypatch, seconds):
    """A timed call of ``variant`` on a rung of side ``s`` 'takes' ``seconds(variant, s)``."""
    monkeypatch.setattr(gemm_tuning, "_time_call", lambda variant, run: seconds(variant, run()))


def _three_ways(side):
    return {"serial": lambda: side, "threaded": lambda: side, "split": lambda: side}


@pytest.mark.parametrize("split_from,expected", [(64, 64 ** 3), (256, 256 ** 3), (None, 2 * 256 ** 3)])
def test_a_split_that_wins_lowers_the_threshold_where_mkls_threads_lose(monkeypatch, split_from, expected):
    def seconds(variant, side):
        if variant == "threaded":
            return 3.0                                  # MKL's threads lose everywhere
        split_wins = split_from is not None and side >= split_from
        return 1.0 if (variant == "split") == split_wins else 2.0
    _script(monkeypatch, seconds)
    assert gemm_tuning.serial_threshold(_three_ways) == (expected, True)


def test_either_threaded_way_winning_counts_and_one_thread_stays_the_incumbent(monkeypatch):
    """MKL's threads win at 256, the split at 192, neither by the margin at 128: the threshold is 192³."""
    wins = {256: "threaded", 192: "split"}

    def seconds(variant, side):
        if side in wins:
            return 1.0 if variant == wins[side] else 2.0
        return 0.97 if variant != "serial" else 1.0     # 3 % faster: under the margin
    _script(monkeypatch, seconds)
    timed = []
    assert gemm_tuning.serial_threshold(lambda s: (timed.append(s), _three_ways(s))[1]) == (192 ** 3, True)
    assert timed == [256, 192, 128]


@needs_serial
@pytest.mark.parametrize("parts", [1, 2])
def test_the_walks_runners_include_the_split_where_this_thread_may_split(monkeypatch, parts):
    monkeypatch.setattr(gemm, "split_parts", lambda: parts)
    seen, real = [], gemm._run_split
    monkeypatch.setattr(gemm, "_run_split", lambda *args: (seen.append(args), real(*args))[1])
    runners = gemm._thread_runners(np.float32, 48)
    assert set(runners) == ({"serial", "threaded", "split"} if parts > 1 else {"serial", "threaded"})
    for run in runners.values():
        run()
    if parts > 1:           # the split is the rung's product, in row blocks over ``parts`` threads
        (axis, a, b, out, op_a, op_b, op_c, k, got_parts), = seen
        assert (axis, a.shape, b.shape, out.shape, k, got_parts) == ("rows", (48, 48), (48, 48), (48, 48), 48, 2)
        out[:] = 0
        runners["split"]()
        np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    else:
        assert seen == []
