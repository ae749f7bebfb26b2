"""``python -m engine bench NAME``: run one benchmark of ``engine.bench`` and print its report.

Contract: ``bench NAME [--size tiny|default] [--repeats N] [--device cpu|cuda] [--contention N] [--json]`` prints
one JSON object (``--json``; without it an indented one) with sizes, per-variant medians, side-by-side ratios and a
``correct`` section; exits 0 when the fast path matched its baseline (``correct.ok``), 1 otherwise. With
``--contention N`` the object holds the ``quiet`` and the ``contended`` report (N competing processes, see
``engine.bench.contention``), each timing's ``slowdown`` and every ratio quiet and contended side by side.
"""

from __future__ import annotations

import argparse
import json

from engine.commands._common import at_least, finite, print_json, torch_device

HELP = ("Benchmark a hot path against the naive way (score, sample, ground, store, train, iteration, warm_start), "
        "a curator's wait (curation), or a demo run against this machine's arithmetic floor (floor).")
NAMES = ("score", "sample", "ground", "store", "train", "iteration", "curation", "warm_start", "floor")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", choices=NAMES, help="the benchmark")
    parser.add_argument("--size", choices=("tiny", "default"), default="default",
                        help="workload size: tiny (seconds, a smoke test) or default (the measured one; default)")
    parser.add_argument("--repeats", type=at_least(1), default=3,
                        help="timed rounds per variant, median reported (default: 3)")
    parser.add_argument("--device", type=torch_device, default="cpu", help="cpu | cuda | cuda:N (default: cpu)")
    parser.add_argument("--contention", type=at_least(0), default=0, metavar="N",
                        help="measure quiet, then again while N competing CPU-bound processes run (started and "
                             "stopped by the benchmark); reports both and each timing's slowdown (default: 0, quiet "
                             "only)")
    parser.add_argument("--json", action="store_true", help="print one compact JSON object")


def run(args: argparse.Namespace) -> int:
    import contextlib
    import sys

    from engine import bench
    from engine.errors import CheckpointError
    from engine.preflight import check_device

    try:  # a CUDA device this machine lacks was an AssertionError traceback from inside torch
        check_device(args.device, "--device")
    except CheckpointError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    # Trainers print their logs on stdout; keep stdout for the one JSON object.
    with contextlib.redirect_stdout(sys.stderr):
        def measure() -> dict:
            return bench.run(args.name, size=args.size, repeats=args.repeats, device=args.device)

        if args.contention > 0:
            from engine.bench.contention import with_contention

            report = {"benchmark": args.name, **with_contention(measure, args.contention)}
        else:
            report = measure()
    if args.json:
        print_json(report)
    else:
        print(json.dumps(finite(report), indent=2, default=str, allow_nan=False))
    return 0 if report.get("correct", {}).get("ok", True) else 1
