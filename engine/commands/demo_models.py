"""``python -m engine demo-models``: build the tiny demo planner and grounder (14.5 min on 2 cores, fp32)."""

from __future__ import annotations

import argparse
import dataclasses

HELP = "Train the demo tokenizer and the tiny warm-started planner and grounder into --out."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from engine.demo.agents import AgentBuildConfig

    parser.add_argument("--out", default="assets/demo", help="output directory (default: assets/demo)")
    parser.add_argument("--joint-from", default="",
                        help="build one agent for both roles instead (agents.topology = shared without LoRA): this "
                             "agent (e.g. assets/demo/grounder) trained further on both roles' rows, into --out")
    parser.add_argument("--tasks", default="examples/demo/tasks.jsonl",
                        help="demo task suite (Task JSONL); regenerated from the default world when missing")
    for f in dataclasses.fields(AgentBuildConfig):
        flag = f"--{f.name.replace('_', '-')}"
        # argparse expands %-formats in help; a literal "28%" in a field's help would crash --help
        text = f"{f.metadata.get('help', '')} (default: {f.default})".strip().replace("%", "%%")
        if isinstance(f.default, bool):  # type=bool would read "--flag False" as True
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default, help=text)
        else:
            parser.add_argument(flag, type=type(f.default), default=f.default, help=text,
                                choices=f.metadata.get("choices"))


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from engine.demo import world
    from engine.demo.agents import AgentBuildConfig, build_demo_agents, build_joint_agent, check_build_config
    from engine.demo.world import generate_suite
    from engine.tasks import load_tasks

    config = AgentBuildConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(AgentBuildConfig)})
    try:
        world.parse_plan_styles(config.planner_styles)
    except ValueError as err:
        raise SystemExit(f"demo-models: --planner-styles: {err}") from None
    try:
        check_build_config(config)
    except ValueError as err:
        raise SystemExit(f"demo-models: {err}") from None
    tasks = list(load_tasks(args.tasks)) if Path(args.tasks).exists() else generate_suite()
    if args.joint_from:
        build_joint_agent(tasks, args.out, args.joint_from, config)
    else:
        build_demo_agents(tasks, args.out, config)
    return 0
