"""``python -m engine step STAGE --run R --iteration T``: run one stage of one iteration."""

from __future__ import annotations

import argparse

HELP = "Run one stage (sample, score, pairs, train_planner, ground, critique, train_grounder, evaluate)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from engine.loop import STAGES

    parser.add_argument("stage", choices=list(STAGES))
    parser.add_argument("--run", required=True, help="run id (see `python -m engine status`)")
    parser.add_argument("--iteration", type=int, required=True, help="iteration (0 = the starting agents)")
    parser.add_argument("--db", default="runs/studio.duckdb")
    parser.add_argument("--critic", choices=("reference", "openai", "hf"), default=None,
                        help="override critic.backend")
    parser.add_argument("--base-url", default=None, help="override critic.base_url (OpenAI-compatible /v1 URL)")
    parser.add_argument("--model", default=None, help="override critic.model")
    parser.add_argument("--quiet", action="store_true")


def run(args: argparse.Namespace) -> int:
    from engine.commands._common import print_json
    from engine.commands.run import progress_printer
    from engine.config import config_from_dict, config_to_dict
    from engine.loop import run_config, run_stage
    from engine.store import Store, StoreError

    try:
        with Store(args.db) as store:
            config = run_config(store, args.run)
            data = config_to_dict(config)
            for key, value in (("backend", args.critic), ("base_url", args.base_url), ("model", args.model)):
                if value is not None:
                    data["critic"][key] = value
            config = config_from_dict(data, "--critic/--base-url/--model")
            status = run_stage(store, args.run, args.iteration, args.stage, config=config,
                               progress=progress_printer(args.quiet))
            print_json({"run_id": args.run, "iteration": args.iteration, "stage": args.stage, "status": status,
                        "state": store.stage_status(args.run, args.iteration).get(args.stage)})
    except StoreError as exc:  # held by another process, a newer schema, not a store: say so, no traceback
        print(f"error: {exc}")
        return 3
    return 0 if status in ("done", "skipped") else 1
