"""Filters that survive a reload: a tab's queue filters (order, status, search...) are kept in the browser's
localStorage (``gr.BrowserState``) and put back when the page loads again, per browser, so a curator who reloads
(or comes back tomorrow, while the studio runs) finds the queue as they left it.

Contract: ``remember(ctx, name, fields)`` with ``fields`` = ``{key: (component, events)}``. Every listed event saves
all the fields' values at once (in the browser, no server call); the page-load event restores them. Both are wired
by a hook in ``ctx.load_hooks`` that ``studio.app`` runs at the page's top level once every tab is built.
A saved value is data from the browser: it is put back only when the component accepts it (a choice it offers,
a string for a text box); anything else leaves the component at its default. Values are encrypted by
``gr.BrowserState`` with the studio's browser secret (``studio.browser_secret``: kept beside the store, so a restarted
studio still reads them).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import gradio as gr

from studio.common import Ctx


def _choices(component: gr.components.Component) -> list[Any] | None:
    """The values a choice component offers (None for free-form components)."""
    choices = getattr(component, "choices", None)
    if choices is None:
        return None
    return [c[1] if isinstance(c, (tuple, list)) else c for c in choices]


def accepted(component: gr.components.Component, value: Any) -> bool:
    """Would ``component`` take ``value`` back as it is (no invented choice, the right type)?"""
    options = _choices(component)
    if options is not None:
        return value in options
    if isinstance(component, gr.Checkbox):
        return isinstance(value, bool)
    return isinstance(value, str) and len(value) <= 1000


def restored(components: Sequence[gr.components.Component], keys: Sequence[str], saved: Any) -> list[Any]:
    """One update per component: the saved value where it is acceptable, else no change."""
    saved = saved if isinstance(saved, dict) else {}
    return [gr.update(value=saved[k]) if k in saved and accepted(c, saved[k]) else gr.update()
            for c, k in zip(components, keys)]


def remember(ctx: Ctx, name: str, fields: dict[str, tuple[gr.components.Component, Sequence[Callable]]]) -> None:
    """Keep ``fields``' values in this browser under ``moat-studio-<name>`` and restore them when the page loads."""
    keys = list(fields)
    components = [fields[k][0] for k in keys]
    triggers = [event for _, events in fields.values() for event in events]

    def hook(demo: gr.Blocks) -> None:
        # Made here, at the page's top level: inside a tab, Gradio mounts the component only when the tab is first
        # shown, and the page-load event would read its default instead of what the browser kept.
        box = gr.BrowserState({}, storage_key=f"moat-studio-{name}", secret=ctx.browser_secret)
        # Saved in the browser itself (no server round trip): a reload right after a change still finds it.
        save = f"(...v) => Object.fromEntries({json.dumps(keys)}.map((k, i) => [k, v[i]]))"
        gr.on(triggers, None, components, box, js=save, show_progress="hidden", api_name=f"{name}_filters_save",
              api_visibility="undocumented")
        demo.load(lambda saved: restored(components, keys, saved), box, components, show_progress="hidden",
                  api_name=f"{name}_filters_restore", api_visibility="undocumented")

    ctx.load_hooks.append(hook)
