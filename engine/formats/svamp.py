"""SVAMP loader: ``{"ID", "Body", "Question", "Equation", "Answer", "Type"}``.

Contract: Task.question is ``Body.strip() + " " + Question.strip()`` -- exactly what Lumos's SVAMP evaluation feeds
the planner (no period is inserted when Body lacks one, so prompts stay identical to Lumos's); Task.answer is the
numeric ``Answer`` as text, without ``.0`` when integral; ``Equation`` and ``Type`` go to meta; id is ``ID`` (else
``svamp-<line>``, or ``svamp-<n>`` for the n-th record of an array); domain "maths", source "svamp".

The file is JSON lines or, as SVAMP distributes it (``SVAMP.json``), one JSON array of these objects, read whole up
to ``engine.tasks.MAX_ARRAY_BYTES`` (64 MiB; SVAMP.json is under 1 MB); errors in an array name the line and the
record (``SVAMP.json:12 (record 3): Answer: ...``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from engine.errors import DataError
from engine.formats.common import DEFAULT_SPLIT, check_split, expect_object, record_id, require_text, unique
from engine.tasks import Task, read_records

SOURCE = "svamp"


def number_text(value: int | float) -> str:
    """51.0 -> "51", 2.5 -> "2.5"."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def load_svamp(path: str | Path, split: str = DEFAULT_SPLIT) -> Iterator[Task]:
    check_split(path, split)
    seen: dict[str, int] = {}
    for line, raw in read_records(path):
        row = expect_object(raw, path, line)
        body = require_text(row, "Body", path, line)
        question = require_text(row, "Question", path, line)
        if "Answer" not in row:
            raise DataError(str(path), line, "Answer", "missing required field")
        answer = row["Answer"]
        # bool is an int subclass; a true/false answer is a data error, not 1/0.
        if isinstance(answer, bool) or not isinstance(answer, (int, float)):
            raise DataError(str(path), line, "Answer", f"must be a number, got {type(answer).__name__}")
        meta = {key.lower(): row[key] for key in ("Equation", "Type") if key in row}
        task_id, id_key = record_id(row, SOURCE, path, line)
        unique(task_id, seen, path, line, id_key)
        yield Task(
            id=task_id,
            domain="maths",
            source=SOURCE,
            split=split,
            question=f"{body.strip()} {question.strip()}",
            answer=number_text(answer),
            meta=meta,
        )
