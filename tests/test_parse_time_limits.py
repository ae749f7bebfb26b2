"""Parsers of model output take time linear in its length, and give the results they gave before they were made so.

* ``engine.tools.web_actions``: its regexes backtracked on untrusted text (``R1 = CLICK(`` and 4,000 spaces took a
  minute: cubic; long runs of space around ``)``, ``->`` or ``;`` were quadratic). The scans that replaced them are
  held to the old regexes, kept here as the oracle (``_Reference``) on short text, where backtracking costs nothing,
  and to results pinned from the old code.
* ``engine.actions.keyword_args`` recounted the bracket depth from the start for each ``Query:`` (quadratic), and
  ``split_args`` searched the rest of the text at each opening quote.

The time checks are ratios, not wall-clock bounds: each parser reads a small input and one ``GROWTH`` times longer,
in alternating rounds so that a busy spell on a loaded machine slows both. Linear code takes about ``GROWTH`` times
as long; the old code took ``GROWTH**2`` to ``GROWTH**3`` times, at sizes where it ran for seconds per call.
"""

from __future__ import annotations

import math
import re
import timeit
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.actions import keyword_args, split_args
from engine.tools.web_actions import (
    WebOperation,
    WebParseError,
    parse_web_operation,
    parse_web_operations,
    split_web_actions,
)

GROWTH = 8  # the large input is GROWTH times the small one
# linear: ~8 (up to ~12 on a loaded 2-core machine); the old code: 40 and more (quadratic) or ~500 (cubic)
MAX_RATIO = 24


def _time_ratio(parse: Callable[[str], object], small: str, large: str) -> float:
    """Best time of ``parse(large)`` over best time of ``parse(small)``, each timed as a batch long enough to read
    (30 ms for the small input). Rounds alternate the two and stop once the ratio is within ``MAX_RATIO``: a ratio
    above it must hold in three rounds."""
    number = 1
    while timeit.timeit(lambda: parse(small), number=number) < 0.03:
        number *= 2
    best_small = best_large = math.inf
    for _ in range(3):
        best_small = min(best_small, timeit.timeit(lambda: parse(small), number=number))
        best_large = min(best_large, timeit.timeit(lambda: parse(large), number=number))
        if best_large <= MAX_RATIO * best_small:
            break
    return best_large / best_small


# ---------------------------------------------------------------------------------------------------- time

# (make(n), small n): the old code took seconds on make(GROWTH * n)
WEB_CASES = {
    "space in the Env (was cubic)": (lambda n: "R1 = CLICK(" + " " * n + "x", 250),
    "newlines in the Env (was cubic)": (lambda n: "R1 = CLICK(" + "\n" * n + "x", 250),
    "space after the closing paren": (lambda n: "R1 = CLICK(Env, QUERY: a)" + " " * n + "x", 2000),
    "space in a Mind2Web element": (lambda n: "x" + " " * n + "y", 4000),
    "space in a Mind2Web value": (lambda n: "a -> TYPE: b" + " " * n + "x", 2000),
    "unclosed tags in a Mind2Web plan": (lambda n: "[a] b -> CLICK;" + "[;" * (n // 2) + "x -> CLICK", 8000),
}


@pytest.mark.parametrize("case", WEB_CASES)
def test_web_parsing_time_is_linear(case):
    make, n = WEB_CASES[case]
    ratio = _time_ratio(lambda text: parse_web_operations(text, strict=False), make(n), make(GROWTH * n))
    assert ratio <= MAX_RATIO, f"{case}: {GROWTH}x the text took {ratio:.0f}x the time"


ARG_CASES = {
    "keyword_args, many keywords": (
        lambda text: keyword_args(text, ["Query"]), lambda n: "R1, " + "Query: x, " * n, 500
    ),
    "split_args, many quotes": (split_args, lambda n: " ''" * n, 20000),
}


@pytest.mark.parametrize("case", ARG_CASES)
def test_argument_splitting_time_is_linear(case):
    parse, make, n = ARG_CASES[case]
    ratio = _time_ratio(parse, make(n), make(GROWTH * n))
    assert ratio <= MAX_RATIO, f"{case}: {GROWTH}x the text took {ratio:.0f}x the time"


# ---------------------------------------------------------------------------------------------------- same results

OP = WebOperation
PINNED_OPERATIONS = [  # results of the old regexes
    ("R3 = TYPE(R2, QUERY: Type Atlanta as the departure location, TEXT: Atlanta)",
     OP("TYPE", "Type Atlanta as the departure location", "Atlanta")),
    ("  r12=click( Env ,query:  a (b), c  )  .  ", OP("CLICK", "a (b), c")),
    ("SELECT(R6, QUERY: Pick (one), or two, TEXT: 6 nights (total)).",
     OP("SELECT", "Pick (one), or two", "6 nights (total)")),
    ("R1 = CLICK(Env, QUERY: a) b)", OP("CLICK", "a) b")),
    ("R1 = CLICK(Env, QUERY:)", OP("CLICK", "")),
    ("R1 = TYPE(\n Env\t,\n QUERY :\n x , text : y \n)\n", OP("TYPE", "x", "y")),
    ("R1 = TYPE(Env, QUERY: a, TEXT: b, TEXT: c)", OP("TYPE", "a", "b, TEXT: c")),
    ("R1 = \u017fELECT(Env, QUERY: a)", OP("SELECT", "a")),  # long s matches "S" case-insensitively
    ("R1=TYPE(,QUERY:q,TEXT:)", OP("TYPE", "q")),
    ("R1 = CLICK(Env, QUERY: a -> CLICK)", OP("CLICK", "a -> CLICK")),
    ("[combobox]  Departing from -> TYPE: ATLANTA", OP("TYPE", "Departing from", "ATLANTA", "combobox")),
    ("[span]  Atlanta, GA (ATL) -> CLICK", OP("CLICK", "Atlanta, GA (ATL)", "", "span")),
    ("  [ a ]   x \n  y -> click : v w  ", OP("CLICK", "x y", "v w", "a")),
    ("a -> b -> SELECT: c", OP("SELECT", "a -> b", "c")),
    ("x -> TYPE: a -> CLICK", OP("TYPE", "x", "a -> CLICK")),
    ("[x -> TYPE: a]b", OP("TYPE", "[x", "a]b")),  # no step after the "[...]": it is part of the element
    ("-> CLICK", OP("CLICK", "")),
    ("[t]-> CLICK\n", OP("CLICK", "", "", "t")),
    ("x -> CLICKED -> TYPE", OP("TYPE", "x -> CLICKED")),
    ("[] x ->SELECT:", OP("SELECT", "x")),
    ("[a] CLICK(Env, QUERY: q) -> CLICK", OP("CLICK", "CLICK(Env, QUERY: q)", "", "a")),
]
PINNED_REJECTS = [
    "R1 = CLICK(Env)", "R1 = CLICK((Env), QUERY: a)", "CLICK(Env, QUERY: a) x", "CLICK(Env, QUERY: a)..",
    "x -> HOVER", "x -> CLICK y", "[a] b", "R1 = CLICK(E(nv, QUERY: a)", "R1 = CLICK(Env, TEXT: a)",
    "R = CLICK(E, QUERY: a)", "x -> CLICK_", "x - > CLICK",
]
PINNED_SPLITS = [
    ("R1 = CLICK(Env, QUERY: a; b); R2 = TYPE(R1, QUERY: c, TEXT: d; e)",
     ["R1 = CLICK(Env, QUERY: a; b)", "R2 = TYPE(R1, QUERY: c, TEXT: d; e)"]),
    ("[a] b -> CLICK; [c] d -> TYPE: e; f; [g] h -> SELECT: i;",
     ["[a] b -> CLICK", "[c] d -> TYPE: e; f", "[g] h -> SELECT: i"]),
    ("[a] b -> CLICK;[x;[y] z -> CLICK", ["[a] b -> CLICK", "[x", "[y] z -> CLICK"]),
    ("R1 = CLICK(Env, QUERY: a);R2=TYPE(R1, QUERY: b, TEXT: c) ; click(E, QUERY: d);garbage; TYPE (E, QUERY: e)",
     ["R1 = CLICK(Env, QUERY: a)", "R2=TYPE(R1, QUERY: b, TEXT: c)", "click(E, QUERY: d)", "garbage",
      "TYPE (E, QUERY: e)"]),
    ("R1 = CLICK(Env, QUERY: a; R2 = b)", ["R1 = CLICK(Env, QUERY: a", "R2 = b)"]),
    ("[a] b -> CLICK; [c; d] -> TYPE: e", ["[a] b -> CLICK", "[c; d] -> TYPE: e"]),
    (" ; ; ", [";"]),
]
PINNED_KEYWORDS = [
    ("R1, Query: text, with, commas", ["Query"], (["R1"], {"Query": "text, with, commas"})),
    ("R2, QUERY: Type Atlanta, TEXT: Atlanta", ["Query", "Text"],
     (["R2"], {"Query": "Type Atlanta", "Text": "Atlanta"})),
    ("[R2, R5], Question: What (a, b)?", ["Question"], (["[R2, R5]"], {"Question": "What (a, b)?"})),
    ("a, b", ["Query"], (["a", "b"], {})),
    ("Query: a, (b, Query: c), Query : d ,query:e", ["Query"], ([], {"Query": "e"})),
    ("R1 'x, y', \"z\", Query: it's", ["Query"], (["R1 'x, y'", '"z"'], {"Query": "it's"})),
    ("f(a, Query: b), [Query: c], Query: d", ["Query"], (["f(a, Query: b)", "[Query: c]"], {"Query": "d"})),
    ("x), Query: y", ["Query"], (["x)"], {"Query": "y"})),
    ("Text: t, Query: q, Text: u", ["Query", "Text"], ([], {"Text": "u", "Query": "q"})),
]


@pytest.mark.parametrize(("text", "expected"), PINNED_OPERATIONS)
def test_pinned_web_operation(text, expected):
    assert parse_web_operation(text) == expected


@pytest.mark.parametrize("text", PINNED_REJECTS)
def test_pinned_web_reject(text):
    with pytest.raises(WebParseError):
        parse_web_operation(text)


@pytest.mark.parametrize(("text", "expected"), PINNED_SPLITS)
def test_pinned_web_split(text, expected):
    assert split_web_actions(text) == expected


@pytest.mark.parametrize(("text", "keys", "expected"), PINNED_KEYWORDS)
def test_pinned_keyword_args(text, keys, expected):
    assert keyword_args(text, keys) == expected


class _Reference:
    """The backtracking regexes ``engine.tools.web_actions`` used before it was made linear: exact, and fast on
    short text."""

    LUMOS = re.compile(
        r"^\s*(?:R\d+\s*=\s*)?(?P<op>CLICK|TYPE|SELECT)\s*\(\s*(?P<env>[^,()]*?)\s*,\s*QUERY\s*:\s*(?P<body>.*)\)\s*\.?\s*$",
        re.IGNORECASE | re.DOTALL,
    )
    TEXT_SEP = re.compile(r",\s*TEXT\s*:", re.IGNORECASE)
    GOLD = re.compile(
        r"^\s*(?:\[(?P<tag>[^\]]*)\])?\s*(?P<element>.*?)\s*->\s*(?P<op>CLICK|TYPE|SELECT)\b(?:\s*:\s*(?P<value>.*?))?\s*$",
        re.IGNORECASE | re.DOTALL,
    )
    LUMOS_SPLIT = re.compile(
        r"(?<=\))\s*;\s*(?=\S)|;\s*(?=R\d+\s*=)|;\s*(?=(?:CLICK|TYPE|SELECT)\s*\()", re.IGNORECASE
    )
    GOLD_SPLIT = re.compile(r";\s*(?=\[[^\]]*\])")

    @classmethod
    def operation(cls, text: str) -> WebOperation | None:
        """The operation, or None where the old code raised ``WebParseError``."""
        try:
            if match := cls.LUMOS.match(text):
                parts = cls.TEXT_SEP.split(match["body"], maxsplit=1)
                return WebOperation(match["op"], parts[0].strip(), (parts[1] if len(parts) == 2 else "").strip())
            if match := cls.GOLD.match(text):
                element = " ".join(match["element"].split())
                return WebOperation(match["op"], element, (match["value"] or "").strip(), (match["tag"] or "").strip())
        except WebParseError:  # an op that matches case-insensitively but does not upper() to one ("clic\u212a")
            return None
        return None

    @classmethod
    def split(cls, text: str) -> list[str]:
        text = text.strip().rstrip(";")
        if not text:
            return []
        first = cls.LUMOS_SPLIT.split(text)[0]
        splitter = cls.GOLD_SPLIT if cls.GOLD.match(first) and not cls.LUMOS.match(first) else cls.LUMOS_SPLIT
        return [part.strip() for part in splitter.split(text) if part.strip()]


def _operation(text: str) -> WebOperation | None:
    try:
        return parse_web_operation(text)
    except WebParseError:
        return None


# Pieces of both forms, the space characters str.strip() knows, and the case-insensitive oddities of the op names
_PIECES = [
    "R1", "r2", "R", "1", "\u0661", "=", " ", "  ", "\n", "\t", "\u00a0", "\x1c", "(", ")", ",", ";", ":", ".", "[",
    "]", "-", ">", "->", "CLICK", "click", "TYPE", "SELECT", "\u017felect", "clic\u212a", "QUERY", "query", "TEXT",
    "x", "ab", "_", "Env", "\u00e9",
]
_SHAPES = ["R1 = CLICK(Env, QUERY: a)", "[a] b -> TYPE: c", "R2 = TYPE(R1, QUERY: q, TEXT: t)", " x -> SELECT", "; "]
_text = st.lists(st.sampled_from(_PIECES + _SHAPES), max_size=14).map("".join)


@settings(max_examples=400, deadline=None)
@given(text=_text)
def test_web_parsing_matches_the_old_regexes(text):
    assert _operation(text) == _Reference.operation(text)
    assert split_web_actions(text) == _Reference.split(text)
