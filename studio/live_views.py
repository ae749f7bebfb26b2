"""Live views: a data tab (Plans, Pairs, Critic, Metrics) reloads by itself once a stage it reads has ended for what
it shows, without a page reload and without disturbing a curator at work.

Why: the tabs reloaded only when the view key changed (``Ctx.view``). The first visit's iteration picker moves to
iteration 1 as soon as ``sample`` is done, before any pair exists, so Pairs said "iteration 1 has no pairs yet" (and
Critic "no verdicts yet", Metrics iteration 0 only) until the page was reloaded; the same after the Run tab's *Rest of
iteration*.

Contract:

* A tab's *stamp* (``stamp``): the ended records (status and finish time; a running or pending stage counts as not
  ended) of the stages the tab reads (``READS``), for the run and iteration it shows; for Metrics, whose charts span
  the run, of every iteration, and of its compare run's too (``COMPARED``: the run its load passed as ``applied``).
  One query of the small ``stages`` table per run. A stage outside ``READS[tab]`` never changes the tab's stamp: a
  critique ending does not reload Pairs.
* ``watch(ctx, tab_id) -> Watch``, called by the tab's ``build``: ``Watch.trigger`` is a hidden textbox the tab adds to
  the triggers of the load its ``ctx.view.change`` runs (the same event: ``always_last``, so a live reload never
  overtakes, nor is overtaken by, the tab's other loads of the session), and that load reads inside
  ``Watch.reading(request, run, iteration, applied)`` (or calls ``Watch.seen`` before it reads): the stamp it read
  under and the filters it applied, per browser session.
* One ``gr.Timer`` for all watched tabs (``LiveViews.wire``, a ``Ctx.load_hooks`` hook: made at the page's top level)
  ticks only while a watched tab is shown with a run picked (switched in the browser, as ``studio.team_counters``'s
  timer is), every ``studio.pace.LIVE_BUSY_S`` while a job runs and every ``studio.pace.IDLE_S`` otherwise. A tick,
  and every switch of the tab shown (a tab hidden when its stage ended is checked when it is shown again), compares
  the shown tab's stamp with the one its last load read for this session (``LiveViews.check``): when it differs it
  sends that tab's trigger a new value (its load runs) and nothing else; otherwise ``gr.skip()`` for every output.
  No load read for the shown view yet (the view's own load is about to start): nothing is sent.
* In Plans, Pairs and Critic, a load the trigger ran (``Watch.fired``: the event's target is the trigger, and the
  session's last load, if one is recorded, read the same run and iteration) is a *live reload*. It reads the filters as
  the session's last load applied them (``Watch.applied``: what that load passed to ``reading``), never the boxes as
  they are: the Pairs tab's Search / Min / Max and the Plans tab's Search apply on Enter only, so text typed and not
  submitted is neither applied nor refused (a half-typed "-" in Min margin raised "margin bounds must be numbers" at a
  curator who pressed nothing). The Critic tab has no text filter: its dropdowns and radios apply at each change, so
  what they hold is what was applied. A live reload keeps those filters, the page (a page past the new last shows the
  last, as any load does) and the pick: it sends the picker new choices (the pick's own label kept among them when it
  has left the page) and never a value, except to an empty picker, which takes the page's first item. So the open pair
  or verdict stays, with its detail (redrawn only when it shows another item) and the edit typed under it, even when an
  action took it off a filtered page (*Reviewed = no*); the open task of Plans stays, its plans drawn again with the
  diff's two picks kept. Metrics has no pick or text filter: its live reload is its load.
* ``Watch.reading(request, run, iteration, applied)`` wraps a load's read: the stamp of now (and the filters it
  applies) recorded before the read, so a stage that ends during it is seen by the next check; a read that raises
  (a margin the curator submitted that is no number) puts back the session's record as it was, so its stamp is not
  taken as seen: a stage that ended since the last load that drew the page still reloads it at the next check.

Kept on the server, keyed by ``request.session_hash`` (a ``gr.State`` reaches a handler as it was when its event
started), at most ``SESSIONS`` sessions per tab, the least recently used forgotten first (a forgotten session's next
check records the stamp of then and sends nothing).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import gradio as gr

from engine.store import Store
from studio.common import Ctx, fired_by
from studio.pace import LIVE_BUSY_S, poll_seconds

SESSIONS = 1024  # per tab: far more browser sessions than a team opens at once
# The stages whose end changes what each tab shows (its table, line, detail or charts). Pairs: the pairs themselves
# and the planner's training (the line's "trained on these pairs already" warning); Critic: the verdicts and the
# grounder's training (the same warning); Plans: the plans, their scores, the chosen/rejected marks, the groundings
# and the grounder's GRPO rollouts; Metrics: every stage a chart reads (sample, score and ground feed none).
READS: dict[str, tuple[str, ...]] = {
    "plans": ("sample", "score", "pairs", "ground", "train_grounder"),
    "pairs": ("pairs", "train_planner"),
    "critic": ("critique", "train_grounder"),
    "metrics": ("warm_start_planner", "warm_start_grounder", "pairs", "train_planner", "critique", "train_grounder",
                "evaluate"),
}
# Metrics shows the whole run: its stamp spans every iteration (the others show one iteration).
RUN_WIDE = frozenset({"metrics"})
# Metrics also draws a compare run beside run A: its load passes that run as ``applied``, and its stamp counts too.
COMPARED = frozenset({"metrics"})
NOT_ENDED = ("running", "pending")


def stamp(store: Store, run_id: str | None, iteration: int | None, stages: tuple[str, ...]) -> str:
    """The ended records of ``stages`` for ``run_id``'s ``iteration`` (None: every iteration) as one string:
    ``iteration:stage:status:finished_at`` each, sorted; "" without a run."""
    if not run_id:
        return ""
    marks = ", ".join("?" for _ in stages)
    where, params = "run_id = ? AND stage IN (" + marks + ") AND status NOT IN (?, ?)", [run_id, *stages, *NOT_ENDED]
    if iteration is not None:
        where += " AND iteration = ?"
        params.append(int(iteration))
    rows = store.query(f"SELECT iteration, stage, status, finished_at FROM stages WHERE {where} "
                       "ORDER BY iteration, stage", params)
    return "|".join(f"{i}:{s}:{st}:{f}" for i, s, st, f in rows.itertuples(index=False, name=None))


def view_of(view: str | None) -> tuple[str | None, int | None]:
    """``(run, iteration)`` of a view key (``studio.app.view_key``: ``"<run>\\n<iteration>"``, either part empty)."""
    run, _, it = str(view or "").partition("\n")
    try:
        return run or None, int(it) if it.strip() else None
    except ValueError:
        return run or None, None


def pace(ctx: Ctx) -> float:
    """The timer's interval now: ``LIVE_BUSY_S`` while the job worker runs a job, else the idle pace."""
    return poll_seconds(ctx.jobs, LIVE_BUSY_S)


@dataclass
class _Seen:
    """What a session's view of one tab was last read under: its run, iteration (None: run-wide) and stamp, and the
    filters that load applied (``Watch.applied``: what a live reload reads instead of the boxes; for a ``COMPARED``
    tab, the compare run it drew, whose stages its stamp counts)."""

    run: str | None
    iteration: int | None
    stamp: str
    applied: Any = None


@dataclass
class Watch:
    """One watched tab: its id, the stages it reads and the ``gr.State`` its load listens to."""

    live: LiveViews
    tab_id: str
    trigger: gr.Textbox
    stages: tuple[str, ...] = ()
    _seen: OrderedDict[str | None, _Seen] = field(default_factory=OrderedDict)

    def scope(self, run_id: str | None, iteration: Any) -> tuple[str | None, int | None]:
        """The run and iteration the stamp covers (a run-wide tab: no iteration)."""
        if self.tab_id in RUN_WIDE or iteration is None or iteration == "":
            return run_id or None, None
        try:
            return run_id or None, int(iteration)
        except (TypeError, ValueError):
            return run_id or None, None

    def stamp(self, run_id: str | None, iteration: int | None, applied: Any = None) -> str:
        """The view's stamp; for a ``COMPARED`` tab, the compare run's (``applied``, when a run id) after it."""
        own = stamp(self.live.ctx.store, run_id, iteration, self.stages)
        if self.tab_id in COMPARED and isinstance(applied, str) and applied and applied != run_id:
            return own + "||" + stamp(self.live.ctx.store, applied, None, self.stages)
        return own

    def seen(self, request: gr.Request | None, run_id: str | None, iteration: Any, applied: Any = None) -> None:
        """The tab's load is about to read ``run_id``/``iteration`` (with the filters ``applied``): the stamp of now is
        what it shows. Read before the load reads, so a stage that ends during the read changes the stamp again (a
        second reload, never a missed one). A load that may fail reads inside ``reading`` instead."""
        self._record(request, run_id, iteration, applied)

    def _record(self, request: gr.Request | None, run_id: str | None, iteration: Any,
                applied: Any) -> tuple[str | None, _Seen | None, _Seen]:
        """Record ``seen``'s read for the session: ``(its key, the record it replaced, the new record)``."""
        run_id, it = self.scope(run_id, iteration)
        record = _Seen(run_id, it, self.stamp(run_id, it, applied), applied)
        key = getattr(request, "session_hash", None)
        with self.live.lock:
            before = self._seen.get(key)
            self._put(key, record)
        return key, before, record

    @contextmanager
    def reading(self, request: gr.Request | None, run_id: str | None, iteration: Any,
                applied: Any = None) -> Iterator[None]:
        """``seen`` for the read inside: recorded before it, and put back as it was when the read raises (a filter
        refused), so the stamp of a read that drew nothing is not taken as seen."""
        key, before, record = self._record(request, run_id, iteration, applied)
        try:
            yield
        except BaseException:
            with self.live.lock:
                if self._seen.get(key) is record:  # nothing newer recorded meanwhile (a check, another load)
                    if before is None:
                        self._seen.pop(key, None)
                    else:
                        self._put(key, before)
            raise

    def fired(self, evt: gr.EventData | None, request: gr.Request | None, run_id: str | None,
              iteration: Any) -> bool:
        """Whether the load of ``evt`` is a live reload: its trigger sent it (``common.fired_by``) for the run and
        iteration the session's last load read. A view change queued behind it (``always_last``: one of them runs)
        reads its view as a view change does."""
        if not fired_by(evt, self.trigger):
            return False
        with self.live.lock:
            record = self._seen.get(getattr(request, "session_hash", None))
        return record is None or (record.run, record.iteration) == self.scope(run_id, iteration)

    def applied(self, request: gr.Request | None) -> Any:
        """The filters the session's last load applied (``reading``'s ``applied``); None when none is recorded."""
        with self.live.lock:
            record = self._seen.get(getattr(request, "session_hash", None))
        return None if record is None else record.applied

    def _put(self, key: str | None, record: _Seen) -> None:  # the caller holds the lock
        self._seen[key] = record
        self._seen.move_to_end(key)
        while len(self._seen) > SESSIONS:
            self._seen.popitem(last=False)

    def check(self, request: gr.Request | None, run_id: str | None, iteration: int | None) -> Any:
        """The trigger's update for this session's view: a new value when the stamp differs from the one its last load
        read, else ``gr.skip()`` (also while no load has read this view: it is about to)."""
        run_id, it = self.scope(run_id, iteration)
        if not run_id or (it is None and self.tab_id not in RUN_WIDE):
            return gr.skip()
        key = getattr(request, "session_hash", None)
        with self.live.lock:
            before = self._seen.get(key)
        now = self.stamp(run_id, it, None if before is None else before.applied)
        with self.live.lock:  # the check and the record at once: a load's seen() lands before or after both
            record = self._seen.get(key)
            if record is not before:  # a load began meanwhile: it reads what is new
                return gr.skip()
            if record is None:  # a forgotten session: count from now
                self._put(key, _Seen(run_id, it, now))
                return gr.skip()
            if (record.run, record.iteration) != (run_id, it) or record.stamp == now:
                return gr.skip()
            # Recorded as asked for: the next tick, before the load has started, must not ask again.
            self._put(key, _Seen(run_id, it, now, record.applied))
        return str(time.monotonic_ns())


class LiveViews:
    """The live views of one app (``ctx``): its watched tabs and the one timer that checks the shown one. Appended to
    ``ctx.load_hooks`` by the first ``watch``; the hook wires the timer once every tab is built."""

    def __init__(self, ctx: Ctx) -> None:
        self.ctx = ctx
        self.watches: dict[str, Watch] = {}
        self.lock = threading.Lock()

    def check(self, view: str | None, tab: str | None, request: gr.Request | None) -> list[Any]:
        """One trigger update per watched tab (registration order): a new value at most for the shown one."""
        run_id, it = view_of(view)
        return [w.check(request, run_id, it) if w.tab_id == tab else gr.skip() for w in self.watches.values()]

    def active_js(self) -> str:
        """The browser-side ``(view, tab) -> the timer's update``: on while a watched tab is shown with a run."""
        tabs = ", ".join(f"'{t}'" for t in self.watches)
        return ("(view, tab) => { const run = String(view ?? '').split('\\n')[0]; "
                f"return {{__type__: 'update', active: [{tabs}].includes(tab) && !!run}}; }}")

    def __call__(self, demo: gr.Blocks) -> None:
        self.wire()

    def wire(self) -> None:
        """The timer, its tick (``/live_views_check``), the same check at each switch of the tab shown
        (``/live_views_shown``) and the timer's switch in the browser (``/live_views_on``); all undocumented."""
        ctx, triggers = self.ctx, [w.trigger for w in self.watches.values()]
        timer, paced = gr.Timer(pace(ctx), active=False), gr.State(None)

        def tick(view: str, tab: str, was: float | None, request: gr.Request) -> tuple:
            now = pace(ctx)  # busy while a job runs: a first visit's user waits on its stages
            return (*self.check(view, tab, request), gr.skip() if now == was else gr.update(value=now), now)

        # "once": a tick still running when the next one comes (a loaded store) drops it.
        timer.tick(tick, [ctx.view, ctx.tab, paced], [*triggers, timer, paced], api_name="live_views_check",
                   api_visibility="undocumented", show_progress="hidden", trigger_mode="once")
        # A tab shown again checks at once: its stage may have ended while another tab was shown.
        def shown(view: str, tab: str, request: gr.Request) -> list[Any]:
            return self.check(view, tab, request)

        ctx.tab.change(shown, [ctx.view, ctx.tab], triggers,
                       api_name="live_views_shown", api_visibility="undocumented", show_progress="hidden",
                       trigger_mode="always_last")
        gr.on([ctx.view.change, ctx.tab.change], None, [ctx.view, ctx.tab], timer, js=self.active_js(),
              api_name="live_views_on", api_visibility="undocumented", show_progress="hidden")


def watch(ctx: Ctx, tab_id: str) -> Watch:
    """Watch ``tab_id`` (a key of ``READS``) for this app: its trigger, to add to the triggers of its view's load, and
    ``seen``, for that load to call before it reads."""
    live = next((hook for hook in ctx.load_hooks if isinstance(hook, LiveViews)), None)
    if live is None:
        live = LiveViews(ctx)
        ctx.load_hooks.append(live)
    # A hidden textbox, not a gr.State: every event with a State among its outputs sends that State a value, a skip
    # included, and the page fired the State's change on the first one it received, so the tab switch's check (its
    # outputs are every tab's trigger) reloaded Plans and Pairs behind the Critic tab at each page load. A textbox
    # changes only when it is sent a value.
    trigger = gr.Textbox("", visible="hidden", elem_classes="moat-live-trigger")
    live.watches[tab_id] = Watch(live, tab_id, trigger, READS[tab_id])
    return live.watches[tab_id]
