"""``tw.distribute.experimental``: TF's ``tf.distribute.experimental`` names that tensorweave has.

>>> import tensorweave as tw
>>> tw.distribute.experimental.CommunicationOptions(compression="bf16").compression
'bf16'
"""
from tensorweave.distribute.compression import CastCompression, CommunicationOptions, Compression, Int8Compression
from tensorweave.distribute.ps import partitioners
from tensorweave.distribute.ps.namespaces import coordinator
from tensorweave.distribute.ps.strategy import ParameterServerStrategy


class CommunicationImplementation:
    """TF's enum of collective implementations (the transport is chosen by ``connect``)."""

    AUTO = "AUTO"
    RING = "RING"
    NCCL = "NCCL"


__all__ = ["CommunicationOptions", "CommunicationImplementation", "Compression", "CastCompression",
           "Int8Compression", "ParameterServerStrategy", "partitioners", "coordinator"]
