"""Short leases on queue items, so two curators walking one queue are not handed the same item at the same time.

Contract: ``LeaseBook(ttl_s)`` holds, per queue (any hashable, e.g. ``("pair", run_id, iteration)``), which curator
last opened which item and when. ``claim(queue, item, curator)`` gives the item to ``curator`` unless another
curator opened it less than ``ttl_s`` seconds ago (then it returns that holder's name and claims nothing);
opening another item releases the curator's previous one in that queue. ``taken(queue, items, curator)`` is the
subset of ``items`` held by someone else right now (what ``j``/``k`` skip), ``holder(queue, item, curator)`` who
else holds one item (an undo on it is refused); ``release(curator)`` drops all of a
curator's items. The studio claims an item when a curator opens it and again when they decide on it (refused, with
the holder's name, when another curator has it). In memory and thread-safe: the studio is the one process that
serves a team's store (DuckDB admits one), so its memory is the team's; a lease never outlives ``ttl_s`` or the
process, and an anonymous session (no curator name yet) neither takes nor is refused one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Iterable


class LeaseBook:
    def __init__(self, ttl_s: float = 90.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self._clock = clock
        self._held: dict[Hashable, dict[str, tuple[str, float]]] = {}  # queue -> item -> (curator, since)
        self._lock = threading.Lock()

    def _live(self, queue: Hashable) -> dict[str, tuple[str, float]]:
        items = self._held.setdefault(queue, {})
        now = self._clock()
        for item in [i for i, (_, since) in items.items() if now - since >= self.ttl_s]:
            del items[item]
        return items

    def claim(self, queue: Hashable, item: str, curator: str | None) -> str | None:
        """Give ``item`` to ``curator``; returns ``None`` on success, else the curator who holds it."""
        if not curator:
            return None
        with self._lock:
            items = self._live(queue)
            holder = items.get(item)
            if holder is not None and holder[0] != curator:
                return holder[0]
            for other in [i for i, (who, _) in items.items() if who == curator and i != item]:
                del items[other]  # one open item per curator and queue
            items[item] = (curator, self._clock())
            return None

    def release(self, curator: str | None) -> None:
        """Drop every item ``curator`` holds, in every queue (a curator who corrected their name: the old name
        would otherwise hold their item against them)."""
        if not curator:
            return
        with self._lock:
            for items in self._held.values():
                for item in [i for i, (who, _) in items.items() if who == curator]:
                    del items[item]

    def holder(self, queue: Hashable, item: str, curator: str | None) -> str | None:
        """Who other than ``curator`` holds ``item`` now (None: nobody, or ``curator``), claiming nothing."""
        with self._lock:
            held = self._live(queue).get(item)
            return held[0] if held is not None and held[0] != curator else None

    def taken(self, queue: Hashable, items: Iterable[str], curator: str | None) -> set[str]:
        """The ``items`` another curator holds now (none for an anonymous session)."""
        if not curator:
            return set()
        with self._lock:
            live = self._live(queue)
            return {i for i in items if i in live and live[i][0] != curator}
