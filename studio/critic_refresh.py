"""The Critic tab's queue as the page refreshes it (``CriticRefresh``): one read of a page of verdicts and the line
above it (``read``: rows, page, the team's "reviewed N of M", the trained warning) behind every refresh of the table,
and the handlers that send it: the tab's load (any filter change, ``/critic_queue``: also the agreement), an action's
reload (also the agreement) and the walk's refresh after ``j``/``k`` (the table and its line only: a key press stays
cheap). ``studio.tab_critic`` lays out the page and wires these to its events.

Every read goes through the tab's ``studio.queue_sessions.QueueSessions`` (``sessions``): the load and the reloads
start a new generation of the session's queue and record what they drew; the walk's refresh paints nothing over a
newer read and sends only what changed; the painters record what the line's team counter counts, for the counters'
timer (``studio.team_counters``). The load and the reloads also tell the tab's live reload (``studio.live_views``,
``live``) what they read under, before they read: a stage it watches that ends for the view then reloads the page
through the load (the same event as a filter change), keeping the pick (on the page or not: a verdict an action
took off a *Reviewed = no* page stays picked, with the edit typed under it), the page and the filters. The filters
apply at each change (no text box waits for Enter), so what they hold is what the queue shows, and what a live reload
reads. A page past the last
shows the last (``studio.picks.clamped_page``), and the page box moves there through the tab's ``[page, nonce]``
clamp state (the same clamp twice still moves it).

The agreement line follows the team (``agreement_tick``): it was drawn only by this curator's own load and actions, so
another curator's decisions did not show in it until then. It is the second output of the team counters' tick
(``studio.team_counters.wire_counters``, ``/critic_counters``: every ``COUNTERS_S``, switched on in the browser only
while the tab is shown with a run and an iteration; one timer and one request a tick for the tab), and each tick reads
one small mark of the iteration's verdict log (``decisions_mark``: its row count and newest id; the log is append-only,
so every decision, "looks right" and undo changes it) and redraws the line only when the mark differs from the one the
session's line was drawn from (recorded by the load and the reloads before they read the agreement, run and iteration
included: the tick reads what the line was drawn for, not the pickers of now), and sends nothing when a load or reload
drew the line while the tick read.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import gradio as gr
import pandas as pd

from engine.store import Store
from studio.common import Ctx, who_of
from studio.critic_queue import PAGE, agreement_markdown, empty_note, page_labels, verdict_labels, verdict_table
from studio.live_views import Watch
from studio.picks import clamped_page, pick_update
from studio.queue_lines import queue_info, review_line, trained_line
from studio.queue_sessions import SESSIONS, QueueRead, QueueSessions, WalkedTo
from studio.stage_text import skipped_reason
from studio.team_counters import counts_of

# The override log's rows the agreement reads: verdict decisions and "looks right" reviews (an undo row takes the
# target of the row it undoes: engine.review_trail.undo_last).
AGREEMENT_TARGETS = ("verdict", "verdict_review")


def decisions_mark(store: Store, run_id: str | None, iteration: int | None) -> tuple[int, int] | None:
    """What the agreement line of an iteration is drawn from, in one small query: ``(rows, newest id)`` of its verdict
    rows in the override log; None without a run and an iteration (no line)."""
    if not run_id or iteration is None:
        return None
    row = store.query("SELECT count(*) AS n, coalesce(max(override_id), 0) AS newest FROM overrides "
                      "WHERE run_id = ? AND iteration = ? AND target IN (?, ?)",
                      [run_id, int(iteration), *AGREEMENT_TARGETS]).iloc[0]
    return int(row["n"]), int(row["newest"])


@dataclass(eq=False)  # compared by identity: a tick replaces the record only if no load recorded another meanwhile
class _AgreementDrawn:
    """What a session's agreement line was drawn for: the run, the iteration and their ``decisions_mark``."""

    run_id: str | None
    iteration: int | None
    mark: tuple[int, int] | None


class CriticRefresh:
    """The Critic tab's queue reads for one app (``ctx``); ``order_id`` is the elem_id of the tab's Order dropdown,
    whose change starts the queue at its head. Its handlers take their inputs in the order the tab wires them."""

    def __init__(self, ctx: Ctx, order_id: str, live: Watch | None = None) -> None:
        self.ctx = ctx
        self.order_id = order_id
        self.sessions = QueueSessions()  # the newest read of the queue and what it drew, per browser session
        self.live = live  # the tab's live reload (studio.live_views): told what each load and reload read under
        # per browser session, what its agreement line was drawn from (at most SESSIONS, least recently used first)
        self._agreements: OrderedDict[str | None, _AgreementDrawn] = OrderedDict()
        self._lock = threading.Lock()

    def read(self, run_id, it, st, rv, od, pg, name, request: gr.Request | None
             ) -> tuple[str, pd.DataFrame, int, Any]:
        """The queue's page and the line above it (rows, page, the team's "reviewed N of M", the trained warning):
        the read behind every refresh of the table (a filter, the page box, an action, ``j``/``k``).
        ``(line, rows, total, the page clamp)``: the clamp state's update, set when the page asked for is past the
        last."""
        store = self.ctx.store
        asked = max(int(pg or 1), 1)
        # A page past the last one (typed, or filters that narrowed the queue) shows the last page, and says so.
        df, total, shown = clamped_page(lambda p: verdict_table(store, run_id, it, st, rv, p, order=od), asked, PAGE)
        # With no row: why (the iteration has none at all, or the filters; one count without filters tells).
        unfiltered = total or (verdict_table(store, run_id, it, size=1)[1] if run_id and it is not None else 0)
        why = "" if total else empty_note(it, st, rv, unfiltered,
                                          None if unfiltered else skipped_reason(store, run_id, it, "critique"))
        line = queue_info(total, asked, shown, PAGE, why)
        if unfiltered:  # an iteration without verdicts has nothing to review: no "reviewed 0 of 0"
            line += review_line(store, run_id, it, "verdict", who_of(name, request))
            line += trained_line(store, run_id, it, "verdict")
        # [page, nonce]: the same clamp twice still moves the page box
        return line, df, total, [shown, time.monotonic_ns()] if shown != asked else gr.update()

    def full_read(self, run_id, it, st, rv, od, pg, name, request: gr.Request | None
                  ) -> tuple[str, pd.DataFrame, int, Any, str]:
        """What the load and an action's reload both send: ``read``'s ``(line, rows, total, page clamp)`` and the
        agreement. A new generation of the session's queue: a walk's refresh still reading paints nothing over it."""
        self.sessions.begin(request)
        # The stamp recorded before the read (a stage that ends during it is seen by the next check); put back when
        # the read raises (studio.live_views).
        with self.live.reading(request, run_id, it) if self.live is not None else nullcontext():
            line, df, total, clamp = self.read(run_id, it, st, rv, od, pg, name, request)
        return line, df, total, clamp, self.agreement(run_id, it, request)

    def _record(self, request: gr.Request | None, drawn: _AgreementDrawn) -> None:  # the caller holds the lock
        key = getattr(request, "session_hash", None)
        self._agreements[key] = drawn
        self._agreements.move_to_end(key)
        while len(self._agreements) > SESSIONS:
            self._agreements.popitem(last=False)

    def agreement(self, run_id, it, request: gr.Request | None) -> str:
        """The agreement line, its ``decisions_mark`` recorded for the session first: a decision made while it reads
        differs from the mark, so the next tick draws it (again, at worst), never misses it."""
        drawn = _AgreementDrawn(run_id, it, decisions_mark(self.ctx.store, run_id, it))
        with self._lock:
            self._record(request, drawn)
        return agreement_markdown(self.ctx.store, run_id, it)

    def agreement_tick(self, request: gr.Request | None) -> Any:
        """One tick of the agreement's timer: the line read again when the iteration's verdict log has changed since
        the session's line was drawn, else ``gr.skip()`` (also before any load drew one, and when a load or reload
        drew it while this read)."""
        key = getattr(request, "session_hash", None)
        with self._lock:
            drawn = self._agreements.get(key)
        if drawn is None or drawn.mark is None:
            return gr.skip()
        now = decisions_mark(self.ctx.store, drawn.run_id, drawn.iteration)
        if now == drawn.mark:
            return gr.skip()
        line = agreement_markdown(self.ctx.store, drawn.run_id, drawn.iteration)
        with self._lock:
            if self._agreements.get(key) is not drawn:  # a newer drawing: it read what is new
                return gr.skip()
            self._record(request, _AgreementDrawn(drawn.run_id, drawn.iteration, now))
        return line

    def load(self, run_id, it, st, rv, od, pg, current, name, request: gr.Request, evt: gr.EventData = None):
        """``/critic_queue``: ``(line, rows, picker, agreement, row count, page clamp)``. A new order starts at its
        head: page 1, the pick left to the page's first verdict (as on the Pairs tab). A live reload
        (``studio.live_views``: a stage the tab reads ended) moves no pick, even one an action took off a filtered
        page: the verdict shown and the edit typed under it stay."""
        # By elem_id, not identity: the served app's event names a copy of the component built here.
        reordered = getattr(getattr(evt, "target", None), "elem_id", None) == self.order_id
        if reordered:
            pg, current = 1, None
        live = self.live is not None and self.live.fired(evt, request, run_id, it)
        line, df, total, clamp, agree = self.full_read(run_id, it, st, rv, od, pg, name, request)
        # A live reload keeps the pick's own label among the choices when it has left the page.
        labels = page_labels(self.ctx.store, run_id, it, df, current) if live else verdict_labels(df)
        self.sessions.drew(request, counts_of(run_id, it, name, request), line=line, table=df, choices=labels,
                           total=total)
        return (line, df, pick_update(labels, list(df["key"]), current, keep=live), agree, total,
                [1, time.monotonic_ns()] if reordered else clamp)

    def reload(self, run_id, it, st, rv, od, pg, current, name, request: gr.Request):
        """After an action: refresh everything but the picked verdict (and its choices: an action changes no verdict's
        label, which names the critic's status)."""
        line, df, _total, clamp, agree = self.full_read(run_id, it, st, rv, od, pg, name, request)
        # only what it sends: not the choices or the row count
        self.sessions.drew(request, counts_of(run_id, it, name, request), line=line, table=df)
        return line, df, agree, clamp

    def walked(self, run_id, it, st, rv, od, pg, walk: WalkedTo | None, name, request: gr.Request):
        """After ``j``/``k`` (``studio.keys.wire_walk``): the queue's table and line read again, not the agreement
        (a key press must stay cheap; the agreement follows the decisions), sent through ``sessions.after_walk``
        (nothing over a newer read, only what changed). The picker's choices keep the label of the verdict walked to
        even when it has left the page (another curator's decision took it off a *Reviewed = no* queue): without it
        the picker showed its raw key."""
        def read(key: str) -> QueueRead:
            line, df, total, clamp = self.read(run_id, it, st, rv, od, pg, name, request)
            return QueueRead(line, df, page_labels(self.ctx.store, run_id, it, df, key), total, clamp,
                             counts_of(run_id, it, name, request))

        return self.sessions.after_walk(request, walk, read)
