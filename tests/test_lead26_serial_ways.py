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
    seen, real = [], gemm.share_tasks
    monkeypatch.setattr(gemm, "share_tasks", lambda tasks, n: (seen.append((len(tasks), n)), real(tasks, n))[1])
    a, b, out = gemm._rung_operands(np.float32, 48)
    runners = gemm._thread_runners(np.float32, 48, (a, b, out))
    assert set(runners) == ({"serial", "threaded", "split"} if parts > 1 else {"serial", "threaded"})
    for name, run in runners.items():               # every way computes the rung's product
        out[:] = 0
        run()
        np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4, err_msg=name)
    assert seen == ([(2, 2)] if parts > 1 else [])   # the split: two row blocks over two threads


@needs_serial
@pytest.mark.parametrize("here,inside,walks", [(2, False, True), (1, False, False), (None, False, True),
                                               (2, True, False)])
def test_the_threshold_is_walked_only_from_a_thread_that_may_use_every_core(monkeypatch, here, inside, walks):
    """A walk from inside a tiled region (the other core busy with the region's other tiles) saw threads
    lose at every rung; such a thread takes the default for the call and leaves the threshold unwalked."""
    walked = []
    monkeypatch.setattr(gemm, "_serial_work", {})
    monkeypatch.setattr(gemm, "_cores", lambda: 2)
    monkeypatch.setattr(gemm, "threads_here", lambda: here)
    monkeypatch.setattr(gemm, "inside_blocks_here", lambda: inside)

    class Tuner:
        def threshold(self, name, walk, default):
            walked.append(name)
            return 12345
    monkeypatch.setattr(gemm, "tuner", lambda: Tuner())
    got = gemm.serial_work(np.float32)
    assert (got, walked) == ((12345, ["serial-ways:float32"]) if walks else (gemm_tuning.SERIAL_DEFAULT, []))
    assert (np.dtype(np.float32) in gemm._serial_work) == walks     # a default is not kept for the process
