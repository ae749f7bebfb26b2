"""Helpers shared by command modules: JSON printing (and where a summary goes when ``--out`` is stdout), the flags
several commands share (``--quiet``), and turning engine errors into exit codes (2 bad input, ``fail`` and
``store_missing``; 3 a store that cannot be used, ``store_unusable``)."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from engine.errors import ConfigError, DataError


def print_json(obj: Any, file: Any = None) -> None:
    """One line of strict JSON: a NaN or infinite float (the interval of no values, an infinite log-PPL) is null, as
    ``json.dumps`` would otherwise write ``NaN``/``Infinity``, which ``jq`` and other parsers refuse."""
    print(json.dumps(finite(obj), ensure_ascii=False, indent=None, default=str, allow_nan=False), file=file)


def finite(obj: Any) -> Any:
    """``obj`` with every NaN or infinite float (in dicts, lists and tuples) replaced by None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {key: finite(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(value) for value in obj]
    return obj


def summary_stream(out: str) -> Any:
    """Where a command that wrote ``--out`` prints its summary: stdout, unless ``--out`` is stdout itself
    (``/dev/stdout``, ``/dev/fd/1``, the file stdout is redirected to), where the summary would be appended to the
    data a pipe reads (``export --out /dev/stdout | jq`` got a last line that was no record); then stderr."""
    try:
        same = os.path.samestat(os.stat(out), os.fstat(sys.stdout.fileno()))
    except (OSError, ValueError, AttributeError):  # no such file, stdout closed or not a real file (pytest capture)
        same = False
    return sys.stderr if same else sys.stdout


DEFAULT_DB = "runs/studio.duckdb"


BAD_INPUT = 2  # every command's exit status for bad input: a located config/data error, a missing store, ...


def no_store(db: str) -> str:
    """The refusal for a store file that is not there: a command that took the default says how to pick another;
    one given ``--db`` is told only that the file is missing."""
    return f"no store at {db}" + (" (the default: use --db to pick one)" if db == DEFAULT_DB else "")


def store_missing(db: str) -> bool:
    """Whether the store file ``db`` is missing, said as ``error: no store at DB`` on stderr when it is; the command
    then exits ``BAD_INPUT``. Checked before opening the store: DuckDB would create an empty one."""
    if Path(db).exists():
        return False
    print(f"error: {no_store(db)}", file=sys.stderr)
    return True


def fail(exc: Exception) -> int:
    """Print a located error on stderr and return the exit code for bad input."""
    if isinstance(exc, (DataError, ConfigError)):
        print(f"error: {exc}", file=sys.stderr)
        return BAD_INPUT
    raise exc


STORE_UNUSABLE = 3  # every command's exit status for a store it cannot use (held, newer schema, not a store)


def store_unusable(exc: Exception) -> int:
    """A ``StoreError`` (held by another process, a newer schema, not a DuckDB file) as one line on stderr -- stdout
    stays for the command's JSON -- and ``STORE_UNUSABLE``, the same status from every command."""
    print(f"error: {exc}", file=sys.stderr)
    return STORE_UNUSABLE


def add_quiet_flag(parser: argparse.ArgumentParser) -> None:
    """``--quiet``, with one meaning in every command that takes it (run, step, experiment, eval, swap): no progress
    bars on stderr, the command's own nor the libraries' (``quiet_libraries``); the result is printed all the same."""
    parser.add_argument("--quiet", action="store_true",
                        help="no progress bars on stderr (the result is still printed)")


def quiet_libraries() -> None:
    """Silence the progress bars ``datasets`` draws while TRL's trainers tokenize their rows and the "Loading
    weights" bar transformers draws for every model load (``--quiet``): in this process, and through the
    environment in the worker processes it starts."""
    os.environ["HF_DATASETS_DISABLE_PROGRESS_BARS"] = "1"
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"  # transformers reads it at import (a worker's)
    import datasets
    import transformers

    datasets.disable_progress_bars()
    transformers.utils.logging.disable_progress_bar()


def at_least(low: int) -> Callable[[str], int]:
    """An argparse ``type``: an integer >= ``low``, refused by argparse's usage error (exit 2) otherwise."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be {low} or more, not {value}")
        return value
    return parse


def positive_seconds(text: str) -> float:
    """An argparse ``type``: a finite number of seconds above 0 (``nan``, ``inf`` and negatives were accepted)."""
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, not {text}")
    return value


def torch_device(text: str) -> str:
    """An argparse ``type``: ``cpu``, ``cuda`` or ``cuda:N`` (torch's own error was a traceback)."""
    if not re.fullmatch(r"cpu|cuda(:\d+)?", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not cpu, cuda or cuda:N")
    return text


def writable_file(text: str) -> str:
    """An argparse ``type``: a file path whose directory exists and that is not a directory, checked before any
    work (a bad path used to fail with a traceback after the work was done)."""
    path = os.path.abspath(text)
    if os.path.isdir(path):
        raise argparse.ArgumentTypeError(f"{text} is a directory; give a file name")
    folder = os.path.dirname(path)
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"the directory of {text} is a file, not a folder")
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"the directory of {text} does not exist")
    return text


@contextmanager
def ctrl_c_stops(note: str | None = None, again_quits: bool = False) -> Iterator[Callable[[], bool]]:
    """While the block runs, Ctrl-C (SIGINT) asks the stages to stop instead of raising: the batch in flight
    finishes, the stage records "stopped" and the command exits 130 (128 + SIGINT, the shell's convention). Yields
    the ``should_stop`` the loop polls; ``note`` is printed on stderr at the first Ctrl-C. ``again_quits``: a second
    Ctrl-C raises ``KeyboardInterrupt`` at once (``engine.__main__`` turns it into one line and 130), for a user who
    will not wait for a long batch; ``engine.loop.run_stage`` records the stage ``stopped`` on its way out. The
    previous handler is put back on the way out."""
    asked = [False]

    def request_stop(*_: object) -> None:
        if asked[0] and again_quits:
            raise KeyboardInterrupt
        if note and not asked[0]:
            print(note, file=sys.stderr)
        asked[0] = True

    previous = signal.signal(signal.SIGINT, request_stop)
    try:
        yield lambda: asked[0]
    finally:
        signal.signal(signal.SIGINT, previous)


def stopping_note(command: str) -> str:
    """What ``run`` and ``step`` print at the first Ctrl-C: the stop is not instant (the batch in flight, a training
    step or a generation batch, runs to its end first: seconds on the demo, longer on a big model), so say it was
    heard, how to resume and how to quit now."""
    return (f"\nCtrl-C: stopping after the batch in flight; the {command} command with --run ID resumes. Press "
            "Ctrl-C again to quit at once (the stage is recorded stopped and resumes the same way).")


def said_stage_failed(exc: BaseException, db: str, resume: str = "") -> bool:
    """For an exception that failed a recorded stage (``engine.errors.failed_stage``), say so on stderr, where its
    traceback is kept and ``resume`` (a sentence, optional), and return True; False for any other exception, which the
    caller re-raises (bad input before or between stages, or a bug)."""
    from engine.errors import failed_stage

    where = failed_stage(exc)
    if where is None:
        return False
    then = f"; {resume}" if resume else ""
    print(f"error: iteration {where[0]}, stage {where[1]} failed: {type(exc).__name__}: {exc}\n(its traceback is in "
          f"`python -m engine status --db {shlex.quote(db)} --json`{then})", file=sys.stderr)
    return True
