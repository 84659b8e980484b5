"""keras.random: seed semantics (None / int / SeedGenerator), distributions, and a SeedGenerator
owned by a model drawing new numbers at every compiled training step."""
import numpy as np
import pytest

import tensorweave as tw
from tensorweave import keras

R = keras.random


def test_seed_semantics():
    gen = R.SeedGenerator(1337)
    a, b = R.normal((4,), seed=gen).numpy(), R.normal((4,), seed=gen).numpy()
    assert not np.allclose(a, b)
    again = R.SeedGenerator(1337)
    np.testing.assert_array_equal(R.normal((4,), seed=again).numpy(), a)      # same seed, same sequence
    np.testing.assert_array_equal(R.uniform((3,), seed=5).numpy(), R.uniform((3,), seed=5).numpy())
    assert not np.allclose(R.uniform((3,)).numpy(), R.uniform((3,)).numpy())
    keras.utils.set_random_seed(3)
    first = R.SeedGenerator().get_config()["seed"]
    keras.utils.set_random_seed(3)
    assert R.SeedGenerator().get_config()["seed"] == first
    with pytest.raises(ValueError, match="Argument `seed` must be either an integer or an instance of `SeedGenerator`"):
        R.normal((2,), seed="abc")
    with pytest.raises(ValueError, match="`seed` must be an int or None"):
        R.SeedGenerator(1.5)


def test_distributions():
    gen = R.SeedGenerator(0)
    x = R.normal((20000,), mean=2.0, stddev=3.0, seed=gen).numpy()
    assert abs(x.mean() - 2.0) < 0.1 and abs(x.std() - 3.0) < 0.1 and x.dtype == np.float32
    u = R.uniform((20000,), minval=-1.0, maxval=3.0, seed=gen, dtype="float64").numpy()
    assert u.dtype == np.float64 and u.min() >= -1.0 and u.max() < 3.0 and abs(u.mean() - 1.0) < 0.05
    t = R.truncated_normal((20000,), stddev=1.0, seed=gen).numpy()
    assert np.abs(t).max() <= 2.0
    k = R.randint((1000,), 3, 7, seed=gen).numpy()
    assert k.dtype == np.int32 and set(np.unique(k)) == {3, 4, 5, 6}
    c = R.categorical(tw.math.log([[0.1, 0.9]]), 2000, seed=gen).numpy()
    assert c.shape == (1, 2000) and abs(c.mean() - 0.9) < 0.05
    d = R.dropout(np.ones((1000,), "float32"), 0.25, seed=gen).numpy()
    np.testing.assert_allclose(np.unique(d), [0.0, 4 / 3], rtol=1e-6)
    assert abs((d == 0).mean() - 0.25) < 0.05
    s = R.shuffle(np.arange(10), seed=gen).numpy()
    assert sorted(s.tolist()) == list(range(10)) and s.tolist() != list(range(10))
    m = R.shuffle(np.arange(6).reshape(2, 3), axis=1, seed=1).numpy()
    assert sorted(m[0].tolist()) == [0, 1, 2] and (m[1] - m[0] == 3).all()


def test_seed_generator_in_a_compiled_train_step():
    class Noisy(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(1)
            self.seed_generator = R.SeedGenerator(42)
            self.draws = []

        def call(self, x):
            return self.dense(x)

        def train_step(self, data):
            x, y = data
            noise = R.normal(tw.shape(x), stddev=0.1, seed=self.seed_generator)
            with tw.GradientTape() as tape:
                loss = tw.reduce_mean(tw.square(self(x + noise) - y))
            grads = tape.gradient(loss, self.trainable_weights)
            self.optimizer.apply_gradients(zip(grads, self.trainable_weights))
            return {"loss": loss, "noise": tw.reduce_sum(noise)}

    keras.utils.set_random_seed(0)
    model = Noisy()
    model.compile(keras.optimizers.SGD(0.1))
    x = np.ones((8, 2), "float32")
    history = model.fit(x, np.zeros((8, 1), "float32"), batch_size=8, epochs=3, verbose=0).history
    assert len(set(np.round(history["noise"], 5))) == 3          # a new draw at every step
    assert model.seed_generator.state.numpy().tolist() == [3, 42]
