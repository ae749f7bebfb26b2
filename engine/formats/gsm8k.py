"""GSM8K loader: ``{"question", "answer"}`` where ``answer`` is a worked solution ending ``#### N``.

Contract: Task.answer is ``N`` with thousands commas stripped; the worked solution (text before ``####``) is kept in
``meta["solution"]``; domain "maths", source "gsm8k"; id is the record's own id or ``gsm8k-<line>``. A record without
``####``, with an empty final answer or one that is not a number raises ``DataError``. The file is JSON lines (as
GSM8K ships it) or one JSON array of records (``engine.tasks.read_records``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from engine.errors import DataError
from engine.formats.common import DEFAULT_SPLIT, check_split, expect_object, record_id, require_text, unique
from engine.tasks import Task, read_records

SOURCE = "gsm8k"


# GSM8K's final answers are whole numbers; a sign and a decimal part are allowed (variants of the set have them).
_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)")


def split_answer(answer: str) -> tuple[str, str]:
    """``(solution, final)`` from a GSM8K answer; raises ``ValueError`` when there is no ``#### N`` or N is not a
    number (no answer the executor gives could ever match ``#### abc``)."""
    solution, sep, final = answer.rpartition("####")
    final = final.strip().replace(",", "")
    if not sep or not final:
        raise ValueError("expected a final line '#### N'")
    if not _NUMBER.fullmatch(final):
        raise ValueError(f"expected a number after '####', got {final[:40]!r}")
    return solution.strip(), final


def load_gsm8k(path: str | Path, split: str = DEFAULT_SPLIT) -> Iterator[Task]:
    check_split(path, split)
    seen: dict[str, int] = {}
    for line, raw in read_records(path):
        row = expect_object(raw, path, line)
        question = require_text(row, "question", path, line)
        answer = require_text(row, "answer", path, line)
        try:
            solution, final = split_answer(answer)
        except ValueError as exc:
            raise DataError(str(path), line, "answer", str(exc)) from None
        task_id, id_key = record_id(row, SOURCE, path, line)
        unique(task_id, seen, path, line, id_key)
        yield Task(
            id=task_id,
            domain="maths",
            source=SOURCE,
            split=split,
            question=question.strip(),
            answer=final,
            meta={"solution": solution},
        )
