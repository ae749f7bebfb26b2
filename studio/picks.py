"""What the studio's pickers, page boxes and filter radios are set to: the run's iterations and the one picked by
default (``run_iterations``, ``default_iteration``), a queue picker's choices and value after a reload of its page
(``pick_update``, ``with_own_label``), a table row click as a pick (``first_cell``), the page a queue shows
(``clamped_page``) and an "any / yes / no" radio as a filter (``tri``).

No state kept between calls: each takes what it reads (the store, a page fetch) as an argument. The component
whose choices move is ``studio.picker.Picker``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gradio as gr

from engine.store import Store


def run_iterations(store: Store, run_id: str | None) -> list[int]:
    return store.iterations(run_id) if run_id else []


def default_iteration(iterations: list[int]) -> int | None:
    """The newest training iteration (>= 1) when there is one, else the newest."""
    training = [i for i in iterations if i >= 1]
    return (training or iterations or [None])[-1]


def clamped_page(fetch: Callable[[int], tuple[Any, int]], page: Any, size: int) -> tuple[Any, int, int]:
    """``(rows, total, page shown)`` of a queue read page by page (``fetch(page) -> (rows, total)``, total 0 on a
    page past the end): a page past the last one (a typed 99, or filters that narrowed the queue under the curator)
    shows the last page instead of an empty one that reads as "no rows at all"."""
    page = max(int(page or 1), 1)
    rows, total = fetch(page)
    if total or page == 1:
        return rows, total, page
    _, total = fetch(1)
    if not total:
        return rows, 0, 1
    last = max(1, -(-total // size))
    rows, total = fetch(last)
    return rows, total, last


def pick_update(labels: list[tuple[str, str]], keys: list[str], current: str | None, keep: bool = False) -> dict:
    """The queue picker after a reload of its page: the new choices, and the first item only when the pick the
    request carried is not on the page. When it is, the value is left out of the update, so a reload that was in
    flight while the curator moved (j, a row click) cannot put the pick back where it was when the reload left.
    ``keep`` (a live reload, ``studio.live_views``): a pick is never moved, on the page or not (an action took it
    off a filtered page, and the curator may be editing it): only an empty picker takes the first item. Pass
    ``labels`` with the pick's own label among them then (``with_own_label``)."""
    if current in keys or (keep and current):
        return gr.update(choices=labels)
    return gr.update(choices=labels, value=keys[0] if keys else None)


def with_own_label(labels: list[tuple[str, str]], current: str | None,
                   label_of: Callable[[str], str]) -> list[tuple[str, str]]:
    """A queue picker's choices for a page (``(label, key)`` each) with ``current``, the pick, kept among them under
    its own label (``label_of(current)``) when it is not on the page: an action took it off the filtered queue, or a
    refresh read a page it has since left. Without it the picker shows the pick as its raw key. A pick
    ``label_of`` cannot name (ValueError, KeyError, LookupError: ``studio.picker`` passes stale ones) is left out."""
    if not current or current in {key for _, key in labels}:
        return labels
    try:
        return [*labels, (label_of(current), current)]
    except (ValueError, KeyError, LookupError):
        return labels


def first_cell(evt: gr.SelectData) -> Any:
    """A Dataframe row click -> the row's first cell (its key), for wiring ``table.select`` to a picker."""
    return evt.row_value[0] if evt.row_value else gr.update()


def tri(value: str) -> bool | None:
    """A "any / yes / no" radio as None / True / False."""
    return {"yes": True, "no": False}.get(value)
