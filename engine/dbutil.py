"""Small helpers shared by the store's modules: constants of the schema, cell conversion between DuckDB/pandas and
Python (JSON columns, NaN/NaT as None), and which DuckDB errors are worth retrying."""

from __future__ import annotations

import json
import re
from typing import Any

import duckdb
import pandas as pd

from engine import schema

STAGE_STATUSES = ("pending", "running", "done", "failed", "stopped", "skipped")
FINISHED = ("done", "failed", "stopped")
# Every table the schema creates, in its first version or in a migration.
TABLES = tuple(re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", schema.DDL_V1 + "".join(schema.MIGRATIONS.values())))
CONFLICT_RETRIES = 25  # writers in one process conflict only briefly; a loaded CPU stretches that


def is_conflict(exc: Exception) -> bool:
    """Optimistic-concurrency failures worth retrying: "Conflict on update", and a duplicate key from another
    transaction that inserted the same new key first (our own upserts never duplicate a key themselves)."""
    text = str(exc)
    return (
        isinstance(exc, duckdb.TransactionException)
        or "Conflict on update" in text
        or (isinstance(exc, duckdb.ConstraintException) and "Duplicate key" in text)
    )


def json_cell(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def loads(text: Any, default: Any = None) -> Any:
    """A JSON cell's value; ``default`` for a missing cell (None, NaN, pandas' NA/NaT)."""
    if text is None or isna(text):
        return default
    return json.loads(text)


def slug(name: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return slug[:40] or "run"


def records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """DataFrame rows as dicts with NaN/NaT turned into None (pandas fills missing values with NaN)."""
    return [{k: (None if isna(v) else v) for k, v in row.items()} for row in df.to_dict("records")]


def isna(value: Any) -> bool:
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):  # lists/arrays are never "missing"
        return False


def number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def iso(value: Any) -> str | None:
    return value.isoformat() if hasattr(value, "isoformat") and not isna(value) else None
