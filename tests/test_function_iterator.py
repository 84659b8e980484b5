"""``next(iterator)`` inside a ``tw.function`` on an iterator made outside it (TF's
``train_step(iterator)`` loop): each call takes the next element, as in TF — the first element
used to be baked into the trace, so every call returned it."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave.core import errors

X = np.arange(10, dtype=np.float32).reshape(5, 2)
Y = np.array([b"a", b"b", b"c", b"d", b"e"])


def _dataset():
    return tw.data.Dataset.from_tensor_slices((X, Y)).batch(2)


def test_iterator_argument_takes_the_next_batch_each_call():
    @tw.function
    def step(iterator):
        x, y = next(iterator)
        return x * 2.0, y
    it = iter(_dataset())
    got = [step(it) for _ in range(3)]
    for (x, y), lo in zip(got, (0, 2, 4)):
        np.testing.assert_array_equal(x.numpy(), X[lo:lo + 2] * 2)
        assert [bytes(b) for b in y.numpy()] == list(Y[lo:lo + 2])
    with pytest.raises(errors.OutOfRangeError, match="End of sequence"):
        step(it)


def test_captured_iterator_and_get_next():
    it = iter(_dataset())

    @tw.function
    def step():
        return it.get_next()[0]
    np.testing.assert_array_equal(step().numpy(), X[0:2])
    np.testing.assert_array_equal(step().numpy(), X[2:4])
    assert step.experimental_get_tracing_count() == 1


def test_training_loop_over_an_iterator_equals_eager():
    def run(traced):
        tw.random.set_seed(3)
        w = tw.Variable(np.ones((2, 1), np.float32))
        opt = tw.keras.optimizers.SGD(0.01)

        def step(iterator):
            x, _ = next(iterator)
            with tw.GradientTape() as tape:
                loss = tw.reduce_sum(tw.square(tw.matmul(x, w) - 1.0))
            opt.apply_gradients([(tape.gradient(loss, w), w)])
            return loss
        step = tw.function(step) if traced else step
        it = iter(_dataset())
        return [float(step(it)) for _ in range(3)], w.numpy()
    (losses, w), (ref_losses, ref_w) = run(True), run(False)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-6)
    np.testing.assert_allclose(w, ref_w, rtol=1e-6)
    assert len(set(losses)) == 3


def test_a_loop_over_a_dataset_inside_the_trace_is_unrolled():
    @tw.function
    def total():
        t = tw.constant(0.0)
        for x, _ in _dataset():
            t += tw.reduce_sum(x)
        return t
    assert float(total()) == X.sum()
    assert float(total()) == X.sum()
