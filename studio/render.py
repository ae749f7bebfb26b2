"""Small pure renderers the tabs share: a value in, HTML or Markdown text out, nothing read and no state kept.

Diffs of two texts (``word_diff_html``; ``action_diff_html``, action by action as ``action_parts`` cuts them), a
plan as a picker names it (``plan_label``, ``plan_labels``), text in a ``<pre>`` (``pre``), text from data or a user
inside a Markdown line: as typed (``md_escaped``: an executor's error, a tool's value), quoted (``md_quote``: a
search) or as code (``md_code``: an answer), and the style that keeps a read-only queue table from looking editable
(``static_table_css``). Every text that comes from data or a user is escaped.
"""

from __future__ import annotations

import difflib
import html
import itertools
import re
from typing import Any


def word_diff_html(a: str, b: str) -> str:
    """Word-level diff of two texts as HTML: words only in ``a`` in <del>, only in ``b`` in <ins>."""
    wa, wb = (a or "").split(), (b or "").split()
    out: list[str] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=wa, b=wb, autojunk=False).get_opcodes():
        if op == "equal":
            out.append(html.escape(" ".join(wa[i1:i2])))
            continue
        if i2 > i1:
            out.append(f"<del style='background:#fdd'>{html.escape(' '.join(wa[i1:i2]))}</del>")
        if j2 > j1:
            out.append(f"<ins style='background:#dfd'>{html.escape(' '.join(wb[j1:j2]))}</ins>")
    return f"<div class='moat-diff' style='white-space:pre-wrap'>{' '.join(out)}</div>"


def plan_labels(plans: Any) -> list[tuple[str, int]]:
    """``(plan_label, k)`` for one task-step's plans (a frame with ``k``, ``text``, ``logppl``), in the frame's
    order; a repeated text names the lowest k that has it."""
    first_of: dict[str, int] = {}
    for k, text in sorted(zip(plans["k"], plans["text"]), key=lambda r: int(r[0])):
        first_of.setdefault(str(text), int(k))
    return [(plan_label(int(k), logppl, first_of[str(text)]), int(k))
            for k, text, logppl in zip(plans["k"], plans["text"], plans["logppl"])]


def plan_label(k: int, logppl: Any, same_as: int | None = None) -> str:
    """A plan as a picker names it: ``"k=3 · log-PPL 0.6123"`` (``"not scored"`` without a score), and
    ``" · same text as k=0"`` when its text repeats an earlier plan's."""
    scored = logppl is not None and logppl == logppl  # NaN (pandas' missing score) is not equal to itself
    label = f"k={k} · " + (f"log-PPL {float(logppl):.4f}" if scored else "not scored")
    return label + (f" · same text as k={same_as}" if same_as is not None and same_as != k else "")


def action_parts(text: str | None) -> list[str]:
    """An action text cut into its actions: at ``;`` and newlines outside brackets (as ``engine.actions`` splits
    them), each stripped of blanks and a trailing ``.``; unbalanced brackets never raise (a ``)`` too many counts as
    depth 0), so any text splits."""
    parts, depth, start, text = [], 0, 0, text or ""
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(depth - 1, 0)
        elif ch in ";\n" and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in (p.strip().rstrip(".").strip() for p in parts) if p]


def action_diff_html(a: str | None, b: str | None) -> str:
    """Action-by-action diff of two action texts as HTML (``action_parts``): an action only in ``a`` struck out
    whole (<del>), one only in ``b`` added whole (<ins>), each replaced action right before its replacement, the
    others as they are, joined by ``; ``. A word diff cut ``R3 = Calculator(R2 - 5)`` into ``Calculator(R2`` and
    ``- 5);`` pieces that read as garbled text."""
    pa, pb = action_parts(a), action_parts(b)
    out: list[str] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=pa, b=pb, autojunk=False).get_opcodes():
        if op == "equal":
            out.extend(html.escape(p) for p in pa[i1:i2])
            continue
        for old, new in itertools.zip_longest(pa[i1:i2], pb[j1:j2]):
            if old is not None:
                out.append(f"<del style='background:#fdd'>{html.escape(old)}</del>")
            if new is not None:
                out.append(f"<ins style='background:#dfd'>{html.escape(new)}</ins>")
    return f"<div class='moat-diff' style='white-space:pre-wrap'>{'; '.join(out)}</div>"


# The queue tables (Pairs, Critic) are read-only: a click picks the row. Gradio still frames the clicked cell and
# hangs "select column" / "select row" handles on it, which looked like an edit box: both are hidden.
def static_table_css(elem_id: str) -> str:
    return (f"<style>#{elem_id} .selection-button {{ display: none !important; }} "
            f"#{elem_id} .cell-selected, #{elem_id} .cell-selected * {{ box-shadow: none !important; }}</style>")


def pre(text: Any) -> str:
    return f"<pre style='white-space:pre-wrap'>{html.escape('' if text is None else str(text))}</pre>"


# The characters that mean something inside a Markdown line (emphasis, code, links, HTML and entities, GFM's strike
# and table cells): an error's "Calculator(2*x*3)" rendered an italic x with its stars gone. Parentheses, dots and
# dashes are left as they are: they act only at a line's start, where this text never stands.
_MD_INLINE = re.compile(r"([\\`*_\[\]<>#|~&])")


def md_escaped(text: Any) -> str:
    """Text from data or a user (an executor's error, a tool's value) for the middle of a Markdown line, shown as
    typed: its Markdown and HTML characters backslash-escaped ("*x*" stays *x*, "<b>" stays <b>) and its blanks and
    newlines one space each (a line break or a blank line in it would start another paragraph); None as ""."""
    return _MD_INLINE.sub(r"\\\1", " ".join(str("" if text is None else text).split()))


def md_quote(text: Any, width: int = 60) -> str:
    """User text (a search) quoted inside a Markdown line: on one line, cut to ``width``, with Markdown and HTML
    characters escaped (``md_escaped``), so "*x*" or "<b>" show as typed."""
    flat = " ".join(str(text or "").split())
    flat = flat if len(flat) <= width else flat[:width - 1] + "…"
    return "“" + md_escaped(flat) + "”"


def md_code(text: Any) -> str:
    """Text from data (an answer, a variable's name) as inline Markdown code, whatever backticks it holds: fenced by
    one backtick more than its longest run of them, and padded with a space where it starts or ends with one (a
    backtick inside a one-backtick span ended the span there) or is empty (two bare backticks are no span)."""
    flat = " ".join(str("" if text is None else text).split())
    fence = "`" * (max((len(run) for run in re.findall(r"`+", flat)), default=0) + 1)
    pad = " " if not flat or flat.startswith("`") or flat.endswith("`") else ""
    return f"{fence}{pad}{flat}{pad}{fence}"
