"""Issues 13/14 (ray14): a sharded global variable made by a common initializer is drawn per
shard — each rank computes only its slice, never the whole value — with the one-device value
bit for bit: ``distribute/sharded_draws.py`` (the block-wise draw), ``tw.random``'s
``stateless_slice``, ``keras.initializers.slice_of``, ``InitialPieces.piece``. In-process ranks
here (a Keras layer under ``keras.distribution.ModelParallel`` too); on the Ray workers:
tests/test_ray14_steps.py."""
import itertools
import tracemalloc

import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core.philox import philox
from tensorweave.core.sbp import B, P, S
from tensorweave.distribute import sharded_draws
from tensorweave.distribute.variables import InitialPieces
from tensorweave.kernels.cpu.random_kernels import standard_normal, truncated_normal, uniform01

init = tw.keras.initializers
P2, P3 = tw.placement("cpu", ranks=[0, 1]), tw.placement("cpu", ranks=[0, 1, 2])
MESH = tw.placement("cpu", ranks=[[0, 1], [2, 3]])
WHOLE = {"uniform": uniform01, "normal": standard_normal, "truncated_normal": truncated_normal}


@pytest.mark.parametrize("block", [5, 64, 1 << 18])
@pytest.mark.parametrize("kind", sharded_draws.KINDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_slice_of_a_draw_is_the_slice_of_the_whole_draw(monkeypatch, block, kind, dtype):
    monkeypatch.setattr(sharded_draws, "BLOCK", block)
    for shape in [(), (7,), (40, 9), (3, 4, 5), (3, 0)]:
        whole = WHOLE[kind](philox((3, 4)), shape, dtype)
        for starts in itertools.product(*[range(0, d + 1, max(1, d // 2)) for d in shape]):
            where = tuple(slice(a, min(d, a + max(1, d // 2))) for a, d in zip(starts, shape))
            part = sharded_draws.slice_of_draw(kind, philox((3, 4)), dtype, shape, where)
            assert part.dtype == whole.dtype
            np.testing.assert_array_equal(part, whole[where], err_msg=f"{shape} {where}")


def test_a_truncated_normal_slice_follows_several_redraw_rounds(monkeypatch):
    # 4,000 values: ~180 beyond 2 sigma, ~8 of those again: three rounds at least
    monkeypatch.setattr(sharded_draws, "BLOCK", 97)
    whole = truncated_normal(philox((9,)), (80, 50), np.float32)
    for where in [(slice(0, 27), slice(0, 50)), (slice(0, 80), slice(17, 34)), (slice(60, 80), slice(49, 50))]:
        np.testing.assert_array_equal(sharded_draws.slice_of_draw("truncated_normal", philox((9,)), np.float32,
                                                                  (80, 50), where), whole[where])


def test_a_draw_of_another_kind_or_dtype_is_refused_by_name():
    with pytest.raises(ValueError, match="multinomial draws of float32"):
        sharded_draws.slice_of_draw("multinomial", philox((1,)), np.float32, (2,), (slice(0, 1),))
    with pytest.raises(ValueError, match="uniform draws of float16"):
        sharded_draws.slice_of_draw("uniform", philox((1,)), np.float16, (2,), (slice(0, 1),))


INITIALIZERS = [
    lambda: init.GlorotUniform(seed=3), lambda: init.GlorotNormal(seed=4), lambda: init.HeUniform(seed=5),
    lambda: init.HeNormal(seed=6), lambda: init.LecunUniform(seed=7), lambda: init.LecunNormal(seed=8),
    lambda: init.RandomUniform(-0.3, 0.7, seed=9), lambda: init.RandomNormal(0.5, 2.0, seed=10),
    lambda: init.TruncatedNormal(-1.0, 0.1, seed=11), lambda: init.VarianceScaling(2.0, "fan_out",
                                                                                    "untruncated_normal", seed=12),
    lambda: init.Zeros(), lambda: init.Ones(), lambda: init.Constant(0.25),
    lambda: init.Constant(np.arange(6, dtype=np.float32)),
]


@pytest.mark.parametrize("make", INITIALIZERS, ids=lambda m: type(m()).__name__)
@pytest.mark.parametrize("placement,sbp", [(P2, S(0)), (P3, S(1)), (MESH, (S(1), S(0))), (P2, B)],
                         ids=["S0-2", "S1-3", "mesh", "B"])
def test_the_common_initializers_draw_only_the_slice_with_the_one_device_bits(monkeypatch, make, placement, sbp):
    shape = (7, 6)
    whole = make()(shape).numpy()
    calls = []
    monkeypatch.setattr(tw.keras.initializers, "_random", lambda *a: calls.append(a))   # the whole draw
    v = tw.Variable(make(), shape=shape, placement=placement, sbp=sbp)
    np.testing.assert_array_equal(v.numpy(), whole)
    assert calls == []
    for got, where in zip(v.to_local(), tw.distribute.layout.shard_slices(shape, placement, v.sbp)):
        np.testing.assert_array_equal(got.numpy(), whole[where])


def test_float64_and_an_uneven_split_of_a_vector():
    he = init.HeUniform(seed=2)
    v = tw.Variable(he, shape=(11,), dtype=tw.float64, placement=P3, sbp=S(0))
    assert [t.shape.as_list() for t in v.to_local()] == [[4], [4], [3]]
    np.testing.assert_array_equal(v.numpy(), he((11,), dtype=tw.float64).numpy())


def test_other_initializers_still_give_the_one_device_value():
    # drawn whole and sliced: Orthogonal, Identity, an unseeded-looking subclass with its own call
    class Halves(init.Initializer):
        def __call__(self, shape, dtype=None):
            return tw.fill(shape, 0.5)
    for make in (lambda: init.Orthogonal(seed=2), lambda: init.Identity(), Halves):
        v = tw.Variable(make(), shape=(6, 6), placement=P3, sbp=S(1))
        np.testing.assert_array_equal(v.numpy(), make()((6, 6)).numpy())
    assert init.slice_of(init.Orthogonal(seed=1), (4, 4), "float32", (slice(0, 2), slice(0, 4))) is None
    assert init.slice_of(init.RandomUniform(0, 10, seed=1), (4,), "int32", (slice(0, 2),)) is None
    assert init.slice_of(init.RandomNormal(seed=None), (4,), "float32", (slice(0, 2),)) is None


def test_an_unseeded_initializer_draws_per_slice_with_replicas_and_shards_agreeing():
    tw.keras.utils.set_random_seed(5)
    split = tw.Variable(init.GlorotNormal(), shape=(6, 4), placement=P2, sbp=S(1))
    tw.keras.utils.set_random_seed(5)
    rep = tw.Variable(init.GlorotNormal(), shape=(6, 4), placement=P2, sbp=B)
    np.testing.assert_array_equal(split.numpy(), rep.numpy())
    np.testing.assert_array_equal(*[t.numpy() for t in rep.to_local()])


def test_a_rank_allocates_its_shard_not_the_whole_value(monkeypatch):
    # 4 ranks over a 8 MB float32 weight: a rank's piece is 2 MB; drawing the whole value first
    # (the code before) allocated >= 8 MB on the rank
    monkeypatch.setattr(sharded_draws, "BLOCK", 1 << 15)        # 128 KB blocks
    shape, four = (2048, 1024), tw.placement("cpu", ranks=[0, 1, 2, 3])
    full = 2048 * 1024 * 4
    for make, sbp in [(lambda: init.GlorotUniform(seed=1), S(0)), (lambda: init.TruncatedNormal(seed=2), S(1)),
                      (lambda: init.HeNormal(seed=3), S(1)), (lambda: init.Ones(), S(0))]:
        spec = InitialPieces(make(), shape, four, (sbp,), tw.float32)
        make()((2, 2))                          # imports and first-call caches outside the measurement
        tracemalloc.start()
        try:
            piece = spec.piece(1)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert piece.nbytes == full // 4
        assert peak < full // 2, (type(make()).__name__, peak)


def test_a_keras_layer_under_model_parallel_draws_its_kernel_per_shard(monkeypatch):
    calls = []
    real = tw.keras.initializers._random
    monkeypatch.setattr(tw.keras.initializers, "_random", lambda *a: calls.append(a[0]) or real(*a))
    mesh = tw.keras.distribution.DeviceMesh((2,), ["model"], ["cpu:0", "cpu:1"])
    layout = tw.keras.distribution.LayoutMap(mesh)
    layout["dense.*kernel"] = (None, "model")
    with tw.keras.distribution.ModelParallel(layout_map=layout).scope():
        layer = tw.keras.layers.Dense(6, kernel_initializer=init.HeNormal(seed=4), name="dense")
        layer.build((None, 5))
    assert layer.kernel.sbp == (S(1),)
    assert calls == []                   # no whole draw on any rank
    np.testing.assert_array_equal(layer.kernel.numpy(), init.HeNormal(seed=4)((5, 6)).numpy())


def test_a_partial_variable_keeps_the_value_on_one_rank():
    v = tw.Variable(init.RandomUniform(seed=4), shape=(2, 3), placement=P2, sbp=P)
    np.testing.assert_array_equal(v.to_local()[0].numpy(), init.RandomUniform(seed=4)((2, 3)).numpy())
    np.testing.assert_array_equal(v.to_local()[1].numpy(), np.zeros((2, 3), np.float32))


def test_a_slice_done_redrawing_while_other_values_still_redraw(monkeypatch):
    # seed (0,): the first row's values beyond 2 sigma are all fine after the second draw while six
    # values of other rows need a third: the slice keeps no stale positions into later rounds
    monkeypatch.setattr(sharded_draws, "BLOCK", 64)
    whole = truncated_normal(philox((0,)), (60, 50), np.float32)
    for where in [(slice(0, 1), slice(0, 50)), (slice(0, 2), slice(10, 50)), (slice(3, 5), slice(0, 50))]:
        np.testing.assert_array_equal(sharded_draws.slice_of_draw("truncated_normal", philox((0,)), np.float32,
                                                                  (60, 50), where), whole[where])


def test_the_draw_is_walked_in_blocks_of_whole_trailing_rows():
    # the block size bounds a rank's extra memory: 600 rows of 1,000 values in blocks of 262 rows
    blocks = list(sharded_draws._blocks((600, 1000), (slice(0, 600), slice(0, 1000))))
    assert [count for count, _, _ in blocks] == [262_000, 262_000, 76_000]
    assert len(list(sharded_draws._blocks((8, 3), (slice(0, 8), slice(0, 3))))) == 1     # small: one block
