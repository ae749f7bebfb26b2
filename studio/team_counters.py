"""The team's "reviewed N of M by the team, K by you" on a queue tab (Pairs, Critic), kept current for a curator who
only reads: ``wire_counters`` adds a ``gr.Timer`` that every ``COUNTERS_S`` reads the two counts again
(``engine.review_trail.review_progress``) and rewrites that counter inside the line above the table, nothing else.
A tab's other line that follows the team (the Critic tab's agreement) is a second output of the same tick: one timer,
one switch and one request a tick per tab.

Takes the tab's ``studio.queue_sessions.QueueSessions``, whose painters record the line they drew and what its
counter counts (``Counts``: the run, the iteration and the curator the line was read for, not what the pickers hold
when the timer ticks, which may be a run whose load has not drawn yet). Sends nothing when the count is unchanged,
when the line has no counter (an iteration without items), or when the session began another read of the queue
while the tick read (``QueueSessions.recount``). Never touches the table, the picker, the detail or anything a
curator edits. The timer ticks only while its tab is shown (``Ctx.tab``) with a run and an iteration (``Ctx.view``):
every tick costs the whole page a pass over its components (``studio.pace``), and a hidden tab's counter is read
again when the tab is shown, at its next tick or key press.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import gradio as gr

from studio.common import Ctx, who_of
from studio.queue_lines import review_line
from studio.queue_sessions import QueueSessions

# Every event costs the page a pass over all its components (studio.pace), so the counters follow the team at the
# page's idle pace (studio.pace.IDLE_S), not faster: a teammate's decision shows within 10 s, and the curator's own
# key presses and actions still redraw the counter at once.
COUNTERS_S = 10.0
# The counter as studio.queue_lines.review_line writes it. The last one in a line is the counter: the line's head may
# quote a search text, and what follows the counter (the trained warning) never reads like one.
COUNTER = re.compile(r" · reviewed \d+ of \d+ by the team(?:, \d+ by you)?")

# What a line's counter counts: the run, the iteration (None when not picked: the line has no counter then) and the
# curator (None: no "by you").
Counts = tuple[str | None, int | None, str | None]


def counts_of(run_id: str | None, iteration: int | None, name: str | None, request: gr.Request | None) -> Counts:
    """What the counter in a line read for this run, iteration and curator name counts (``who_of``: a login wins)."""
    return run_id, iteration, who_of(name, request)


def recounted(line: str, counter: str) -> str:
    """``line`` with its counter (the last ``COUNTER``) replaced by ``counter``; unchanged when it has none."""
    found = list(COUNTER.finditer(line))
    if not found:
        return line
    return line[:found[-1].start()] + counter + line[found[-1].end():]


def recount(ctx: Ctx, target: str, sessions: QueueSessions, request: gr.Request | None) -> Any:
    """One tick: the session's line with its ``target`` (pair | verdict) counter read again, or ``gr.skip()``."""
    def rewrite(line: str, counts: Counts | None) -> str | None:
        if counts is None or not COUNTER.search(line):  # no counter in the line: nothing to read
            return None
        run_id, iteration, who = counts
        return recounted(line, review_line(ctx.store, run_id, iteration, target, who))

    return sessions.recount(request, rewrite)


def active_js(tab_id: str) -> str:
    """The browser-side ``(view, tab) -> the timer's update``: on while the page shows ``tab_id`` (``Ctx.tab``) and a
    run and an iteration (``Ctx.view``, ``studio.app.view_key``: ``"<run>\\n<iteration>"``, either part empty when
    none is picked). In the browser, so a tab switch asks the server nothing."""
    return ("(view, tab) => { const [run, it] = String(view ?? '').split('\\n'); "
            f"return {{__type__: 'update', active: tab === {json.dumps(tab_id)} && !!run && !!it}}; }}")


def wire_counters(ctx: Ctx, target: str, info: gr.Markdown, sessions: QueueSessions,
                  also: tuple[gr.Markdown, Callable[[gr.Request | None], Any]] | None = None) -> gr.Timer:
    """The timer of one queue tab (``target`` pair | verdict) and its two events: the tick (``/{tab}_counters``,
    ``info`` its output) and, in the browser, its switch on and off (``/{tab}_counters_on``: ``active_js``, at
    each change of the view key or the tab shown); tab ``pairs`` or ``critic`` (both undocumented). ``also``: another
    line of the tab that follows the team at the same pace (the Critic tab's agreement, ``studio.critic_refresh``)
    and its tick (``request -> its update or gr.skip()``), a second output of the same event: one request a tick,
    not one a line. Returns the timer."""
    tab_id = "pairs" if target == "pair" else "critic"
    timer = gr.Timer(COUNTERS_S, active=False)
    outputs = [info] if also is None else [info, also[0]]

    def tick(request: gr.Request) -> Any:
        counter = recount(ctx, target, sessions, request)
        return counter if also is None else (counter, also[1](request))

    # "once": a tick still running when the next one comes (a loaded store) drops it; there is another in 10 s.
    timer.tick(tick, None, outputs, api_name=f"{tab_id}_counters", api_visibility="undocumented",
               show_progress="hidden", trigger_mode="once")
    gr.on([ctx.view.change, ctx.tab.change], None, [ctx.view, ctx.tab], timer, js=active_js(tab_id),
          api_name=f"{tab_id}_counters_on", api_visibility="undocumented", show_progress="hidden")
    return timer
