"""``own_change(source, api_name) -> trigger``: the change of ``source`` as a trigger of one event alone, for an event
that has other triggers too (``gr.on([timer.tick, own_change(ctx.run, "run_refresh_on_run")], refresh, ...)``).

Why: Gradio's page (6.x, the dependency manager in ``Blocks``) runs an ``always_last`` event that a second trigger
asks for while it is still running once more when that call completes, but it does so by dispatching again the whole
trigger event the completed call was started for: every listener of that trigger runs again, not the deferred event
alone. The Run tab's refresh listened to its timer and to the run picker's change, and the Metrics tab's compare
list, experiments and figures to the run picker's change and to Refresh, the tab shown, the compare box or the live
trigger: a timer tick or a click on a tab while one of them ran for a page load fired the run picker's change a
second time, and the iteration pick, the Plans filters and every Metrics view computed again (most loads of a
CPU-throttled page did; ``tests/test_studio_browser_run_change.py``). The Plans list and the Pairs and Critic queues
listened to the view key's change (``Ctx.view``) beside their filters: a search submitted while the Plans list loaded
for the page's view held the view change back as a whole (the two queues waited for the Plans load) and then fired it
again (``tests/test_studio_browser_view_change.py``).

Contract: ``own_change`` adds a hidden textbox and a listener of ``source.change`` that runs in the browser only and
copies ``source``'s value into it (as text; "" for none), and returns the textbox's ``change``. Its only listener is
the caller's event, so a deferred run of that event runs it alone. The copy changes only when ``source``'s value
does, so a change of ``source`` fired again with the same value starts nothing. The copy is a trigger: the event
reads ``source`` itself as its input. One ``own_change`` per event: two events on one copy would run each other again.
A listener that runs in the browser only is never deferred, so the copying itself never runs ``source``'s listeners
again.
"""

from __future__ import annotations

from collections.abc import Callable

import gradio as gr

# The value as text: the copy is a textbox, and None (nothing picked) reads as "".
COPY_JS = "(value) => (value == null ? '' : String(value))"


def own_change(source: gr.components.Component, api_name: str) -> Callable:
    """A trigger that fires when ``source``'s value changes, for one event (see the module docstring). ``api_name``
    names the browser-only copying listener (undocumented, like the studio's other UI-internal events)."""
    copy = gr.Textbox("", visible="hidden", elem_classes="moat-own-change")
    source.change(None, source, copy, js=COPY_JS, show_progress="hidden", api_name=api_name,
                  api_visibility="undocumented")
    return copy.change
