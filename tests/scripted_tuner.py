"""A GEMM tuner stand-in for the tests of the einsum classes (``einsum-rows:``, ``einsum-pair:``): the
classes under one prefix scripted, every other class its incumbent, untimed.

>>> t = ScriptedTuner("einsum-pair:", pick="rows")
>>> t.choose("einsum-pair:x", {"one": lambda: None, "rows": lambda: None}, "one"), t.timed
('rows', [('einsum-pair:x', ['one', 'rows'], 'one')])
>>> t.choose("threads:x", {}, "mkl"), t.backend("threads:x")
('mkl', None)
"""


class ScriptedTuner:
    """The classes starting with ``prefix``: ``cached`` their kept choice (``backend``), and a timing
    (``choose``) runs every candidate, records ``(class, candidates, incumbent)`` in ``timed`` and
    answers ``pick``."""

    def __init__(self, prefix, cached=None, pick="one"):
        self.prefix, self.cached, self.pick, self.timed, self.choices = prefix, cached, pick, [], {}

    def backend(self, cls):
        return self.cached if cls.startswith(self.prefix) else None

    def choose(self, cls, runners, incumbent="mkl", clock=None, settle=True):
        if not cls.startswith(self.prefix):
            return incumbent
        for run in runners.values():
            run()
        self.timed.append((cls, sorted(runners), incumbent))
        return self.pick

    def threshold(self, name, walk, default):
        return default
