"""``keras.utils.experimental.DatasetCreator`` (TF's name): a function that makes the input
pipeline, called where the data is read.

``DatasetCreator(dataset_fn, input_options=None)``: ``dataset_fn(input_context)`` returns a
``tw.data.Dataset``. Under ``ParameterServerStrategy`` ``model.fit(creator, steps_per_epoch=N)``
calls it once on every worker with that worker's ``tw.distribute.InputContext`` (shard with
``input_pipeline_id``/``num_input_pipelines``); without a strategy it is called once, here,
with the default context (one pipeline). ``steps_per_epoch`` is required: the dataset is
usually repeated.

>>> import numpy as np
>>> import tensorweave as tw
>>> def dataset_fn(context):
...     x = np.arange(8, dtype=np.float32).reshape(8, 1)
...     return tw.data.Dataset.from_tensor_slices((x, 2 * x)).shard(
...         context.num_input_pipelines, context.input_pipeline_id).batch(4).repeat()
>>> model = tw.keras.Sequential([tw.keras.Input(shape=(1,)), tw.keras.layers.Dense(1)])
>>> model.compile("sgd", "mse")
>>> creator = tw.keras.utils.experimental.DatasetCreator(dataset_fn)
>>> len(model.fit(creator, epochs=2, steps_per_epoch=2, verbose=0).history["loss"])
2
"""
import types


class DatasetCreator:
    """Wraps ``dataset_fn(input_context) -> Dataset`` for ``Model.fit``/``evaluate`` (see the module)."""

    def __init__(self, dataset_fn, input_options=None):
        if not callable(dataset_fn):
            raise TypeError(f"DatasetCreator: `dataset_fn` must be a callable taking a tw.distribute.InputContext, got "
                            f"{type(dataset_fn).__name__}")
        self.dataset_fn = dataset_fn
        self.input_options = input_options

    def __call__(self, *args, **kwargs):
        from tensorweave.data import Dataset
        dataset = self.dataset_fn(*args, **kwargs)
        if not isinstance(dataset, Dataset):
            raise TypeError(f"DatasetCreator: `dataset_fn` must return a tw.data.Dataset, got "
                            f"{type(dataset).__name__}")
        return dataset

    def __repr__(self):
        return f"<DatasetCreator {getattr(self.dataset_fn, '__name__', self.dataset_fn)!r}>"


def require_steps(steps, argument, method):
    """TF's rule: a DatasetCreator's dataset has no known length, so the steps must be given."""
    if steps is None:
        raise ValueError(f"Model.{method}: when `x` is a tw.keras.utils.experimental.DatasetCreator, the "
                         f"`{argument}` argument must be given (its dataset is usually repeated and has no known "
                         f"length). Hint: model.{method}(creator, {argument}=N)")


def local_dataset(creator, steps, argument, method):
    """The creator's dataset for this process alone (no strategy): one input pipeline."""
    from tensorweave.distribute.ps.strategy import InputContext
    require_steps(steps, argument, method)
    return creator(InputContext())


experimental = types.SimpleNamespace(DatasetCreator=DatasetCreator)
