"""Dataset loaders: turn each supported file format into a stream of ``engine.tasks.Task`` records.

Contract: ``load(format, path, ground=None, split=None)`` yields Tasks; every malformed record raises
``DataError(path, line, field, message)`` (never skipped, never partially used): the whole file is read and
validated before the first Task is yielded, so a consumer never sees part of a bad file. Files must be UTF-8 JSONL
with at least one record and lines of at most ``engine.tasks.MAX_LINE_BYTES``; the SVAMP loader also takes one JSON
array document, as SVAMP itself ships (``engine.tasks.read_records``: up to ``MAX_ARRAY_BYTES``, each record located
by its line and position). ``FORMATS`` lists the names the CLI accepts. Each loader lives in its own module and is
imported lazily by ``load`` so submodules can share the small helpers defined here without an import cycle.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from engine.errors import ArrayLine, DataError, line_text
from engine.tasks import SPLITS, Task

FORMATS = ("gsm8k", "svamp", "hotpotqa", "strategyqa", "lumos", "tasks")
DEFAULT_SPLIT = "held_in"
_ID_KEYS = ("id", "ID", "qid", "_id")


def load(format: str, path: str | Path, ground: str | Path | None = None, split: str | None = None) -> Iterator[Task]:
    """Stream Tasks from ``path`` in ``format``; ``ground`` is the Lumos grounder file (lumos only).

    ``split=None`` means the loader's default ("train" for lumos, "held_in" otherwise); the "tasks" format keeps the
    split stored in each record and ignores ``split``.
    """
    if ground is not None and format != "lumos":
        raise DataError(str(ground), None, "ground", f"a grounder file only applies to --format lumos, not {format}")
    if format == "lumos":
        from engine.formats.lumos import load_lumos

        return _all_or_nothing(load_lumos(path, ground, split=split or "train"))
    if format == "tasks":
        from engine.tasks import load_tasks

        return _all_or_nothing(load_tasks(path))
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
    return _all_or_nothing(loader(path, split=split))


def _all_or_nothing(tasks: Iterator[Task]) -> Iterator[Task]:
    """Validate every record before yielding the first, so a bad line 900 never leaves 899 tasks imported."""
    yield from list(tasks)


def check_split(path: str | Path, split: str) -> str:
    """Reject an unknown split up front, before any record is read."""
    if split not in SPLITS:
        raise DataError(str(path), None, "split", f"{split!r} is not one of {', '.join(SPLITS)}")
    return split


def expect_object(row: Any, path: str | Path, line: int) -> dict[str, Any]:
    if not isinstance(row, dict):
        raise DataError(str(path), line, "<record>", f"expected a JSON object, got {type(row).__name__}")
    return row


def require_text(row: dict[str, Any], key: str, path: str | Path, line: int) -> str:
    """The record's ``key`` as a non-empty string, or a located ``DataError``."""
    if key not in row:
        raise DataError(str(path), line, key, "missing required field")
    value = row[key]
    if not isinstance(value, str) or not value.strip():
        raise DataError(str(path), line, key, f"must be a non-empty string, got {type(value).__name__}")
    return value


def record_id(row: dict[str, Any], source: str, path: str | Path, line: int) -> tuple[str, str]:
    """``(id, key)``: the record's own id and the key holding it (``id``/``ID``/``qid``/``_id``), or
    ``(<source>-<line>, "id")`` when it has none (``<source>-<n>`` for the n-th record of a JSON array document, whose
    records may share a line); the key lets a duplicate-id error name the field as written."""
    for key in _ID_KEYS:
        if key in row:
            value = row[key]
            if isinstance(value, bool) or not isinstance(value, (str, int)) or not str(value).strip():
                raise DataError(str(path), line, key, "must be a non-empty string or an integer")
            return str(value), key
    return f"{source}-{line.record if isinstance(line, ArrayLine) else line}", "id"


def unique(task_id: str, seen: dict[str, int], path: str | Path, line: int, field: str = "id") -> None:
    """Record ``task_id`` in ``seen``; a repeat is an error (named by ``field``) because ids key every later join."""
    if task_id in seen:
        raise DataError(str(path), line, field, f"duplicate id {task_id!r} (first on line {line_text(seen[task_id])})")
    seen[task_id] = line
