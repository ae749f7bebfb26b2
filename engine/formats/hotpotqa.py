"""HotpotQA loader: ``{"question", "answer", "type"?, "level"?, "context"?, "_id"?}``.

Contract: Task.question/answer are the record's; the optional official ``context`` (a list of
``[title, [sentence, ...]]`` pairs) becomes Task.context passages ``"title: sentence sentence ..."``, or
``"[title]: sentence ..."`` when the title itself holds ": " or starts with "[" (``passage_text``), which
``split_passage`` (and so ``engine.tools.qa.Corpus.from_context``) reads back to the same title; ``type``,
``level`` and ``supporting_facts`` go to meta when present; id is the record's own (``_id``/``id``) or
``hotpotqa-<line>``; domain "qa", source "hotpotqa". An answer that is a GSM8K worked solution (a line
``#### <number>``) is refused, naming the format to use: such a file loads as "QA" otherwise, since both formats
have a question and an answer.

The file is JSON lines or one JSON array of records (Lumos's ``data/eval/hotpotqa/test.json``, one line), read whole
up to ``engine.tasks.MAX_ARRAY_BYTES``; errors in an array name the line and the record (``read_records``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from engine.errors import DataError
from engine.formats.common import DEFAULT_SPLIT, check_split, expect_object, record_id, require_text, unique
from engine.tasks import Task, read_records

SOURCE = "hotpotqa"
_META_KEYS = ("type", "level", "supporting_facts")
GSM8K_MARK = re.compile(r"\n####\s*\S")
# A plain "prefix: " longer than this is text, not a title (Corpus.from_context's rule from the start); a bracketed
# title may be as long as Wikipedia allows.
_PLAIN_TITLE, _MAX_TITLE = 120, 255


def passage_text(title: str, text: str) -> str:
    """One Task.context passage: ``"title: text"``, or ``"[title]: text"`` for a title that the plain layout would
    cut ("Star Wars: Episode IV – A New Hope" read back as "Star Wars") or not take as a title (over 120 characters).
    Brackets only then, so every passage that read right before is written as before. Wikipedia titles, HotpotQA's,
    never hold "[" or "]"; a title no layout keeps whole is the caller's ``DataError``."""
    if ": " in title or title.startswith("[") or len(title) > _PLAIN_TITLE:
        return f"[{title}]: {text}"
    return f"{title}: {text}"


def split_passage(item: str) -> tuple[str, str] | None:
    """``(title, text)`` of a Task.context passage, or None for an untitled one.

    ``"[title]: text"`` gives the bracketed title whole; otherwise the title ends at the first ": " (the layout files
    written before titles were bracketed, and hand-written contexts), if it is short enough to be a title. A title
    holding ": " written in the old plain layout stays ambiguous there and is cut at its first ": ": load the source
    file again to write it bracketed.
    """
    if item.startswith("["):
        end = item.find("]: ")
        if 0 < end <= _MAX_TITLE + 1 and "\n" not in item[:end]:
            return item[1:end].strip(), item[end + 3 :].strip()
    title, sep, text = item.partition(": ")
    return (title.strip(), text.strip()) if sep and len(title) <= _PLAIN_TITLE else None


def context_passages(context: Any, path: str | Path, line: int) -> list[str]:
    """``[[title, [sentences]], ...]`` -> ``["title: sentences joined", ...]`` (``passage_text``); anything else, or a
    title that would not read back whole, is a DataError."""
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
        title, text = pair[0].strip(), " ".join(s.strip() for s in pair[1] if s.strip())
        passage = passage_text(title, text)
        if split_passage(passage) != (title, text):  # e.g. "]: " in a title: no layout reads that back whole
            raise DataError(str(path), line, f"context[{i}][0]", f"title {title[:60]!r} cannot be kept whole in a "
                                                                 "passage (a title holding ']: ', or a long one)")
        passages.append(passage)
    return passages


def load_hotpotqa(path: str | Path, split: str = DEFAULT_SPLIT) -> Iterator[Task]:
    check_split(path, split)
    seen: dict[str, int] = {}
    for line, raw in read_records(path):
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
