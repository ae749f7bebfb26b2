"""StrategyQA loader, both layouts Lumos uses.

* StrategyQA / Lumos eval: ``{"question", "answer": bool, "qid"?, "facts"?, "decomposition"?, ...}``.
* BIG-bench: ``{"input", "target_scores": {"Yes": 1, "No": 0}, "target"?}``.

Contract: Task.answer is "yes" or "no" (a non-boolean ``answer`` or undecidable ``target_scores`` raises
``DataError``); ``facts``, ``decomposition``, ``term``, ``description`` and the BIG-bench ``target`` explanation go
to meta when present; id is ``qid``/``id`` or ``strategyqa-<line>``; domain "qa", source "strategyqa".
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from engine.errors import DataError
from engine.formats.common import DEFAULT_SPLIT, check_split, expect_object, record_id, require_text, unique
from engine.tasks import Task, read_jsonl

SOURCE = "strategyqa"
_META_KEYS = ("term", "description", "facts", "decomposition")


def bigbench_answer(scores: Any, path: str | Path, line: int) -> str:
    """``{"Yes": 1, "No": 0}`` -> "yes"; the higher-scored option wins, a tie or other keys is an error."""
    valid = (
        isinstance(scores, dict)
        and set(scores) == {"Yes", "No"}
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in scores.values())
    )
    if not valid or scores["Yes"] == scores["No"]:
        raise DataError(str(path), line, "target_scores", 'must be {"Yes": n, "No": m} with n != m')
    return "yes" if scores["Yes"] > scores["No"] else "no"


def _question_and_answer(row: dict[str, Any], path: str | Path, line: int) -> tuple[str, str]:
    if "input" in row and "question" not in row:
        return require_text(row, "input", path, line), bigbench_answer(row.get("target_scores"), path, line)
    question = require_text(row, "question", path, line)
    if "answer" not in row:
        raise DataError(str(path), line, "answer", "missing required field")
    if not isinstance(row["answer"], bool):
        raise DataError(str(path), line, "answer", f"must be true or false, got {row['answer']!r}")
    return question, "yes" if row["answer"] else "no"


def load_strategyqa(path: str | Path, split: str = DEFAULT_SPLIT) -> Iterator[Task]:
    check_split(path, split)
    seen: dict[str, int] = {}
    for line, raw in read_jsonl(path):
        row = expect_object(raw, path, line)
        question, answer = _question_and_answer(row, path, line)
        meta = {key: row[key] for key in _META_KEYS if key in row}
        if isinstance(row.get("target"), str):
            meta["explanation"] = row["target"]
        task_id, id_key = record_id(row, SOURCE, path, line)
        unique(task_id, seen, path, line, id_key)
        yield Task(
            id=task_id, domain="qa", source=SOURCE, split=split, question=question.strip(), answer=answer, meta=meta
        )
