"""HotpotQA loader: ``{"question", "answer", "type"?, "level"?, "context"?, "_id"?}``.

Contract: Task.question/answer are the record's; the optional official ``context`` (a list of
``[title, [sentence, ...]]`` pairs) becomes Task.context passages ``"title: sentence sentence ..."``; ``type``,
``level`` and ``supporting_facts`` go to meta when present; id is the record's own (``_id``/``id``) or
``hotpotqa-<line>``; domain "qa", source "hotpotqa". An answer that is a GSM8K worked solution (a line
``#### <number>``) is refused, naming the format to use: such a file loads as "QA" otherwise, since both formats
have a question and an answer.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from engine.errors import DataError
from engine.formats.common import DEFAULT_SPLIT, check_split, expect_object, record_id, require_text, unique
from engine.tasks import Task, read_jsonl

SOURCE = "hotpotqa"
_META_KEYS = ("type", "level", "supporting_facts")
GSM8K_MARK = re.compile(r"\n####\s*\S")


def context_passages(context: Any, path: str | Path, line: int) -> list[str]:
    """``[[title, [sentences]], ...]`` -> ``["title: sentences joined", ...]``; anything else is a DataError."""
    if not isinstance(context, list):
        raise DataError(str(path), line, "context", "must be a list of [title, [sentences]] pairs")
    passages = []
    for i, pair in enumerate(context):
        ok = (
            isinstance(pair, list)
            and len(pair) == 2
            and isinstance(pair[0], str)
            and isinstance(pair[1], list)
            and all(isinstance(s, str) for s in pair[1])
        )
        if not ok:
            raise DataError(str(path), line, f"context[{i}]", "must be a [title, [sentences]] pair")
        text = " ".join(s.strip() for s in pair[1] if s.strip())
        passages.append(f"{pair[0].strip()}: {text}")
    return passages


def load_hotpotqa(path: str | Path, split: str = DEFAULT_SPLIT) -> Iterator[Task]:
    check_split(path, split)
    seen: dict[str, int] = {}
    for line, raw in read_jsonl(path):
        row = expect_object(raw, path, line)
        question = require_text(row, "question", path, line)
        answer = require_text(row, "answer", path, line)
        if GSM8K_MARK.search(answer):  # a short answer, never a worked solution: the file is GSM8K's
            raise DataError(str(path), line, "answer", "is a worked maths solution ending in '#### <number>' "
                                                       "(GSM8K's format), not a HotpotQA answer: load it with "
                                                       "--format gsm8k")
        context = context_passages(row["context"], path, line) if "context" in row else []
        task_id, id_key = record_id(row, SOURCE, path, line)
        unique(task_id, seen, path, line, id_key)
        yield Task(
            id=task_id,
            domain="qa",
            source=SOURCE,
            split=split,
            question=question.strip(),
            context=context,
            answer=answer.strip(),
            meta={key: row[key] for key in _META_KEYS if key in row},
        )
