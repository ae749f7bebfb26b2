"""Validation helpers every format loader shares: the split, the record's shape, required text, ids and their
uniqueness. Each failure is a ``DataError`` naming the file, line and field. Imports nothing from the loaders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.errors import ArrayLine, DataError, line_text
from engine.tasks import ARRAY_HINT, SPLITS

DEFAULT_SPLIT = "held_in"
_ID_KEYS = ("id", "ID", "qid", "_id")


def check_split(path: str | Path, split: str) -> str:
    """Reject an unknown split up front, before any record is read."""
    if split not in SPLITS:
        raise DataError(str(path), None, "split", f"{split!r} is not one of {', '.join(SPLITS)}")
    return split


def expect_object(row: Any, path: str | Path, line: int) -> dict[str, Any]:
    if not isinstance(row, dict):
        # The benchmark loaders read array documents (engine.tasks.read_records): a list on line 1 here is an array
        # given to a JSON lines format.
        hint = ARRAY_HINT if isinstance(row, list) and not isinstance(line, ArrayLine) and line == 1 else ""
        raise DataError(str(path), line, "<record>", f"expected a JSON object, got {type(row).__name__}{hint}")
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
