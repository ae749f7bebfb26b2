"""``python -m engine demo-world``: regenerate the demo task suite (examples/demo/tasks.jsonl) from its seed."""

from __future__ import annotations

import argparse
import dataclasses

HELP = "Write the seeded demo task suite (maths + QA, train/dev/held_in/held_out) as Task JSONL."
SUITE = "examples/demo/tasks.jsonl"
POOL = "examples/demo/pool.jsonl"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from engine.demo.world import WorldConfig

    parser.add_argument("--out", default=None,
                        help=f"output Task JSONL (default: {SUITE}; with --pool-only: {POOL}, never the suite)")
    from engine.commands._common import at_least
    from engine.demo.qa_world import WORLDS

    for f in dataclasses.fields(WorldConfig):
        flag = f"--{f.name.replace('_', '-')}"
        if f.name == "qa_world":
            parser.add_argument(flag, choices=sorted(WORLDS), default=f.default, help=f"(default: {f.default})")
        else:  # task counts and the seed: a negative count silently wrote no tasks of that kind
            parser.add_argument(flag, type=at_least(0), default=f.default, help=f"(default: {f.default})")
    parser.add_argument("--pool-only", action="store_true",
                        help="write only the pool (--pool-maths/--pool-qa tasks, split train): a second data source "
                             "beside the suite's file, e.g. examples/demo/pool.jsonl")


def run(args: argparse.Namespace) -> int:
    from collections import Counter

    from engine.commands._common import print_json
    from engine.demo.world import WorldConfig, generate_suite, is_pool_task
    from engine.tasks import write_tasks

    config = WorldConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(WorldConfig)})
    tasks = generate_suite(config)
    if args.pool_only:
        if not config.pool_maths and not config.pool_qa:
            raise SystemExit("demo-world: --pool-only needs --pool-maths or --pool-qa")
        tasks = [t for t in tasks if is_pool_task(t)]
    # The pool's default is its own file: written over the suite, it replaced 4,200 tasks by 600 without a word.
    out = args.out or (POOL if args.pool_only else SUITE)
    write_tasks(tasks, out)
    counts = Counter(f"{t.domain}/{t.split}" for t in tasks)
    print_json({"out": out, "count": len(tasks), "by_domain_split": dict(sorted(counts.items()))})
    return 0
