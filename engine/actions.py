"""Parser for the Lumos action language (``R1 = Calculator(3*4); R5, R6 = SolveEquation(R2=xy, R3=x/y)``).

Contract: ``parse_actions(text)`` never raises on bad text. Actions are separated by ``;`` or newlines at bracket
depth 0; each is ``OUT[, OUT...] = Tool(args)`` or a plain alias ``OUT = rhs``. The arguments are kept raw
(``arg_text``): they may hold nested brackets, commas and free text. A trailing ``.`` and a trailing result
annotation (``R1 = Calculator(2 - 0.5) = 1.5``, as in the Lumos exemplars) are dropped. The first problem (empty
text, missing ``=``, unbalanced brackets, a bad variable name, text after the call) is returned as an
``ActionParseError`` with its character span; the actions parsed before it are kept.

``split_args`` and ``keyword_args`` split argument text for the tools, in time linear in its length (the text is
model output); ``format_actions`` joins actions back; ``tools_of`` lists the tools a text calls.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_CALL = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(")
_OPEN = {"(": ")", "[": "]", "{": "}"}
_CLOSE = {v: k for k, v in _OPEN.items()}


@dataclass(frozen=True)
class Action:
    outputs: tuple[str, ...]  # ("R1",), ("R5", "R6"), ("Output",), ("Answer",)
    tool: str | None  # "Calculator"; None for a plain alias such as "Answer = R3"
    arg_text: str  # raw text between the outer parens (or the alias right-hand side), stripped
    span: tuple[int, int]  # character offsets of the whole action in the input text

    def __str__(self) -> str:
        rhs = self.arg_text if self.tool is None else f"{self.tool}({self.arg_text})"
        return f"{', '.join(self.outputs)} = {rhs}"


@dataclass(frozen=True)
class ActionParseError:
    message: str
    span: tuple[int, int]  # offending span in the input
    snippet: str  # the offending text

    def __str__(self) -> str:
        return f"{self.message} at {self.span[0]}-{self.span[1]}: {self.snippet!r}"


@dataclass
class ParsedActions:
    actions: list[Action]
    error: ActionParseError | None

    @property
    def ok(self) -> bool:
        return self.error is None


class _Fail(Exception):
    def __init__(self, message: str, start: int, end: int):
        super().__init__(message)
        self.message, self.start, self.end = message, start, end


def parse_actions(text: str) -> ParsedActions:
    """Parse every action in ``text``; stop at the first error and report it with its span."""
    actions: list[Action] = []
    if not isinstance(text, str) or not text.strip():
        return ParsedActions([], ActionParseError("empty action text", (0, 0), ""))
    try:
        for start, end in _segments(text):
            actions.append(_parse_one(text, start, end))
    except _Fail as fail:
        return ParsedActions(
            actions, ActionParseError(fail.message, (fail.start, fail.end), text[fail.start : fail.end])
        )
    if not actions:
        return ParsedActions([], ActionParseError("empty action text", (0, len(text)), text))
    return ParsedActions(actions, None)


def tools_of(actions: str | None) -> list[str]:
    """The distinct tools a grounding calls, in order of first use (``Calculator``, ``SolveEquation``...); a plain
    alias such as ``Answer = R3`` names none. Text that does not parse yields the tools of the actions before the
    error (none when the brackets do not balance: the text is not split at all then)."""
    seen: list[str] = []
    for action in parse_actions(actions or "").actions:
        if action.tool and action.tool not in seen:
            seen.append(action.tool)
    return seen


def _segments(text: str) -> list[tuple[int, int]]:
    """Spans of the non-blank action segments, split at ``;``/newline outside brackets."""
    spans, stack, start = [], [], 0
    for i, ch in enumerate(text):
        if ch in _OPEN:
            stack.append(i)
        elif ch in _CLOSE:
            if not stack or text[stack[-1]] != _CLOSE[ch]:
                raise _Fail(f"unbalanced {ch!r}", i, i + 1)
            stack.pop()
        elif ch in ";\n" and not stack:
            spans.append((start, i))
            start = i + 1
    if stack:
        raise _Fail(f"unclosed {text[stack[-1]]!r}", stack[-1], len(text))
    spans.append((start, len(text)))
    return [s for s in (_strip_span(text, a, b) for a, b in spans) if s[0] < s[1]]


def _strip_span(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and (text[end - 1].isspace() or text[end - 1] == "."):
        end -= 1  # a trailing "." ends a sentence, it is not part of the action
    return start, end


def _parse_one(text: str, start: int, end: int) -> Action:
    seg = text[start:end]
    eq = seg.find("=")
    if eq < 0:
        raise _Fail("missing '=' (expected 'R1 = Tool(...)')", start, end)
    outputs = []
    pos = start
    for part in seg[:eq].split(","):
        name = part.strip()
        name_start = pos + (len(part) - len(part.lstrip()))
        if not _NAME.match(name):
            raise _Fail(f"bad variable name {name!r}", name_start, name_start + max(len(name), 1))
        outputs.append(name)
        pos += len(part) + 1
    rhs_start, _ = _strip_span(text, start + eq + 1, end)
    rhs = text[rhs_start:end]
    if not rhs:
        raise _Fail("missing right-hand side after '='", start, end)
    call = _CALL.match(rhs)
    if call is None:
        # a plain alias ("Answer = R3"); a further "= value" is an annotation
        alias = rhs.split("=", 1)[0].strip()
        return Action(tuple(outputs), None, alias, (start, end))
    open_at = rhs_start + call.end() - 1
    close_at = _matching(text, open_at)
    rest = text[close_at + 1 : end].strip()
    if rest and not rest.startswith("="):
        raise _Fail("unexpected text after the call", close_at + 1, end)
    return Action(tuple(outputs), call.group(1), text[open_at + 1 : close_at].strip(), (start, end))


def _matching(text: str, open_at: int) -> int:
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] in _OPEN:
            depth += 1
        elif text[i] in _CLOSE:
            depth -= 1
            if depth == 0:
                return i
    raise _Fail("unclosed '('", open_at, len(text))  # unreachable after _segments, kept for safety


def format_actions(actions: Sequence[Action]) -> str:
    """Join actions back into one grounding string (``"R1 = ...; R2 = ..."``)."""
    return "; ".join(str(a) for a in actions)


def split_args(arg_text: str) -> list[str]:
    """Split at top-level commas, respecting (), [], {} and quoted strings; pieces are stripped.

    A quote only opens a string at the start of a token and when it is closed later, so apostrophes in free text
    ("a dog's hearing") are plain characters.
    """
    pieces, depth, quote, start = [], 0, "", 0
    # "is it closed later" by the last index of each quote, not by searching the rest of the text at each quote:
    # that search made text full of quotes quadratic
    last = {q: arg_text.rfind(q) for q in "'\""}
    for i, ch in enumerate(arg_text):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in last and (i == 0 or arg_text[i - 1] in " \t([{,=:") and last[ch] > i:
            quote = ch
        elif ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth = max(depth - 1, 0)
        elif ch == "," and depth == 0:
            pieces.append(arg_text[start:i].strip())
            start = i + 1
    pieces.append(arg_text[start:].strip())
    return [] if pieces == [""] else pieces


def keyword_args(arg_text: str, keys: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """Split ``"R1, Query: text, with, commas"`` or ``"QUERY: a, TEXT: b"`` into positionals and keywords.

    A keyword starts where one of ``keys`` (case-insensitive) followed by ``:`` opens the text or follows a
    top-level comma; its value runs, commas included, up to the next such keyword. Returned keys use the spelling
    given in ``keys``; positionals (before the first keyword) are split with ``split_args``.
    """
    alternatives = "|".join(re.escape(k) for k in keys)
    found = []
    # The bracket depth is carried from one candidate to the next rather than recounted from the start of the text
    # for each: recounting made an argument with many "Query:" quadratic (20 KB took 3 s).
    depth, counted = 0, 0
    for match in re.finditer(rf"(?:^|,)\s*({alternatives})\s*:", arg_text, flags=re.IGNORECASE):
        depth, counted = _depth_at(arg_text, match.start(), counted, depth), match.start()
        if depth == 0:
            canonical = next(k for k in keys if k.lower() == match.group(1).lower())
            found.append((match.start(), match.end(), canonical))
    if not found:
        return split_args(arg_text), {}
    positional = split_args(arg_text[: found[0][0]])
    values = {}
    for i, (_, value_start, key) in enumerate(found):
        value_end = found[i + 1][0] if i + 1 < len(found) else len(arg_text)
        values[key] = arg_text[value_start:value_end].strip()
    return positional, values


def _depth_at(text: str, index: int, start: int = 0, depth: int = 0) -> int:
    """The bracket depth at ``index``, counting on from ``depth`` at ``start`` (a ``)`` at depth 0 is ignored)."""
    for ch in text[start:index]:
        if ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth = max(depth - 1, 0)
    return depth
