"""``keras.distribution`` (Keras 3): meshes, layouts and distributions for Keras models, on
tensorweave's global tensors (see ``tensorweave/distribute/distribution.py``).

>>> from tensorweave import keras
>>> mesh = keras.distribution.DeviceMesh((2,), ["model"], ["cpu:0", "cpu:1"])
>>> layout_map = keras.distribution.LayoutMap(mesh)
>>> layout_map["dense.*kernel"] = (None, "model")
>>> layout_map["dense_1/kernel"].axes
(None, 'model')
"""
from tensorweave.distribute.distribution import (DataParallel, DeviceMesh, Distribution, LayoutMap,  # noqa: F401
                                                 ModelParallel, TensorLayout, distribution, list_devices,
                                                 set_distribution)

__all__ = ["DataParallel", "DeviceMesh", "Distribution", "LayoutMap", "ModelParallel", "TensorLayout",
           "distribution", "list_devices", "set_distribution"]
