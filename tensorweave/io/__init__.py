"""``tw.io``: files, TFRecords, ``tf.train.Example`` parsing and image codecs.

* :mod:`~tensorweave.io.files` — ``read_file``, ``write_file``, ``matching_files``, ``decode_raw``, base64;
* :mod:`~tensorweave.io.gfile` — ``tw.io.gfile`` (``GFile``, ``exists``, ``glob``, ``makedirs`` ...);
* :mod:`~tensorweave.io.tfrecord` — ``TFRecordWriter``, ``TFRecordOptions`` (and ``tw.data.TFRecordDataset``);
* :mod:`~tensorweave.io.example_pb` — ``tw.train.Example`` and friends in the protobuf wire format;
* :mod:`~tensorweave.io.parsing` — ``parse_example``, ``parse_single_example`` and feature specs.
"""
from tensorweave.io import gfile  # noqa: F401
from tensorweave.io.files import (decode_base64, decode_compressed, decode_csv, decode_raw, encode_base64,  # noqa: F401
                                  match_filenames_once, matching_files, read_file, write_file)
from tensorweave.io.parsing import (FixedLenFeature, FixedLenSequenceFeature, RaggedFeature,  # noqa: F401
                                    SparseFeature, VarLenFeature, decode_json_example, parse_example, parse_sequence_example, parse_single_example,
                                    parse_single_sequence_example)
from tensorweave.io.tensor_proto import (deserialize_many_sparse, parse_tensor, serialize_many_sparse,  # noqa: F401
                                         serialize_sparse, serialize_tensor)
from tensorweave.io.tfrecord import TFRecordOptions, TFRecordWriter, tf_record_iterator  # noqa: F401


def __getattr__(name):
    # The image codecs live in tw.image (Pillow is optional and loaded on use).
    if name in ("decode_png", "decode_jpeg", "decode_and_crop_jpeg", "decode_webp", "decode_image", "decode_bmp", "decode_gif", "encode_png", "encode_jpeg",
                "is_jpeg", "extract_jpeg_shape"):
        from tensorweave.image import codec_ops
        return getattr(codec_ops, name)
    raise AttributeError(f"module 'tensorweave.io' has no attribute '{name}'")
