"""Do the tuner's thresholds reproduce? The one-thread threshold (``serial:float32``) and the
split-pass threshold (``split-pass:bytes``) measured in fresh processes, as the tuner measures them
now (samples as blocks of calls, two walks that must agree: ``gemm_tuning.settle_when_two_agree``)
and as before session 16 (``--old``: single calls, one walk), alternated process by process.

Run: ``python benchmarks/bench_threshold_walks.py [--processes 6]`` on a quiet machine (the walks
time threaded calls by wall: under load they measure the other processes; the load average is
printed with every row). Nothing is read from or written to the tuning cache.
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
old = sys.argv[1] == "old"
if old:
    gt.MAX_REPS = 1                                   # a sample is one call, as before session 16
walks = {"serial": (lambda: gt.serial_threshold(functools.partial(gemm._thread_runners, np.float32)),
                    gt.SERIAL_DEFAULT),
         "split": (lambda: gt.serial_threshold(split_passes._runners, split_passes.LADDER, work_of=lambda n: n),
                   split_passes.DEFAULT_BYTES)}
out = {"load": round(os.getloadavg()[0], 2)}
for name, (walk, default) in walks.items():
    t0 = time.perf_counter()
    value, settled = walk() if old else gt.settle_when_two_agree(walk, default)[:2]
    out[name] = [value, settled, round((time.perf_counter() - t0) * 1e3, 1)]
print(json.dumps(out))
"""


def _walk(mode, cache):
    env = dict(os.environ, TW_TUNING_CACHE=cache)
    done = subprocess.run([sys.executable, "-c", _ONE, mode], env=env, capture_output=True, text=True, timeout=600)
    if done.returncode:
        raise SystemExit(done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _spread(values):
    return max(values) / max(1, min(values))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--processes", type=int, default=6, help="fresh processes per mode")
    args = ap.parse_args()
    cache = os.path.join(tempfile.mkdtemp(), "absent.json")
    got = {"old": [], "new": []}
    print("| mode | load | serial:float32 (M multiply-adds, settled, ms) | split-pass:bytes (MiB, settled, ms) |")
    print("|---|---|---|---|")
    for _ in range(args.processes):
        for mode in ("old", "new"):
            row = _walk(mode, cache)
            got[mode].append(row)
            s, p = row["serial"], row["split"]
            print(f"| {mode} | {row['load']} | {s[0] / 1e6:.2f}, {s[1]}, {s[2]} "
                  f"| {p[0] / 2 ** 20:.2f}, {p[1]}, {p[2]} |", flush=True)
    for mode, rows in got.items():
        parts = []
        for name in ("serial", "split"):
            kept = [r[name][0] for r in rows if r[name][1]]          # an unsettled new walk is the default
            parts.append(f"{name} settled {len(kept)}/{len(rows)} at {sorted(set(kept))}"
                         + (f" (spread {_spread(kept):.1f}x)" if kept else ""))
        print(f"{mode}: " + "; ".join(parts))


if __name__ == "__main__":
    main()
