"""TF1 sub-namespaces that regroup existing functions under TF1's module names: ``tf.compat``
(``as_bytes``, ``as_text``...), ``tf.python_io``, ``tf.queue``, ``tf.spectral``, ``tf.manip``,
``tf.debugging``, ``tf.dtypes``, ``tf.app`` and ``tf.flags`` (absl's flags, as TF's are).

>>> import tensorweave.compat.v1 as tf
>>> tf.compat.as_bytes("héllo"), tf.compat.as_text(b"abc")
(b'h\\xc3\\xa9llo', 'abc')
>>> float(tf.manip.roll(tf.constant([1.0, 2.0, 3.0]), 1, 0)[0])
3.0
"""
import numbers
import os
import sys
import types


def _namespace(name, doc, **members):
    module = types.ModuleType(f"tensorweave.compat.v1.{name}", doc)
    module.__dict__.update(members)
    module.__all__ = sorted(members)
    return module


# ---- tf.compat -------------------------------------------------------------------------------------------
def as_bytes(bytes_or_text, encoding="utf-8"):
    """``bytes_or_text`` as bytes (text encoded with ``encoding``)."""
    if isinstance(bytes_or_text, bytearray):
        return bytes(bytes_or_text)
    if isinstance(bytes_or_text, str):
        return bytes_or_text.encode(encoding)
    if isinstance(bytes_or_text, bytes):
        return bytes_or_text
    raise TypeError(f"Expected binary or unicode string, got {bytes_or_text!r}")


def as_text(bytes_or_text, encoding="utf-8"):
    """``bytes_or_text`` as str (bytes decoded with ``encoding``)."""
    if isinstance(bytes_or_text, str):
        return bytes_or_text
    if isinstance(bytes_or_text, bytes):
        return bytes_or_text.decode(encoding)
    raise TypeError(f"Expected binary or unicode string, got {bytes_or_text!r}")


def as_str_any(value, encoding="utf-8"):
    """``value`` as str: bytes decoded, anything else through ``str``."""
    return as_text(value, encoding) if isinstance(value, bytes) else str(value)


def path_to_str(path):
    """A path-like object as a string (other values unchanged)."""
    return os.fspath(path) if isinstance(path, os.PathLike) else path


def forward_compatible(year, month, day):
    """Whether the framework is newer than a (TF) forward-compatibility date: tensorweave implements
    TF 2.x's ops, so dates up to TF 2.21's horizon are True."""
    import datetime
    return datetime.date(year, month, day) < datetime.date(2026, 1, 1)


def _compat_namespace():
    from tensorweave.compat import v1
    from tensorweave.compat.v1_framework import dimension_value
    from tensorweave.compat.v1_dimension import dimension_at_index
    import tensorweave
    return _namespace(
        "compat", "TF's ``tf.compat``: text/bytes conversion and the API versions.",
        as_bytes=as_bytes, as_text=as_text, as_str=as_text, as_str_any=as_str_any, path_to_str=path_to_str,
        forward_compatible=forward_compatible, dimension_value=dimension_value, dimension_at_index=dimension_at_index,
        bytes_or_text_types=(bytes, str), integral_types=(numbers.Integral,), real_types=(numbers.Real,),
        complex_types=(numbers.Complex,), v1=v1, v2=tensorweave)


# ---- re-export namespaces --------------------------------------------------------------------------------
def _python_io():
    from tensorweave import io

    class TFRecordCompressionType:
        """The compression of a TFRecord file (``TFRecordOptions(compression_type=...)``)."""
        NONE, ZLIB, GZIP = 0, 1, 2

    class TFRecordOptions(io.TFRecordOptions):
        """``tw.io.TFRecordOptions`` also taking TF1's ``TFRecordCompressionType`` values."""

        def __init__(self, compression_type=None, **kwargs):
            names = {TFRecordCompressionType.NONE: "", TFRecordCompressionType.ZLIB: "ZLIB",
                     TFRecordCompressionType.GZIP: "GZIP"}
            if isinstance(compression_type, int) and not isinstance(compression_type, bool):
                if compression_type not in names:
                    raise ValueError(f"Unknown TFRecordCompressionType {compression_type}")
                compression_type = names[compression_type]
            super().__init__(compression_type, **kwargs)
    return _namespace("python_io", "TF1's ``tf.python_io``: TFRecord files.", TFRecordWriter=io.TFRecordWriter,
                      tf_record_iterator=io.tf_record_iterator, TFRecordOptions=TFRecordOptions,
                      TFRecordCompressionType=TFRecordCompressionType)


def _queue():
    from tensorweave.compat import v1_queues as q
    members = {n: getattr(q, n) for n in ("FIFOQueue", "PaddingFIFOQueue", "QueueBase", "RandomShuffleQueue",
                                          "PriorityQueue") if hasattr(q, n)}
    return _namespace("queue", "TF1's ``tf.queue``: the queue classes.", **members)


def _spectral():
    from tensorweave import signal as s
    names = ("dct", "fft", "fft2d", "fft3d", "idct", "ifft", "ifft2d", "ifft3d", "irfft", "irfft2d", "irfft3d", "rfft",
             "rfft2d", "rfft3d")
    return _namespace("spectral", "TF1's ``tf.spectral``: ``tw.signal``'s transforms.", **{n: getattr(s, n) for n in names})


def _manip(v1):
    return _namespace("manip", "TF1's ``tf.manip``.", **{n: getattr(v1, n) for n in (
        "batch_to_space_nd", "gather_nd", "reshape", "reverse", "roll", "scatter_nd", "space_to_batch_nd", "tile")})


def _debugging(v1):
    from tensorweave.compat import v1_asserts
    members = {n: getattr(v1_asserts, n) for n in v1_asserts.__all__ if n not in ("verify_tensor_all_finite",
                                                                                 "add_check_numerics_ops")}
    members.update(assert_all_finite=v1_asserts.verify_tensor_all_finite, is_finite=v1.is_finite,
                   is_inf=v1.is_inf, is_nan=v1.is_nan, is_non_decreasing=v1.is_non_decreasing,
                   is_strictly_increasing=v1.is_strictly_increasing)
    return _namespace("debugging", "TF1's ``tf.debugging``: run-time checks.", **members)


def _dtypes(v1):
    names = ("DType", "as_dtype", "as_string", "bfloat16", "bool", "cast", "complex", "complex128", "complex64",
             "double", "float16", "float32", "float64", "half", "int16", "int32", "int64", "int8", "resource",
             "saturate_cast", "string", "uint16", "uint32", "uint64", "uint8", "variant")
    return _namespace("dtypes", "TF1's ``tf.dtypes``.", **{n: getattr(v1, n) for n in names if hasattr(v1, n)})


class _ParsingFlagValues:
    """absl's ``FLAGS`` that parses ``sys.argv`` on the first read of a flag (unknown flags raise), as
    TF1's ``tf.flags.FLAGS`` does (absl's own raises until parsed)."""

    def __init__(self, wrapped):
        self.__dict__["_wrapped"] = wrapped

    def __getattr__(self, name):
        wrapped = self.__dict__["_wrapped"]
        if not hasattr(type(wrapped), name) and not wrapped.is_parsed():    # a flag, not a FlagValues method
            wrapped(sys.argv)
        return getattr(wrapped, name)

    def __setattr__(self, name, value):
        setattr(self.__dict__["_wrapped"], name, value)

    def __delattr__(self, name):
        delattr(self.__dict__["_wrapped"], name)

    def __dir__(self):
        return dir(self.__dict__["_wrapped"])

    def __getitem__(self, name):
        return self.__dict__["_wrapped"][name]

    def __contains__(self, name):
        return name in self.__dict__["_wrapped"]

    def __iter__(self):
        return iter(self.__dict__["_wrapped"])

    def __len__(self):
        return len(self.__dict__["_wrapped"])

    def __call__(self, *args, **kwargs):
        return self.__dict__["_wrapped"](*args, **kwargs)


def _flags():
    try:
        from absl import flags
    except ImportError:
        raise ImportError("tf.flags/tf.app.flags are absl's flags; install absl-py (it comes with tensorboard). "
                          "Hint: pip install absl-py") from None
    members = {n: getattr(flags, n) for n in dir(flags) if not n.startswith("_")}
    members["FLAGS"] = _ParsingFlagValues(flags.FLAGS)
    return _namespace("flags", "TF1's ``tf.flags``: absl's flags, with a ``FLAGS`` that parses "
                      "``sys.argv`` on first use.", **members)


def _app():
    def run(main=None, argv=None):
        """Parses the command-line flags (``tf.app.flags``) and calls ``main(argv)``, exiting with its
        result, as TF1's ``tf.app.run``."""
        from absl import flags
        args = sys.argv if argv is None else argv
        remaining = flags.FLAGS(args, known_only=True)
        main = main or sys.modules["__main__"].main
        sys.exit(main(remaining))
    from tensorweave.compat import v1
    return _namespace("app", "TF1's ``tf.app``: ``run`` and ``flags``.", run=run, flags=v1.flags)


def build(name):
    """The namespace ``tf.<name>`` (built on first use by ``compat.v1.__getattr__``)."""
    from tensorweave.compat import v1
    makers = {"compat": _compat_namespace, "python_io": _python_io, "queue": _queue, "spectral": _spectral,
              "manip": lambda: _manip(v1), "debugging": lambda: _debugging(v1), "dtypes": lambda: _dtypes(v1),
              "flags": _flags, "app": _app}
    return makers[name]()


NAMES = ("compat", "python_io", "queue", "spectral", "manip", "debugging", "dtypes", "flags", "app")
