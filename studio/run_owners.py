"""Which browser created which run: ``RunOwners``, one per store, held by the store's ``studio.jobs.JobWorker``
(``JobWorker.owners``) and so shared by every session, as the worker is. A page is a browser session (Gradio's
``request.session_hash``, ``studio.common.session_of``), the same id a job records as its starter.

A browser is the pages that showed one *visitor key*: a random token (``new_visitor_key``) the studio keeps in the
browser's localStorage (``studio.app``: a ``gr.BrowserState``, on a Space only) and binds to each of its pages as
the page loads (``bind``), before anything on the page reads the runs. So a visitor's reload, or a second tab of the
same browser, is the same owner: before, ownership was the page's, and a reload made a visitor's own run read-only
(and its job unstoppable) until they started another. A page with no bound key (an API client that never loaded the
page, a test) is its own owner, as before.

The record only states the fact (``record``, ``creator``, ``created_by``, ``same_owner``); the rule that reads it is
``studio.curation_rights``'s: on a Hugging Face Space a page curates only the runs its browser created, as it stops
only the job its browser started (``JobWorker.own_jobs_only``). A run nobody recorded (the first-visit showcase run,
which the studio creates itself; a run created before this process started) has no creator, and no page may curate
it there.

Kept in memory, not in the store: a restart of the Space drops every record, which leaves every earlier run
read-only on the Space: the safe side. The key proves nothing but possession: it is 128 random bits that only the
browser holding it sends, so another visitor cannot name it. It holds one entry per run the studio created (a Space
keeps at most ``studio.spaces_policy.MAX_SPACES_RUNS`` runs) and one per page load that bound a key (a few dozen
bytes each; bounded by ``MAX_PAGES``, oldest dropped first).
"""

from __future__ import annotations

import re
import secrets
import threading
from collections import OrderedDict

# A key the studio made (secrets.token_urlsafe(16)): anything else a page sends is replaced by a new one.
VISITOR_KEY = re.compile(r"[A-Za-z0-9_-]{22}")
MAX_PAGES = 10_000  # page loads remembered; a forgotten page is its own owner again (the safe side)


def new_visitor_key() -> str:
    return secrets.token_urlsafe(16)


def visitor_key_or_new(saved: object) -> tuple[str, bool]:
    """``(key, is_new)``: the key a browser kept, when it is one the studio makes, else a new one."""
    if isinstance(saved, str) and VISITOR_KEY.fullmatch(saved):
        return saved, False
    return new_visitor_key(), True


class RunOwners:
    """``run_id -> the owner that created it``, for the runs this process created from a page; an owner is a
    browser's visitor key (``bind``), else the page's session id."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._creators: dict[str, str] = {}
        self._visitors: OrderedDict[str, str] = OrderedDict()  # session -> visitor key

    def bind(self, session: str | None, visitor: str) -> None:
        """The page of ``session`` belongs to the browser holding ``visitor``."""
        if not session or not visitor:
            return
        with self._lock:
            self._visitors[session] = f"visitor:{visitor}"  # never equal to a session id
            self._visitors.move_to_end(session)
            while len(self._visitors) > MAX_PAGES:
                self._visitors.popitem(last=False)

    def _owner(self, session: str | None) -> str | None:
        """Under the lock: the owner a page of ``session`` acts as."""
        return self._visitors.get(session, session) if session else None

    def record(self, run_id: str, session: str | None) -> None:
        """``session``'s owner created ``run_id``. A run created without a session (an API call without one, the
        studio's own showcase run) is left unrecorded: no page could ever match it."""
        if not session:
            return
        with self._lock:
            self._creators.setdefault(run_id, self._owner(session))  # the first record wins: a run is created once

    def creator(self, run_id: str | None) -> str | None:
        """The owner that created ``run_id`` (a visitor key or a session id), or None when none is recorded."""
        if not run_id:
            return None
        with self._lock:
            return self._creators.get(run_id)

    def created_by(self, run_id: str | None, session: str | None) -> bool:
        """Whether ``session``'s owner (its browser, or the page alone) created ``run_id``."""
        if not run_id or not session:
            return False
        with self._lock:
            return self._creators.get(run_id) == self._owner(session)

    def same_owner(self, session: str | None, other: str | None) -> bool:
        """Whether the pages of ``session`` and ``other`` are one owner (one page, or two of one browser)."""
        if not session or not other:
            return False
        with self._lock:
            return self._owner(session) == self._owner(other)
