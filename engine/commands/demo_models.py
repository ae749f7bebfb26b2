"""``python -m engine demo-models``: build the tiny demo planner and grounder (14.5 min on 2 cores, fp32).

Every flag is checked before any work (``engine.demo.agents.check_build_config``: each number's range, ``--roles``,
``--planner-styles``, ``--tokenizer-from``; and ``--out``, ``--joint-from``, ``--tasks`` here): a bad one is one line
``error: --flag: what is wrong`` on stderr and exit status 2 (a ``UsageError``, a ``SystemExit`` whose text is that
line), with nothing written. The build goes into ``<out>.partial-<pid>`` and is moved into ``--out`` only when
complete (``engine.demo.agents``), so Ctrl-C removes the partial directory, leaves ``--out`` as it was, prints one
line on stderr and exits 130.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

HELP = "Train the demo tokenizer and the tiny warm-started planner and grounder into --out."
STOPPED = 130  # 128 + SIGINT, the shell's convention (as ``engine run``)


class UsageError(SystemExit):
    """Exit status 2 for a bad flag. Its text is the line printed on stderr, so a caller that catches it (a test, a
    script around ``main``) reads why, where a plain ``SystemExit(2)`` says only "2"."""

    def __init__(self, message: str) -> None:
        super().__init__(2)
        self.message = message

    def __str__(self) -> str:
        return self.message


def usage_error(flag: str, problem: str) -> UsageError:
    """Print ``error: FLAG: PROBLEM`` on stderr and return the exit to raise."""
    message = f"error: {flag}: {problem}"
    print(message, file=sys.stderr)
    return UsageError(message)


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
    try:
        return _run(args)
    except KeyboardInterrupt:
        # The builder has already removed its partial directory; a traceback would only bury this line.
        print(f"demo-models: stopped by Ctrl-C; {args.out} left as it was", file=sys.stderr)
        return STOPPED


def _flag(field: str) -> str:
    return f"--{field.replace('_', '-')}"


def _run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from engine.demo.agents import (
        AgentBuildConfig,
        BuildConfigError,
        build_demo_agents,
        build_joint_agent,
        check_build_config,
    )
    from engine.demo.world import generate_suite
    from engine.errors import DataError
    from engine.tasks import load_tasks

    config = AgentBuildConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(AgentBuildConfig)})
    try:
        check_build_config(config, joint=bool(args.joint_from))
    except BuildConfigError as err:
        raise usage_error(_flag(err.field), str(err)) from None
    # The builders check these too, but only after the task suite is loaded (~20 s): here they cost nothing.
    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise usage_error("--out", f"{args.out} is a file, not a directory")
    if args.joint_from and not Path(args.joint_from).is_dir():
        raise usage_error("--joint-from", f"{args.joint_from} is not a directory (an agent, e.g. "
                                          "assets/demo/grounder)")
    tasks_path = Path(args.tasks)
    if tasks_path.exists() and not tasks_path.is_file():
        raise usage_error("--tasks", f"{args.tasks} is not a file")
    try:
        tasks = list(load_tasks(tasks_path)) if tasks_path.exists() else generate_suite()
    except DataError as err:
        raise usage_error("--tasks", str(err)) from None
    if not any(t.split == "train" for t in tasks):
        raise usage_error("--tasks", f"{args.tasks} has no task of split train to warm-start on")
    try:
        if args.joint_from:
            build_joint_agent(tasks, args.out, args.joint_from, config)
        else:
            build_demo_agents(tasks, args.out, config)
    except BuildConfigError as err:  # --max-positions, known once the tokenizer exists: nothing was trained yet
        raise usage_error(_flag(err.field), str(err)) from None
    return 0
