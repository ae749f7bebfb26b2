"""``python -m engine demo-world``: regenerate the demo task suite (examples/demo/tasks.jsonl) from its seed.

Prints one JSON line (the file written, its counts) and exits 0; on stderr when ``--out`` is stdout itself, so a
pipe reads only tasks. Bad input is refused before any work with
``error: --flag: what is wrong`` on stderr and exit status 2 (argparse's own usage errors exit 2 too): a negative
count, a percentage outside 0-100, ``--pool-only`` without a pool size, an ``--out`` that is a directory or whose
folder takes no new file (``error: --out: cannot write OUT: ...``, also when writing fails later: a full disk). The
file is written by ``engine.tasks.write_tasks``: a regular file (a symlink's target, the link kept) through a
temporary file renamed into place, which any failure removes; ``/dev/stdout``, a FIFO or a device straight into it.
Ctrl-C leaves a regular ``--out`` as it was, prints one line on stderr and exits 130.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

HELP = "Write the seeded demo task suite (maths + QA, train/dev/held_in/held_out) as Task JSONL."
SUITE = "examples/demo/tasks.jsonl"
POOL = "examples/demo/pool.jsonl"
STOPPED = 130  # 128 + SIGINT, the shell's convention (as ``engine run``)


def percent(text: str) -> int:
    """An argparse ``type``: a whole percentage, 0 to 100 (150 made every maths problem carry a distractor without
    a word)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 0 <= value <= 100:
        raise argparse.ArgumentTypeError(f"must be 0 to 100, not {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from engine.demo.world import WorldConfig

    parser.add_argument("--out", default=None,
                        help=f"output Task JSONL (default: {SUITE}; with --pool-only: {POOL}, never the suite)")
    from engine.commands._common import at_least
    from engine.demo.qa_world import WORLDS

    for f in dataclasses.fields(WorldConfig):
        flag = f"--{f.name.replace('_', '-')}"
        said = f"{_flag_help(f.name)} (default: {f.default})"
        if f.name == "qa_world":
            parser.add_argument(flag, choices=sorted(WORLDS), default=f.default, help=said)
        elif f.name == "distractor_percent":
            parser.add_argument(flag, type=percent, default=f.default, help=said)
        else:  # task counts and the seed: a negative count silently wrote no tasks of that kind
            parser.add_argument(flag, type=at_least(0), default=f.default, help=said)
    parser.add_argument("--pool-only", action="store_true",
                        help="write only the pool (--pool-maths/--pool-qa tasks, split train): a second data source "
                             "beside the suite's file, e.g. examples/demo/pool.jsonl")


# What each WorldConfig field's flag does, for --help (the bare defaults said nothing of it).
_SPLIT_WORDS = {"train": "training (warm start and MOAT)", "dev": "dev (tuning; training templates, unseen tasks)",
                "held_in": "held-in evaluation (training templates)", "held_out": "held-out evaluation (templates no "
                "training data has)"}


def _flag_help(name: str) -> str:
    domain, _, split = name.partition("_")
    if domain in ("maths", "qa") and split in _SPLIT_WORDS:
        return f"{domain} tasks in the {_SPLIT_WORDS[split]} split"
    if domain == "pool":
        return (f"fresh training-template {split} tasks beside the suite (split train; see --pool-only), drawn after "
                "every split so the suite is the same with or without them")
    return {"seed": "the one seed every draw of the world comes from",
            "distractor_percent": "percent of maths problems with a distractor clause (a number the answer does "
                                  "not use)",
            "qa_world": "the QA world: narrow (the committed demo's 7 relations, 5 training chains) or wide (10 "
                        "relations, 21 training chains, the same dev and held-out chains)"}.get(name, name)


def usage_error(flag: str, problem: str) -> int:
    print(f"error: {flag}: {problem}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    # Checked before the suite is generated (seconds of work), and with exit status 2 like argparse's own errors.
    if args.pool_only and not args.pool_maths and not args.pool_qa:
        return usage_error("--pool-only", "needs --pool-maths or --pool-qa (the pool's size; both are 0)")
    # The pool's default is its own file: written over the suite, it replaced 4,200 tasks by 600 without a word.
    out = args.out or (POOL if args.pool_only else SUITE)
    if Path(out).is_dir():
        return usage_error("--out", f"{out} is a directory; give a file name")
    from engine.out_files import probe_out

    try:  # before the suite is generated: /proc/x.jsonl was a traceback (exit 1) after it
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        probe_out(out)
    except OSError as exc:
        return usage_error("--out", f"cannot write {out}: {exc.strerror or exc}")
    try:
        return _write(args, out)
    except KeyboardInterrupt:  # write_tasks removed its temp file; the rename onto --out had not happened
        print(f"demo-world: stopped by Ctrl-C; {out} left as it was", file=sys.stderr)
        return STOPPED


def _write(args: argparse.Namespace, out: str) -> int:
    from collections import Counter

    from engine.commands._common import print_json, summary_stream
    from engine.demo.world import WorldConfig, generate_suite, is_pool_task
    from engine.tasks import write_tasks

    config = WorldConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(WorldConfig)})
    tasks = generate_suite(config)
    if args.pool_only:
        tasks = [t for t in tasks if is_pool_task(t)]
    try:
        write_tasks(tasks, out)
    except OSError as exc:  # the folder changed since the probe, a full disk: write_tasks left no temp file
        return usage_error("--out", f"cannot write {out}: {exc.strerror or exc}")
    counts = Counter(f"{t.domain}/{t.split}" for t in tasks)
    summary = {"out": out, "count": len(tasks), "by_domain_split": dict(sorted(counts.items()))}
    print_json(summary, file=summary_stream(out))
    return 0
