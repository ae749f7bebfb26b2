"""The ``python -m engine`` command line: one subcommand per module in ``engine/commands``.

Each command module exposes ``HELP`` (one line), ``add_arguments(parser)`` and ``run(args) -> int``; modules import
heavy dependencies (torch, transformers) inside ``run`` so ``--help`` stays instant. A reader that goes away
(``| head``) ends a command quietly with status 141, as a shell reports SIGPIPE.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Subcommand name -> module under engine.commands. Listed explicitly: the CLI is the table of contents.
COMMANDS = {
    "load": "load",
    "execute": "execute",
    "eval": "evaluate",
    "demo-world": "demo_world",
    "demo-models": "demo_models",
    "run": "run",
    "step": "step",
    "status": "status",
    "export": "export",
    "bench": "bench",
    "swap": "swap",
    "experiment": "experiment",
    "report": "report",
    "merge": "merge",
    "fetch-model": "fetch_model",
}


def available_commands() -> dict[str, object]:
    """Import the command modules that exist (later issues add more)."""
    found = {}
    for name, module in COMMANDS.items():
        try:
            found[name] = importlib.import_module(f"engine.commands.{module}")
        except ModuleNotFoundError as exc:
            if exc.name != f"engine.commands.{module}":
                raise
    return found


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m engine", description="MOAT Studio engine (headless).")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, module in available_commands().items():
        cmd = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(cmd)
        cmd.set_defaults(_run=module.run)
    return parser


EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a command whose reader went away


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code = int(args._run(args) or 0)
        sys.stdout.flush()  # here, not at exit: a closed pipe found at exit is printed as an ignored exception
        return code
    except BrokenPipeError:  # `... | head`: the reader has what it wanted; a traceback would only be noise
        import os

        # Python flushes stdout once more at exit and would print the same error: point it at /dev/null first.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
