"""Where a curator was, kept in their browser: the tab, run and iteration come back after a reload.

``studio.app`` keeps ``{"tab", "run", "iteration"}`` in a ``gr.BrowserState`` whenever one of them changes (built in
the browser by ``save_js``, so a reload right after a change still finds it), and on page load ``read(saved, tabs)``
turns what the browser sent back into a place the page can take; ``pick_run`` and
``pick_iteration`` then choose the picker values: the saved ones where this store still has them, else the defaults
(the ``landing`` run when given and still there: on Spaces the first-visit demo run,
``studio.first_visit.showcase_run``, which the welcome talks about, rather than another visitor's newest experiment;
else the newest run; its newest training iteration with a stage done, ``done_iterations``, so a visitor does not land
on an iteration that has only just started and shows empty pages; else its newest training iteration). A saved value
is data from the browser: anything that is not a known tab, a string run id or an integer iteration is ignored. The
iteration is kept only when the curator picked it: while the picker shows the studio's own pick the place saves none
(``save_js``), so a reload takes the default of that moment (the run may have trained further meanwhile).
Like ``studio.remember``'s, the values are encrypted with the studio's browser secret (``studio.browser_secret``),
which outlives a restart.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from engine.store import Store
from studio.picks import default_iteration


def save_js(tab: str | None = None) -> str:
    """The browser-side function ``(run, iteration, auto, saved) -> place`` that builds the place from the pickers:
    for ``tab``, or (None) for the tab the page shows now, read from the selected tab button's ``data-tab-id``. With
    no run picked it returns ``saved`` unchanged: while a page loads, Gradio fires change and select events before the
    page-load restore has read what the browser kept, and those must not overwrite it. ``auto`` is the iteration the
    studio picked itself (null once the curator picks): while the picker shows it, the place keeps no iteration
    (``null``, which ``read`` drops), so a reload takes the default again instead of pinning the studio's old pick."""
    shown = ("(() => { const b = document.querySelector('button[role=\"tab\"][aria-selected=\"true\"][data-tab-id]');"
             " return b ? b.dataset.tabId : 'run'; })()")
    which = json.dumps(tab) if tab is not None else shown
    kept = "(auto != null && iteration === auto ? null : iteration)"
    return f"(run, iteration, auto, saved) => (run == null ? saved : {{tab: {which}, run, iteration: {kept}}})"


def read(saved: Any, tabs: Mapping[str, str]) -> dict[str, Any]:
    """The acceptable parts of a saved place: ``tab`` (one of ``tabs``' ids), ``run`` (a string), ``iteration``
    (an int, only beside a run)."""
    if not isinstance(saved, dict):
        return {}
    out: dict[str, Any] = {}
    if isinstance(saved.get("tab"), str) and saved["tab"] in tabs:
        out["tab"] = saved["tab"]
    if isinstance(saved.get("run"), str) and 0 < len(saved["run"]) <= 200:
        out["run"] = saved["run"]
        it = saved.get("iteration")
        if isinstance(it, int) and not isinstance(it, bool):
            out["iteration"] = it
    return out


def pick_run(runs: list[str], wanted: Any, landing: str | None = None) -> str | None:
    """The saved run where the store has it, else ``landing`` where the store has it (the run a session without a
    saved place opens on: on Spaces the first-visit demo run), else the newest (None for an empty store)."""
    run = wanted.get("run") if isinstance(wanted, dict) else None
    if run in runs:
        return run
    return landing if landing in runs else (runs[-1] if runs else None)


def done_iterations(store: Store, run_id: str | None, iterations: list[int]) -> list[int]:
    """Those of ``iterations`` with at least one stage done: the ones whose pages have something to show."""
    if not run_id:
        return []
    return [i for i in iterations if any(s["status"] == "done" for s in store.stage_status(run_id, i).values())]


def pick_iteration(iterations: list[int], run_id: str | None, wanted: Any,
                   done: list[int] | None = None) -> int | None:
    """The saved iteration when ``run_id`` is the saved run and has it, else the picker's default: the newest
    training iteration (>= 1) among ``done`` (``done_iterations``), else ``studio.picks.default_iteration``."""
    if isinstance(wanted, dict) and wanted.get("run") == run_id and wanted.get("iteration") in iterations:
        return wanted["iteration"]
    trained = [i for i in done or [] if i >= 1 and i in iterations]
    return max(trained) if trained else default_iteration(iterations)
