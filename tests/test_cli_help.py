"""Every ``python -m engine`` subcommand renders its ``--help`` (argparse formats help strings with ``%``)."""

from __future__ import annotations

import argparse

import pytest

from engine.__main__ import COMMANDS, available_commands, build_parser


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def test_every_command_module_is_importable() -> None:
    assert set(available_commands()) == set(COMMANDS)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_renders(name: str) -> None:
    command = _subparsers(build_parser())[name]
    pending = [command]
    while pending:  # nested subcommands (bench NAME ...) format their own help too
        parser = pending.pop()
        text = parser.format_help()
        assert parser.prog in text
        pending.extend(_subparsers(parser).values())


def test_quiet_is_one_flag_with_one_meaning() -> None:
    """``--quiet`` is defined once (``engine.commands._common.add_quiet_flag``): eval and swap lacked it, and run,
    step and experiment each described it in their own words."""
    helps = {name: action.help for name, parser in _subparsers(build_parser()).items()
             for action in parser._actions if "--quiet" in action.option_strings}
    assert set(helps) == {"run", "step", "experiment", "eval", "swap"}
    assert len(set(helps.values())) == 1 and "stderr" in next(iter(helps.values()))
