"""Which page created which run: ``RunOwners``, one per store, held by the store's ``studio.jobs.JobWorker``
(``JobWorker.owners``) and so shared by every session, as the worker is. A page is a browser session (Gradio's
``request.session_hash``, ``studio.common.session_of``), the same id a job records as its starter.

The record only states the fact (``record``, ``creator``); the rule that reads it is ``studio.curation_rights``'s: on a
Hugging Face Space a page curates only the runs it created, as it stops only the job it started
(``JobWorker.own_jobs_only``). A run nobody recorded (the first-visit showcase run, which the studio creates itself; a
run created before this process started) has no creator, and no page may curate it there.

Kept in memory, not in the store: a session id means something only while its page is open in this process. A reload
opens a new session and a restart of the Space drops every session, so an id kept in the store would name a page that
can never come back. Losing the record on a restart leaves every earlier run read-only on the Space: the safe side. It
holds one entry per run the studio created (a Space keeps at most ``studio.spaces_policy.MAX_SPACES_RUNS`` runs).
"""

from __future__ import annotations

import threading


class RunOwners:
    """``run_id -> the session that created it``, for the runs this process created from a page."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._creators: dict[str, str] = {}

    def record(self, run_id: str, session: str | None) -> None:
        """``session`` created ``run_id``. A run created without a session (an API call without one, the studio's
        own showcase run) is left unrecorded: no page could ever match it."""
        if not session:
            return
        with self._lock:
            self._creators.setdefault(run_id, session)  # the first record wins: a run is created once

    def creator(self, run_id: str | None) -> str | None:
        """The session that created ``run_id``, or None when none is recorded."""
        if not run_id:
            return None
        with self._lock:
            return self._creators.get(run_id)

    def created_by(self, run_id: str | None, session: str | None) -> bool:
        """Whether the page of ``session`` created ``run_id``."""
        return bool(session) and self.creator(run_id) == session
