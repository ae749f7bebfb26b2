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
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from typing import Any

import gradio as gr
import pandas as pd

from studio.common import Ctx, who_of
from studio.critic_queue import PAGE, agreement_markdown, empty_note, page_labels, verdict_labels, verdict_table
from studio.live_views import Watch
from studio.picks import clamped_page, pick_update
from studio.queue_lines import queue_info, review_line, trained_line
from studio.queue_sessions import QueueRead, QueueSessions, WalkedTo
from studio.stage_text import skipped_reason
from studio.team_counters import counts_of


class CriticRefresh:
    """The Critic tab's queue reads for one app (``ctx``); ``order_id`` is the elem_id of the tab's Order dropdown,
    whose change starts the queue at its head. Its handlers take their inputs in the order the tab wires them."""

    def __init__(self, ctx: Ctx, order_id: str, live: Watch | None = None) -> None:
        self.ctx = ctx
        self.order_id = order_id
        self.sessions = QueueSessions()  # the newest read of the queue and what it drew, per browser session
        self.live = live  # the tab's live reload (studio.live_views): told what each load and reload read under

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
        return line, df, total, clamp, agreement_markdown(self.ctx.store, run_id, it)

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
