"""Dataset loaders: turn each supported file format into a stream of ``engine.tasks.Task`` records.

Contract: ``load(format, path, ground=None, split=None)`` yields Tasks; every malformed record raises
``DataError(path, line, field, message)`` (never skipped, never partially used): the whole file is read and
validated before the first Task is yielded, so a consumer never sees part of a bad file. Files must be UTF-8 JSONL
with at least one record and lines of at most ``engine.tasks.MAX_LINE_BYTES``; the benchmark loaders (gsm8k, svamp,
hotpotqa, strategyqa) also take one JSON array document, as SVAMP and Lumos's eval files ship
(``engine.tasks.read_records``: up to ``MAX_ARRAY_BYTES``, each record located by its line and position), and the
StrategyQA loader one BIG-bench task document (``engine.formats.strategyqa``).
``FORMATS`` lists the names the CLI accepts. Each loader lives in its own module and is imported lazily by ``load``;
the validation helpers they share live in ``engine.formats.common``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from engine.errors import DataError
from engine.formats.common import DEFAULT_SPLIT
from engine.tasks import Task

FORMATS = ("gsm8k", "svamp", "hotpotqa", "strategyqa", "lumos", "tasks")


def load(format: str, path: str | Path, ground: str | Path | None = None, split: str | None = None) -> Iterator[Task]:
    """Stream Tasks from ``path`` in ``format``; ``ground`` is the Lumos grounder file (lumos only).

    ``split=None`` means the loader's default ("train" for lumos, "held_in" otherwise); the "tasks" format keeps the
    split stored in each record and ignores ``split``.
    """
    if ground is not None and format != "lumos":
        raise DataError(str(ground), None, "ground", f"a grounder file only applies to --format lumos, not {format}")
    if format == "lumos":
        from engine.formats.lumos import load_lumos

        return _all_or_nothing(load_lumos(path, ground, split=split or "train"), format, path)
    if format == "tasks":
        from engine.tasks import load_tasks

        return _all_or_nothing(load_tasks(path), format, path)
    split = split or DEFAULT_SPLIT
    if format == "gsm8k":
        from engine.formats.gsm8k import load_gsm8k as loader
    elif format == "svamp":
        from engine.formats.svamp import load_svamp as loader
    elif format == "hotpotqa":
        from engine.formats.hotpotqa import load_hotpotqa as loader
    elif format == "strategyqa":
        from engine.formats.strategyqa import load_strategyqa as loader
    else:
        raise DataError(str(path), None, "format", f"unknown format {format!r} (known: {', '.join(FORMATS)})")
    return _all_or_nothing(loader(path, split=split), format, path)


def _all_or_nothing(tasks: Iterator[Task], format: str, path: str | Path) -> Iterator[Task]:
    """Validate every record before yielding the first, so a bad line 900 never leaves 899 tasks imported. An error
    in the file's first record whose fields are another format's says which (a GSM8K file read as SVAMP said only
    "Body: missing required field")."""
    try:
        loaded = list(tasks)
    except DataError as exc:
        hint = None if exc.field.startswith("<") else _other_format(exc, format, path)  # not JSON or file errors
        if hint is None:
            raise
        raise DataError(exc.path, exc.line, exc.field, f"{exc.message}; {hint}") from None
    yield from loaded


# The fields that tell each format's records apart (a record holding all of one set, and the first set that matches).
_FORMAT_FIELDS = (("lumos", {"dataset", "messages"}), ("tasks", {"id", "domain", "split", "question"}),
                  ("svamp", {"Body", "Question", "Answer"}), ("strategyqa", {"input", "target_scores"}),
                  ("strategyqa", {"qid", "question", "answer"}), ("hotpotqa", {"question", "answer", "context"}),
                  ("hotpotqa", {"_id", "question", "answer"}), ("hotpotqa", {"question", "answer", "type"}),
                  ("gsm8k", {"question", "answer"}))


def _other_format(exc: DataError, format: str, path: str | Path) -> str | None:
    """"its fields (a, b) are those of the F format", when the failing record is the file's first and its fields
    are another format's; None otherwise."""
    from engine.tasks import read_records

    try:
        line, row = next(iter(read_records(path)))
    except (DataError, StopIteration):
        return None
    if not isinstance(row, dict) or exc.line is None or int(exc.line) != int(line):
        return None
    keys = set(row)
    if "answer" in keys and isinstance(row["answer"], str) and "####" in row["answer"]:
        guess = "gsm8k"  # a worked solution ending "#### N": GSM8K whatever else the record holds
    else:
        guess = next((name for name, fields in _FORMAT_FIELDS if fields <= keys), None)
    if guess is None or guess == format:
        return None
    shown = ", ".join(sorted(keys)[:8]) + (", ..." if len(keys) > 8 else "")
    return f"the record's fields ({shown}) are those of the {guess} format: is this file {guess}?"

