"""The boundary to a live WebShop server: ``WebShopEnv`` (a Protocol) and ``WebShopHTTPEnv``, a client for
princeton-nlp/WebShop's flask app (``web_agent_site/app.py``) that drives its routes the way ReAct/Lumos do:
``/<session>`` (instruction page), ``/search_results/<session>/<keywords>/<page>``,
``/item_page/<session>/<asin>/<keywords>/<page>/<options>``,
``/item_sub_page/<session>/<asin>/<keywords>/<page>/<sub_page>/<options>`` and ``/done/<session>/<asin>/<options>``
(whose page carries ``Your score (min 0.0, max 1.0)``, the reward). Actions are the WebShop text-env forms
``search[query]`` and ``click[button]``; turning Lumos ``Search(...)``/``Click(...)`` into them is the caller's job.

What it is for: running WebShop episodes against a real server, for a user who has one (no stage calls it yet; the
loop scores web tasks offline with ``engine.tools.mind2web``). Not provided: the WebShop environment itself
(products, search engine, reward function); it needs its own server with its data (see princeton-nlp/WebShop's
README). Nothing here imitates it: without a reachable server every call raises ``WebShopUnavailableError``, and
``webshop_env(None)`` raises ``NotImplementedError`` explaining what to run.
"""

from __future__ import annotations

import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Protocol

WEBSHOP_HELP = (
    "WebShop requires its environment server (princeton-nlp/WebShop, `./run_dev.sh` serving web_agent_site on e.g. "
    "http://localhost:3000) with its product data; MOAT Studio does not ship or imitate it - see README"
)


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
