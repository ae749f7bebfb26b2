"""StrategyQA loader, both layouts Lumos uses, in the containers they ship in.

* StrategyQA / Lumos eval: ``{"question", "answer": bool, "qid"?, "facts"?, "decomposition"?, ...}``.
* BIG-bench: ``{"input", "target_scores": {"Yes": 1, "No": 0}, "target"?}``.

Containers: JSON lines (one record per line), a JSON array of records (Lumos's ``data/eval/strategyqa/test.json``,
on one line; ``engine.tasks.read_records``), or a BIG-bench task document, one JSON object over many lines whose
``examples`` list holds the records (Lumos's ``data/eval/strategyqa/strategy_qa.json``; its metadata, canary
included, is not kept). A document is recognised by its first line: an object left open there, with a next line that
starts no record of its own. It is read whole (up to ``engine.tasks.MAX_ARRAY_BYTES``), each example located by the
line it starts on and its position; a document cut short says so at the file's last line, and one without an
``examples`` list is refused as a layout this loader does not read (not as a truncated line).

Contract: Task.answer is "yes" or "no" (a non-boolean ``answer`` or undecidable ``target_scores`` raises
``DataError``); ``facts``, ``decomposition``, ``term``, ``description`` and the BIG-bench ``target`` explanation go
to meta when present; id is ``qid``/``id`` or ``strategyqa-<line>`` (``strategyqa-<n>`` for a document's n-th
example); domain "qa", source "strategyqa".
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from engine import tasks
from engine.errors import ArrayLine, DataError
from engine.formats.common import DEFAULT_SPLIT, check_split, expect_object, record_id, require_text, unique
from engine.tasks import Task, read_records

SOURCE = "strategyqa"
_META_KEYS = ("term", "description", "facts", "decomposition")
_BOM = b"\xef\xbb\xbf"
_SPACE = " \t\r\n"  # JSON's own whitespace


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


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _opens_a_document(path: str) -> bool:
    """Whether the file is one JSON object spread over lines: its first non-blank line opens an object it does not
    close, and the next non-blank line starts no record of its own. JSON lines whose first record is cut short
    (followed by whole records, or by nothing) stay JSON lines, so their error still names that line."""
    lines: list[str] = []
    try:
        with open(path, "rb") as handle:
            while len(lines) < 2:
                # the first line whole (up to the cap), of the next only its start; an over-long line is read_jsonl's
                raw = handle.readline(tasks.MAX_LINE_BYTES + 1 if not lines else 64)
                if not raw or len(raw) > tasks.MAX_LINE_BYTES:
                    return False
                text = raw.removeprefix(_BOM).decode("utf-8", "replace").strip(_SPACE)
                if text:
                    lines.append(text)
    except OSError:
        return False  # read_jsonl says why
    if not lines[0].startswith("{") or lines[1].startswith("{"):
        return False
    try:
        json.loads(lines[0])
    except json.JSONDecodeError as exc:
        return exc.pos >= len(lines[0])  # left open at the line's end, not broken inside it
    except ValueError:
        return False
    return False


def _document_records(path: str) -> Iterator[tuple[ArrayLine, Any]]:
    """The ``examples`` of a BIG-bench task document, each at (the line it starts on, its position)."""
    with open(path, "rb") as handle:
        data = handle.read(tasks.MAX_ARRAY_BYTES + 1)  # read at call time: tests lower the limit
    if len(data) > tasks.MAX_ARRAY_BYTES:
        raise DataError(path, None, "<file>", f"a JSON document larger than {tasks.MAX_ARRAY_BYTES} bytes "
                                              "(MAX_ARRAY_BYTES); write its examples as JSON lines")
    try:
        text = data.removeprefix(_BOM).decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise DataError(path, line, "<encoding>", "not valid UTF-8; save the file as UTF-8") from None
    decoder = json.JSONDecoder(parse_constant=_no_constant)
    try:  # the whole document first: a syntax error anywhere is reported before any record is used
        document = decoder.decode(text)
    except json.JSONDecodeError as exc:
        end = len(text.rstrip(_SPACE))
        if exc.pos >= end or exc.msg.startswith("Unterminated string"):
            last = text.count("\n", 0, end) + 1
            raise DataError(path, last, "<json>", "the file ends before the JSON document that opens on line 1 does "
                                                  "(is it cut short?)") from None
        raise DataError(path, exc.lineno, "<json>", f"invalid JSON at column {exc.colno}: {exc.msg} (in the JSON "
                                                    "document that opens on line 1)") from None
    except ValueError as exc:  # NaN / Infinity
        raise DataError(path, 1, "<json>", str(exc)) from None
    if not isinstance(document, dict) or not isinstance(document.get("examples"), list):
        keys = ", ".join(sorted(document)[:8]) if isinstance(document, dict) else type(document).__name__
        raise DataError(path, 1, "examples", f"a JSON document spread over several lines ({keys}) that is not a "
                                             "BIG-bench task (no 'examples' list): this layout is not supported; "
                                             "give JSON lines, a JSON array of records or a BIG-bench task file")
    if not document["examples"]:
        raise DataError(path, 1, "examples", "the BIG-bench task document has no examples")
    yield from _locate_examples(text, decoder)


def _locate_examples(text: str, decoder: json.JSONDecoder) -> Iterator[tuple[ArrayLine, Any]]:
    """Walk an already validated document's top level to find where each example starts (json keeps no positions).
    A repeated ``examples`` key keeps the last, as json does."""
    def skip(pos: int) -> int:
        while pos < len(text) and text[pos] in _SPACE:
            pos += 1
        return pos

    found: list[tuple[ArrayLine, Any]] = []
    counted, line = 0, 1  # newlines are counted once, from the last example on: linear in the text
    pos = skip(text.index("{")) + 1
    while text[skip(pos)] != "}":
        key, pos = decoder.raw_decode(text, skip(pos))
        pos = skip(skip(pos) + 1)  # past ':'
        if key != "examples":
            _, pos = decoder.raw_decode(text, pos)
        else:
            found, pos = [], skip(pos + 1)  # past '['
            while text[pos] != "]":
                counted, line = pos, line + text.count("\n", counted, pos)
                start = ArrayLine(line, len(found) + 1)
                row, pos = decoder.raw_decode(text, pos)
                found.append((start, row))
                pos = skip(pos)
                pos = skip(pos + 1) if text[pos] == "," else pos
            pos += 1
        pos = skip(pos)
        pos = pos + 1 if text[pos] == "," else pos
    yield from found


def _records(path: str | Path) -> Iterator[tuple[int, Any]]:
    if _opens_a_document(str(path)):
        yield from _document_records(str(path))
    else:
        yield from read_records(path)  # JSON lines, or a JSON array document (Lumos's eval test.json)


def load_strategyqa(path: str | Path, split: str = DEFAULT_SPLIT) -> Iterator[Task]:
    check_split(path, split)
    seen: dict[str, int] = {}
    for line, raw in _records(path):
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
