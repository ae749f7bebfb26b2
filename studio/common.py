"""What every tab shares: the ``Ctx`` handed to tab builders, curator identity, the write guard, the Spaces
policy and small renderers.

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

Mistakes a user can fix (no curator name, a bad plan number) are raised as ``user_error`` (inside a handler:
``with user_errors():``), shown in the page without a traceback in the server log.
"""

from __future__ import annotations

import difflib
import html
import itertools
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gradio as gr

from engine.config import RunConfig
from engine.config_checks import apply_settings
from engine.errors import ConfigError
from engine.leases import LeaseBook
from engine.store import Store
from engine.surprisal import SurprisalService
from studio.jobs import JobWorker

DEMO_AGENTS = ("assets/demo/planner", "assets/demo/grounder")
# Spaces mode: (dotted field, largest value allowed).
SPACES_CAPS = (("data.train_limit", 16), ("data.eval_limit", 20), ("sample.k", 4), ("run.iterations", 1))


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
    # The controls of the write endpoints (their buttons, a field only a write reads), registered by each tab's
    # build: studio.app's load handler switches them all off for a viewer's session in one place, so no tab needs
    # its own viewer code (and a new tab's controls follow by being registered). Cosmetic: check_writable guards.
    write_controls: list[gr.components.Component] = field(default_factory=list)


def user_error(message: str) -> gr.Error:
    """An error the user can fix (no curator name, a bad plan number, nothing to undo), for the page's error modal.
    Gradio prints a traceback for every exception a handler raises unless it is a ``gr.Error`` with
    ``print_exception=False``: a server log full of expected mistakes would hide the real failures."""
    return gr.Error(message, print_exception=False)


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
        return f"Viewing as **{user}** (read-only)"
    return f"Curating as **{user}**"


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
    return f"⚠ **{holder}** has this {what} open right now; `j`/`k` skip it." if holder else ""


def check_writable(ctx: Ctx, request: gr.Request | None = None) -> None:
    """Refuse a change in a read-only studio, or from a viewer account (``--viewers``)."""
    if ctx.read_only:
        raise user_error("This studio is read-only.")
    user = getattr(request, "username", None) if request is not None else None
    if user and user in ctx.viewers:
        raise user_error(f"{user} has a read-only viewer account.")


def spaces_policy(config: RunConfig) -> RunConfig:
    """Spaces mode: only the demo agents (no adapters), the reference critic, no external QA model, in-process hf
    generation and training, every size within its cap;
    anything else raises ``ConfigError`` naming the field (refused rather than silently changed, so the run is the
    config the visitor saw). ``spaces_capped`` gives a config that passes."""
    for role, path in zip(("planner", "grounder"), DEMO_AGENTS):
        agent = getattr(config, role)
        if agent.path.rstrip("/") != path:
            raise ConfigError(f"{role}.path", f"only the demo agent {path} is allowed on Spaces")
        if agent.adapter:
            raise ConfigError(f"{role}.adapter", "no adapters on Spaces: only the demo agents run there")
    if config.critic.backend != "reference":
        raise ConfigError("critic.backend", "only the reference critic is allowed on Spaces")
    if config.tools.qa_base_url:  # a visitor must not make the Space call arbitrary URLs
        raise ConfigError("tools.qa_base_url", "no external QA model on Spaces (leave it empty)")
    for dotted, allowed in (("sample.backend", "hf"), ("ground.backend", "hf"), ("launch.mode", "inprocess")):
        section, name = dotted.split(".")
        if getattr(getattr(config, section), name) != allowed:
            raise ConfigError(dotted, f"only {allowed} on Spaces")
    for dotted, cap in SPACES_CAPS:
        section, name = dotted.split(".")
        value = getattr(getattr(config, section), name)
        if value == 0 or value > cap:  # 0 means "all" for the limits
            raise ConfigError(dotted, f"at most {cap} on Spaces (0, meaning all, is not allowed either)")
    for index, phase in enumerate(config.schedule.phases, start=1):  # a phase's settings must not lift a cap
        where = f"schedule.phases[{index}].set"
        phase_config = apply_settings(config, phase.set, where)
        phase_config.schedule.phases = []
        try:
            spaces_policy(phase_config)
        except ConfigError as exc:
            raise ConfigError(where, f"{exc.field}: {exc.message}") from None
    return config


def spaces_capped(config: RunConfig) -> RunConfig:
    """``config`` with the demo agents, the reference critic and every size within its Spaces cap."""
    for role, path in zip(("planner", "grounder"), DEMO_AGENTS):
        getattr(config, role).path, getattr(config, role).adapter = path, ""
    config.critic.backend = "reference"
    config.tools.qa_base_url = config.tools.qa_model = ""
    config.sample.backend = config.ground.backend = "hf"
    config.launch.mode = "inprocess"
    for dotted, cap in SPACES_CAPS:
        section, name = dotted.split(".")
        value = getattr(getattr(config, section), name)
        if value == 0 or value > cap:
            setattr(getattr(config, section), name, cap)
    return config


def run_iterations(store: Store, run_id: str | None) -> list[int]:
    return store.iterations(run_id) if run_id else []


def default_iteration(iterations: list[int]) -> int | None:
    """The newest training iteration (>= 1) when there is one, else the newest."""
    training = [i for i in iterations if i >= 1]
    return (training or iterations or [None])[-1]


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


def clamped_page(fetch: Callable[[int], tuple[Any, int]], page: Any, size: int) -> tuple[Any, int, int]:
    """``(rows, total, page shown)`` of a queue read page by page (``fetch(page) -> (rows, total)``, total 0 on a
    page past the end): a page past the last one (a typed 99, or filters that narrowed the queue under the curator)
    shows the last page instead of an empty one that reads as "no rows at all"."""
    page = max(int(page or 1), 1)
    rows, total = fetch(page)
    if total or page == 1:
        return rows, total, page
    _, total = fetch(1)
    if not total:
        return rows, 0, 1
    last = max(1, -(-total // size))
    rows, total = fetch(last)
    return rows, total, last


# The queue tables (Pairs, Critic) are read-only: a click picks the row. Gradio still frames the clicked cell and
# hangs "select column" / "select row" handles on it, which looked like an edit box: both are hidden.
def static_table_css(elem_id: str) -> str:
    return (f"<style>#{elem_id} .selection-button {{ display: none !important; }} "
            f"#{elem_id} .cell-selected, #{elem_id} .cell-selected * {{ box-shadow: none !important; }}</style>")


def pre(text: Any) -> str:
    return f"<pre style='white-space:pre-wrap'>{html.escape('' if text is None else str(text))}</pre>"


def page_info(total: int, page: int, size: int) -> str:
    pages = max(1, -(-total // size))
    return f"{total} row{'' if total == 1 else 's'} · page {min(page, pages)} of {pages}"


def md_quote(text: Any, width: int = 60) -> str:
    """User text (a search) quoted inside a Markdown line: on one line, cut to ``width``, with Markdown and HTML
    characters escaped, so "*x*" or "<b>" show as typed."""
    flat = " ".join(str(text or "").split())
    flat = flat if len(flat) <= width else flat[:width - 1] + "…"
    return "“" + re.sub(r"([\\`*_{}\[\]()#+\-.!|<>~&])", r"\\\1", flat) + "”"


def queue_info(total: int, asked: int, shown: int, size: int, empty: str = "") -> str:
    """The line above a queue table (``page_info``): when the page asked for was past the last one, says so (the
    last page is shown, see ``clamped_page``); with no row at all, ``0 rows · <empty>``, the reason (no pair matches
    the filters, iteration 0 has none...) instead of "page 1 of 1"."""
    if not total:
        return f"0 rows · {empty}" if empty else page_info(0, 1, size)
    line = page_info(total, shown, size)
    return line + (f" (page {asked} is past the last page)" if asked != shown else "")


def nothing_in_iteration(iteration: int, noun: str, stage: str, skipped: str | None) -> str:
    """Why an iteration's queue of ``noun`` (pairs, verdicts) is empty before any filter: iteration 0 samples no
    plans; a variant skipped ``stage`` (``skipped``: its recorded reason; "no <noun> yet" would promise rows the run
    never writes); or the iteration has not reached it."""
    if int(iteration) == 0:
        return (f"iteration 0 evaluates the starting agents and samples no plans: {noun} start at iteration 1 "
                "(pick it above)")
    if skipped is not None:
        return f"iteration {int(iteration)} writes no {noun}. Its {stage} stage was skipped" + (
            f": {skipped}" if skipped else "")
    return f"iteration {int(iteration)} has no {noun} yet"


def review_line(store: Store, run_id: str | None, iteration: int | None, target: str,
                curator: str | None = None) -> str:
    """`` · reviewed 12 of 96 by the team, 5 by you`` for a page's info line (items anybody acted on or marked
    reviewed; "by you" when the session's curator is known)."""
    if not run_id or iteration is None:
        return ""
    from engine.review_trail import review_progress

    done = review_progress(store, run_id, int(iteration), target, curator or "")
    mine = f", {done['mine']} by you" if curator else ""
    # studio.team_counters.COUNTER reads this back out of a queue's line: its timer rewrites the counter in place.
    return f" · reviewed {done['reviewed']} of {done['total']} by the team{mine}"


def trained_line(store: Store, run_id: str | None, iteration: int | None, target: str) -> str:
    """A queue's warning when the iteration's training on it is done (``train_planner`` for pairs,
    ``train_grounder`` for verdicts): a curator landing on a finished iteration (the studio's default pick) read
    "press Next stage to train on them" and changed data that no stage would read again."""
    if not run_id or iteration is None:
        return ""
    stage, role, data = (("train_planner", "planner", "pairs") if target == "pair" else
                         ("train_grounder", "grounder", "verdicts"))
    state = store.stage_status(run_id, int(iteration)).get(stage) or {}
    if state.get("status") != "done":
        return ""
    # Only pair actions have a "changed since training" count (the Pairs tab's curation table): the Critic tab's
    # banner named that table too, for verdicts it never counts.
    counted = " and the Pairs tab's curation table counts it as changed since," if target == "pair" else ""
    return (f"\n\n**Iteration {int(iteration)}'s {role} has trained on these {data} already** ({stage} done): "
            f"a change here is recorded and exported,{counted} but no training reads it unless that stage runs "
            "again. To steer the next training, curate the newest iteration before its training stage runs.")


def tri(value: str) -> bool | None:
    """A "any / yes / no" radio as None / True / False."""
    return {"yes": True, "no": False}.get(value)


def pick_update(labels: list[tuple[str, str]], keys: list[str], current: str | None, keep: bool = False) -> dict:
    """The queue picker after a reload of its page: the new choices, and the first item only when the pick the
    request carried is not on the page. When it is, the value is left out of the update, so a reload that was in
    flight while the curator moved (j, a row click) cannot put the pick back where it was when the reload left.
    ``keep`` (a live reload, ``studio.live_views``): a pick is never moved, on the page or not (an action took it
    off a filtered page, and the curator may be editing it): only an empty picker takes the first item. Pass
    ``labels`` with the pick's own label among them then (``with_own_label``)."""
    if current in keys or (keep and current):
        return gr.update(choices=labels)
    return gr.update(choices=labels, value=keys[0] if keys else None)


def with_own_label(labels: list[tuple[str, str]], current: str | None,
                   label_of: Callable[[str], str]) -> list[tuple[str, str]]:
    """A queue picker's choices for a page (``(label, key)`` each) with ``current``, the pick, kept among them under
    its own label (``label_of(current)``) when it is not on the page: an action took it off the filtered queue, or a
    refresh read a page it has since left. Without it the picker shows the pick as its raw key. A pick
    ``label_of`` cannot name (ValueError, KeyError, LookupError: ``studio.picker`` passes stale ones) is left out."""
    if not current or current in {key for _, key in labels}:
        return labels
    try:
        return [*labels, (label_of(current), current)]
    except (ValueError, KeyError, LookupError):
        return labels


def first_cell(evt: gr.SelectData) -> Any:
    """A Dataframe row click -> the row's first cell (its key), for wiring ``table.select`` to a picker."""
    return evt.row_value[0] if evt.row_value else gr.update()
