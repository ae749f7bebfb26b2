"""What every tab shares about a request and its session: the ``Ctx`` handed to tab builders, curator identity, who
has which queue item open (leases), the write guard and user-facing errors.

Nothing here keeps state between calls: ``Ctx`` holds the store, the job worker, the workspace root and the
components shared by the tabs (run and iteration pickers, the hidden view key a view of one iteration listens to,
the session's curator ``gr.State``); per-session values live in those components. ``check_writable`` is the
server-side guard every handler that changes anything (the store, a job, a file) calls first: hidden or disabled
buttons are only cosmetic, an API client can call any endpoint.

Identity: under a login (``--auth``) the login is the curator, always (``curator_of``, ``who_of``): the name box
shows it and cannot be edited, and the header says who curates (``identity_line``); without a login the name typed
once per session is. A viewer (``--viewers``) curates nothing: its header says "Viewing as", and every control in
``Ctx.write_controls`` (each tab registers the controls of its write endpoints when it builds them) is switched off
for its session by the app's load handler; a handler that later switches such a control on asks ``can_write``, so
it never comes back on for a viewer.

Leases (``Ctx.leases``, ``engine.leases``): opening a pair or a verdict takes it under the session's curator
(``claim_note``; ``leasing_name``: nothing for a viewer or in a read-only studio), the note under the picker names
another curator who has it open (``lease_note``), and a decision on an item another curator holds is refused
(``check_lease``), and so is an undo of the curator's own action on an item another curator has open
(``undo_guard``).

Mistakes a user can fix (no curator name, a bad plan number) are raised as ``user_error`` (inside a handler:
``with user_errors():``), shown in the page without a traceback in the server log. A toast (``user_error``'s modal,
``user_info``) shows its text as HTML, never as markdown: ``toast_text`` drops the markdown marks a message written for
the page's Markdown may carry (`code`, **bold**, *italics*), and escapes it as HTML only for the studio's own page
(``asked_by_the_page``: the request Gradio's page sent carries ``x-gradio-user: app``), which then shows
``<tokenizer>`` and ``R&amp;D`` as worded. Gradio sends the same text to an API client (``gradio_client``, curl) as
the error's message: a call from anything else gets the message exactly as worded (``got '<1'``, ``R&D``), no
entity. What is not a mistake and did nothing (nothing to undo) is ``user_info``, an info toast, stopped with
``quiet_stop`` (no modal, no traceback; its message, which only an API client reads, plain: ``plain_text``). A
curator's name in a Markdown line (the header's, a lease note's) is shown as typed (``studio.render.md_escaped``).

Beside it, as stateless as it is: the Spaces policy (``studio.spaces_policy``), the small renderers
(``studio.render``), a queue's info lines (``studio.queue_lines``) and the values of pickers, page boxes and filter
radios (``studio.picks``).
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gradio as gr
from gradio.context import LocalContext

from engine.leases import LeaseBook
from engine.store import Store
from engine.surprisal import SurprisalService
from studio.jobs import JobWorker
from studio.render import md_escaped


@dataclass
class Ctx:
    store: Store
    jobs: JobWorker
    read_only: bool
    spaces: bool
    run: gr.Dropdown  # the run every tab shows
    iteration: gr.Dropdown  # the iteration every tab shows
    curator: gr.State  # the name entered once per session ("" until entered)
    viewers: frozenset[str] = frozenset()  # authenticated users who may look but not change anything
    # Every path a browser sends (config paths, export files) must resolve inside this directory.
    workspace: Path = field(default_factory=Path.cwd)
    # Token-level evidence for pairs (grounders and results cached for the studio's lifetime).
    evidence: SurprisalService = field(default_factory=SurprisalService)
    # Who has which pair/verdict open: j/k skip items another curator holds (engine.leases).
    leases: LeaseBook = field(default_factory=LeaseBook)
    # Run by studio.app with the Blocks, at the page's top level (outside every tab) once the tabs are built: e.g.
    # studio.remember's browser-kept filters, which must not live inside a lazily mounted tab.
    load_hooks: list[Callable[[gr.Blocks], None]] = field(default_factory=list)
    # The key of every gr.BrowserState (studio.browser_secret): None, Gradio's own per-server key.
    browser_secret: str | None = None
    # A hidden component whose value ("<run>\n<iteration>") changes once each time the page shows another run or
    # iteration (studio.app.view_key): a view of one iteration listens to its change, not to both pickers', which
    # fired it twice per load and per run switch (once with the new run and the old iteration).
    view: gr.Textbox | None = None
    # A hidden component whose value is the id of the tab the page shows (studio.app.TABS), set in the browser when a
    # tab is picked or the place restored: a timer of one tab ticks only while its tab is shown (every tick costs the
    # whole page a pass over its components, studio.pace).
    tab: gr.Textbox | None = None
    # A hidden textbox the name box's handler (studio.app) writes a typed name into: the queues and their leases follow
    # a curator who names themselves mid-session through copies of its change of their own (studio.relay). Not the
    # curator State's change: restoring a returning curator's saved name on load set that State too, and every queue
    # was read twice per page load (the name is now restored before the run picker is filled).
    renamed: gr.Textbox | None = None
    # The controls of the write endpoints (their buttons, a field only a write reads), registered by each tab's
    # build: studio.app's load handler switches them all off for a viewer's session in one place, so no tab needs
    # its own viewer code (and a new tab's controls follow by being registered). Cosmetic: check_writable guards.
    write_controls: list[gr.components.Component] = field(default_factory=list)


# The markdown marks a message may carry into a toast, one alternative each, matched left to right in one pass: a code
# span first (its text kept as it is, stars included), then **bold**, then *italics* only between word boundaries, so
# the stars of a formula (2*3*4, R1*2) stay.
_MARKDOWN_MARKS = re.compile(r"`([^`]+)`|\*\*(?=\S)(.+?)(?<=\S)\*\*|(?<![\w*])\*(?=\S)([^*]+?)(?<=\S)\*(?![\w*])")


# Gradio's page marks every call it makes with this header and value (its JS client's submit from the page's events);
# gradio_client marks its own "api", and curl or any other client sends none.
PAGE_HEADER, PAGE_VALUE = "x-gradio-user", "app"


def plain_text(message: str) -> str:
    """``message`` without the markdown marks it was worded with for the page (`code`, **bold**, *italics*), their
    text kept: for a reader of plain text (an API client)."""
    return _MARKDOWN_MARKS.sub(lambda m: next(g for g in m.groups() if g is not None), message)


def asked_by_the_page(request: gr.Request | None = None) -> bool:
    """Whether ``request`` (None: the request of the event running now, as Gradio's context holds it) came from the
    studio's own page: its ``x-gradio-user`` header says "app". False outside an event (a direct call, a test)."""
    if request is None:
        request = LocalContext.request.get(None)
    headers = getattr(request, "headers", None) if request is not None else None
    return headers is not None and headers.get(PAGE_HEADER) == PAGE_VALUE


def toast_text(message: str, page: bool | None = None) -> str:
    """``message`` as the caller of the event running now reads it (``page``: True for the studio's page, False for an
    API client; None: ``asked_by_the_page``). Gradio renders a toast's text as HTML (sanitized; ``gr.Error`` and
    ``gr.Info`` have no plain-text mode), not markdown, so a message worded for the page's Markdown showed its
    backticks and stars (``python -m engine step`` in backticks, the Run tab's *Next stage*): the marks are dropped
    (``plain_text``). For the page the text is escaped as HTML, so ``<tokenizer>`` shows instead of vanishing as a
    tag and ``&amp;`` shows as typed; an API client gets the same text as the error's message, where an entity is
    wrong (``R&amp;D``, ``got '&lt;1'``): it gets the text as worded."""
    text = plain_text(message)
    if page is None:
        page = asked_by_the_page()
    return html.escape(text, quote=False) if page else text


def session_of(request: gr.Request | None) -> str | None:
    """The browser session a request comes from (Gradio's ``session_hash``), None without one (an API call made
    without a session, a test): the worker tells the page that started a job from the others by it."""
    session = getattr(request, "session_hash", None) if request is not None else None
    return str(session) if session else None


def fired_by(evt: gr.EventData | None, block: gr.blocks.Block) -> bool:
    """Whether ``evt`` was fired by ``block``. Gradio keeps a per-session copy of a component once a handler has sent
    it a prop update (``gr.update(choices=...)``: a new instance under the same key, with a new ``_id``), and an
    event's ``target`` is that copy: the run picker's changes named a block of ``_id`` 243, not 3, so a check by
    ``_id`` alone never matched it in a served app. The copy is built from the block's constructor arguments, so
    it keeps the class and the ``elem_id``; a block without an ``elem_id`` is matched by ``_id`` only (give it one
    if handlers send it prop updates)."""
    target = getattr(evt, "target", None)
    if target is None:
        return False
    if target is block or getattr(target, "_id", None) == block._id:
        return True
    elem_id = getattr(block, "elem_id", None)
    return bool(elem_id) and type(target) is type(block) and getattr(target, "elem_id", None) == elem_id


def user_error(message: str) -> gr.Error:
    """An error the user can fix (no curator name, a bad plan number), for the page's error modal, its text plain
    (``toast_text``: escaped for the page, as worded for an API client). Gradio prints a traceback for every
    exception a handler raises unless it is a ``gr.Error`` with ``print_exception=False``: a server log full of
    expected mistakes would hide the real failures."""
    return gr.Error(toast_text(message), print_exception=False)


def user_info(message: str) -> None:
    """An info toast (``gr.Info``) for the session whose event is running, its text plain (``toast_text``)."""
    gr.Info(toast_text(message))


def quiet_stop(message: str) -> gr.Error:
    """To raise after ``user_info`` when a handler did nothing and that is no mistake (nothing to undo): an error the
    page does not show (no red modal over the info toast), which stops the event's ``.success`` chain (nothing
    changed: nothing to reload) and prints no traceback. An API client still gets ``message`` as its error: plain
    (``plain_text``), since the page renders none of it."""
    return gr.Error(plain_text(message), visible=False, title="Info", print_exception=False)


@contextmanager
def user_errors() -> Iterator[None]:
    """Around a handler's calls: a ``ValueError`` (the engine refusing an action) becomes ``user_error`` of its
    message; a ``gr.Error`` raised inside passes as it is. ``gr.Error`` is itself a ``ValueError`` whose ``str`` is
    the ``repr`` of its message, so wrapping ``str(exc)`` again showed the user "'Enter your curator name…'" in
    quotes."""
    try:
        yield
    except gr.Error:
        raise
    except ValueError as exc:
        raise user_error(str(exc)) from None


def login_of(request: gr.Request | None) -> str | None:
    """The authenticated user of a request (``--auth``), else None (no login, or a call without a request)."""
    user = getattr(request, "username", None) if request is not None else None
    return str(user) if user else None


def is_viewer(ctx: Ctx, request: gr.Request | None) -> bool:
    """Whether the request comes from a viewer account (``--viewers``)."""
    user = login_of(request)
    return bool(user and user in ctx.viewers)


def can_write(ctx: Ctx, request: gr.Request | None) -> bool:
    """Whether this session may change anything (``check_writable``'s rule), for switching a control on or off: a
    handler that enables a write control asks this, so the control never comes back on for a viewer after the load
    handler switched it off. Cosmetic only: the write endpoints still call ``check_writable``."""
    return not ctx.read_only and not is_viewer(ctx, request)


def identity_line(ctx: Ctx, user: str) -> str:
    """The header's line for a logged-in ``user``: who curates, or that this session only views."""
    if ctx.read_only or user in ctx.viewers:
        return f"Viewing as **{md_escaped(user)}** (read-only)"
    return f"Curating as **{md_escaped(user)}**"


def curator_of(name: str | None, request: gr.Request | None) -> str:
    """The authenticated user, else the name entered for this session; raises ``gr.Error`` when neither. The login
    wins over any name sent with it (the page's name box is not editable under a login): decisions are recorded
    under who really made them."""
    user = login_of(request)
    if user:
        return user
    if name and name.strip():
        return name.strip()
    raise user_error("Enter your curator name at the top of the page first (it is recorded on every override).")


def who_of(name: str | None, request: gr.Request | None) -> str | None:
    """The curator of a session when known (login, else the typed name), else None: for leases, never an error."""
    user = getattr(request, "username", None) if request is not None else None
    return str(user) if user else ((name or "").strip() or None)


def check_lease(ctx: Ctx, kind: str, run_id: str | None, iteration: Any, key: str, curator: str | None) -> None:
    """Refuse a decision on an item another curator has open: both acting on one pair or verdict, the later
    decision replaced the earlier one and neither curator was told (a two-curator review found it). A decision
    takes the item (or renews the curator's hold on it), so a hold lasts while its curator works on it, and after
    a lapsed hold the first to act holds it and the other is refused."""
    holder = ctx.leases.claim((kind, run_id, iteration), key, curator)  # free or theirs already: held anew
    if holder:
        what = "pair" if kind == "pair" else "verdict"
        raise user_error(f"{holder} has this {what} open right now: a decision here would replace theirs unseen. "
                         f"Move on (j/k skip it) and come back once they have moved on; a hold lapses "
                         f"{ctx.leases.ttl_s:.0f} s after they opened it.")


def undo_guard(ctx: Ctx, run_id: str | None, iteration: Any, curator: str) -> Callable[[dict[str, Any]], None]:
    """``engine.review_trail.undo_last``'s ``guard`` for a studio undo: refuse to take back an action on an item
    another curator has open right now. An undo changes that item as much as a decision does, and ``check_lease``
    refused only decisions: a curator who had moved on pressed ``u`` and changed the pair another was reading. It
    checks the lease without taking it (the undoing curator keeps the item they have open)."""
    def guard(row: dict[str, Any]) -> None:
        kind = "pair" if row["target"] in ("pair", "pair_review") else "verdict"
        index = (row["pair_idx"] or 0) if kind == "pair" else row["k"]
        key = f"{row['task_id']}|{int(row['step'])}|{int(index)}"  # pairs_queue.pair_key / critic_queue.verdict_key
        holder = ctx.leases.holder((kind, run_id, iteration), key, curator)
        if holder:
            raise user_error(f"Not undone: {holder} has the {kind} of your {row['action'].replace('_', ' ')} open "
                             "right now, and an undo would change it under them unseen. Undo again once they "
                             f"have moved on (a hold lapses {ctx.leases.ttl_s:.0f} s after they opened it).")
    return guard


def leasing_name(ctx: Ctx, name: str | None, request: gr.Request | None) -> str | None:
    """The name a session holds items under: none in a read-only studio or for a viewer account, who can decide
    nothing and so must not hold an item against the curators."""
    who = who_of(name, request)
    return None if ctx.read_only or (who and who in ctx.viewers) else who


def claim_note(ctx: Ctx, kind: str, run_id: str | None, iteration: Any, key: str | None, curator: str | None,
               was: str | None) -> tuple[str, str | None]:
    """An opened item's lease: ``(the note under the picker, the name it was taken under)``. A curator who corrected
    their name first gives up what the old name held (it would hold their own item against them)."""
    if was and was != curator:
        ctx.leases.release(was)
    holder = ctx.leases.claim((kind, run_id, iteration), key, curator) if key else None
    return lease_note(holder, "pair" if kind == "pair" else "verdict"), curator


def lease_note(holder: str | None, what: str) -> str:
    """The line under a picker when another curator has the item open."""
    return f"⚠ **{md_escaped(holder)}** has this {what} open right now; `j`/`k` skip it." if holder else ""


def check_writable(ctx: Ctx, request: gr.Request | None = None) -> None:
    """Refuse a change in a read-only studio, or from a viewer account (``--viewers``)."""
    if ctx.read_only:
        raise user_error("This studio is read-only.")
    user = getattr(request, "username", None) if request is not None else None
    if user and user in ctx.viewers:
        raise user_error(f"{user} has a read-only viewer account.")
