"""``python -m engine eval``: run the planner and grounder of a config end to end on a split and print metrics."""

from __future__ import annotations

import argparse

from engine.commands._common import at_least, writable_file
from engine.tasks import SPLITS

HELP = "Evaluate planner + grounder end to end (plan, ground, execute, score) and print metrics as JSON."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default="examples/demo.toml", help="run config (TOML or YAML)")
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


def run(args: argparse.Namespace) -> int:
    import json
    import time

    from engine.commands._common import fail, print_json
    from engine.config import load_config
    from engine.errors import ConfigError, DataError
    from engine.evaluate import evaluate
    from engine.preflight import preflight
    from engine.runtime import load_agent, load_run_tasks, pick_eval_tasks

    try:
        config = load_config(args.config, args.set)
        if args.formulation:
            config.evaluate.formulation = args.formulation
        tasks = load_run_tasks(config)
        preflight(config)
    except (ConfigError, DataError) as exc:
        return fail(exc)
    splits = args.split or config.evaluate.splits
    limit = args.limit if args.limit is not None else config.data.eval_limit
    chosen = pick_eval_tasks(tasks, splits, limit, config.data.eval_seed)
    started = time.perf_counter()
    planner, grounder = load_agent(config.planner), load_agent(config.grounder)
    metrics, traces = evaluate(planner, grounder, chosen, config.evaluate)
    extra = {}
    if args.plan_styles:
        from engine.demo.gap import plan_style_gap

        extra["plan_style_gap"] = {s: plan_style_gap(grounder, [t for t in chosen if t.split == s]) for s in splits}
    if args.traces:
        with open(args.traces, "w", encoding="utf-8") as out:
            for trace in traces:
                out.write(json.dumps(trace.to_dict(), ensure_ascii=False) + "\n")
    print_json({"config": args.config, "formulation": config.evaluate.formulation, "splits": splits,
                "counts": {s: sum(t.split == s for t in chosen) for s in splits}, "metrics": metrics, **extra,
                "seconds": round(time.perf_counter() - started, 1)})
    return 0
