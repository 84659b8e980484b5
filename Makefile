# Set-up is the same for every target: a virtual environment in .venv with tensorweave
# installed (editable) together with its test extra and MKL (the mkl extra: faster matrix
# products on x86-64 Linux, nothing elsewhere), and the loops a cold training step meets built
# ahead of time into the package (`aot`). Works on a fresh machine with Python >= 3.11 and pip.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# Parallel test workers (pytest-xdist); CI machines have 2 cores. Work stealing: each worker
# starts on one contiguous half of the tests (a module's tests stay on one worker, so its
# module-scoped fixtures — a Ray cluster's actors, a trained model — are made once) and an idle
# worker takes half of the other's queue from its end (no core idle behind one long file).
WORKERS ?= 2
DIST    ?= worksteal

.PHONY: demo test bench setup clean tf-oracle aot aot-check

demo: $(STAMP)
	$(PY) -m tensorweave

test: $(STAMP)
	$(PY) -m pytest -q -n $(WORKERS) --dist $(DIST)

# Peers (PyTorch CPU, JAX) are optional: the benchmark notes them as absent when they
# cannot be installed. Never install plain `torch` (the CUDA build is huge).
# TensorFlow (Keras 3) gets a virtual environment of its own outside the repo: it pins its
# own dependencies, and its presence would change what some tests check in .venv.
TF_VENV ?= $(HOME)/.cache/tensorweave/bench-tf-venv
bench: $(STAMP)
	-$(PY) -m pip install -q torch==2.13.0
	-$(PY) -m pip install -q jax
	-test -x $(TF_VENV)/bin/python || ($(PYTHON) -m venv $(TF_VENV) && $(TF_VENV)/bin/pip install -q tensorflow-cpu)
	$(PY) benchmarks/bench_core.py
	TW_BENCH_TF_PYTHON=$(TF_VENV)/bin/python $(PY) benchmarks/bench_models.py

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e '.[test,mkl,aot]'
	-TW_AOT=0 $(PY) -m tensorweave.kernels.cpu.aot_build
	touch $(STAMP)

# The loops a cold training step meets, compiled ahead of time into the package (needs a C
# compiler; without one, or when this fails, kernels compile on first use as before).
aot: $(STAMP)
	TW_AOT=0 $(PY) -m tensorweave.kernels.cpu.aot_build

# The build gives the JIT's bits on every signature it serves: the suite (`test`) JIT-compiles
# the first signature of each kernel; this compiles them all (minutes: run it after `aot`).
aot-check: $(STAMP)
	TW_AOT_CHECK=all $(PY) -m pytest -q -n $(WORKERS) --dist $(DIST) tests/test_cold18_aot.py

clean:
	rm -rf $(VENV) build dist *.egg-info tensorweave/kernels/cpu/_aot

# Differential testing against TensorFlow (tests/tfdiff): records TF's results for every case
# into tests/tfdiff/tf_results.json, which tests/test_tf_differential.py compares against.
tf-oracle:
	test -x $(TF_VENV)/bin/python || ($(PYTHON) -m venv $(TF_VENV) && $(TF_VENV)/bin/pip install -q tensorflow-cpu)
	$(TF_VENV)/bin/python tests/tfdiff/generate.py
	$(TF_VENV)/bin/python tests/tfdiff/generate.py --v1
