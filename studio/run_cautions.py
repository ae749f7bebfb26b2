"""The config cautions of the runs in a store (``engine.loop.stored_run_cautions``: a config that runs, but likely not
as meant), kept once per process for every page that shows them: the Run tab's box under its message
(``studio.tab_run.picked_run_cautions``) and the first-visit welcome (``studio.first_visit.welcome``) read through
this one cache.

Why a cache: the check is ``engine.preflight``, which reads the models' tokenizers (about a second), and every
session's first refresh asks for its run's, the welcome every 2 s. Keyed by (store file, run, the run's stored
config): a job that raises ``run.iterations`` changes the config and so the key, and the cautions are checked anew.
At most ``KEPT`` runs, the least recently used dropped first. A run the studio has just created is seeded with the
cautions its creation computed (``remember``: ``studio.new_run_config.create_run_from_text``,
``studio.first_visit.start_showcase``), so its first refresh does not run the preflight a second time. A check that
fails unexpectedly is logged and not kept: the next ask tries again.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict

from engine.loop import stored_run_cautions
from engine.store import Store

KEPT = 64

logger = logging.getLogger(__name__)
_cache: OrderedDict[tuple[str, str, str], list[str]] = OrderedDict()
_lock = threading.Lock()  # sessions refresh on Gradio's worker threads


def _key(store: Store, run_id: str) -> tuple[str, str, str] | None:
    run = store.get_run(run_id)
    if run is None:
        return None
    return str(store.path), run_id, json.dumps(run["config"], sort_keys=True, default=str)


def _keep(key: tuple[str, str, str], cautions: list[str]) -> None:
    with _lock:
        _cache[key] = list(cautions)
        _cache.move_to_end(key)
        while len(_cache) > KEPT:
            _cache.popitem(last=False)


def remember(store: Store, run_id: str, cautions: list[str]) -> None:
    """Keep ``cautions`` as those of ``run_id`` as the store holds it now: the ones its creation just computed."""
    key = _key(store, run_id)
    if key is not None:
        _keep(key, cautions)


def run_cautions(store: Store, run_id: str | None) -> list[str] | None:
    """The cautions of ``run_id``'s stored config (``[]``: none), from the cache or checked now and kept; None for no
    run, or when the check failed unexpectedly (logged, not kept): whoever shows them shows nothing then."""
    key = _key(store, run_id) if run_id else None
    if key is None:
        return None
    with _lock:
        cautions = _cache.get(key)
        if cautions is not None:
            _cache.move_to_end(key)  # least recently used goes first
            return list(cautions)
    try:
        cautions = stored_run_cautions(store, run_id)
    except Exception:  # noqa: BLE001 - anything: an optional note never stops a page's refresh
        logger.exception("the cautions of run %s could not be checked", run_id)
        return None
    _keep(key, cautions)
    return list(cautions)


def forget_all() -> None:
    """Empty the cache (tests: a run id is unique within one store file only)."""
    with _lock:
        _cache.clear()
