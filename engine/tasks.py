"""The ``Task`` record every stage acts on, and the project's own Task JSONL format.

A task is a question (plus optional context passages) with, when known, its gold subgoals, its gold actions and
its gold answer. ``gold_actions`` holds one action string per subgoal (``"R2 = Calculator(R1 - 7)"``, or several
actions joined by ``"; "``), or, read from a Lumos onetime grounder file, one string for the whole plan; either way
``"; ".join(task.gold_actions)`` is the onetime grounding.

Files are written through ``engine.out_files.write_file`` (atomic for a regular file, a symlink's target
replaced, a pipe or device written straight).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from engine.errors import ArrayLine, DataError
from engine.out_files import write_file

DOMAINS = ("maths", "qa", "web")
SPLITS = ("train", "dev", "held_in", "held_out")  # dev: for tuning; held_out: only for reporting


@dataclass
class Task:
    id: str
    domain: str  # one of DOMAINS
    source: str  # where it came from: "gsm8k", "lumos:maths", "demo:maths", ...
    split: str  # one of SPLITS
    question: str
    context: list[str] = field(default_factory=list)  # optional passages (HotpotQA context, demo corpus)
    gold_subgoals: list[str] = field(default_factory=list)  # without the "Subgoal k: " prefix
    gold_actions: list[str] = field(default_factory=list)  # one per subgoal (a Lumos onetime file: one in all)
    answer: str = ""  # gold answer as text ("18", "yes", "Chief of Protocol")
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def actions_text(self) -> str:
        """The gold actions as one onetime grounding string."""
        return "; ".join(a.strip() for a in self.gold_actions if a.strip())


_REQUIRED = ("id", "domain", "split", "question")
_LIST_FIELDS = ("context", "gold_subgoals", "gold_actions")


# What a JSON lines reader adds when a file turns out to be one JSON array (the benchmark formats read those; the
# tasks and lumos formats, streamed a line at a time, do not).
ARRAY_HINT = (": a JSON array document, and this format reads JSON lines, one object per line (the benchmark formats "
              "gsm8k, svamp, hotpotqa and strategyqa read an array)")


def task_from_dict(row: Any, path: str = "<memory>", line: int | None = None) -> Task:
    """Validate one Task JSON object; raise ``DataError`` naming the field that is wrong."""
    if not isinstance(row, dict):
        hint = ARRAY_HINT if isinstance(row, list) and line == 1 else ""  # an array on the file's one line
        raise DataError(path, line, "<record>", f"expected a JSON object, got {type(row).__name__}{hint}")
    known = {f.name for f in fields(Task)}
    unknown = sorted(set(row) - known)
    if unknown:
        raise DataError(path, line, unknown[0], f"unknown field (known: {', '.join(sorted(known))})")
    for name in _REQUIRED:
        if name not in row:
            raise DataError(path, line, name, "missing required field")
        if not isinstance(row[name], str) or not row[name].strip():
            raise DataError(path, line, name, "must be a non-empty string")
    if row["domain"] not in DOMAINS:
        raise DataError(path, line, "domain", f"{row['domain']!r} is not one of {', '.join(DOMAINS)}")
    if row["split"] not in SPLITS:
        raise DataError(path, line, "split", f"{row['split']!r} is not one of {', '.join(SPLITS)}")
    for name in _LIST_FIELDS:
        value = row.get(name, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise DataError(path, line, name, "must be a list of strings")
    if "answer" in row and not isinstance(row["answer"], (str, int, float, bool)):
        raise DataError(path, line, "answer", "must be a string or a number")
    if "meta" in row and not isinstance(row["meta"], dict):
        raise DataError(path, line, "meta", "must be a JSON object")
    if "source" in row and not isinstance(row["source"], str):
        raise DataError(path, line, "source", "must be a string")
    answer = row.get("answer", "")
    return Task(
        id=row["id"],
        domain=row["domain"],
        source=row.get("source", "tasks"),
        split=row["split"],
        question=row["question"],
        context=list(row.get("context", [])),
        gold_subgoals=list(row.get("gold_subgoals", [])),
        gold_actions=list(row.get("gold_actions", [])),
        answer=str(answer).lower() if isinstance(answer, bool) else str(answer),
        meta=dict(row.get("meta", {})),
    )


# One JSONL line may be at most this many bytes. The largest real records (HotpotQA with its full context, Lumos
# iterative chats) are tens of KB; the cap keeps a corrupt or hostile file (one 50 MB line, a file without newlines)
# from being read into memory whole: such a line is rejected after reading at most this much of it.
MAX_LINE_BYTES = 8 * 1024 * 1024
# A JSON array document is parsed whole, so it is read only up to this size: SVAMP.json is 0.7 MB, HotpotQA's
# official dev files (distractor, fullwiki) about 46 MB each; its 540 MB train file belongs in JSON lines, which are
# read a line at a time. (The loaders hold every record of a file before yielding one, JSON lines too, so a cap at
# twice the largest eval file costs no memory the same data as JSON lines would not.)
MAX_ARRAY_BYTES = 64 * 1024 * 1024
_JSON_SPACE = re.compile(r"[ \t\n\r]*")  # JSON's own whitespace; str.isspace() knows more characters
_UTF8_BOM = b"\xef\xbb\xbf"
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _decode_line(raw: bytes, path: str, number: int) -> str:
    """UTF-8 text of one line; a UTF-8 BOM on line 1 is dropped (editors write it), UTF-16 and bad bytes are errors."""
    if number == 1 and raw.startswith(_UTF16_BOMS):
        raise DataError(path, 1, "<encoding>", "the file is UTF-16 (it starts with a UTF-16 BOM); save it as UTF-8")
    if number == 1 and raw.startswith(_UTF8_BOM):
        raw = raw[len(_UTF8_BOM):]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(path, number, "<encoding>", f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column "
                                                    f"{exc.start + 1}); save the file as UTF-8") from None


def _json_problem(exc: json.JSONDecodeError, line: str) -> str:
    """Where one line's JSON broke, in that line's own columns. json's ``colno`` counts from the last newline before
    the error, so an error at the very end of a line that still carried its newline came out as "column 1" (of the
    next line); a record cut short (a truncated last line) is said to be one."""
    end = len(line) + 1  # the column just past the last character
    if exc.msg.startswith("Unterminated string"):
        return (f"invalid JSON at column {end}: the line ends inside the string that starts at column {exc.colno} "
                "(is the record cut short?)")
    if exc.pos >= len(line):
        return f"invalid JSON at column {end}: the line ends before the record does (is it cut short?)"
    return f"invalid JSON at column {exc.colno}: {exc.msg}"


def read_jsonl(path: str | Path) -> Iterator[tuple[int, Any]]:
    """Yield ``(line_number, parsed_json)`` for each non-blank line of a UTF-8 JSONL file.

    Bad JSON (NaN/Infinity included), bad UTF-8, a UTF-16 file, a line over ``MAX_LINE_BYTES`` and a file with no
    records at all raise ``DataError`` naming the file and line.
    """
    path = str(path)
    try:
        handle = open(path, "rb")
    except OSError as exc:
        raise DataError(path, None, "<file>", f"cannot open: {exc.strerror}") from None
    records = 0
    with handle:
        number = 0
        while True:
            try:
                raw = handle.readline(MAX_LINE_BYTES + 1)
            except OSError as exc:  # e.g. the path is a directory
                raise DataError(path, None, "<file>", f"cannot read: {exc.strerror}") from None
            if not raw:
                break
            number += 1
            if len(raw) > MAX_LINE_BYTES:
                raise DataError(path, number, "<line>", f"line longer than {MAX_LINE_BYTES} bytes "
                                                        "(MAX_LINE_BYTES); is this a JSONL file?")
            text = _decode_line(raw, path, number)
            if not text.strip():
                continue
            text = text.rstrip("\r\n")  # the line's own end: an error there is "the end of the line", not line+1
            try:
                row = json.loads(text, parse_constant=_no_constants)
            except json.JSONDecodeError as exc:
                # A pretty-printed JSON array document: its first line ("[" or "[{...") is no whole record.
                if not records and text.lstrip().startswith("["):
                    column = len(text) - len(text.lstrip()) + 1
                    raise DataError(path, number, "<json>",
                                    f"the file opens with '[' at column {column}{ARRAY_HINT}") from None
                raise DataError(path, number, "<json>", _json_problem(exc, text)) from None
            except ValueError as exc:  # NaN / Infinity
                raise DataError(path, number, "<json>", str(exc)) from None
            except RecursionError:
                raise DataError(path, number, "<json>", "JSON nested too deeply") from None
            if _SURROGATE_ESCAPE.search(text):
                _refuse_lone_surrogates(path, number, row)
            records += 1
            yield number, row
    if not records:
        raise DataError(path, None, "<file>", "no records (the file is empty or blank)")


# A \uD800-\uDFFF escape: JSON allows one alone, but the string it makes is no text (it cannot be written as UTF-8,
# so the store and every JSON output failed on it, far from the file). Read only when a line holds such an escape.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _refuse_lone_surrogates(path: str, line: int | ArrayLine, row: Any) -> None:
    """A ``DataError`` at the first field (``question``, ``messages[2].content``) whose text holds a lone UTF-16
    surrogate; nothing when every one is half of a pair (json joins those into one character)."""
    stack: list[tuple[str, Any]] = [("", row)]
    while stack:  # iterative: json.loads allows deeper nesting than a recursive walk would
        where, value = stack.pop()
        if isinstance(value, dict):
            for key, item in reversed(list(value.items())):
                field = f"{where}.{key}" if where else str(key)
                if not _is_text(key):
                    raise DataError(path, line, field, "a field name holds a lone UTF-16 surrogate (a \\uD800-"
                                                       "\\uDFFF escape without its pair): not text")
                stack.append((field, item))
        elif isinstance(value, list):
            stack.extend((f"{where}[{index}]", item) for index, item in reversed(list(enumerate(value))))
        elif isinstance(value, str) and not _is_text(value):
            raise DataError(path, line, where or "<json>", "holds a lone UTF-16 surrogate (a \\uD800-\\uDFFF "
                                                           "escape without its pair): not text, fix or drop it")


def _is_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def read_records(path: str | Path) -> Iterator[tuple[int, Any]]:
    """Yield ``(line_number, parsed_json)`` per record of a JSON lines file or of one JSON array document.

    A file whose first non-blank character (after a UTF-8 BOM) is ``[`` is one array: read whole up to
    ``MAX_ARRAY_BYTES`` (beyond it a ``DataError`` for the file), each element a record located by an ``ArrayLine``
    (the line it starts on and its position), which the loaders' field errors carry. Anything else is JSON lines,
    streamed by ``read_jsonl``. Errors are those of ``read_jsonl``: bad JSON, bad UTF-8, NaN/Infinity, no records,
    each naming file and line; in an array, bad JSON is located by line and column, and its message names the
    record being read.
    """
    if _starts_with_bracket(str(path)):
        yield from _read_json_array(str(path))
    else:
        yield from read_jsonl(path)


def _starts_with_bracket(path: str) -> bool:
    """Whether the first non-blank byte after a UTF-8 BOM is ``[``; False if unreadable (read_jsonl says why)."""
    try:
        with open(path, "rb") as handle:
            first = True
            while chunk := handle.read(64 * 1024):
                if first and chunk.startswith(_UTF8_BOM):
                    chunk = chunk[len(_UTF8_BOM):]
                first = False
                chunk = chunk.lstrip(b" \t\r\n")
                if chunk:
                    return chunk.startswith(b"[")
    except OSError:
        pass
    return False


def _read_json_array(path: str) -> Iterator[tuple[ArrayLine, Any]]:
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_ARRAY_BYTES + 1)  # never more than the limit, whatever the file claims to be
    except OSError as exc:
        raise DataError(path, None, "<file>", f"cannot read: {exc.strerror}") from None
    if len(data) > MAX_ARRAY_BYTES:
        raise DataError(path, None, "<file>", f"a JSON array document larger than {MAX_ARRAY_BYTES} bytes "
                                              "(MAX_ARRAY_BYTES); write it as JSON lines, one record per line")
    if data.startswith(_UTF8_BOM):
        data = data[len(_UTF8_BOM):]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise DataError(path, line, "<encoding>", f"not valid UTF-8 (byte 0x{data[exc.start]:02x} at column "
                                                  f"{column}); save the file as UTF-8") from None
    # Element by element with raw_decode (not json.loads of the whole text), so each record knows where it starts.
    decoder = json.JSONDecoder(parse_constant=_no_constants)
    lines = _LineCounter(text)
    pos = _JSON_SPACE.match(text).end()
    if not text.startswith("[", pos):  # the file changed since _starts_with_bracket looked
        raise DataError(path, int(lines.at(pos, 1)), "<json>", "expected a JSON array document starting with '['")
    pos += 1
    record = 0
    surrogates = bool(_SURROGATE_ESCAPE.search(text))
    # Bad JSON is located as in JSON lines (a plain line, the column in the message); the record being read is named
    # in the message. Only a parsed record gets an ArrayLine, for the field errors that have no column to show.
    while True:
        pos = _JSON_SPACE.match(text, pos).end()
        if record == 0 and text.startswith("]", pos):
            break
        record += 1
        start = lines.at(pos, record)
        try:
            row, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            end = len(text.rstrip(" \t\r\n"))
            if exc.pos >= end:  # json locates the end of the text, past the file's last newline: name its last line
                raise DataError(path, text.count("\n", 0, end) + 1, "<json>",
                                f"invalid JSON at column {lines.column(end)}: the file ends before record {record} "
                                "does (is it cut short?)") from None
            raise DataError(path, exc.lineno, "<json>",
                            f"invalid JSON at column {exc.colno}: {exc.msg} (in record {record})") from None
        except ValueError as exc:  # NaN / Infinity
            raise DataError(path, int(start), "<json>", f"{exc} (in record {record})") from None
        except RecursionError:
            raise DataError(path, int(start), "<json>", f"JSON nested too deeply (in record {record})") from None
        if surrogates:
            _refuse_lone_surrogates(path, start, row)
        yield start, row
        pos = _JSON_SPACE.match(text, pos).end()
        if text.startswith("]", pos):
            break
        if not text.startswith(",", pos):
            found = repr(text[pos]) if pos < len(text) else "the end of the file"
            raise DataError(path, int(lines.at(pos, record)), "<json>",
                            f"expected ',' or ']' after record {record} at column {lines.column(pos)}, got {found}")
        pos += 1
    rest = _JSON_SPACE.match(text, pos + 1).end()
    if rest < len(text):
        raise DataError(path, int(lines.at(rest, record)), "<json>",
                        f"text after the array's closing ']' at column {lines.column(rest)}")
    if not record:
        raise DataError(path, None, "<file>", "no records (the array is empty)")


class _LineCounter:
    """Line numbers of increasing offsets in one text, counting each newline once (linear in the text)."""

    def __init__(self, text: str):
        self.text, self.pos, self.line = text, 0, 1

    def at(self, pos: int, record: int) -> ArrayLine:
        self.line += self.text.count("\n", self.pos, pos)
        self.pos = pos
        return ArrayLine(self.line, record)

    def column(self, pos: int) -> int:
        return pos - (self.text.rfind("\n", 0, pos) + 1) + 1


def load_tasks(path: str | Path) -> Iterator[Task]:
    """Stream tasks from the project's own Task JSONL; duplicate ids are an error."""
    seen: dict[str, int] = {}
    for number, row in read_jsonl(path):
        task = task_from_dict(row, str(path), number)
        if task.id in seen:
            raise DataError(str(path), number, "id", f"duplicate id {task.id!r} (first on line {seen[task.id]})")
        seen[task.id] = number
        yield task


def write_tasks(tasks: Iterable[Task], path: str | Path) -> int:
    """Write tasks as JSONL through ``write_file`` (atomically for a regular file); returns the count."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0

    def fill(out: Any) -> None:
        nonlocal count
        for task in tasks:
            out.write(json.dumps(task.to_dict(), ensure_ascii=False) + "\n")
            count += 1

    write_file(path, "w", fill)
    return count
