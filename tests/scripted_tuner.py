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


def ways_asked(monkeypatch, run):
    """The ways ``run()`` has ``gemm.timed_choice`` time, a set per class (on a quiet machine; each
    answered ``"rows"``): a split class's ways must be names the GEMM tuner's file keeps."""
    from tensorweave.kernels.cpu import gemm, gemm_tuning
    asked = []
    monkeypatch.setattr(gemm_tuning, "quiet", lambda: True)
    monkeypatch.setattr(gemm, "timed_choice", lambda cls, runners, incumbent, probe: asked.append(set(runners))
                        or "rows")
    run()
    return asked


def scripted_split(monkeypatch, caches):
    """``setup(tuner, quiet=False, parts=2)`` for a test of a split class's kernel: the split parts,
    the GEMM tuner (``tuner``) and the quiet check scripted, the process caches ``caches`` (``(module,
    name)`` pairs) emptied; returns the list of task counts ``gemm.share_tasks`` was given and the set
    of threads those tasks ran on (filled as the kernel runs)."""
    import threading

    from tensorweave.kernels.cpu import gemm, gemm_tuning
    shares, threads = [], set()

    def setup(tuner, quiet=False, parts=2):
        for module, name in caches:
            monkeypatch.setattr(module, name, {})
        monkeypatch.setattr(gemm, "split_parts", lambda: parts)
        monkeypatch.setattr(gemm, "tuner", lambda: tuner)
        monkeypatch.setattr(gemm_tuning, "quiet", lambda: quiet)
        real = gemm.share_tasks

        def share(tasks, n):
            shares.append(len(tasks))
            return real([lambda t=t: threads.add(threading.get_ident()) or t() for t in tasks], n)
        monkeypatch.setattr(gemm, "share_tasks", share)
        return shares, threads
    return setup
