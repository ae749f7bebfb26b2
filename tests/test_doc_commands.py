"""Every ``python -m engine`` command the docs tell people to run is one this engine accepts.

The README's numbers each come with the command that re-creates them, and the experiment files and result reports
carry theirs in comments. A flag renamed or a config field moved would leave those lines failing for the first reader
who tries them; here they fail first. Each command found in the docs (inline code, fenced blocks, TOML and HTML
comments, backslash continuations joined) is parsed by the CLI's own parser, and one that names a config file in the
repository, or ``--set`` overrides, has them loaded and validated as a run would (an experiment file as
``experiment`` loads it). Usage synopses (``bench NAME``, ``merge --run RUN ...``) are not commands and are left out;
``<...>`` placeholders stand for an id or a path the reader fills in.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from engine.__main__ import build_parser
from engine.config import load_config
from engine.experiment import load_experiment

REPO = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "engine/SCALEOUT.md", "engine/bench/RESULTS.md", "examples/**/*.toml", "examples/**/*.md")
PREFIX = "python -m engine "
METAVARIABLE = re.compile(r"[A-Z][A-Z0-9_]*\Z")  # NAME, RUN, T: a value the reader fills in
SHELL = set("();<>|&")  # a token of these ends a command: a pipe, a redirect, a list, or prose in parentheses
GENERATED = ("runs/", "/tmp/", "$")  # paths an earlier command in the same doc writes


@dataclass(frozen=True)
class DocCommand:
    where: str  # file:line
    text: str  # everything after "python -m engine " up to the end of its span (a comment, a pipe, prose)

    def __str__(self) -> str:
        return f"{self.where}: python -m engine {self.text}"


def _spans(path: Path, text: str) -> list[tuple[int, str, bool]]:
    """(offset, text, one command per line?) of each place a command may sit: code blocks, code spans and HTML
    comments in Markdown (a span may wrap across lines), comment lines in TOML."""
    if path.suffix == ".toml":
        out, offset = [], 0
        for line in text.splitlines(keepends=True):
            if line.lstrip().startswith("#"):
                out.append((offset, line.lstrip()[1:], True))
            offset += len(line)
        return out
    spans = [(m.start(1), m.group(1), True) for m in re.finditer(r"```[^\n]*\n(.*?)```", text, re.S)]
    fenced = [(start, start + len(body)) for start, body, _ in spans]
    spans += [(m.start(1), m.group(1), False) for m in re.finditer(r"(?<!`)`([^`]+)`(?!`)", text)
              if not any(a <= m.start() < b for a, b in fenced)]
    spans += [(m.start(1), m.group(1), False) for m in re.finditer(r"<!--(.*?)-->", text, re.S)]
    return spans


def _join_continuations(path: Path, text: str) -> str:
    if path.suffix == ".toml":  # a continued command goes on in the next comment line
        return re.sub(r"\\[ \t]*\n[ \t]*#", " ", text)
    return re.sub(r"\\[ \t]*\n", " ", text)


def doc_commands() -> list[DocCommand]:
    found: dict[tuple[str, str], DocCommand] = {}
    for pattern in DOCS:
        for path in sorted(REPO.glob(pattern)):
            text = _join_continuations(path, path.read_text(encoding="utf-8"))
            for offset, span, by_line in _spans(path, text):
                for match in re.finditer(re.escape(PREFIX), span):
                    rest = span[match.end():]
                    rest = rest.split("\n")[0] if by_line else " ".join(rest.split())
                    rest = rest.split("`")[0].strip()  # an HTML comment holds code spans of its own
                    line = text.count("\n", 0, offset + match.start()) + 1
                    where = f"{path.relative_to(REPO)}:{line}"
                    found.setdefault((where, rest), DocCommand(where, rest))
    return list(found.values())


def _argv(command: DocCommand) -> list[str] | None:
    """The arguments to parse, placeholders filled, up to where the shell or the prose takes over; None for a usage
    synopsis."""
    lexer = shlex.shlex(re.sub(r"<[^<>]*>", "PLACEHOLDER-ID", command.text), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    argv = []
    for token in lexer:  # '#' starts a shell comment: shlex drops it
        if set(token) <= SHELL or token == "--" or token == "python":  # "--" of "-->", or the next command
            break
        argv.append(token.rstrip(".,:") if token.endswith((".", ",", ":")) and not token.endswith("..") else token)
    if len(argv) < 2 or any(tok in ("...", "…") or "…" in tok for tok in argv):
        return None  # a synopsis, or a command named in prose ("`python -m engine swap` cannot open ...")
    # An option's value written as its metavariable (--run RUN, --iteration T) is the reader's to fill in: a value of
    # the option's type stands in. A metavariable anywhere else (bench NAME) makes the line a synopsis.
    options = _subcommand_options(argv[0])
    for i, token in enumerate(argv[1:], start=1):
        if METAVARIABLE.match(token):
            action = options.get(argv[i - 1]) if argv[i - 1].startswith("--") else None
            if action is None:
                return None
            argv[i] = "1" if action.type in (int, float) else "PLACEHOLDER-ID"
    return argv


def _subcommand_options(name: str) -> dict[str, argparse.Action]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    command = sub.choices.get(name)
    return dict(command._option_string_actions) if command is not None else {}


COMMANDS = doc_commands()
RUNNABLE = [c for c in COMMANDS if _argv(c) is not None]  # the rest are synopses (bench NAME) or prose mentions


def test_the_docs_hold_the_commands_this_test_reads():
    """The extraction itself: without it every check below would pass on nothing."""
    assert len(COMMANDS) > 150, len(COMMANDS)
    texts = [c.text for c in COMMANDS]
    assert any(t.startswith("run --config examples/demo.toml") for t in texts)  # a README code block
    assert any(t.startswith("experiment --config examples/experiments/ablations.toml") for t in texts)
    assert any(c.where.startswith("examples/experiments/tune-") for c in COMMANDS)  # a TOML comment
    joined = next(c for c in COMMANDS if c.where.startswith("examples/experiments/tune-wide-qa.toml")
                  and c.text.startswith("eval "))
    assert "--set data.tasks=" in joined.text and "--plan-styles" in joined.text, joined  # a continued line
    synopses = [c for c in COMMANDS if _argv(c) is None]
    assert synopses and len(synopses) < len(COMMANDS) / 10, [str(c) for c in synopses]


@pytest.mark.parametrize("command", RUNNABLE, ids=lambda c: c.where)
def test_a_documented_command_parses_and_its_config_loads(command):
    argv = _argv(command)
    assert argv is not None
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as exc:
            if exc.code:
                pytest.fail(f"{command}\n{stderr.getvalue().strip()}", pytrace=False)
            return  # --help
    config = getattr(args, "config", None)
    overrides = list(getattr(args, "set", None) or [])
    if config and config.startswith(GENERATED):
        config = None  # written by an earlier command of the same doc: its --set overrides are still checked
    elif config and not (REPO / config).is_file():
        pytest.fail(f"{command}\nnames {config}, which is not in the repository", pytrace=False)
    if config and args.command == "experiment":
        load_experiment(REPO / config)
    elif config or overrides:
        try:
            load_config(REPO / config if config else None, overrides)
        except Exception as exc:  # the message is the finding
            pytest.fail(f"{command}\n{type(exc).__name__}: {exc}", pytrace=False)
