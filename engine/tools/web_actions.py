"""Web-agent actions as text: the ``WebOperation(op, element, value)`` record and parsers for the two forms in Lumos
data.

* Lumos grounding actions ``R3 = TYPE(R2, QUERY: Type Atlanta as the departure location, TEXT: Atlanta)``. The
  element is the QUERY text, which may contain commas and parentheses; only ``, TEXT:`` starts the value.
* Mind2Web gold steps ``[combobox]  Departing from -> TYPE: ATLANTA`` (the Lumos ``natural_language_plan``).

``parse_web_operations`` splits a whole onetime grounding / plan (``; ``-separated) in either form; a string in
neither form raises ``WebParseError`` (or gives None with ``strict=False``). Scoring lives in
``engine.tools.mind2web``, the WebShop client in ``engine.tools.webshop``.
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


_LUMOS_RE = re.compile(
    r"^\s*(?:R\d+\s*=\s*)?(?P<op>CLICK|TYPE|SELECT)\s*\(\s*(?P<env>[^,()]*?)\s*,\s*QUERY\s*:\s*(?P<body>.*)\)\s*\.?\s*$",
    re.IGNORECASE | re.DOTALL,
)
_TEXT_SEP_RE = re.compile(r",\s*TEXT\s*:", re.IGNORECASE)
_GOLD_RE = re.compile(
    r"^\s*(?:\[(?P<tag>[^\]]*)\])?\s*(?P<element>.*?)\s*->\s*(?P<op>CLICK|TYPE|SELECT)\b(?:\s*:\s*(?P<value>.*?))?\s*$",
    re.IGNORECASE | re.DOTALL,
)
# Split only where one call ends (")" then ";") or the next one starts ("R2 =", "CLICK("), so a ";" inside a QUERY
# or TEXT survives and a malformed call becomes its own (failed) step instead of swallowing its neighbours.
_LUMOS_SPLIT_RE = re.compile(
    r"(?<=\))\s*;\s*(?=\S)|;\s*(?=R\d+\s*=)|;\s*(?=(?:CLICK|TYPE|SELECT)\s*\()", re.IGNORECASE
)
_GOLD_SPLIT_RE = re.compile(r";\s*(?=\[[^\]]*\])")


def parse_lumos_action(text: str) -> WebOperation:
    """``R3 = TYPE(R2, QUERY: q, TEXT: t)`` -> ``WebOperation("TYPE", q, t)``."""
    match = _LUMOS_RE.match(text)
    if not match:
        raise WebParseError(f"not a Lumos web action: {text!r}")
    # The QUERY may hold commas and parentheses ("Atlanta, GA (ATL)"); only ", TEXT:" starts the value.
    parts = _TEXT_SEP_RE.split(match["body"], maxsplit=1)
    value = parts[1] if len(parts) == 2 else ""
    return WebOperation(match["op"], parts[0].strip(), value.strip())


def parse_gold_step(text: str) -> WebOperation:
    """``[combobox]  Departing from -> TYPE: ATLANTA`` -> ``WebOperation("TYPE", "Departing from", "ATLANTA")``."""
    match = _GOLD_RE.match(text)
    if not match:
        raise WebParseError(f"not a Mind2Web step: {text!r}")
    element = " ".join(match["element"].split())  # the gold form pads with double spaces
    return WebOperation(match["op"], element, (match["value"] or "").strip(), (match["tag"] or "").strip())


def parse_web_operation(text: str) -> WebOperation:
    """Parse one action in either form (Lumos call or Mind2Web ``->`` step)."""
    if _LUMOS_RE.match(text):
        return parse_lumos_action(text)
    if _GOLD_RE.match(text):
        return parse_gold_step(text)
    raise WebParseError(f"not a web action (Lumos `R1 = CLICK(Env, QUERY: ...)` or `[tag] text -> OP`): {text!r}")


def split_web_actions(text: str) -> list[str]:
    """Split a ``; ``-joined grounding or plan into single action strings."""
    text = text.strip().rstrip(";")
    if not text:
        return []
    first = _LUMOS_SPLIT_RE.split(text)[0]
    # Mind2Web plans ("[tag] text -> OP; ...") split before each "[tag]"; anything else is read as Lumos calls.
    splitter = _GOLD_SPLIT_RE if _GOLD_RE.match(first) and not _LUMOS_RE.match(first) else _LUMOS_SPLIT_RE
    return [part.strip() for part in splitter.split(text) if part.strip()]


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
