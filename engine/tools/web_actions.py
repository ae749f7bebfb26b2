"""Web-agent actions as text: the ``WebOperation(op, element, value)`` record and parsers for the two forms in Lumos
data.

* Lumos grounding actions ``R3 = TYPE(R2, QUERY: Type Atlanta as the departure location, TEXT: Atlanta)``. The
  element is the QUERY text, which may contain commas and parentheses; only ``, TEXT:`` starts the value.
* Mind2Web gold steps ``[combobox]  Departing from -> TYPE: ATLANTA`` (the Lumos ``natural_language_plan``).

``parse_web_operations`` splits a whole onetime grounding / plan (``; ``-separated) in either form; a string in
neither form raises ``WebParseError`` (or gives None with ``strict=False``). Scoring lives in
``engine.tools.mind2web``, the WebShop client in ``engine.tools.webshop``.

Parsing takes time linear in the text: a model writes it, so it is untrusted (the backtracking regexes this
replaced took a minute on ``CLICK(`` followed by 4,000 spaces). Each form is read by a scan that tries each candidate
position once (the ``,`` ending the Env, the last ``)``, each ``->``, each ``;``) with anchored regexes that cannot
backtrack (possessive quantifiers); the results are those of the regexes it replaced, whose grammar is spelled out at
``_lumos_call`` and ``_gold_step``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

OPS = ("CLICK", "TYPE", "SELECT")


class WebParseError(ValueError):
    """A web action string that is in neither the Lumos nor the Mind2Web form."""


@dataclass(frozen=True)
class WebOperation:
    op: str  # CLICK | TYPE | SELECT
    element: str  # Lumos QUERY text, or the Mind2Web element text (without its [tag])
    value: str = ""  # TEXT for TYPE/SELECT; empty for CLICK
    tag: str = ""  # Mind2Web element tag ("combobox"), when known

    def __post_init__(self) -> None:
        op = self.op.strip().upper()
        if op not in OPS:
            raise WebParseError(f"unknown web operation {self.op!r} (expected one of {', '.join(OPS)})")
        object.__setattr__(self, "op", op)

    def op_string(self) -> str:
        """``"OP VALUE"`` as Mind2Web scores it; CLICK carries no value there, so any value is ignored."""
        return self.op if self.op == "CLICK" or not self.value.strip() else f"{self.op} {self.value.strip()}"


# Anchored pieces, used as .match(text, pos). A possessive quantifier (*+, ++) never gives back what it took, so each
# costs the length of what it reads; where the old regexes backtracked (a lazy Env between two "\s*", a lazy element
# before "\s*->"), the scans below try each candidate position once instead. The results are the same: every run of
# space these give no ground on is followed by a character only one side can take. "\s" is str.isspace, the set
# that str.strip() and str.split() remove.
_SPACE = re.compile(r"\s*+")
_RESULT_VAR = re.compile(r"R\d++\s*+=\s*+", re.IGNORECASE)  # "R3 = "
_LUMOS_OP = re.compile(r"(CLICK|TYPE|SELECT)\s*+\(", re.IGNORECASE)  # "TYPE ("
_ENV = re.compile(r"[^,()]*+,")  # "R2," : the Env holds no comma or parenthesis
_QUERY = re.compile(r"\s*+QUERY\s*+:\s*+", re.IGNORECASE)
_TAG = re.compile(r"\[([^\]]*+)\]")  # "[combobox]"
_GOLD_OP = re.compile(r"\s*+(CLICK|TYPE|SELECT)\b\s*+", re.IGNORECASE)  # " TYPE" after "->", as a whole word
_TEXT_SEP_RE = re.compile(r",\s*+TEXT\s*+:", re.IGNORECASE)
# Split only where one call ends (")" then ";") or the next one starts ("R2 =", "CLICK("), so a ";" inside a QUERY
# or TEXT survives and a malformed call becomes its own (failed) step instead of swallowing its neighbours.
_LUMOS_SPLIT_RE = re.compile(
    r"(?<=\))\s*+;\s*+(?=\S)|;\s*+(?=R\d++\s*+=)|;\s*+(?=(?:CLICK|TYPE|SELECT)\s*+\()", re.IGNORECASE
)


def _lumos_call(text: str) -> tuple[str, str] | None:
    """``(op, body)`` of a Lumos call, or None when ``text`` is not one.

    The form, case-insensitive and with space allowed around each token: an optional ``R<digits> =``, the op,
    ``(``, an Env holding no ``,``, ``(`` or ``)``, ``,``, ``QUERY:``, the body, ``)`` and an optional ``.``. The
    body may hold parentheses, so it runs to the last ``)`` of the text; after that one only space and a ``.`` may
    follow.
    """
    pos = _SPACE.match(text).end()
    result_var = _RESULT_VAR.match(text, pos)
    if result_var:  # no second try without it: no op starts with "R"
        pos = result_var.end()
    op = _LUMOS_OP.match(text, pos)
    env = _ENV.match(text, op.end()) if op else None
    query = _QUERY.match(text, env.end()) if env else None
    if op is None or query is None:
        return None
    close = text.rfind(")")
    if close < query.end() or text[close + 1 :].strip() not in ("", "."):
        return None
    return op[1], text[query.end() : close]


def _gold_step(text: str) -> tuple[str, str, str, str] | None:
    """``(tag, element, op, value)`` of a Mind2Web step, unstripped, or None when ``text`` is not one.

    The form, case-insensitive and with space allowed around each token: an optional ``[tag]``, the element, ``->``,
    the op as a whole word, then the end or ``:`` and the value. The element ends at the first ``->`` that such a
    tail follows (so it may hold ``->`` itself); when none follows the ``[tag]``, the ``[`` starts the element.
    """
    start = _SPACE.match(text).end()
    tag = _TAG.match(text, start)
    if tag:
        step = _gold_tail(text, _SPACE.match(text, tag.end()).end())
        if step:
            return (tag[1], *step)
    step = _gold_tail(text, start)
    return ("", *step) if step else None


def _gold_tail(text: str, start: int) -> tuple[str, str, str] | None:
    """``(element, op, value)`` for the element starting at ``start``: ``->`` by ``->``, the first that an op and
    then the end or a ``:`` follow. Each check reads only the space and the op after its ``->``, so the loop is
    linear."""
    arrow = text.find("->", start)
    while arrow >= 0:
        op = _GOLD_OP.match(text, arrow + 2)
        if op and (op.end() == len(text) or text[op.end()] == ":"):
            return text[start:arrow], op[1], text[op.end() + 1 :]
        arrow = text.find("->", arrow + 2)
    return None


def _split_gold_plan(text: str) -> list[str]:
    """Split a Mind2Web plan before each ``[tag]``: at each ``;`` whose next non-space character is a ``[`` with a
    ``]`` anywhere after it. A ``;`` elsewhere (inside an element or a value) does not split."""
    last_close = text.rfind("]")
    parts, start = [], 0
    semicolon = text.find(";")
    while semicolon >= 0:
        after = _SPACE.match(text, semicolon + 1).end()
        if after < last_close and text[after] == "[":
            parts.append(text[start:semicolon])
            start = after
        semicolon = text.find(";", semicolon + 1)
    parts.append(text[start:])
    return parts


def parse_lumos_action(text: str) -> WebOperation:
    """``R3 = TYPE(R2, QUERY: q, TEXT: t)`` -> ``WebOperation("TYPE", q, t)``."""
    call = _lumos_call(text)
    if call is None:
        raise WebParseError(f"not a Lumos web action: {text!r}")
    op, body = call
    # The QUERY may hold commas and parentheses ("Atlanta, GA (ATL)"); only ", TEXT:" starts the value.
    parts = _TEXT_SEP_RE.split(body, maxsplit=1)
    value = parts[1] if len(parts) == 2 else ""
    return WebOperation(op, parts[0].strip(), value.strip())


def parse_gold_step(text: str) -> WebOperation:
    """``[combobox]  Departing from -> TYPE: ATLANTA`` -> ``WebOperation("TYPE", "Departing from", "ATLANTA")``."""
    step = _gold_step(text)
    if step is None:
        raise WebParseError(f"not a Mind2Web step: {text!r}")
    tag, element, op, value = step
    # the gold form pads with double spaces
    return WebOperation(op, " ".join(element.split()), value.strip(), tag.strip())


def parse_web_operation(text: str) -> WebOperation:
    """Parse one action in either form (Lumos call or Mind2Web ``->`` step)."""
    if _lumos_call(text) is not None:
        return parse_lumos_action(text)
    if _gold_step(text) is not None:
        return parse_gold_step(text)
    raise WebParseError(f"not a web action (Lumos `R1 = CLICK(Env, QUERY: ...)` or `[tag] text -> OP`): {text!r}")


def split_web_actions(text: str) -> list[str]:
    """Split a ``; ``-joined grounding or plan into single action strings."""
    text = text.strip().rstrip(";")
    if not text:
        return []
    first = _LUMOS_SPLIT_RE.split(text, maxsplit=1)[0]
    # Mind2Web plans ("[tag] text -> OP; ...") split before each "[tag]"; anything else is read as Lumos calls.
    gold_plan = _gold_step(first) is not None and _lumos_call(first) is None
    parts = _split_gold_plan(text) if gold_plan else _LUMOS_SPLIT_RE.split(text)
    return [part.strip() for part in parts if part.strip()]


def parse_web_operations(text: str, strict: bool = True) -> list[WebOperation | None]:
    """Parse every action in ``text``; with ``strict=False`` an unparseable action becomes ``None`` (a failed step)."""
    operations: list[WebOperation | None] = []
    for part in split_web_actions(text):
        try:
            operations.append(parse_web_operation(part))
        except WebParseError:
            if strict:
                raise
            operations.append(None)
    return operations
