"""The Pairs tab's queue as the page refreshes it (``PairsRefresh``): one read of a page of effective pairs and the
line above it (``read``: rows, page, the team's "reviewed N of M", the trained warning) behind every refresh of the
table, and the handlers that send it: the tab's load (any filter change, ``/pairs_search``: also the two charts and
the text filters it applied), an action's reload (also the charts) and the walk's refresh after ``j``/``k`` (the table
and its line only: a key press stays cheap). ``studio.tab_pairs`` lays out the page and wires these to its events.

Every read goes through the tab's ``studio.queue_sessions.QueueSessions`` (``sessions``): the load and the reloads
start a new generation of the session's queue and record what they drew; the walk's refresh paints nothing over a
newer read and sends only what changed; the painters record what the line's team counter counts, for the counters'
timer (``studio.team_counters``). The load and the reloads also tell the tab's live reload (``studio.live_views``,
``live``) what they read under, before they read: a stage it watches that ends for the view then reloads the page
through the load (the same event as a filter change), keeping the pick (on the page or not), the page and the
filters as last applied (never text typed and not submitted).

The Search / Min / Max boxes filter on Enter only (and ``studio.remember`` keeps them only then): the load returns the
text it applied (a ``gr.State``, ``[min, max, text]``), and the reloads and the walk's refresh read the queue through
it, never through text typed and not submitted; a live reload reads the same text as the live view recorded it
(``Watch.applied``: the load's inputs carry no state of it). The radios and the order filter at each change, so their
boxes are what was applied. A page past the last shows the last (``studio.picks.clamped_page``) and moves the page box
there.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import gradio as gr
import pandas as pd

from studio.common import Ctx, who_of
from studio.live_views import Watch
from studio.pairs_charts import _pair_stats, length_figure, margin_figure
from studio.pairs_queue import PAGE, empty_note, number, page_labels, pairs_table
from studio.picks import clamped_page, pick_update
from studio.queue_lines import queue_info, review_line, trained_line
from studio.queue_sessions import QueueRead, QueueSessions, WalkedTo
from studio.stage_text import skipped_reason
from studio.team_counters import counts_of

# The text filters before any load applied one: none.
NO_TEXT_FILTERS = ("", "", "")


class PairsRefresh:
    """The Pairs tab's queue reads for one app (``ctx``); ``order_id`` is the elem_id of the tab's Order dropdown,
    whose change starts the queue at its head. Its handlers take their inputs in the order the tab wires them."""

    def __init__(self, ctx: Ctx, order_id: str, live: Watch | None = None) -> None:
        self.ctx = ctx
        self.order_id = order_id
        self.sessions = QueueSessions()  # the newest read of the queue and what it drew, per browser session
        self.live = live  # the tab's live reload (studio.live_views): told what each load and reload read under

    def read(self, run_id, it, lo, hi, txt, ov, ex, ti, od, pg, name, request: gr.Request | None
             ) -> tuple[str, pd.DataFrame, int, Any]:
        """The queue's page and the line above it (rows, page, the team's "reviewed N of M", the trained warning):
        the read behind every refresh of the table (a filter, the page box, an action, ``j``/``k``).
        ``(line, rows, total, the page box's update)``: the page shown when the one asked for is past the last."""
        store = self.ctx.store
        lo, hi, asked = number(lo), number(hi), max(int(pg or 1), 1)
        # A page past the last one (typed, or filters that narrowed the queue) shows the last page, and says so.
        df, total, shown = clamped_page(
            lambda p: pairs_table(store, run_id, it, min_margin=lo, max_margin=hi, text=txt, overridden=ov,
                                  excluded=ex, ties=ti, order=od, page=p), asked, PAGE)
        # With no row: why (the iteration has none at all, or the filters; one count without filters tells).
        unfiltered = total or (pairs_table(store, run_id, it, size=1)[1] if run_id and it is not None else 0)
        line = queue_info(total, asked, shown, PAGE,
                          "" if total else empty_note(it, lo, hi, txt, ov, ex, ti, unfiltered,
                                                      None if unfiltered else skipped_reason(store, run_id, it,
                                                                                              "pairs")))
        if unfiltered:  # an iteration without pairs has nothing to review: no "reviewed 0 of 0"
            line += review_line(store, run_id, it, "pair", who_of(name, request))
            line += trained_line(store, run_id, it, "pair")
        return line, df, total, shown if shown != asked else gr.update()

    def full_read(self, run_id, it, lo, hi, txt, ov, ex, ti, od, pg, name, request: gr.Request | None
                  ) -> tuple[str, pd.DataFrame, int, Any, Any, Any]:
        """What the load and an action's reload both send: ``read``'s ``(line, rows, total, page box)`` and the two
        charts. A new generation of the session's queue: a walk's refresh still reading paints nothing over it."""
        self.sessions.begin(request)
        # The stamp recorded before the read (a stage that ends during it is seen by the next check), with the text
        # filters it applies (what a live reload reads); put back when the read refuses them (studio.live_views).
        reading = self.live.reading(request, run_id, it, [lo, hi, txt]) if self.live is not None else nullcontext()
        with reading:
            line, df, total, page_box = self.read(run_id, it, lo, hi, txt, ov, ex, ti, od, pg, name, request)
        # Both charts from one stats query: this page is the one every curator reloads after each action.
        stats = _pair_stats(self.ctx.store, run_id, it) if run_id and it is not None else None
        return (line, df, total, page_box, margin_figure(self.ctx.store, run_id, it, stats),
                length_figure(self.ctx.store, run_id, it, stats))

    def load(self, run_id, it, lo, hi, txt, ov, ex, ti, od, pg, current, name, request: gr.Request,
             evt: gr.EventData = None):
        """``/pairs_search``: ``(line, rows, picker, margin chart, length chart, row count, the text filters applied,
        page box)``. A new order starts at its head: page 1, the pick left to the page's first pair. A live reload
        (``studio.live_views``: a stage the tab reads ended) reads the text filters the session's last load applied,
        not the boxes (text typed and not submitted), and moves no pick, even one no longer on the page."""
        # By elem_id, not identity: the served app's event names a copy of the component built here.
        reordered = getattr(getattr(evt, "target", None), "elem_id", None) == self.order_id
        if reordered:
            # The pick stayed where it was, often last in the new order, where `j` had nowhere to go and said nothing.
            pg, current = 1, None
        live = self.live is not None and self.live.fired(evt, request, run_id, it)
        if live:
            lo, hi, txt = self.live.applied(request) or NO_TEXT_FILTERS
        line, df, total, page_box, hist_fig, bias_fig = self.full_read(run_id, it, lo, hi, txt, ov, ex, ti, od, pg,
                                                                       name, request)
        labels = page_labels(self.ctx.store, run_id, it, df, current if live else None)
        self.sessions.drew(request, counts_of(run_id, it, name, request), line=line, table=df, choices=labels,
                           total=total)
        return (line, df, pick_update(labels, list(df["key"]), current, keep=live), hist_fig, bias_fig, total,
                [lo, hi, txt], 1 if reordered else page_box)

    def walked(self, run_id, it, filtered, ov, ex, ti, od, pg, walk: WalkedTo | None, name, request: gr.Request):
        """After ``j``/``k`` (``studio.keys.wire_walk``): the queue's table and line read again, no charts (a key press
        must stay cheap; the charts follow the actions), sent through ``sessions.after_walk`` (nothing over a newer
        read, only what changed). The picker's choices keep the label of the pair walked to even when it has left the
        filtered page."""
        lo, hi, txt = filtered or NO_TEXT_FILTERS

        def read(key: str) -> QueueRead:
            line, df, total, page_box = self.read(run_id, it, lo, hi, txt, ov, ex, ti, od, pg, name, request)
            return QueueRead(line, df, page_labels(self.ctx.store, run_id, it, df, key), total, page_box,
                             counts_of(run_id, it, name, request))

        return self.sessions.after_walk(request, walk, read)

    def reload(self, run_id, it, filtered, ov, ex, ti, od, pg, current, name, request: gr.Request):
        """After an action: refresh everything but the picked pair, whose label among the picker's choices follows
        the action (a swap reads "plan 7 over 4" from then on): choices only, never the value. The filters as the
        last load applied them."""
        lo, hi, txt = filtered or NO_TEXT_FILTERS
        line, df, _total, page_box, hist_fig, bias_fig = self.full_read(run_id, it, lo, hi, txt, ov, ex, ti, od, pg,
                                                                        name, request)
        labels = page_labels(self.ctx.store, run_id, it, df, current)
        # Not the row count: no output here.
        self.sessions.drew(request, counts_of(run_id, it, name, request), line=line, table=df, choices=labels)
        return line, df, gr.update(choices=labels), hist_fig, bias_fig, page_box
