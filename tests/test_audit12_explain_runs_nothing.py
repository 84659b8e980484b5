"""Issue 13: ``tw.distribute.explain(fn, *args)`` is read *before running*: it plans and reports,
and nothing of ``fn`` runs — a variable it assigns keeps its value, a draw's stream does not
advance (the first real call still draws what one device's first call draws), and the report
names each op's source line in the text and the dict (audit, session 12)."""
import numpy as np

import tensorweave as tw
from tensorweave.core.sbp import S

P2 = tw.placement("cpu", ranks=[0, 1])


def _step(v):
    def f(x):
        v.assign_add(x)
        return v.read_value() * tw.random.uniform([5, 3], seed=7)
    return f


def test_explain_runs_nothing_and_the_first_call_after_it_is_the_first_call():
    x = np.full((5, 3), 2.0, np.float32)
    tw.random.set_seed(3)
    one = tw.Variable(np.ones((5, 3), np.float32))
    want = tw.function(_step(one))(tw.constant(x)).numpy()

    tw.random.set_seed(3)
    v = tw.Variable(np.ones((5, 3), np.float32), placement=P2, sbp=S(0))
    f = tw.function(_step(v))
    gx = tw.constant(x).to_global(placement=P2, sbp=tw.sbp.broadcast)
    e = tw.distribute.explain(f, gx)
    np.testing.assert_array_equal(v.numpy(), np.ones((5, 3)))        # the assignment did not run
    d = e.to_dict()
    assert [o["type"] for o in d["ops"]][:2] == ["AssignAddVariableOp", "ReadVariableOp"]
    line = f"{__file__}:{_step.__code__.co_firstlineno + 2}"          # v.assign_add(x)
    assert d["ops"][0]["line"] == line and line in str(e)

    got = f(gx)
    np.testing.assert_array_equal(v.numpy(), np.full((5, 3), 3.0))   # one assignment: the call's
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)         # the stream's first draw
    tw.random.set_seed(None)
