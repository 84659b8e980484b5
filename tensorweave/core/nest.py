"""Nested structures (lists, tuples, namedtuples, dicts) of leaves: flatten and rebuild.

>>> from tensorweave.core import nest
>>> s = {"a": [1, 2], "b": (3,)}
>>> nest.flatten(s)
[1, 2, 3]
>>> nest.pack_sequence_as(s, [4, 5, 6])
{'a': [4, 5], 'b': (6,)}
"""


def is_nested(x):
    return isinstance(x, (list, tuple, dict))


def flatten(x):
    out = []
    _flatten_into(x, out)
    return out


def _flatten_into(x, out):
    # one list for the whole structure: a list per leaf made tw.function's call path 2x slower
    if isinstance(x, dict):
        for k in sorted(x, key=_key):
            _flatten_into(x[k], out)
    elif isinstance(x, (list, tuple)):
        for v in x:
            _flatten_into(v, out)
    else:
        out.append(x)


def _key(k):
    return (type(k).__name__, k) if not isinstance(k, str) else ("", k)


def pack_sequence_as(structure, flat):
    it = iter(flat)

    def build(s):
        if isinstance(s, dict):
            built = {k: build(s[k]) for k in sorted(s, key=_key)}
            return type(s)((k, built[k]) for k in s) if type(s) is not dict else {k: built[k] for k in s}
        if isinstance(s, (list, tuple)):
            items = [build(v) for v in s]
            if hasattr(s, "_fields"):
                return type(s)(*items)
            return type(s)(items)
        return next(it)
    return build(structure)


def map_structure(fn, *structures):
    flats = [flatten(s) for s in structures]
    return pack_sequence_as(structures[0], [fn(*xs) for xs in zip(*flats)])


def assert_same_structure(a, b):
    def shape(x):
        if isinstance(x, dict):
            return ("dict", tuple(sorted((k, shape(v)) for k, v in x.items())))
        if isinstance(x, (list, tuple)):
            return ("seq", tuple(shape(v) for v in x))
        return "leaf"
    if shape(a) != shape(b):
        raise ValueError(f"structures differ: {a!r} vs {b!r}")


def flatten_up_to(structure, value):
    """Flattens ``value`` only as deep as ``structure`` goes (its leaves may be lists, e.g. shapes)."""
    if isinstance(structure, dict):
        out = []
        for k in sorted(structure, key=_key):
            out.extend(flatten_up_to(structure[k], value[k]))
        return out
    if isinstance(structure, (list, tuple)):
        if len(structure) != len(value):
            raise ValueError(f"structure has {len(structure)} items but {value!r} has {len(value)}")
        out = []
        for s, v in zip(structure, value):
            out.extend(flatten_up_to(s, v))
        return out
    return [value]
