"""Runs the corpus programs and prints their numbers as JSON: under TensorFlow 2.x's compat.v1
(``--tensorflow``, in the benchmark venv: the import line becomes ``import tensorflow.compat.v1 as tf``
with ``tf.disable_v2_behavior()``) or under tensorweave. Each program runs in a fresh process.

    TF_USE_LEGACY_KERAS=1 ~/.cache/tensorweave/bench-tf-venv/bin/python tests/tf1_corpus/run_reference.py --tensorflow
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TW_IMPORT = "import tensorweave.compat.v1 as tf"
TF_IMPORT = "import tensorflow.compat.v1 as tf; tf.disable_v2_behavior()"


def programs():
    return sorted(f[:-3] for f in os.listdir(HERE) if f.endswith(".py") and f not in
                  ("corpus_data.py", "run_reference.py", "__init__.py"))


def run_one(name, tensorflow):
    source = open(os.path.join(HERE, name + ".py")).read()
    if tensorflow:
        if TW_IMPORT not in source:
            raise SystemExit(f"{name}: no '{TW_IMPORT}' line")
        source = source.replace(TW_IMPORT, TF_IMPORT, 1)
    else:
        source += "\nimport tensorweave.compat.v1 as _tw1\n_tw1.disable_eager_execution()\n"
    module = {"__name__": name, "__file__": os.path.join(HERE, name + ".py")}
    sys.path.insert(0, HERE)
    exec(compile(source, module["__file__"], "exec"), module)
    return module["main"]()


if __name__ == "__main__":
    tensorflow = "--tensorflow" in sys.argv
    names = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(names) == 1:
        print(json.dumps(run_one(names[0], tensorflow)))
        sys.exit(0)
    env = dict(os.environ, DIGITS_CSV=os.environ.get("DIGITS_CSV", ""))
    results = {}
    for name in names or programs():
        out = subprocess.run([sys.executable, __file__, name] + (["--tensorflow"] if tensorflow else []),
                             capture_output=True, text=True, env=env)
        lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
        results[name] = json.loads(lines[-1]) if lines else {"error": out.stderr[-800:]}
        print(name, results[name], flush=True)
    print(json.dumps(results, indent=1))
