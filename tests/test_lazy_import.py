"""``import tensorweave`` loads the layers only; everything above them loads on first use (PEP 562).

Each check runs in a fresh interpreter (this one has imported everything). The first-use checks
fork one child per public namespace from a process that has just run ``import tensorweave``, so
each namespace is used first with nothing else loaded: a registration (op, kernel, gradient,
hook) that only happened because another module was imported first shows up as a failure there.
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest

import tensorweave as tw

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(tw.__file__)))
ABOVE_RUNTIME = ("compat", "data", "distribute", "estimator", "experimental", "image", "io", "keras", "linalg",
                 "onnx", "profiler", "ragged", "saved_model", "saving", "sbp", "sparse", "train",
                 "module", "linear_operator")


def _python(code, timeout=600):
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=dict(os.environ, PYTHONPATH=ROOT),
                         capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-5000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_loads_the_layers_and_nothing_above():
    res = _python("""
        import json, sys
        import tensorweave
        loaded = {m.split(".")[1] for m in sys.modules if m.startswith("tensorweave.")}
        print(json.dumps(sorted(loaded)))
    """)
    assert {"core", "ops", "kernels", "autodiff", "runtime"} <= set(res)
    assert not set(res) & set(ABOVE_RUNTIME), sorted(set(res) & set(ABOVE_RUNTIME))


def test_every_public_name_resolves_and_lazy_modules_change_no_registration():
    res = _python("""
        import json, sys
        import tensorweave as tw
        from tensorweave.core import registry, upcalls
        from tensorweave.core.graph import Graph, Operation, SymbolicTensor
        from tensorweave.core.tensor import EagerTensor, Tensor
        from tensorweave.ops.variables import Variable

        def snapshot():
            ops = {n: [sorted(d.kernels), d.grad is not None, d.sbp is not None, sorted(d.traits), d.bind is not None]
                   for n, d in registry._OPS.items()}
            calls = {n: getattr(upcalls, n).__module__ for n in upcalls._NAMES}
            classes = {c.__name__: sorted(vars(c)) for c in (Tensor, EagerTensor, SymbolicTensor, Graph, Operation,
                                                             Variable)}
            return ops, calls, classes

        (ops0, calls0, classes0), names = snapshot(), [n for n in dir(tw) if not n.startswith("_")]
        eager = {n: v for n, v in vars(tw).items() if not n.startswith("_")}
        unresolved = [n for n in names if getattr(tw, n, None) is None and n not in ("newaxis",)]
        ops1, calls1, classes1 = snapshot()
        print(json.dumps({
            "names": names, "all": tw.__all__, "unresolved": unresolved,
            "new_ops": sorted(set(ops1) - set(ops0)), "op_modules": sorted(tw._OP_MODULES),
            "changed_ops": sorted(n for n in ops0 if ops0[n] != ops1[n]), "calls": calls0 == calls1,
            # (Keras wraps op functions that have no checked wrapper: a call on a KerasTensor is a layer)
            "rebound": sorted(n for n, v in eager.items() if getattr(tw, n) is not v
                              and getattr(getattr(tw, n), "_keras_symbolic_op", None) is not v),
            "class_attrs": {c: sorted(set(classes1[c]) - set(classes0[c])) for c in classes0
                            if classes0[c] != classes1[c]}}))
    """)
    assert not res["unresolved"]
    assert set(res["all"]) <= set(res["names"])
    for name in ("keras", "data", "distribute", "compat", "estimator", "saved_model", "train", "placement",
                 "RaggedTensor", "SparseTensor", "constant", "Session", "function"):
        assert name in res["names"], name
    # Ops registered by lazily loaded modules are exactly the ones get_op knows how to load.
    assert res["new_ops"] == res["op_modules"]
    assert not res["changed_ops"], "a lazy module changed ops registered at import (kernels, gradients, rules)"
    assert res["calls"]
    assert not res["rebound"], "a lazy module replaced names of the tensorweave namespace"
    # The one method a lazy module adds: to_global needs a placement, and making one loads distribute.
    assert res["class_attrs"] == {"EagerTensor": ["to_global"], "SymbolicTensor": ["to_global"]}


def test_an_op_of_a_lazy_module_is_found_by_name_and_enumeration():
    res = _python("""
        import json, sys
        import tensorweave
        from tensorweave.core.registry import get_op, registered_ops
        first = get_op("VarIsInitializedOp").name
        only = "tensorweave.compat.v1_state_ops" in sys.modules
        print(json.dumps([first, only, "UniqueSegmentSum" in registered_ops(), "_Boxing" in registered_ops()]))
    """)
    assert res == ["VarIsInitializedOp", True, True, True]
    with pytest.raises(tw.errors.NotFoundError, match="Op type not registered: 'NoSuchOpAnywhere'"):
        tw.core.registry.get_op("NoSuchOpAnywhere")


# First use of each public namespace, each in a child forked right after ``import tensorweave``.
FIRST_USES = {
    "keras": """
        m = tw.keras.Sequential([tw.keras.layers.Dense(2, activation="relu"), tw.keras.layers.Dense(1)])
        m.compile(optimizer="adam", loss="mse")
        h = m.fit(np.ones((8, 3), np.float32), np.ones((8, 1), np.float32), epochs=1, verbose=0)
        assert np.isfinite(h.history["loss"][0]) and m.predict(np.ones((2, 3)), verbose=0).shape == (2, 1)
    """,
    "compat": """
        tf = tw.compat.v1
        g = tf.Graph()
        with g.as_default():
            v = tf.Variable(1.0)
            y = tf.gradients(tf.square(v), [v])[0]
            ok = tf.is_variable_initialized(v)
            with tf.Session() as s:
                s.run(tf.global_variables_initializer())
                assert s.run(y) == 2.0 and s.run(ok)
    """,
    "distribute": """
        p = tw.placement("cpu", ranks=[0, 1])
        x = tw.constant([[1.0, 2.0], [3.0, 4.0]]).to_global(p, tw.sbp.split(0))
        y = tw.reduce_sum(x * 2.0).to_global(p, tw.sbp.broadcast)
        assert [float(v) for v in y.to_local()] == [20.0, 20.0]
    """,
    "data": """
        ds = tw.data.Dataset.from_tensor_slices(np.arange(5)).map(lambda v: v * 2).batch(2)
        assert [b.numpy().tolist() for b in ds] == [[0, 2], [4, 6], [8]]
    """,
    "train": """
        v = tw.Variable(3.0)
        path = tw.train.Checkpoint(v=v).save(os.path.join(tmp, "ckpt"))
        v.assign(0.0)
        tw.train.Checkpoint(v=v).restore(path)
        assert float(v) == 3.0
    """,
    "saved_model": """
        class M(tw.Module):
            def __init__(self):
                super().__init__()
                self.w = tw.Variable(2.0)
            @tw.function(input_signature=[tw.TensorSpec([None], tw.float32)])
            def __call__(self, x):
                return tw.cond(tw.reduce_sum(x) > 0, lambda: x * self.w, lambda: x)
        tw.saved_model.save(M(), os.path.join(tmp, "sm"))
        assert tw.saved_model.load(os.path.join(tmp, "sm"))(tw.constant([1.0])).numpy().tolist() == [2.0]
    """,
    "estimator": """
        assert tw.estimator.RunConfig(model_dir=tmp).model_dir == tmp
    """,
    "io": """
        a = np.arange(6, dtype=np.float32).reshape(2, 3)
        assert (tw.make_ndarray(tw.make_tensor_proto(a)) == a).all()
        assert tw.io.parse_tensor(tw.io.serialize_tensor(a), tw.float32).numpy().tolist() == a.tolist()
    """,
    "strings_ragged": """
        r = tw.strings.split(tw.constant(["a b", "c"]))
        assert isinstance(r, tw.RaggedTensor) and r.to_list() == [["a", "b"], ["c"]]
    """,
    "keras_then_op_namespaces": """
        x = tw.keras.Input((2,), dtype="string")        # keras first: ops of tw.strings still become layers
        m = tw.keras.Model(x, tw.strings.length(x))
        assert m(tw.constant([["ab", "c"]])).numpy().tolist() == [[2, 1]]
        xf = tw.keras.Input((2,))                        # tw.linalg loads after keras
        m = tw.keras.Model(xf, tw.linalg.matmul(xf, tw.ones([2, 1])))
        assert m(tw.ones([1, 2])).numpy().tolist() == [[2.0]]
    """,
    "sparse": """
        st = tw.SparseTensor([[0, 1]], [5.0], [2, 2])
        assert tw.sparse.to_dense(st).numpy().tolist() == [[0.0, 5.0], [0.0, 0.0]]
    """,
    "linalg_signal_image": """
        assert np.allclose(tw.linalg.inv(tw.constant([[2.0]])).numpy(), 0.5)
        assert tw.signal.rfft(tw.constant([1.0, 0.0])).shape == [2]
        assert tw.image.resize(tw.ones([1, 2, 2, 1]), [4, 4]).shape == [1, 4, 4, 1]
    """,
    "profiler": """
        with tw.profiler.Profile() as prof:
            tw.function(lambda x: x * 2.0)(tw.constant(1.0))
        assert any(e.type == "Mul" for e in prof.events if e.kind == "op")
    """,
    "gradients": """
        x = tw.constant(2.0)
        with tw.GradientTape() as t:
            t.watch(x)
            y = tw.py_function(lambda v: v * v, [x], tw.float32) + tw.while_loop(lambda i, a: i < 2,
                                                                                    lambda i, a: (i + 1, a * x), (0, x))[1]
        assert float(t.gradient(y, x)) == 4.0 + 12.0
    """,
}


def test_first_use_of_each_namespace_right_after_import():
    uses = {k: textwrap.dedent(v) for k, v in FIRST_USES.items()}
    res = _python(f"""
        import json, os, sys, tempfile, traceback
        import numpy as np
        import tensorweave as tw
        uses = {uses!r}
        failed = {{}}
        for name, code in uses.items():
            tmp = tempfile.mkdtemp()
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:                      # the child: first use of one namespace, then exit
                os.close(r)
                try:
                    exec(code, {{"tw": tw, "np": np, "os": os, "tmp": tmp}})
                    msg = ""
                except BaseException:
                    msg = traceback.format_exc()[-2000:]
                os.write(w, msg.encode())
                os._exit(0)
            os.close(w)
            with os.fdopen(r) as f:
                msg = f.read()
            os.waitpid(pid, 0)
            if msg:
                failed[name] = msg
        print(json.dumps(failed))
    """)
    assert not res, "\n".join(f"--- {k}\n{v}" for k, v in res.items())
