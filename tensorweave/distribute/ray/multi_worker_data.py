"""``MultiWorkerMirroredStrategy.experimental_distribute_dataset``: a pipeline of global batches
split over the Ray workers by its ``AutoShardPolicy`` (``tw.data.sharding``).

The result is what ``fit`` trains on (pass it as ``x``) and, iterated on the driver, shows
each step's per-replica batches as :class:`PerReplica` values (one replica per worker), the
way the workers get them: a worker whose input has run out has a batch of no rows, and the
iteration ends when every worker's has (TF's multi-worker partial batches).

>>> import tensorweave as tw
>>> import tensorweave.data
>>> from tensorweave.distribute.ray.multi_worker_data import DistributedDataset
>>> [[v.tolist() for v in step.values] for step in DistributedDataset(tw.data.Dataset.range(5).batch(4), 2)]
[[[0, 1], [2, 3]], [[4], []]]
"""
from tensorweave.data import sharding


class PerReplica:
    """One value per replica (TF's ``PerReplica``): ``values[i]`` is worker ``i``'s."""

    def __init__(self, values):
        self.values = tuple(values)

    def __repr__(self):
        return f"PerReplica({self.values!r})"


class DistributedDataset:
    """A ``tw.data`` pipeline of global batches distributed over ``num_workers`` workers."""

    def __init__(self, dataset, num_workers):
        from tensorweave.data import Dataset
        if not isinstance(dataset, Dataset):
            raise TypeError(f"experimental_distribute_dataset: expected a tw.data.Dataset, got "
                            f"{type(dataset).__name__}. Hint: arrays go to fit directly")
        # TF's sharding errors here and now; the workers' pipelines are kept (a shuffle in a
        # rebuilt one moves on each epoch, as the workers' do)
        self._pipelines = [sharding.worker_pipeline(dataset, num_workers, i) for i in range(num_workers)]
        self.dataset, self.num_workers = dataset, num_workers

    @property
    def element_spec(self):
        return self.dataset.element_spec

    @property
    def policy(self):
        """The policy that applies (``AUTO`` decided)."""
        return sharding.resolve_policy(self.dataset, self.num_workers)

    def __iter__(self):
        n = self.num_workers
        if self._pipelines[0][0] == sharding.P.DATA:
            # one pass over the global batches, sliced n ways (n passes of one pipeline would
            # shuffle differently)
            for b in self.dataset.as_numpy_iterator():
                yield PerReplica(sharding.slice_rows(b, n, i) for i in range(n))
            return
        streams = [sharding.stream_of(p, n, i) for i, p in enumerate(self._pipelines)]
        while True:
            values = [next(s, None) for s in streams]
            present = [v for v in values if v is not None]
            if not present:
                return
            empty = sharding.empty_like(present[0])
            yield PerReplica(empty if v is None else v for v in values)
