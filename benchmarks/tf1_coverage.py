"""How much of TF1's API ``tensorweave.compat.v1`` covers: per namespace, the public names of
TensorFlow's ``tf.compat.v1`` (and ``.nn``, ``.train``, ``.layers``, ``.losses``, ``.summary``,
``.metrics``, ``tf.estimator``) that exist in tensorweave and that its tests use.

Run it in a virtual environment with TensorFlow (the names come from there); tensorweave is
imported from this checkout, in the same process when its dependencies are installed there,
else in a subprocess of ``$TENSORWEAVE_PYTHON`` (default ``/work/main/.venv/bin/python``)::

    TF_USE_LEGACY_KERAS=1 ~/.cache/tensorweave/bench-tf-venv/bin/python benchmarks/tf1_coverage.py [--missing]

A name counts as **present** when the namespace has it, and as **working** when it is present
and a test under ``tests/`` (or a case of ``tests/tfdiff/v1_cases.py``, compared with TensorFlow)
uses it through that namespace (``tf.nn.dropout`` for compat.v1's nn,
or ``tw.nn.dropout``/``tw.dropout`` where compat.v1 re-exports tensorweave's own function).
TensorFlow 2.16+ has no ``tf.estimator``: its names are the list below (TF 2.15's).
``tf.compat.v1.layers`` and ``.nn.rnn_cell`` need ``tf_keras`` and ``TF_USE_LEGACY_KERAS=1``.
"""
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMESPACES = ["", "nn", "train", "layers", "losses", "summary", "metrics", "estimator"]

# tf.estimator's public names in TensorFlow 2.15 (the last release that had it).
ESTIMATOR_NAMES = [
    "BaselineClassifier", "BaselineEstimator", "BaselineRegressor", "BestExporter", "BinaryClassHead",
    "BoostedTreesClassifier", "BoostedTreesEstimator", "BoostedTreesRegressor", "CheckpointSaverHook",
    "CheckpointSaverListener", "DNNClassifier", "DNNEstimator", "DNNLinearCombinedClassifier",
    "DNNLinearCombinedEstimator", "DNNLinearCombinedRegressor", "DNNRegressor", "Estimator", "EstimatorSpec",
    "EvalSpec", "Exporter", "FeedFnHook", "FinalExporter", "FinalOpsHook", "GlobalStepWaiterHook", "Head",
    "LatestExporter", "LinearClassifier", "LinearEstimator", "LinearRegressor", "LoggingTensorHook",
    "LogisticRegressionHead", "ModeKeys", "MultiClassHead", "MultiHead", "MultiLabelHead", "NanLossDuringTrainingError",
    "NanTensorHook", "PoissonRegressionHead", "ProfilerHook", "RegressionHead", "RunConfig", "SecondOrStepTimer",
    "SessionRunArgs", "SessionRunContext", "SessionRunHook", "SessionRunValues", "StepCounterHook", "StopAtStepHook",
    "SummarySaverHook", "TrainSpec", "VocabInfo", "WarmStartSettings", "add_metrics", "classifier_parse_example_spec",
    "experimental", "export", "regressor_parse_example_spec", "train_and_evaluate",
]


# ---- TensorFlow's side --------------------------------------------------------------------------------
def tensorflow_names():
    import tensorflow as tf
    v1 = tf.compat.v1
    out = {}
    for ns in NAMESPACES:
        if ns == "estimator":
            out[ns] = sorted(ESTIMATOR_NAMES)
            continue
        module = v1
        try:
            for part in filter(None, ns.split(".")):
                module = getattr(module, part)
            out[ns] = sorted(n for n in dir(module) if not n.startswith("_"))
        except Exception as e:  # noqa: BLE001 - e.g. layers without tf_keras
            raise SystemExit(f"tf.compat.v1.{ns}: {type(e).__name__}: {e}. Hint: install tf_keras and set "
                             "TF_USE_LEGACY_KERAS=1") from None
    return out


# ---- tensorweave's side --------------------------------------------------------------------------------
def _test_sources():
    texts = []
    for folder, _, files in os.walk(os.path.join(ROOT, "tests")):
        for f in files:
            if f.endswith(".py"):
                with open(os.path.join(folder, f), encoding="utf-8") as fh:
                    texts.append(fh.read())
    # the compat.v1 differential cases are generated from templates: count the sources they run
    sys.path.insert(0, os.path.join(ROOT, "tests", "tfdiff"))
    try:
        import v1_cases
        texts.extend(src for _, _, src in v1_cases.all_cases())
    finally:
        sys.path.pop(0)
    return "\n".join(texts)


def tensorweave_coverage(names):
    sys.path.insert(0, ROOT)
    import tensorweave as tw
    import tensorweave.compat.v1 as tf1
    tests = _test_sources()
    path_re = r"\.((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*)"
    used_v1 = set(re.findall(r"\b(?:tf|tf1)" + path_re, tests))     # tests write compat.v1 as ``tf``
    # ``tf.gfile.exists`` uses ``tf.gfile`` too, ``tf.UnconnectedGradients.ZERO`` the class
    used_v1 |= {p.rsplit(".", k)[0] for p in list(used_v1) for k in range(1, p.count(".") + 1)}
    used_tw = set(re.findall(r"\btw" + path_re, tests))
    # compat.v1's sub-modules imported by name (``from tensorweave.compat import v1_train as train``)
    for ns in ("train", "layers", "losses", "metrics", "summary", "estimator"):
        used_v1 |= {f"{ns}.{n}" for n in re.findall(rf"\b(?:v1_)?{ns}\.([A-Za-z_]\w*)", tests)}
    report = {}
    for ns, tf_names in names.items():
        module = tf1
        try:
            for part in filter(None, ns.split(".")):
                module = getattr(module, part)
        except AttributeError:
            module = None
        rows = []
        for n in tf_names:
            try:
                obj = getattr(module, n) if module is not None else None
                present = module is not None and hasattr(module, n)
            except Exception:  # noqa: BLE001 - a name whose lookup raises is not present
                obj, present = None, False
            path = f"{ns}.{n}" if ns else n
            tested = present and (path in used_v1 or _tested_in_tw(tw, ns, n, obj, used_tw))
            rows.append((n, present, tested))
        report[ns or "compat.v1"] = rows
    return report


def _tested_in_tw(tw, ns, name, obj, used):
    """compat.v1 re-exports tensorweave's own function: a test of ``tw.<ns>.<name>`` tests it."""
    target = tw
    for part in filter(None, ns.split(".")):
        target = getattr(target, part, None)
        if target is None:
            return False
    same = getattr(target, name, None)
    if same is None or (same is not obj and getattr(same, "__wrapped__", same) is not getattr(obj, "__wrapped__",
                                                                                              obj)):
        return False
    return (f"{ns}.{name}" if ns else name) in used


def main():
    show_missing = "--missing" in sys.argv
    if "--tensorweave-part" in sys.argv:
        names = json.load(sys.stdin)
        print(json.dumps(tensorweave_coverage(names)))
        return
    names = tensorflow_names()
    try:
        report = tensorweave_coverage(names)
    except ImportError:
        python = os.environ.get("TENSORWEAVE_PYTHON", "/work/main/.venv/bin/python")
        out = subprocess.run([python, __file__, "--tensorweave-part"], input=json.dumps(names), capture_output=True,
                             text=True, env=dict(os.environ, PYTHONPATH=ROOT), check=True)
        report = json.loads(out.stdout.strip().splitlines()[-1])
    total = present = working = 0
    print(f"{'namespace':<22}{'TF names':>9}{'present':>9}{'working':>9}{'%':>7}")
    for ns, rows in report.items():
        n, p, w = len(rows), sum(r[1] for r in rows), sum(r[2] for r in rows)
        total, present, working = total + n, present + p, working + w
        label = "tf.compat.v1" if ns == "compat.v1" else ("tf.estimator" if ns == "estimator" else
                                                           f"tf.compat.v1.{ns}")
        print(f"{label:<22}{n:>9}{p:>9}{w:>9}{100.0 * w / max(n, 1):>6.1f}%")
        if show_missing:
            print("   missing:", " ".join(r[0] for r in rows if not r[1]))
            print("   untested:", " ".join(r[0] for r in rows if r[1] and not r[2]))
    print(f"{'overall':<22}{total:>9}{present:>9}{working:>9}{100.0 * working / max(total, 1):>6.1f}%")


if __name__ == "__main__":
    main()
