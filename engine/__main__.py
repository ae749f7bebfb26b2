"""The ``python -m engine`` command line: one subcommand per module in ``engine/commands``.

Each command module exposes ``HELP`` (one line), ``add_arguments(parser)`` and ``run(args) -> int``; modules import
heavy dependencies (torch, transformers) inside ``run`` so ``--help`` stays instant. A reader that goes away
(``| head``) ends a command quietly with status 141, as a shell reports SIGPIPE. Ctrl-C in a command that does not
stop gracefully by itself (``swap``, ``eval``, ``load``; or a second Ctrl-C in ``run``/``step``, which stop after the
batch in flight at the first) ends it with one line on stderr and status 130 (128 + SIGINT), not a traceback: a
store's open transaction is rolled back, and a stage left ``running`` reads ``interrupted`` and resumes as after a
kill.
"""

from __future__ import annotations

import argparse
import difflib
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
    "config": "config",
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
    # No abbreviated flags: `run --iteration 1` was taken for `run --iterations 1`, which re-targets a stored run
    # (`step` has an --iteration of its own), and an abbreviation that works today breaks when a flag is added.
    parser = argparse.ArgumentParser(prog="python -m engine", description="MOAT Studio engine (headless).",
                                     allow_abbrev=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, module in available_commands().items():
        cmd = sub.add_parser(name, help=module.HELP, description=module.HELP, allow_abbrev=False)
        module.add_arguments(cmd)
        cmd.set_defaults(_run=module.run, _parser=cmd)
    return parser


# Flags a user reaches for that mean something else here: the close match would point at the dangerous one.
MISTAKES = {
    ("run", "--iteration"): "run has no --iteration: to run one stage of iteration N use `python -m engine step STAGE "
                            "--run ID --iteration N`; `run --iterations N` runs iterations 0..N and re-targets a "
                            "stored run to N",
}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The parsed command line; a flag the command does not know is refused with that command's usage (argparse
    leaves unknown arguments to the top-level parser, whose usage lists only the commands)."""
    args, unknown = build_parser().parse_known_args(argv)
    if unknown:
        for flag in unknown:
            if hint := MISTAKES.get((args.command, flag.split("=")[0])):
                args._parser.error(f"unrecognized arguments: {' '.join(unknown)}; {hint}")
        flags = [f for action in args._parser._actions for f in action.option_strings]
        close = [difflib.get_close_matches(u.split("=")[0], flags, n=1, cutoff=0.75) for u in unknown
                 if u.startswith("--")]
        hint = "; did you mean " + " or ".join(m[0] for m in close if m) + "?" if any(close) else ""
        args._parser.error(f"unrecognized arguments: {' '.join(unknown)}{hint}")
    return args


EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a command whose reader went away
EXIT_INTERRUPTED = 130  # 128 + SIGINT: what a shell reports for a command ended by Ctrl-C


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
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
    except KeyboardInterrupt:  # the user asked for it: a traceback of wherever it landed tells them nothing
        print(f"\n{args.command}: stopped by Ctrl-C", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
