"""``python -m engine eval``: run the planner and grounder of a config end to end on a split and print metrics.

Contract: prints one JSON object ``{"config", "formulation", "splits", "counts", "metrics", "seconds"}`` and exits 0.
Bad input exits 2 with ``error: ...`` on stderr before any model is loaded: a bad config or data file, a split
(``--split``, else the config's ``evaluate.splits``) the data files have no task of (as ``run`` refuses it through
``engine.runtime.check_eval_splits``; it printed ``"counts": {"held_out": 0}, "metrics": {}``), and a ``--traces``
file whose folder takes no new file. ``--traces`` is written atomically once the evaluation is done (temp file,
rename), with the mode ``open()`` would give it. ``--quiet``: none of the libraries' progress bars on stderr (the
weights' loading), as ``run`` and ``step``.
"""

from __future__ import annotations

import argparse
import sys

from engine.commands._common import add_quiet_flag, at_least, writable_file
from engine.tasks import SPLITS

HELP = "Evaluate planner + grounder end to end (plan, ground, execute, score) and print metrics as JSON."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default="examples/demo.toml",
                        help="run config (TOML or YAML; default: examples/demo.toml)")
    parser.add_argument("--split", action="append", choices=SPLITS,
                        help="split to evaluate (repeatable; default: the config's evaluate.splits)")
    parser.add_argument("--limit", type=at_least(0), default=None,
                        help="tasks per split (default: data.eval_limit; 0: every task)")
    parser.add_argument("--formulation", choices=("onetime", "iterative"), default=None,
                        help="how the agents take turns: onetime = the planner writes the whole plan, then the "
                             "grounder grounds all of it at once; iterative = subgoal by subgoal, the planner seeing "
                             "each step's execution result before the next (default: the config's "
                             "evaluate.formulation, onetime unless set)")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                        help="override a config field (repeatable)")
    parser.add_argument("--traces", type=writable_file, default=None, help="write per-task traces to this JSONL file")
    parser.add_argument("--plan-styles", action="store_true",
                        help="demo world: also measure the grounder on each plan style (concrete, explicit, vague, "
                             "paraphrased) of the same tasks")
    parser.add_argument("--json", action="store_true", help="print one JSON object (the default output)")
    add_quiet_flag(parser)


def run(args: argparse.Namespace) -> int:
    import time

    from engine.commands._common import fail, print_json, quiet_libraries
    from engine.config import load_config
    from engine.errors import ConfigError, DataError
    from engine.evaluate import evaluate
    from engine.export import probe_folder, write_jsonl
    from engine.preflight import preflight
    from engine.runtime import check_eval_splits, load_agent, load_run_tasks, pick_eval_tasks

    try:
        config = load_config(args.config, args.set)
        if args.formulation:
            config.evaluate.formulation = args.formulation
        tasks = load_run_tasks(config)
        if args.split:  # a split named twice was evaluated, and counted, twice
            config.evaluate.splits = list(dict.fromkeys(args.split))
        try:
            check_eval_splits(config, tasks)
        except ConfigError as exc:  # the same refusal as `run`'s, naming the flag when the split came from it
            raise (ConfigError("--split", exc.message) if args.split else exc) from None
        preflight(config)
    except (ConfigError, DataError) as exc:
        return fail(exc)
    if args.traces:
        try:  # before the models load: a folder that takes no file failed with a traceback after the whole evaluation
            probe_folder(args.traces)
        except OSError as exc:
            print(f"error: --traces: cannot write {args.traces}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    splits = config.evaluate.splits
    limit = args.limit if args.limit is not None else config.data.eval_limit
    chosen = pick_eval_tasks(tasks, splits, limit, config.data.eval_seed)
    if args.quiet:
        quiet_libraries()
    started = time.perf_counter()
    planner, grounder = load_agent(config.planner), load_agent(config.grounder)
    metrics, traces = evaluate(planner, grounder, chosen, config.evaluate)
    extra = {}
    if args.plan_styles:
        from engine.demo.gap import plan_style_gap

        extra["plan_style_gap"] = {s: plan_style_gap(grounder, [t for t in chosen if t.split == s]) for s in splits}
    if args.traces:
        try:
            write_jsonl((trace.to_dict() for trace in traces), args.traces)
        except OSError as exc:  # the folder changed since the probe, a full disk: the old file is left as it was
            print(f"error: --traces: cannot write {args.traces}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    print_json({"config": args.config, "formulation": config.evaluate.formulation, "splits": splits,
                "counts": {s: sum(t.split == s for t in chosen) for s in splits}, "metrics": metrics, **extra,
                "seconds": round(time.perf_counter() - started, 1)})
    return 0
