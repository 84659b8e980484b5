"""Records TensorFlow's results for every case in ``cases.py`` into ``tf_results.json`` (and, with
``--v1``, for ``v1_cases.py`` run with ``tf.compat.v1`` into ``tf1_results.json``).

Run with a Python that has TensorFlow (never tensorweave's venv):

    make tf-oracle     # or: ~/.cache/tensorweave/bench-tf-venv/bin/python tests/tfdiff/generate.py [--v1]

The file keeps each case's source, so a case edited without regenerating shows up as stale.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")    # tf.compat.v1.layers needs tf_keras
    sys.path.insert(0, HERE)
    import tensorflow as tf  # noqa: PLC0415 - only in the oracle's environment

    import runner
    from compare import SUITES
    cases_module, out_path, v1 = SUITES["v1" if "--v1" in sys.argv else "v2"]
    cases = __import__(cases_module)
    module = tf.compat.v1 if v1 else tf
    tf.random.set_seed(0)
    results = {cid: {"family": fam, "src": src, "tf": runner.run(module, src)} for cid, fam, src in cases.all_cases()}
    with open(out_path, "w") as f:
        json.dump({"tensorflow": tf.__version__, "cases": results}, f, indent=0, sort_keys=True)
        f.write("\n")
    errors = sum("error" in r["tf"] for r in results.values())
    print(f"{len(results)} cases recorded from TensorFlow {tf.__version__} ({errors} raise) -> {out_path}")


if __name__ == "__main__":
    main()
