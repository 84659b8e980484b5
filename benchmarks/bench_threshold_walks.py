"""Do the tuner's thresholds reproduce? The one-thread threshold (``serial:float32``) and the
split-pass threshold (``split-pass:bytes``) measured as the tuner measures them now — samples as
blocks of calls, one walk per fresh process, settled for the machine when a process's walk agrees
with the one the process before it left in the cache (``gemm_tuning.Tuner.threshold``): a *chain*
of fresh processes on one new cache file until the threshold settles or ``MAX_TRIES`` runs out —
and as before session 16 (``old``: single calls, one walk in one process settles it), alternated.

Run: ``python benchmarks/bench_threshold_walks.py [--chains 6]`` on a quiet machine (the walks
time threaded calls by wall: under load they measure the other processes; the load average is
printed with every row). The machine's own tuning cache is not touched. The tuner walks only with
a spare core (``gemm_tuning.spare_core()``: a busy process keeps the default, shown unsettled);
``--walk-anyway`` bypasses that (and ``old`` always does, as before session 16).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

_ONE = r"""
import functools, json, os, sys, time
import numpy as np
from tensorweave.kernels.cpu import gemm, gemm_tuning as gt, split_passes
if sys.argv[2] == "anyway":
    gt.quiet = gt.spare_core = lambda: True           # walk whatever the load (see the docstring)
old = sys.argv[1] == "old"
if old:
    gt.MAX_REPS = 1                                   # a sample is one call, as before session 16
walks = {"serial:float32": (lambda: gt.serial_threshold(functools.partial(gemm._thread_runners, np.float32)),
                            gt.SERIAL_DEFAULT),
         "split-pass:bytes": (lambda: gt.serial_threshold(split_passes._runners, split_passes.LADDER,
                                                          work_of=lambda n: n), split_passes.DEFAULT_BYTES)}
out = {"load": round(os.getloadavg()[0], 2)}
tuner = gt.Tuner(os.environ["TW_TUNING_CACHE"], {"bench": 1}, ())
for name, (walk, default) in walks.items():
    t0 = time.perf_counter()
    if old:
        value, settled = walk()
    else:
        value = tuner.threshold(name, walk, default)
        settled = tuner.thresholds[name]["settled"]
    out[name] = [value, settled, round((time.perf_counter() - t0) * 1e3, 1)]
print(json.dumps(out))
"""


def _walk(mode, cache, anyway):
    env = dict(os.environ, TW_TUNING_CACHE=cache)
    done = subprocess.run([sys.executable, "-c", _ONE, mode, "anyway" if anyway or mode == "old" else "gated"],
                          env=env, capture_output=True, text=True, timeout=600)
    if done.returncode:
        raise SystemExit(done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _spread(values):
    return max(values) / max(1, min(values))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--chains", type=int, default=6, help="settlements per mode (old: one process each)")
    ap.add_argument("--walk-anyway", action="store_true", help="walk without a spare core too")
    args = ap.parse_args()
    from tensorweave.kernels.cpu import gemm_tuning
    got = {"old": [], "new": []}
    print("| mode, chain | process | load | serial:float32 (M multiply-adds, settled, ms) "
          "| split-pass:bytes (MiB, settled, ms) |")
    print("|---|---|---|---|---|")
    for chain in range(args.chains):
        for mode in ("old", "new"):
            cache = os.path.join(tempfile.mkdtemp(), "gemm-tuning.json")
            kept = {}
            for process in range(1 if mode == "old" else gemm_tuning.MAX_TRIES + 2):
                row = _walk(mode, cache, args.walk_anyway)
                s, p = row["serial:float32"], row["split-pass:bytes"]
                print(f"| {mode} {chain} | {process} | {row['load']} | {s[0] / 1e6:.2f}, {s[1]}, {s[2]} "
                      f"| {p[0] / 2 ** 20:.2f}, {p[1]}, {p[2]} |", flush=True)
                for name, (value, settled, _) in (("serial", s), ("split", p)):
                    if settled and name not in kept:
                        kept[name] = (value, process + 1)
                if len(kept) == 2:
                    break
            got[mode].append(kept)
    for mode, chains in got.items():
        parts = []
        for name in ("serial", "split"):
            values = [c[name][0] for c in chains if name in c]
            parts.append(f"{name} settled in {len(values)}/{len(chains)} at {sorted(set(values))}"
                         + (f" (spread {_spread(values):.1f}x, after {[c[name][1] for c in chains if name in c]}"
                            " processes)" if values else ""))
        print(f"{mode}: " + "; ".join(parts))


if __name__ == "__main__":
    main()
