"""``poll_seconds(jobs, busy_s) -> float``: how often a page's timers ask the server, by whether a job is running.

Every timer tick is a Gradio event, and every event costs the browser far more than its outputs: the page updates
every component's loading status and clones their values (measured on an idle Pairs tab with the Run tab's 2 s and
the iteration sync's 3 s timers: 9.9 s of renderer main-thread time per 10 s, against 0.35 s with the timers off).
On a 2-core machine that starved the curator's own events (a ``j`` key took more than 15 s in CI).

The studio owns its store (DuckDB: one process), so stages and iterations change only while its job worker runs a
job. The timers tick every ``busy_s`` then and every ``IDLE_S`` otherwise; the idle pace only has to notice a job that
another session started (busy paces: the Run tab's ``RUN_TAB_BUSY_S``, the iteration picker's ``SYNC_BUSY_S``, the
data tabs' live reload's ``LIVE_BUSY_S``, ``studio.live_views``). A job started from this page turns its timer to the
busy pace at once (``tab_run``).
"""

from __future__ import annotations

from studio.jobs import JobWorker

IDLE_S = 10.0  # no job running: only another session's new job can change what the timers show
RUN_TAB_BUSY_S = 2.0  # the Run tab's pipeline, job log, stage table and loss chart while a job runs
SYNC_BUSY_S = 3.0  # the iteration picker's new iterations while a job runs
# The data tabs' live reload (studio.live_views) while a job runs: a first visit's user waits on the stage that fills
# the tab shown, and the check is one small query that sends nothing unless a stage has ended.
LIVE_BUSY_S = 3.0


def poll_seconds(jobs: JobWorker, busy_s: float) -> float:
    """``busy_s`` while ``jobs`` runs a job, else ``IDLE_S``."""
    return busy_s if jobs.snapshot().get("running") else IDLE_S
