"""Runs every recorded case in tensorweave and compares with TensorFlow's recorded result.

    PYTHONPATH=$PWD python tests/tfdiff/compare.py [--v1]   # the agreement figure and every disagreement

``--v1`` compares ``v1_cases.py`` run with ``tensorweave.compat.v1`` against ``tf.compat.v1``.

Outcomes: ``agree``; ``deliberate`` (a documented difference, ``differences.py``); ``missing`` (a
TF name tensorweave lacks); ``differ``; ``stale`` (the case changed since TF's results were
recorded: regenerate them).
"""
import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "tf_results.json")
# suite -> (cases module, TF's recorded results, whether the cases run with compat.v1)
SUITES = {"v2": ("cases", RESULTS, False), "v1": ("v1_cases", os.path.join(HERE, "tf1_results.json"), True)}

# Per-dtype (rtol, atol): the frameworks' kernels differ in the last bits (and half types a lot).
TOL = {"float16": (1e-2, 1e-3), "bfloat16": (2e-2, 1e-2), "float32": (2e-5, 1e-6), "float64": (1e-10, 1e-12),
       "complex64": (2e-5, 1e-5), "complex128": (1e-10, 1e-12)}


def load(suite="v2"):
    with open(SUITES[suite][1]) as f:
        return json.load(f)


def _num(v):
    if isinstance(v, str) and v in ("nan", "inf", "-inf"):    # the encoding of non-finite floats
        return float(v)
    return v


def _close(a, b, dtype):
    if isinstance(a, list) or isinstance(b, list):
        return isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and all(
            _close(x, y, dtype) for x, y in zip(a, b))
    a, b = _num(a), _num(b)
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    if isinstance(a, float) or isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        if math.isinf(a) or math.isinf(b):
            return a == b
        rtol, atol = TOL.get(dtype, (0, 0))
        return abs(a - b) <= atol + rtol * abs(b)
    return a == b


def same(ours, theirs):
    """Whether two encoded results agree (both raise, or equal structure, dtypes, shapes, values)."""
    if "error" in theirs or "error" in ours:
        return "error" in theirs and "error" in ours
    if set(ours) != set(theirs):
        return False
    for key in ("list", "ragged", "sparse"):
        if key in theirs:
            return len(ours[key]) == len(theirs[key]) and all(same(a, b) for a, b in zip(ours[key], theirs[key]))
    if "dtype" in theirs:
        return (ours["dtype"] == theirs["dtype"] and ours["shape"] == theirs["shape"]
                and _close(ours["value"], theirs["value"], theirs["dtype"]))
    if "py" in theirs:
        return _close(ours["py"], theirs["py"], "float64")
    return ours == theirs


def _missing(ours):
    return ours.get("error") == "AttributeError" and "has no attribute" in ours.get("message", "")


def outcomes(suite="v2"):
    """``{case_id: (outcome, ours, theirs)}`` for every case of ``suite``, running each in tensorweave."""
    sys.path.insert(0, HERE)
    import runner
    from differences import DELIBERATE

    cases_module, _, v1 = SUITES[suite]
    cases = __import__(cases_module)
    if v1:
        import tensorweave.compat.v1 as tw
    else:
        import tensorweave as tw
    recorded = load(suite)["cases"]
    out = {}
    for cid, _fam, src in cases.all_cases():
        rec = recorded.get(cid)
        if rec is None or rec["src"] != src:
            out[cid] = ("stale", None, None)
            continue
        ours, theirs = runner.run(tw, src), rec["tf"]
        if _missing(ours) and not _missing(theirs):
            kind = "missing"
        elif same(ours, theirs):
            kind = "agree"
        elif cid in DELIBERATE:
            kind = "deliberate"
        else:
            kind = "differ"
        out[cid] = (kind, ours, theirs)
    return out


def summary(results):
    counts = {}
    for kind, _, _ in results.values():
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def main():
    suite = "v1" if "--v1" in sys.argv else "v2"
    results = outcomes(suite)
    for cid, (kind, ours, theirs) in sorted(results.items()):
        if kind not in ("agree", "deliberate"):
            print(f"{kind:8s} {cid}\n         tf: {json.dumps(theirs)[:160]}\n         tw: {json.dumps(ours)[:160]}")
    c = summary(results)
    total = len(results)
    print(f"\n{c.get('agree', 0)} / {total} agree with TensorFlow {load(suite)['tensorflow']}; "
          f"{c.get('deliberate', 0)} deliberate differences; {c.get('missing', 0)} missing names; "
          f"{c.get('differ', 0)} other differences; {c.get('stale', 0)} stale")


if __name__ == "__main__":
    main()
