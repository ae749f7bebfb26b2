"""``python -m engine load``: read a dataset file through a format loader and summarise it.

Contract: ``load --format F FILE [--ground FILE] [--split S] [--json]`` prints one JSON object
``{"format", "path", "count", "first": task dict or null, "domains": {domain: count}, "splits": {split: count},
"with_gold_actions": n}`` (``--json``; without it a one-line human summary) and exits 0; bad input prints
``error: path:line: field: message`` on stderr and exits 2.
"""

from __future__ import annotations

import argparse
from collections import Counter

from engine.commands._common import fail, print_json
from engine.errors import DataError
from engine.formats import FORMATS, load
from engine.tasks import SPLITS

HELP = "Load a dataset file (GSM8K, SVAMP, HotpotQA, StrategyQA, Lumos, Task JSONL) and summarise it."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", required=True, choices=FORMATS, help="input file format")
    parser.add_argument("path", metavar="FILE", help="the dataset file (for lumos: the planner file)")
    parser.add_argument("--ground", metavar="FILE", default=None, help="lumos only: the grounder file to join by id")
    parser.add_argument("--split", choices=SPLITS, default=None,
                        help="split to tag tasks with (default: train for lumos, held_in for the benchmark formats; "
                             "the tasks format keeps each record's own)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    domains: Counter[str] = Counter()
    splits: Counter[str] = Counter()
    grounded = 0
    first = None
    try:
        # Consume the whole stream: a bad record anywhere must fail the command, not truncate the count.
        for task in load(args.format, args.path, ground=args.ground, split=args.split):
            first = first or task.to_dict()
            domains[task.domain] += 1
            splits[task.split] += 1
            grounded += bool(task.gold_actions)
    except DataError as exc:
        return fail(exc)
    summary = {
        "format": args.format,
        "path": args.path,
        "count": sum(domains.values()),
        "first": first,
        "domains": dict(sorted(domains.items())),
        "splits": dict(sorted(splits.items())),
        "with_gold_actions": grounded,
    }
    if args.json:
        print_json(summary)
    else:
        per_domain = ", ".join(f"{d}={n}" for d, n in summary["domains"].items()) or "none"
        per_split = ", ".join(f"{k}={n}" for k, n in summary["splits"].items()) or "none"
        # Gold actions are what the grounder is scored and trained on: say how many tasks have them (a lumos
        # planner file has them only with --ground).
        print(f"{args.path}: {summary['count']} tasks ({per_domain}; split {per_split}; "
              f"{grounded} with gold actions)")
    return 0
