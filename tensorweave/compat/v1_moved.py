"""TF1 top-level names of functions that TF2 moved into a namespace (``tf.lgamma`` is
``tf.math.lgamma``, ``tf.cholesky`` is ``tf.linalg.cholesky``, ``tf.sparse_reorder`` is
``tf.sparse.reorder``...). In TensorFlow 2.21 each TF1 name below is the very same object as the
TF2 function named beside it, so compat.v1 takes ``tw``'s function for it (the TF1 spellings whose
arguments differ from TF2's are in ``v1_aliases``' table instead).

>>> import tensorweave.compat.v1 as tf
>>> tf.segment_sum([1.0, 2.0, 3.0], [0, 0, 1]).numpy().tolist()
[3.0, 3.0]
>>> tf.sparse_tensor_to_dense(tf.SparseTensor([[0, 1]], [5], [1, 3])).numpy().tolist()
[[0, 5, 0]]
"""
import importlib

# TF1 name -> the tensorweave function (module path, attribute); checked object-identical in TF 2.21.
MOVED = {
    "FixedLenFeature": "io.FixedLenFeature", "FixedLenSequenceFeature": "io.FixedLenSequenceFeature",
    "SparseFeature": "io.SparseFeature", "VarLenFeature": "io.VarLenFeature",
    "accumulate_n": "math.accumulate_n", "angle": "math.angle", "digamma": "math.digamma", "erfc": "math.erfc",
    "invert_permutation": "math.invert_permutation", "is_non_decreasing": "math.is_non_decreasing",
    "is_strictly_increasing": "math.is_strictly_increasing", "lbeta": "math.lbeta", "lgamma": "math.lgamma",
    "rint": "math.rint",
    "segment_max": "math.segment_max", "segment_mean": "math.segment_mean", "segment_min": "math.segment_min",
    "segment_prod": "math.segment_prod", "segment_sum": "math.segment_sum",
    "unsorted_segment_max": "math.unsorted_segment_max", "unsorted_segment_mean": "math.unsorted_segment_mean",
    "unsorted_segment_min": "math.unsorted_segment_min", "unsorted_segment_prod": "math.unsorted_segment_prod",
    "unsorted_segment_sqrt_n": "math.unsorted_segment_sqrt_n",
    "cholesky": "linalg.cholesky", "cholesky_solve": "linalg.cholesky_solve", "matrix_band_part": "linalg.band_part",
    "matrix_solve": "linalg.solve", "matrix_solve_ls": "linalg.lstsq", "matrix_triangular_solve": "linalg.triangular_solve",
    "qr": "linalg.qr", "svd": "linalg.svd", "self_adjoint_eig": "linalg.eigh", "self_adjoint_eigvals": "linalg.eigvalsh",
    "fft": "signal.fft", "fft2d": "signal.fft2d", "fft3d": "signal.fft3d",
    "ifft": "signal.ifft", "ifft2d": "signal.ifft2d", "ifft3d": "signal.ifft3d",
    "decode_base64": "io.decode_base64", "encode_base64": "io.encode_base64", "decode_compressed": "io.decode_compressed",
    "decode_json_example": "io.decode_json_example", "deserialize_many_sparse": "io.deserialize_many_sparse",
    "matching_files": "io.matching_files", "parse_single_sequence_example": "io.parse_single_sequence_example",
    "parse_tensor": "io.parse_tensor", "serialize_tensor": "io.serialize_tensor", "read_file": "io.read_file",
    "write_file": "io.write_file",
    "random_crop": "image.random_crop",
    "regex_replace": "strings.regex_replace", "string_join": "strings.join", "string_strip": "strings.strip",
    "string_to_hash_bucket_fast": "strings.to_hash_bucket_fast",
    "string_to_hash_bucket_strong": "strings.to_hash_bucket_strong",
    "sparse_fill_empty_rows": "sparse.fill_empty_rows", "sparse_mask": "sparse.mask", "sparse_maximum": "sparse.maximum",
    "sparse_minimum": "sparse.minimum", "sparse_reorder": "sparse.reorder", "sparse_reset_shape": "sparse.reset_shape",
    "sparse_reshape": "sparse.reshape", "sparse_retain": "sparse.retain", "sparse_slice": "sparse.slice",
    "sparse_softmax": "sparse.softmax", "sparse_tensor_dense_matmul": "sparse.sparse_dense_matmul",
    "sparse_tensor_to_dense": "sparse.to_dense", "sparse_to_indicator": "sparse.to_indicator",
    "sparse_transpose": "sparse.transpose", "SparseTensorValue": "sparse.SparseTensorValue",
    "tensor_scatter_update": "tensor_scatter_nd_update",
    "double": "float64", "half": "float16",
}
# tf.compat.v1.nn names of the same kind.
MOVED_NN = {"avg_pool_v2": "nn.avg_pool", "max_pool_v2": "nn.max_pool", "zero_fraction": "math.zero_fraction"}


def resolve(path):
    """The tensorweave object at ``path`` (``"math.lgamma"`` -> ``tensorweave.math.lgamma``)."""
    module, _, attr = path.rpartition(".")
    # namespaces such as tw.image are imported on first use, so import them by name here
    obj = importlib.import_module("tensorweave" + ("." + module if module else ""))
    return getattr(obj, attr)


# tw's namespaces that load on first use (``tw.__getattr__``): names over them resolve on first use too.
LAZY_NAMESPACES = ("io", "image", "train")


def is_lazy(path):
    return path.split(".")[0] in LAZY_NAMESPACES


def install(namespace, table):
    """Puts the entries of ``table`` over eagerly loaded namespaces into ``namespace``; the others
    are looked up by the module's ``__getattr__`` (:func:`lazy`)."""
    for name, path in table.items():
        if not is_lazy(path):
            namespace[name] = resolve(path)


def lazy(table, name):
    """The object for ``name`` if ``table`` has it over a lazily loaded namespace, else None."""
    path = table.get(name)
    return resolve(path) if path is not None and is_lazy(path) else None
