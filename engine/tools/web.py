"""Web-agent actions: Mind2Web-style step scoring offline, and the boundary to a live WebShop server.

Provided
--------
* ``WebOperation(op, element, value)`` and parsers for the two textual forms in Lumos data:
  - Lumos grounding actions ``R3 = TYPE(R2, QUERY: Type Atlanta as the departure location, TEXT: Atlanta)``.
    The element is the QUERY text, which may contain commas and parentheses; only ``, TEXT:`` starts the value.
  - Mind2Web gold steps ``[combobox]  Departing from -> TYPE: ATLANTA`` (the Lumos ``natural_language_plan``).
  ``parse_web_operations`` splits a whole onetime grounding / plan (``; ``-separated) in either form.
* ``score_step`` / ``score_episode``: Mind2Web metrics. Element accuracy, operation F1 (token F1 between
  ``"OP VALUE"`` strings, as MindAct computes it over whitespace token sets), step success (element correct and
  op F1 == 1) and task success (every gold step succeeds).

  Offline there are no DOM candidates, so "the predicted element is the gold element" cannot be checked the way
  Mind2Web does (by candidate id). The default ``element_match`` is a case-insensitive bag-of-words token F1 >=
  ``threshold`` (0.5) between the two element texts. That is meaningful when both sides are written the same way
  (Lumos QUERY vs Lumos QUERY); a Lumos QUERY ("Type Atlanta as the departure location") against a Mind2Web
  element text ("Departing from") needs a real grounding step - pass your own ``element_match`` for that.
  Values are compared case-insensitively by default (``case_sensitive=False``).
* ``WebShopEnv`` (a Protocol) and ``WebShopHTTPEnv``: a client for princeton-nlp/WebShop's flask app
  (``web_agent_site/app.py``) that drives its routes the way ReAct/Lumos do: ``/<session>`` (instruction page),
  ``/search_results/<session>/<keywords>/<page>``, ``/item_page/<session>/<asin>/<keywords>/<page>/<options>``,
  ``/item_sub_page/<session>/<asin>/<keywords>/<page>/<sub_page>/<options>`` and ``/done/<session>/<asin>/<options>``
  (whose page carries ``Your score (min 0.0, max 1.0)``, the reward). Actions are the WebShop text-env forms
  ``search[query]`` and ``click[button]``; turning Lumos ``Search(...)``/``Click(...)`` into them is the caller's job.

Not provided
------------
* The WebShop environment itself (products, search engine, reward function). It needs its own server with its data
  (see princeton-nlp/WebShop's README). Nothing here imitates it: without a reachable server every call raises
  ``WebShopUnavailableError``, and ``webshop_env(None)`` raises ``NotImplementedError`` explaining what to run.
* Mind2Web data and DOM candidate ranking.
"""

from __future__ import annotations

import re
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from html.parser import HTMLParser
from typing import Any, Protocol

OPS = ("CLICK", "TYPE", "SELECT")
DEFAULT_ELEMENT_THRESHOLD = 0.5

WEBSHOP_HELP = (
    "WebShop requires its environment server (princeton-nlp/WebShop, `./run_dev.sh` serving web_agent_site on e.g. "
    "http://localhost:3000) with its product data; MOAT Studio does not ship or imitate it - see README"
)


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


# ---------------------------------------------------------------------------------------------------- parsing

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


# ---------------------------------------------------------------------------------------------------- scoring


@dataclass(frozen=True)
class StepScore:
    element_correct: bool
    op_f1: float
    step_success: bool


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def token_f1(a: str, b: str) -> float:
    """Case-insensitive bag-of-words F1 over ``\\w+`` tokens (punctuation ignored)."""
    ta, tb = _words(a), _words(b)
    if not ta and not tb:
        return 1.0
    same = sum((Counter(ta) & Counter(tb)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(ta), same / len(tb)
    return 2 * precision * recall / (precision + recall)


def make_element_matcher(threshold: float = DEFAULT_ELEMENT_THRESHOLD) -> Callable[[str, str], bool]:
    """The default offline element matcher: ``token_f1(pred, gold) >= threshold``."""
    return lambda predicted, gold: token_f1(predicted, gold) >= threshold


def op_f1(predicted: str, gold: str, case_sensitive: bool = False) -> float:
    """MindAct's ``calculate_f1``: F1 between the whitespace token *sets* of two ``"OP VALUE"`` strings."""
    if not case_sensitive:
        predicted, gold = predicted.lower(), gold.lower()
    pred, label = set(predicted.split()), set(gold.split())
    if not pred and not label:
        return 1.0
    tp = len(pred & label)
    if tp == 0:
        return 0.0
    precision, recall = tp / len(pred), tp / len(label)
    return 2 * precision * recall / (precision + recall)


def score_step(
    predicted: WebOperation | None,
    gold: WebOperation,
    element_match: Callable[[str, str], bool] | None = None,
    threshold: float = DEFAULT_ELEMENT_THRESHOLD,
    case_sensitive: bool = False,
) -> StepScore:
    """Mind2Web step metrics; a missing/unparseable prediction (``None``) fails the step."""
    if predicted is None:
        return StepScore(False, 0.0, False)
    matcher = element_match or make_element_matcher(threshold)
    element_correct = bool(matcher(predicted.element, gold.element))
    f1 = op_f1(predicted.op_string(), gold.op_string(), case_sensitive)
    return StepScore(element_correct, f1, element_correct and f1 == 1.0)


def score_episode(
    pred_ops: Sequence[WebOperation | None],
    gold_ops: Sequence[WebOperation | None],
    element_match: Callable[[str, str], bool] | None = None,
    threshold: float = DEFAULT_ELEMENT_THRESHOLD,
    case_sensitive: bool = False,
) -> dict[str, Any]:
    """Score predicted steps against gold steps position by position.

    Missing predicted steps fail; extra ones are ignored (counted in ``n_predicted``). Returns ``n_steps``,
    ``n_predicted``, ``element_accuracy``, ``op_f1`` (mean), ``step_success_rate``, ``task_success`` and ``steps``
    (one ``StepScore`` dict per gold step).
    """
    if not gold_ops or any(g is None for g in gold_ops):
        raise ValueError("gold episode must hold at least one step and every gold step must be parsed")
    steps = [
        score_step(pred_ops[i] if i < len(pred_ops) else None, gold, element_match, threshold, case_sensitive)
        for i, gold in enumerate(gold_ops)
        if gold is not None
    ]
    n = len(steps)
    return {
        "n_steps": n,
        "n_predicted": len(pred_ops),
        "element_accuracy": sum(s.element_correct for s in steps) / n,
        "op_f1": sum(s.op_f1 for s in steps) / n,
        "step_success_rate": sum(s.step_success for s in steps) / n,
        "task_success": all(s.step_success for s in steps),
        "steps": [asdict(s) for s in steps],
    }


# ---------------------------------------------------------------------------------------------------- WebShop


class WebShopUnavailableError(RuntimeError):
    """The WebShop server could not be reached or answered with an error."""


class WebShopEnv(Protocol):
    """What the loop needs from WebShop: start an episode on a goal, then act with ``search[...]``/``click[...]``."""

    def reset(self, goal: int | str) -> str: ...

    def step(self, action: str) -> tuple[str, float, bool]: ...


def webshop_env(base_url: str | None) -> WebShopHTTPEnv:
    """The WebShop client for ``base_url``; without one there is no environment to talk to."""
    if not base_url:
        raise NotImplementedError(WEBSHOP_HELP + " (set the WebShop server URL to enable WebShop episodes)")
    return WebShopHTTPEnv(base_url)


class _VisibleText(HTMLParser):
    """Collects visible text with the tag (and class) that holds it, like ReAct's BeautifulSoup pass."""

    _HIDDEN = {"style", "script", "head", "title", "meta"}

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[tuple[str, str]] = []
        self.texts: list[tuple[str, str, str]] = []  # (text, parent tag, parent class)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in ("br", "img", "input", "meta", "link", "hr"):
            self.stack.append((tag, dict(attrs).get("class") or ""))

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                del self.stack[i:]
                break

    def handle_data(self, data: str) -> None:
        text = data.strip()
        if not text or any(tag in self._HIDDEN for tag, _ in self.stack):
            return
        tag, cls = self.stack[-1] if self.stack else ("", "")
        self.texts.append((text, tag, cls))


@dataclass
class _Session:
    page_type: str = "init"  # init | search | item | item_sub | end
    query: str = ""
    page: int = 1
    asin: str = ""
    subpage: str = ""
    options: dict[str, str] = field(default_factory=dict)
    asins: list[str] = field(default_factory=list)
    option_types: dict[str, str] = field(default_factory=dict)


_SUBPAGES = ("Description", "Features", "Reviews", "Attributes")
_SCORE_LABEL = "Your score (min 0.0, max 1.0)"


class WebShopHTTPEnv:
    """Drives a running WebShop flask server over HTTP (stdlib urllib), following ReAct's/Lumos's client.

    ``reset(goal)`` takes the goal index in the server's goal list (or a ready session id such as ``"fixed_3"``);
    the server, not this client, owns the goal texts. ``step`` returns ``(observation, reward, done)``; the reward is
    read from the ``/done`` page after ``click[Buy Now]``.
    """

    def __init__(self, base_url: str, timeout: float = 30.0, fetch: Callable[[str], str] | None = None):
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._fetch = fetch or self._http_get  # injectable so URL building can be tested without a server
        self.session_id = ""
        self.state = _Session()

    # -- HTTP
    def _http_get(self, url: str) -> str:
        try:
            with urllib.request.urlopen(url, timeout=self.timeout) as response:
                return response.read().decode("utf-8", errors="replace")
        except (urllib.error.URLError, OSError) as exc:
            raise WebShopUnavailableError(f"{WEBSHOP_HELP}. GET {url} failed: {exc}") from None

    def _url(self) -> str:
        s, q = self.state, urllib.parse.quote
        sid = q(self.session_id, safe="")
        # The server reads <options> with ast.literal_eval, so they travel as a Python dict literal.
        options = q(repr(s.options), safe="")
        keywords = q(s.query, safe="")
        routes = {
            "init": f"/{sid}",
            "search": f"/search_results/{sid}/{keywords}/{s.page}",
            "item": f"/item_page/{sid}/{q(s.asin, safe='')}/{keywords}/{s.page}/{options}",
            "item_sub": f"/item_sub_page/{sid}/{q(s.asin, safe='')}/{keywords}/{s.page}/{s.subpage}/{options}",
            "end": f"/done/{sid}/{q(s.asin, safe='')}/{options}",
        }
        return self.base_url + routes[s.page_type]

    # -- observation
    def _observe(self) -> tuple[str, float]:
        parser = _VisibleText()
        parser.feed(self._fetch(self._url()))
        texts = [t for t, _, _ in parser.texts]
        if _SCORE_LABEL in texts and texts.index(_SCORE_LABEL) + 1 < len(texts):
            value = texts[texts.index(_SCORE_LABEL) + 1]
            return f"{_SCORE_LABEL}: {value}", float(value)
        lines, option_type = [], ""
        self.state.asins, self.state.option_types = [], {}
        for text, tag, cls in parser.texts:
            if tag == "button":
                lines.append(f"[{text}]")
            elif tag == "label":  # product options; the current option type is the last plain text seen
                chosen = text in self.state.options.values()
                lines.append(f"[[{text}]]" if chosen else f"[{text}]")
                self.state.option_types[text] = option_type
            elif "product-link" in cls.split():
                lines.append(f"[{text}]")
                self.state.asins.append(text)
            else:
                lines.append(text)
                option_type = text
        return "\n".join(lines), 0.0

    # -- protocol
    def reset(self, goal: int | str) -> str:
        if isinstance(goal, int) or (isinstance(goal, str) and goal.isdigit()):
            self.session_id = f"fixed_{int(goal)}"  # the flask app picks goal N for session ids "fixed_N"
        elif isinstance(goal, str) and re.fullmatch(r"[\w-]+", goal):
            self.session_id = goal
        else:
            raise ValueError(
                "WebShopHTTPEnv.reset takes a goal index or session id; the WebShop server owns the goal texts"
            )
        self.state = _Session()
        return self._observe()[0]

    def step(self, action: str) -> tuple[str, float, bool]:
        if not self.session_id:
            raise RuntimeError("call reset(goal) before step(action)")
        match = re.fullmatch(r"\s*(search|click|think)\[(.*)\]\s*", action, re.IGNORECASE | re.DOTALL)
        if not match:
            raise ValueError(f"WebShop actions are search[query] or click[button], got {action!r}")
        kind, arg = match[1].lower(), match[2].strip()
        if kind == "think":
            return "OK.", 0.0, False
        note = self._search(arg) if kind == "search" else self._click(arg)
        observation, reward = self._observe()
        return note or observation, reward, self.state.page_type == "end"

    def _search(self, query: str) -> str:
        if self.state.page_type != "init":
            raise ValueError("search[...] is only available on the search page (click[Back to Search] first)")
        self.state = _Session(page_type="search", query=query, page=1)
        return ""

    def _click(self, button: str) -> str:
        s, lower = self.state, button.lower()
        if lower == "buy now" and s.page_type == "item":
            s.page_type = "end"
        elif lower == "back to search":
            self.state = _Session()
        elif lower == "next >" and s.page_type == "search":
            s.page += 1
        elif lower == "< prev":
            if s.page_type == "search" and s.page > 1:
                s.page -= 1
            elif s.page_type == "item_sub":
                s.page_type = "item"
            elif s.page_type == "item":
                s.page_type, s.options = "search", {}
        elif s.page_type == "item" and button.title() in _SUBPAGES:
            s.page_type, s.subpage = "item_sub", button.title()
        elif s.page_type == "search" and button.upper() in {a.upper() for a in s.asins}:
            s.page_type, s.asin = "item", next(a for a in s.asins if a.upper() == button.upper())
        elif s.page_type == "item" and button in s.option_types:
            s.options[s.option_types[button]] = button
            return f"You have clicked {button}."
        else:
            raise ValueError(f"click[{button}] is not available on the {s.page_type} page")
        return ""
