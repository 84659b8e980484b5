"""The Cora citation graph (LINQS plain-text form): ``cora.content`` (paper id, binary word
features, class name per line) and ``cora.cites`` (``cited citing`` per line).

``path`` is the directory holding both (or one with a ``cora/`` folder); without it,
``$TENSORWEAVE_DATASETS`` is searched. Paper ids are remapped to rows ``0..N-1`` in file order.

>>> import os, tempfile
>>> from tensorweave.keras.datasets import cora
>>> d = tempfile.mkdtemp()
>>> _ = open(os.path.join(d, "cora.content"), "w").write("31\\t0\\t1\\tTheory\\n7\\t1\\t1\\tCase_Based\\n")
>>> _ = open(os.path.join(d, "cora.cites"), "w").write("31\\t7\\n")
>>> features, labels, edges = cora.load_data(d)
>>> features.tolist(), labels.tolist(), edges.tolist()
([[0.0, 1.0], [1.0, 1.0]], [1, 0], [[1, 0]])
"""
import numpy as np

from tensorweave.keras.datasets import _paths

FILES = ("cora.content", "cora.cites")


def _has_files(d):
    return all(_paths.first_existing(d, [f]) for f in FILES)


def _lines(path):
    with open(path, encoding="utf-8") as f:
        return [(n, line.split()) for n, line in enumerate(f, 1) if line.strip()]


def load_data(path=None, return_metadata=False):
    """``(features, labels, edges)``:

    * ``features``: float32 ``(N, F)``, the 0/1 word indicators;
    * ``labels``: int64 ``(N,)``, the class index, classes numbered in sorted name order;
    * ``edges``: int64 ``(E, 2)``, one row ``(i, j)`` per citation: paper ``i`` cites paper
      ``j`` (the file writes ``j i``), as row indices into ``features``. Directed, as in the
      file; add the reversed rows for an undirected graph.

    ``return_metadata=True`` adds a dict with ``class_names`` (list) and ``paper_ids`` (the
    original id of each row). Raises ``ValueError`` naming the file and line for malformed
    rows, duplicate ids and citations of unknown papers.
    """
    d = _paths.find_dir("cora", path, _has_files)
    content, cites = (_paths.first_existing(d, [f]) for f in FILES)
    rows = _lines(content)
    if not rows:
        raise ValueError(f"{content}: no papers")
    width = len(rows[0][1])
    if width < 3:
        raise ValueError(f"{content}:{rows[0][0]}: expected 'id feature... label', got {width} fields")
    ids, names, feats = [], [], np.empty((len(rows), width - 2), np.float32)
    index = {}
    for r, (n, fields) in enumerate(rows):
        if len(fields) != width:
            raise ValueError(f"{content}:{n}: {len(fields)} fields, but the first line has {width}")
        pid = fields[0]
        if pid in index:
            raise ValueError(f"{content}:{n}: paper id {pid} appears twice (first on row {index[pid] + 1})")
        index[pid] = r
        ids.append(pid)
        names.append(fields[-1])
        try:
            feats[r] = np.asarray(fields[1:-1], dtype=np.float32)
        except ValueError:
            raise ValueError(f"{content}:{n}: features must be numbers") from None
    class_names = sorted(set(names))
    cls = {c: i for i, c in enumerate(class_names)}
    labels = np.asarray([cls[c] for c in names], np.int64)
    edges = []
    for n, fields in _lines(cites):
        if len(fields) != 2:
            raise ValueError(f"{cites}:{n}: expected 'cited citing', got {len(fields)} fields")
        cited, citing = fields
        for pid in fields:
            if pid not in index:
                raise ValueError(f"{cites}:{n}: paper id {pid} is not in {content}")
        edges.append((index[citing], index[cited]))
    edges = np.asarray(edges, np.int64).reshape(-1, 2)
    if not return_metadata:
        return feats, labels, edges
    paper_ids = np.asarray([int(i) for i in ids], np.int64) if all(i.isdigit() for i in ids) \
        else np.asarray(ids, dtype=object)
    return feats, labels, edges, {"class_names": class_names, "paper_ids": paper_ids}
