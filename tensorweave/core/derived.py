"""Values derived from variable storage, kept until the storage changes (e.g. transformed filters).

A kernel that spends time turning a weight into another form on every call (Winograd's filter
transform: 4/9 of a ResNet50's batch-1 forward pass) can keep the result here, keyed by the weight's
array. Only arrays a :class:`~tensorweave.Variable` stores are eligible (the variable registers each
array it stores with :func:`track`); every other array — a user's NumPy array, which may be
modified in place between calls, or an intermediate — is recomputed each time. A variable updated
in place (optimizer steps, scatters: ``Variable._storage_for_update``) calls :func:`modified`
first, which drops what was derived from its array; an assignment stores a new array, so the old
entries simply stop being asked for and go when that array is freed (weak references).

Entries are bounded by :data:`MAX_BYTES` in total (least recently used first); ``TW_DERIVED_CACHE_MB``
sets it (``0`` switches caching off).

>>> import numpy as np
>>> from tensorweave.core import derived
>>> w = np.arange(3.0); derived.track(w)
>>> derived.get(w, "double", lambda a: 2 * a)
array([0., 2., 4.])
>>> w[0] = 5.0; derived.modified(w)          # an in-place update
>>> derived.get(w, "double", lambda a: 2 * a)
array([10.,  2.,  4.])
"""
import collections
import itertools
import os
import threading
import weakref

MAX_BYTES = int(float(os.environ.get("TW_DERIVED_CACHE_MB", "512")) * (1 << 20))

_lock = threading.RLock()    # re-entrant: a weak-reference callback can run inside (cyclic GC)
_slots = {}                             # id(array) -> _Slot
_lru = collections.OrderedDict()        # (id(array), key) -> bytes, least recently used first
_bytes = [0]
#: every slot's generation is drawn from here, so a generation names one array's contents in the
#: whole process (a freed array's id, reused by a new array, never meets its old generation):
#: :func:`get_many` keys a value derived from several arrays by the others' generations
_generations = itertools.count(1)


class _Slot:
    __slots__ = ("ref", "generation", "values")

    def __init__(self, ref):
        self.ref, self.generation, self.values = ref, next(_generations), {}


def _drop_values(ident, slot):
    for key, value in slot.values.items():
        _bytes[0] -= _lru.pop((ident, key), 0)
    slot.values.clear()
    slot.generation = next(_generations)


def _forget(ident, ref):
    with _lock:
        slot = _slots.get(ident)
        if slot is not None and slot.ref is ref:
            _drop_values(ident, slot)
            del _slots[ident]


def track(array):
    """Register ``array`` as a variable's storage: values derived from it may be cached. Not a
    scalar (a metric's or optimizer's counter, a NumPy scalar after ``assign_add``): nothing is
    derived from one, and a NumPy scalar's failed weak reference raised on every such write
    (issue 18 mlp22: three per mlp training step)."""
    if MAX_BYTES <= 0 or getattr(array, "ndim", None) == 0:
        return
    ident = id(array)
    try:
        ref = weakref.ref(array, lambda r, ident=ident: _forget(ident, r))
    except TypeError:                   # NumPy scalars and other values without weak references
        return
    with _lock:
        old = _slots.get(ident)
        if old is not None:
            if old.ref() is array:
                return
            _drop_values(ident, old)    # the id of a freed array, reused
        _slots[ident] = _Slot(ref)


def modified(array):
    """``array`` is about to change in place: drop what was derived from it."""
    slot = _slots.get(id(array))
    if slot is not None:
        with _lock:
            _drop_values(id(array), slot)


def tracked(array):
    """Whether ``array`` is a tracked variable storage: what is derived from it is kept until it
    changes (:func:`get`)."""
    slot = _slots.get(id(array))
    return slot is not None and slot.ref() is array


def get(array, key, compute):
    """``compute(array)``, cached per (``array``, ``key``) while ``array`` is a tracked, unmodified
    variable storage; computed afresh for any other array."""
    ident = id(array)
    slot = _slots.get(ident)
    if slot is None or slot.ref() is not array:
        return compute(array)
    with _lock:
        value = slot.values.get(key)
        if value is not None:
            _lru.move_to_end((ident, key))
            return value
        seen = slot.generation
    value = compute(array)
    size = int(getattr(value, "nbytes", 0))
    with _lock:
        if size > MAX_BYTES or _slots.get(ident) is not slot or slot.generation != seen:
            return value                # too large, or the array changed while computing
        _bytes[0] += size - _lru.pop((ident, key), 0)
        slot.values[key] = value
        _lru[(ident, key)] = size
        while _bytes[0] > MAX_BYTES:
            (old_ident, old_key), old_size = _lru.popitem(last=False)
            old_slot = _slots.get(old_ident)
            if old_slot is not None:
                old_slot.values.pop(old_key, None)
            _bytes[0] -= old_size
    return value


def generation(array):
    """A number naming ``array``'s current contents while it is a tracked variable storage (it
    changes when the array is modified, and no other array's ever equals it), else None."""
    slot = _slots.get(id(array))
    if slot is None or slot.ref() is not array:
        return None
    return slot.generation


def get_many(arrays, key, compute):
    """``compute(*arrays)``, cached while every one of ``arrays`` is a tracked, unmodified
    variable storage (kept with the first array's values, keyed by ``key`` and the others'
    :func:`generation`: a change to any of them is a new key); computed afresh otherwise.

    >>> import numpy as np
    >>> a, b = np.ones(2), np.zeros(2); track(a); track(b)
    >>> get_many((a, b), "stacked", lambda *xs: np.stack(xs)).tolist()
    [[1.0, 1.0], [0.0, 0.0]]
    >>> b[0] = 3.0; modified(b)
    >>> get_many((a, b), "stacked", lambda *xs: np.stack(xs)).tolist()
    [[1.0, 1.0], [3.0, 0.0]]
    """
    others = tuple(generation(x) for x in arrays[1:])
    if None in others:
        return compute(*arrays)
    return get(arrays[0], (key,) + others, lambda _first: compute(*arrays))


def clear():
    """Drop every cached value (tracking stays)."""
    with _lock:
        for ident, slot in list(_slots.items()):
            _drop_values(ident, slot)


def cached_bytes():
    """Bytes held by cached values."""
    return _bytes[0]
