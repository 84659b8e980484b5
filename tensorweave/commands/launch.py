"""``tensorweave launch --workers N [--address ADDR] script.py [args...]``: runs a script against
a Ray cluster of N rank actors.

Like ``torchrun`` or OneFlow's launcher, but single-controller: the script runs once, here,
as ``__main__`` (with ``sys.argv`` set to the script and its arguments); before it starts,
``tw.distribute.connect(address, num_workers=N)`` has made the ranks (so
``tw.distribute.current()`` is the cluster and ``tw.placement("cpu", ranks=range(N))`` names
its workers), and when it ends, ``tw.distribute.shutdown()`` stops them. Without
``--address`` a local Ray instance is started (loopback only); ``--address auto`` attaches to a
``ray start`` cluster. ``--transport shm|object_store|hier`` fixes the collectives' transport
(default: measured at connect, see ``docs/design/ray.md``). The exit status is the script's
(1 when it raises).
"""
import os
import runpy
import sys


def configure(parser):
    parser.add_argument("--workers", type=int, required=True, help="number of ranks (Ray actors)")
    parser.add_argument("--address", default=None,
                        help="a Ray cluster ('auto' or 'ray://host:port'); default: start one on this machine")
    parser.add_argument("--cpus-per-worker", type=float, default=1.0, help="Ray CPUs reserved per rank")
    parser.add_argument("--spread", action="store_true", help="place ranks on different nodes where possible")
    parser.add_argument("--transport", choices=("shm", "object_store", "hier"), default=None,
                        help="the collectives' transport (default: TW_RAY_TRANSPORT, else measured at connect)")
    parser.add_argument("script", help="the Python script to run")
    parser.add_argument("args", nargs="*", help="its arguments (after --)")


def run(args):
    from tensorweave.distribute.ray import connect, shutdown
    if not os.path.isfile(args.script):
        print(f"tensorweave launch: no such script: {args.script}", file=sys.stderr)
        return 2
    if args.workers < 1:
        print(f"tensorweave launch: --workers must be at least 1, got {args.workers}", file=sys.stderr)
        return 2
    connect(address=args.address, num_workers=args.workers, resources_per_worker={"CPU": args.cpus_per_worker},
            strategy="SPREAD" if args.spread else "PACK", transport=args.transport)
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [args.script] + list(args.args)
    sys.path.insert(0, os.path.dirname(os.path.abspath(args.script)))
    try:
        runpy.run_path(args.script, run_name="__main__")
        return 0
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        shutdown()
