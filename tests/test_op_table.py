"""The generic op test: every OpInfo in ``tests/opinfos`` against its NumPy reference,
eager vs graph vs ``tw.function``, and float64 gradients vs finite differences."""
import importlib
import pkgutil

import numpy as np
import pytest

import tensorweave as tw
import opinfos
from opinfo import OpInfo


def _collect():
    ops = []
    for m in pkgutil.iter_modules(opinfos.__path__):
        mod = importlib.import_module(f"opinfos.{m.name}")
        ops.extend(getattr(mod, "OPS", []))
    return ops


ALL_OPS = _collect()
_ids = [o.name for o in ALL_OPS]
assert len(set(_ids)) == len(_ids), "duplicate OpInfo names"


def _seed(*parts):
    return np.random.default_rng(abs(hash("/".join(map(str, parts)))) % 2**32)


def _is_array(a):
    return isinstance(a, np.ndarray)


def _to_tensors(args):
    return [tw.constant(a) if _is_array(a) else a for a in args]


def _flat(out):
    if isinstance(out, (list, tuple)):
        r = []
        for o in out:
            r.extend(_flat(o))
        return r
    return [out]


def _np(x):
    if isinstance(x, tw.IndexedSlices):
        x = x.to_dense()
    return np.asarray(x.numpy() if hasattr(x, "numpy") else x)


def _samples(info, dtype):
    import zlib
    rng = np.random.default_rng(zlib.crc32(f"{info.name}/{dtype.name}".encode()))
    return info.samples(dtype.np_dtype, rng)


def _cases():
    for info in ALL_OPS:
        for d in info.dtypes:
            yield pytest.param(info, d, id=f"{info.name}-{d.name}")


@pytest.mark.parametrize("info,dtype", list(_cases()))
def test_forward(info: OpInfo, dtype):
    rtol, atol = info.tolerance(dtype)
    for s in _samples(info, dtype):
        got = _flat(info.op(*_to_tensors(s.args), **s.kwargs))
        want = _flat(info.ref(*s.args, **s.kwargs))
        assert len(got) == len(want), f"{info.name}[{s.name}]: {len(got)} outputs, reference has {len(want)}"
        for g, w in zip(got, want):
            g, w = _np(g), np.asarray(w)
            exp_dtype = info.out_dtype(dtype).np_dtype if info.out_dtype else w.dtype
            assert g.dtype == exp_dtype, f"{info.name}[{s.name}] {dtype.name}: dtype {g.dtype}, expected {exp_dtype}"
            assert g.shape == w.shape, f"{info.name}[{s.name}]: shape {g.shape}, expected {w.shape}"
            if g.dtype.kind == "f" or g.dtype.name == "bfloat16":
                np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol,
                                           err_msg=f"{info.name}[{s.name}] {dtype.name}")
            else:
                np.testing.assert_array_equal(g, w, err_msg=f"{info.name}[{s.name}] {dtype.name}")


def _graph_dtype(info):
    for d in (tw.float32, tw.float64, tw.int32):
        if d in info.dtypes:
            return d
    return info.dtypes[0]


@pytest.mark.parametrize("info", [o for o in ALL_OPS if o.graph], ids=lambda o: o.name)
def test_eager_graph_function_agree(info: OpInfo):
    dtype = _graph_dtype(info)
    for s in _samples(info, dtype):
        eager = [_np(o) for o in _flat(info.op(*_to_tensors(s.args), **s.kwargs))]
        g = tw.Graph()
        with g.as_default():
            phs = [tw.placeholder(tw.as_dtype(a.dtype), a.shape) if _is_array(a) else a for a in s.args]
            outs = _flat(info.op(*phs, **s.kwargs))
            for o, e in zip(outs, eager):
                assert o.shape.is_compatible_with(e.shape), \
                    f"{info.name}[{s.name}]: static shape {o.shape} vs value shape {e.shape}"
                assert o.dtype.np_dtype == e.dtype, f"{info.name}[{s.name}]: static dtype {o.dtype} vs {e.dtype}"
        with tw.Session(graph=g) as sess:
            feed = {p: a for p, a in zip(phs, s.args) if _is_array(a)}
            graph_out = sess.run(outs, feed)
        fn = tw.function(lambda *a: info.op(*a, **s.kwargs))
        fun_out = [_np(o) for o in _flat(fn(*_to_tensors(s.args)))]
        for e, gr, fu in zip(eager, graph_out, fun_out):
            np.testing.assert_array_equal(np.asarray(gr), e, err_msg=f"{info.name}[{s.name}] graph != eager")
            np.testing.assert_array_equal(fu, e, err_msg=f"{info.name}[{s.name}] function != eager")


def _grad_positions(info, args):
    if info.grad_args is not None:
        return [i for i in info.grad_args if i < len(args) and _is_array(args[i])]
    return [i for i, a in enumerate(args) if _is_array(a) and a.dtype == np.float64]


def _loss_fn(info, s, cots):
    def loss(*xs):
        args = list(s.args)
        for i, x in xs:
            args[i] = x
        outs = _flat(info.op(*[tw.constant(a) if _is_array(a) else a for a in args], **s.kwargs))
        total = tw.constant(0.0, dtype=tw.float64)
        for o, c in zip(outs, cots):
            if c is not None:
                total = total + tw.reduce_sum(o * tw.constant(c))
        return total
    return loss


def _cotangents(info, s, rng):
    outs = _flat(info.op(*_to_tensors(s.args), **s.kwargs))
    return [rng.uniform(-1, 1, size=o.shape).astype(np.float64) if o.dtype == tw.float64 else None for o in outs]


def _numeric_grad(f, x, eps):
    g = np.zeros_like(x)
    flat = x.reshape(-1)
    gf = g.reshape(-1)
    for k in range(flat.size):
        orig = flat[k]
        flat[k] = orig + eps
        fp = f(x)
        flat[k] = orig - eps
        fm = f(x)
        flat[k] = orig
        gf[k] = (fp - fm) / (2 * eps)
    return g


def _grad_cases():
    for info in ALL_OPS:
        if info.grad and tw.float64 in info.dtypes:
            yield pytest.param(info, id=info.name)


@pytest.mark.parametrize("info", list(_grad_cases()))
def test_gradients(info: OpInfo):
    for s in _samples(info, tw.float64):
        pos = _grad_positions(info, s.args)
        if not pos or all(s.args[i].size == 0 for i in pos):
            continue
        rng = np.random.default_rng(7)
        cots = _cotangents(info, s, rng)
        loss = _loss_fn(info, s, cots)
        xs = [tw.constant(s.args[i]) for i in pos]
        with tw.GradientTape() as tape:
            for x in xs:
                tape.watch(x)
            y = loss(*zip(pos, xs))
        grads = tape.gradient(y, xs)
        for k, (i, g) in enumerate(zip(pos, grads)):
            x0 = np.array(s.args[i], dtype=np.float64, order="C")  # reshape(-1) must be a view

            def f(x, i=i):
                return float(loss((i, tw.constant(x)), *[(j, tw.constant(s.args[j])) for j in pos if j != i]))
            num = _numeric_grad(f, x0, info.eps)
            ana = np.zeros_like(x0) if g is None else _np(g)
            np.testing.assert_allclose(ana, num, rtol=info.grad_tol * 100, atol=info.grad_tol * 10,
                                       err_msg=f"{info.name}[{s.name}] d/d(arg {i})")
        # the same gradients from tw.gradients in a graph
        gph = tw.Graph()
        with gph.as_default():
            phs = [tw.placeholder(tw.float64, s.args[i].shape) for i in pos]
            yg = loss(*zip(pos, phs))
            gg = tw.gradients(yg, phs)
        fetch = [g for g in gg if g is not None]
        with tw.Session(graph=gph) as sess:
            vals = sess.run(fetch, {p: s.args[i] for p, i in zip(phs, pos)})
        it = iter(vals)
        for g_eager, g_graph in zip(grads, gg):
            if g_graph is None:
                assert g_eager is None or not np.any(_np(g_eager))
                continue
            np.testing.assert_allclose(np.asarray(next(it)), _np(g_eager), rtol=1e-10, atol=1e-12,
                                       err_msg=f"{info.name}[{s.name}] tw.gradients != GradientTape")
        if info.grad_order >= 2:
            _check_second_order(info, s, pos, loss, rng)


def _check_second_order(info, s, pos, loss, rng):
    i = pos[0]
    x0 = np.array(s.args[i], dtype=np.float64, order="C")
    v = rng.uniform(-1, 1, size=x0.shape)

    def first(x):
        xt = tw.constant(x)
        with tw.GradientTape() as t:
            t.watch(xt)
            y = loss((i, xt), *[(j, tw.constant(s.args[j])) for j in pos if j != i])
        g = t.gradient(y, xt)
        return 0.0 if g is None else float(np.sum(_np(g) * v))
    num = _numeric_grad(first, x0.copy(), 1e-4)
    xt = tw.constant(x0)
    with tw.GradientTape() as outer:
        outer.watch(xt)
        with tw.GradientTape() as inner:
            inner.watch(xt)
            y = loss((i, xt), *[(j, tw.constant(s.args[j])) for j in pos if j != i])
        g = inner.gradient(y, xt)
        h = tw.reduce_sum(g * tw.constant(v))
    ana = outer.gradient(h, xt)
    ana = np.zeros_like(x0) if ana is None else _np(ana)
    np.testing.assert_allclose(ana, num, rtol=1e-4, atol=1e-5, err_msg=f"{info.name}[{s.name}] second order")
