"""``QueueSessions``: per browser session of one queue tab (Pairs, Critic), which read of the queue is the newest and
what the page last drew of it, so that the refresh after ``j``/``k`` (``studio.keys.wire_walk``) never paints over a
newer read and sends only what changed.

Newest first. The views several triggers refresh are each one ``always_last`` event (``studio.app.CONCURRENCY``), but
the walk's refresh is an event of its own beside the tab's load and the action reloads, and one session's events
overlap. A refresh that landed after the load of the page a second ``j`` crossed to left the page box on 2 under page
1's table and choices; one that landed after a swap's reload drew the pair as it was before the swap. So every
*painter* of the queue (the tab's load; the action reloads go through it) starts a new generation of the session when
it starts (``begin``) and again when it has drawn (``drew``: a refresh that began while it was reading may have read
what it was about to replace), and so does every move (a later move's refresh is the one that counts). A move keeps
the generation it started (``WalkedTo``); its refresh sends nothing (``gr.skip()`` for every output) when the
session's generation is another by the time it has read.

Only what changed. A refresh re-sent the table, its line and the picker's choices at every key press: a table sent
again is drawn again (the renderer's cost ``studio.pace`` and ``studio.redraw`` measure), and on the Pairs tab a new
table value fires ``table.change``, a whole-run curation summary. The painters record the signatures of the parts
they sent (``studio.redraw.signature``), and the refresh sends only the parts whose signature differs
(``studio.redraw.only_changed``). A painter records only the parts it sends: an action's reload that leaves the
picker's choices or the row count as they are must not claim to have drawn them.

The team counters' timer (``studio.team_counters``) paints the line alone, between the others: ``recount`` rewrites the
counter inside the line the session last drew (kept as text with what its counter counts, ``counts``), sends it only
when it changed, and sends nothing when the session began another generation while it read (it paints over no newer
read; it begins none itself, so a walk's refresh in flight still sends its table). A read that began before the
tick's and lands after it may paint its slightly older counter over the tick's: the next tick puts it right.

Kept on the server, keyed by ``request.session_hash``: a ``gr.State`` reaches a handler as it was when its event
started, so a refresh could not see a load that began after it. At most ``SESSIONS`` sessions are kept, the least
recently used forgotten first; a forgotten session's next refresh is skipped (its generation is new) or sends every
part once.
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import gradio as gr
import pandas as pd

from studio.redraw import only_changed, signature

SESSIONS = 1024  # far more browser sessions than a team opens at once; each keeps an int, four digests and a line
# The parts of the queue a painter or the walk's refresh sends, in the refresh's output order (before the page box).
PARTS = ("line", "table", "choices", "total")


class WalkedTo(NamedTuple):
    """Where a ``j``/``k`` went on its page (``key``; the item it stayed on when it could not move) and the session's
    generation it started: its refresh paints only while that generation is still the session's."""

    key: str
    generation: int


class QueueRead(NamedTuple):
    """A tab's queue as the walk's refresh read it: the line above the table, the page's rows, the picker's choices,
    the row count, the page box's update (sent as it is: a clamp to the last page) and what the line's team counter
    counts (``studio.team_counters.Counts``; None: the tick leaves the line alone)."""

    line: str
    table: pd.DataFrame
    choices: list[tuple[str, str]]
    total: int
    page: Any
    counts: Any = None


@dataclass
class _Session:
    generation: int
    drawn: dict[str, str] = field(default_factory=dict)  # part -> signature of what the page shows
    # The line the page shows, as text, and what its team counter counts: the counters' tick rewrites it in place.
    line: tuple[str, Any] | None = None


class QueueSessions:
    """One queue tab's sessions (see the module docstring). Thread-safe: a session's events run on several of the
    queue's workers at once."""

    def __init__(self, limit: int = SESSIONS) -> None:
        self._limit = limit
        self._sessions: OrderedDict[str | None, _Session] = OrderedDict()
        # One counter for all sessions: a session forgotten and met again never reuses a generation a move kept.
        self._generations = itertools.count(1)
        self._lock = threading.Lock()

    def _session(self, request: gr.Request | None) -> _Session:
        """The session's entry (made when new), as the most recently used; the caller holds the lock."""
        key = getattr(request, "session_hash", None)
        session = self._sessions.get(key)
        if session is None:
            session = self._sessions[key] = _Session(next(self._generations))
            while len(self._sessions) > self._limit:
                self._sessions.popitem(last=False)
        self._sessions.move_to_end(key)
        return session

    def begin(self, request: gr.Request | None) -> int:
        """A painter or a move starts: a new generation of the session, returned."""
        with self._lock:
            session = self._session(request)
            session.generation = next(self._generations)
            return session.generation

    def drew(self, request: gr.Request | None, counts: Any = None, **parts: Any) -> None:
        """A painter has read what it sends: the signatures of those parts (names from ``PARTS``; the choices as the
        ``(label, key)`` list), and a new generation (a refresh that began before is older than this drawing). With
        the line: its text and ``counts``, what its team counter counts (see ``recount``)."""
        with self._lock:
            session = self._session(request)
            session.drawn.update({name: signature(value) for name, value in parts.items()})
            if "line" in parts:
                session.line = (parts["line"], counts)
            session.generation = next(self._generations)

    def after_walk(self, request: gr.Request | None, walked: WalkedTo | None,
                   read: Callable[[str], QueueRead]) -> tuple:
        """The walk's refresh: ``read(key)`` of the item walked to, sent as ``(line, table, choices update, total,
        page)`` with the parts the page already shows skipped; every output skipped when the walk went to another
        page (``walked`` None: that page's change loads the queue) or when the session has begun another
        generation since the move."""
        nothing = (gr.skip(),) * (len(PARTS) + 1)
        if walked is None:
            return nothing
        queue = read(walked.key)
        # Signed as the painters sign them (the choices as their list); the choices go out as the picker's update.
        drawn_as = {"line": queue.line, "table": queue.table, "choices": queue.choices, "total": queue.total}
        sent_as = {**drawn_as, "choices": gr.update(choices=queue.choices)}
        parts = [(signature(drawn_as[name]), lambda name=name: sent_as[name]) for name in PARTS]
        with self._lock:  # the check and the record at once: a painter's drew() lands before or after both
            session = self._session(request)
            if session.generation != walked.generation:
                return nothing
            outputs, signatures = only_changed([session.drawn.get(name) for name in PARTS], parts)
            session.drawn = dict(zip(PARTS, signatures))
            session.line = (queue.line, queue.counts)
        return (*outputs, queue.page)

    def recount(self, request: gr.Request | None, rewrite: Callable[[str, Any], str | None]) -> Any:
        """The team counters' tick: ``rewrite(line, counts)`` (read outside the lock) is the line the session last drew
        with its counter read again, None when there is nothing to rewrite. Sent, and recorded as drawn, only when it
        differs from that line, the session began no generation meanwhile and drew no other line (a walk's refresh
        draws within its move's generation); ``gr.skip()`` otherwise, and for a session that has drawn no line (or
        was forgotten: a tick makes no entry)."""
        key = getattr(request, "session_hash", None)
        with self._lock:
            session = self._sessions.get(key)
            if session is None or session.line is None:
                return gr.skip()
            self._sessions.move_to_end(key)
            generation, drawn = session.generation, session.line
        line, counts = drawn
        new = rewrite(line, counts)
        with self._lock:  # the check and the record at once, as in after_walk
            session = self._sessions.get(key)
            # The same generation is not enough: a walk's refresh draws a newer line within the generation its move
            # began, so the line read must still be the one drawn (the same record, not an equal text).
            if (new is None or new == line or session is None or session.generation != generation
                    or session.line is not drawn):
                return gr.skip()
            session.line = (new, counts)
            session.drawn["line"] = signature(new)
        return new
