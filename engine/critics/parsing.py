"""Reading a model critic's reply into verdict fields.

Contract: ``parse_response(text, finish_reason=None)`` never raises and returns a dict of ``Verdict`` fields
(``status``, ``raw``, ``corrected_subgoals``, ``corrected_actions``, ``finish_reason``, ``extra``) that a backend
completes with ``backend``/``model``/timings: ``Verdict(backend=..., model=..., **fields)``. ``raw`` is always
the text exactly as received. Statuses:

* ``truncated`` -- ``finish_reason == "length"``: the reply was cut, so it is not trusted even if it looks whole;
* ``error`` -- ``finish_reason == "content_filter"`` (the server withheld the answer);
* ``corrected`` -- a ``Corrected Actions:`` section whose text parses with ``engine.actions.parse_actions``
  (stored normalised, ``R1 = ...; R2 = ...``), with the ``Corrected Subgoals:`` before it parsed by
  ``engine.formats.lumos.parse_subgoals`` (``None`` when the reply gives no subgoals: the plan's own are kept);
* ``accepted`` -- no corrected actions (or ``Corrected Actions: None`` after the accept phrase) and a line
  ending in ``Final answer reached``;
* ``unparsed`` -- anything else; ``extra["parse_error"]`` says why (e.g. the action parser's error).

Tolerated: reasoning blocks (``<think>...</think>``, a reply that starts inside one and only closes it, also
``<thinking>``/``<reasoning>``), any letter case, extra spaces, markdown (``**Corrected Actions:**``, headings,
code fences, inline backticks, bullet or numbered lists, loose ones too (a blank line between the items), one
subgoal per line) and a trailing period (``Final Answer Reached.``). A correction takes precedence over an accept
phrase; the last label wins when a label is repeated (models often restate the instructions before answering).
"""

from __future__ import annotations

import re
from typing import Any

from engine.actions import format_actions, parse_actions
from engine.formats.lumos import parse_subgoals

_CLOSE_ONLY = re.compile(r"^.*</(?:think|thinking|reasoning)>", re.S | re.I)  # reply began inside a block
_OPEN_ONLY = re.compile(r"<(think|thinking|reasoning)>", re.I)
_FENCE = re.compile(r"^[ \t]*(```|~~~)[^\n]*$", re.M)
# The leading markup run is entered only at its first character (the lookbehind): searched from every character of a
# long run of spaces, newlines or asterisks, a bare ``[*_\s]*corrected`` rescanned the rest of the run each time, so
# a reply holding 30,000 of them took half a minute per reply, 300,000 nearly an hour. The leftmost match is the same.
_LABEL = r"(?<![*_\s])[*_\s]*corrected[*_\s]+{}[*_\s]*[:：][*_]*"
_SUBGOALS_LABEL = re.compile(_LABEL.format("sub[-\\s]?goals?"), re.I)
_ACTIONS_LABEL = re.compile(_LABEL.format("actions?"), re.I)
_ACCEPT = re.compile(r"final[*_\s]+answer[*_\s]+(?:is[*_\s]+|has[*_\s]+been[*_\s]+)?reached[\s.!*_`]*$",
                     re.I | re.M)
_BULLET = re.compile(r"^[ \t]*(?:[-*+•>]|\d+[.)])[ \t]+", re.M)
_HEADING = re.compile(r"^[ \t]*#+[ \t]*", re.M)
_SUBGOAL_MARK = re.compile(r"(?:^|(?<=[\s;,.]))[*_]*sub[-\s]?goal\s*(\d+)[*_]*\s*:[*_]*\s*", re.I)
_ASSIGN = re.compile(r"^[A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*\s*=")
# What may follow a blank line inside the block: a tool call or an alias of one name (``R2 = Calculator(...)``,
# ``Answer = R2``), never prose that merely starts like an assignment (``x = 5 because ...``).
_OUTPUTS = r"([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)\s*="
_ACTION_LINE = re.compile(rf"^{_OUTPUTS}\s*(?:[A-Za-z_]\w*\s*\(|[A-Za-z_]\w*[\s;.]*$)")
_ASSIGNED = re.compile(rf"(?:^|;)\s*{_OUTPUTS}", re.M)
_OPENERS, _CLOSERS = "([{", ")]}"


def _drop_closed_blocks(text: str) -> str:
    """``text`` without each reasoning block that closes: from an opening tag to the first closing tag of its name
    (any case), left to right; an opening tag no close follows stays. One pass: a name found unclosed once is never
    searched for again (a lazy ``<(name)>.*?</\\1>`` regex rescanned to the end from every unclosed tag, so a reply
    of 20,000 of them took minutes)."""
    kept: list[str] = []
    pos = search_from = 0
    unclosed: set[str] = set()
    while opened := _OPEN_ONLY.search(text, search_from):
        name = opened.group(1).lower()
        close = None if name in unclosed else re.compile(rf"</{name}>", re.I).search(text, opened.end())
        if close is None:  # no close of this name anywhere after here: none after a later opening either
            unclosed.add(name)
            search_from = opened.end()
            continue
        kept.append(text[pos:opened.start()])
        pos = search_from = close.end()
    kept.append(text[pos:])
    return "".join(kept)


def strip_reasoning(text: str) -> tuple[str, str | None]:
    """``(answer text, problem)``: reasoning blocks removed; problem is set when a block never closes."""
    text = _drop_closed_blocks(text)
    text = _CLOSE_ONLY.sub("", text)
    opened = _OPEN_ONLY.search(text)
    if opened:
        return text[: opened.start()], "a reasoning block was opened and never closed"
    return text, None


def _clean(text: str) -> str:
    """Drop markdown that carries no meaning here: code fences, headings, bullets and inline backticks."""
    text = _FENCE.sub("", text)
    text = _HEADING.sub("", text)
    text = _BULLET.sub("", text)
    return text.replace("`", "")


def _depth_change(line: str) -> int:
    return sum(line.count(c) for c in _OPENERS) - sum(line.count(c) for c in _CLOSERS)


def action_block(section: str) -> str:
    """The action lines at the start of ``section``: stop at the first line of prose after them.

    Leading blank lines and an introduction ending in ``:`` are skipped. A line continues the block while
    brackets are open (multi-line ``Code(...)`` arguments) or when it starts with an assignment (``R2 = ...``).
    After blank lines only a new action continues it (``_ACTION_LINE``: a tool call or a one-name alias, to a name
    the block has not assigned yet): a loose markdown list puts a blank line between its items, and stopping there
    kept the first action alone as the whole "correction"; a restatement of the same actions still ends it. Any
    other line ends the block.
    """
    kept: list[str] = []
    assigned: set[str] = set()  # the names the kept lines assign, kept as they grow (a rescan per line was quadratic)
    depth = 0
    gap = False
    for line in section.strip().splitlines():
        if depth > 0:  # inside an open bracket: keep the line as written (code keeps its indentation)
            kept.append(line.rstrip())
            depth += _depth_change(line)
            continue
        stripped = line.strip().strip("*_").strip()
        if not kept and (not stripped or (stripped.endswith(":") and not _ASSIGN.match(stripped))):
            continue  # blank lines and an introduction ("Here are the fixed actions:") before the actions
        if kept and not stripped:
            gap = True
            continue
        if kept and not (_new_action(stripped, assigned) if gap else _ASSIGN.match(stripped)):
            break
        gap = False
        kept.append(stripped)
        assigned |= {name for names in _ASSIGNED.findall(stripped) for name in _names(names)}
        depth += _depth_change(stripped)
    return "\n".join(kept)


def _names(outputs: str) -> set[str]:
    return {name.strip() for name in outputs.split(",")}


def _new_action(line: str, assigned: set[str]) -> bool:
    """Whether ``line`` (after a blank line) is an action assigning none of the names in ``assigned``."""
    found = _ACTION_LINE.match(line)
    return bool(found) and not assigned & _names(found.group(1))


def corrected_subgoals(section: str) -> list[str]:
    """``Subgoal 1: a; Subgoal 2: b`` (or one per line, bulleted, bold) -> ``["a", "b"]``; raises ValueError."""
    section = section.replace("**", "").replace("__", "")
    marks = list(_SUBGOAL_MARK.finditer(section))
    if not marks:
        raise ValueError("the corrected subgoals are not numbered 'Subgoal 1: ...'")
    numbers = [int(m.group(1)) for m in marks]
    if numbers != list(range(1, len(marks) + 1)):
        raise ValueError(f"the corrected subgoals are numbered {numbers}, expected 1..{len(marks)}")
    pieces = []
    for mark, nxt in zip(marks, marks[1:] + [None]):
        piece = section[mark.end(): nxt.start() if nxt else len(section)]
        pieces.append(" ".join(piece.split()).rstrip(";,").strip())
    return [s.strip() for s in parse_subgoals(format_subgoals_canonical(pieces))]


def format_subgoals_canonical(pieces: list[str]) -> str:
    return "; ".join(f"Subgoal {k}: {p}" for k, p in enumerate(pieces, start=1))


def _result(status: str, raw: str, finish_reason: str | None, *, subgoals: list[str] | None = None,
            actions: str | None = None, problem: str | None = None) -> dict[str, Any]:
    extra = {"parse_error": problem} if problem else {}
    return {"status": status, "raw": raw, "corrected_subgoals": subgoals, "corrected_actions": actions,
            "finish_reason": finish_reason, "extra": extra}


def _correction(body: str, raw: str, finish_reason: str | None) -> dict[str, Any]:
    actions_at = list(_ACTIONS_LABEL.finditer(body))[-1]
    actions_text = action_block(body[actions_at.end():])
    parsed = parse_actions(actions_text)
    if not parsed.ok:
        return _result("unparsed", raw, finish_reason, problem=f"corrected actions do not parse: {parsed.error}")
    subgoals = None
    labels = list(_SUBGOALS_LABEL.finditer(body, 0, actions_at.start()))
    if labels:
        try:
            subgoals = corrected_subgoals(body[labels[-1].end(): actions_at.start()])
        except ValueError as exc:
            return _result("unparsed", raw, finish_reason, problem=f"corrected subgoals do not parse: {exc}")
    return _result("corrected", raw, finish_reason, subgoals=subgoals, actions=format_actions(parsed.actions))


def _empty_correction(body: str) -> bool:
    """``Final answer reached`` followed by ``Corrected Actions: None`` (or N/A, or nothing): an accept."""
    actions_at = list(_ACTIONS_LABEL.finditer(body))[-1]
    rest = body[actions_at.end():].strip().strip("*_.").strip().lower()
    return rest in ("", "none", "n/a", "-") and bool(_ACCEPT.search(body[: actions_at.start()]))


def parse_response(text: str | None, finish_reason: str | None = None) -> dict[str, Any]:
    """Classify one critic reply; see the module docstring for the statuses."""
    raw = text if isinstance(text, str) else ""
    if finish_reason == "length":
        return _result("truncated", raw, finish_reason, problem="the reply hit the token limit")
    if finish_reason == "content_filter":
        return _result("error", raw, finish_reason, problem="the server's content filter withheld the reply")
    body, problem = strip_reasoning(raw)
    body = _clean(body)
    if _ACTIONS_LABEL.search(body) and not _empty_correction(body):
        return _correction(body, raw, finish_reason)
    if _ACCEPT.search(body):
        return _result("accepted", raw, finish_reason)
    if _SUBGOALS_LABEL.search(body):
        problem = "corrected subgoals without corrected actions"
    elif not body.strip():
        problem = problem or "empty reply"
    return _result("unparsed", raw, finish_reason,
                   problem=problem or "neither 'Final answer reached' nor 'Corrected Actions:' found")
