"""The view key's change (``Ctx.view``: the run and iteration shown) loads each data tab once per page load: in a real
browser (Debian's Chromium driven by Playwright) on the hand-made world of ``tests/_store_world.py`` served in this
process, and in the app's wiring (no event on the server listens to the view key's change beside another trigger).

Why it loaded them more than once: Gradio's page runs an ``always_last`` event that a second trigger asks for while
it is still running once more when it completes, by dispatching again the whole trigger event the running call was
started for (``studio.relay``). The Plans list, the Pairs queue and the Critic queue each listened to the view key's
change beside their filters, pages and live triggers, so a search submitted (or a page turned, a filter picked) in one
tab while its load for the page's view ran held the whole view change back until that load ended (the other two tabs
waited for it) and then fired it again: the tabs read the store again. Each now listens to a copy of the view key's
change of its own.
"""

from __future__ import annotations

import collections
import functools
import threading

import pytest

from engine.store import Store
from tests._store_world import build_world
from tests.test_studio_browser_run_change import _counted

DEADLINE_S = 60.0
# The queues load while the Plans list's load is held: well inside the hold, so a queue that waits for it fails here.
QUEUES_S = 20.0
LOADS = ("plans_search", "pairs_search", "critic_queue")


def test_no_server_event_shares_the_view_keys_change_with_another_trigger(tmp_path):
    """The view key's change starts no server event that has another trigger too; the three data tabs' loads listen
    to copies of it of their own (``studio.relay``), beside listeners that run in the browser only."""
    from studio.app import build_app
    from studio.relay import COPY_JS

    with Store(tmp_path / "ws.duckdb") as store:
        build_world(store)
        demo = build_app(store, "examples/demo.toml")
        view = demo.moat_ctx.view
        on_view = [block_fn for block_fn in demo.fns.values() if (view._id, "change") in block_fn.targets]
        shared = [block_fn.api_name for block_fn in on_view if block_fn.fn is not None and len(block_fn.targets) > 1]
        assert not shared, f"{shared} listen to the view key's change beside another trigger: use studio.relay"
        copies = [block_fn.api_name for block_fn in on_view if block_fn.js == COPY_JS]
        assert sorted(copies) == ["critic_queue_on_view", "pairs_search_on_view", "plans_search_on_view"]
        demo.close()


def _held_first_call(demo, api_name: str, held: threading.Event, released: threading.Event) -> None:
    """The first call of the event ``api_name`` sets ``held``, then waits (up to the deadline) for ``released``."""
    for block_fn in demo.fns.values():
        if block_fn.api_name == api_name:
            real = block_fn.fn

            @functools.wraps(real)  # Gradio reads the signature (gr.Request, gr.EventData) through the wrapper
            def holding(*args, _real=real, **kwargs):
                if not held.is_set():
                    held.set()
                    released.wait(DEADLINE_S)
                return _real(*args, **kwargs)

            block_fn.fn = holding


@pytest.mark.browser
def test_a_search_submitted_during_a_page_load_does_not_reload_the_other_tabs(tmp_path):
    """The Plans list's load for the page's view is held until a search has been submitted in the Plans tab (the
    page holds that call back: the event is running). Meanwhile the Pairs and Critic queues load; once the held load
    and the search have run, each tab has loaded once for the view, and Plans once more for the search. Before, the
    page held the view key's change back as a whole behind the running Plans load (the queues waited for it), then
    dispatched it again (Plans loaded a third time; in other timings every listener of it ran again)."""
    from tests._studio import serve_studio
    from tests.test_studio_browser import ARGS, CHROMIUM, sync_api

    held, released = threading.Event(), threading.Event()
    calls: collections.Counter = collections.Counter()

    with Store(tmp_path / "ws.duckdb") as store:
        build_world(store)
        url, demo = serve_studio(store)
        _held_first_call(demo, "plans_search", held, released)
        _counted(demo, LOADS, calls)
        try:
            with sync_api.sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
                try:
                    page = browser.new_page(viewport={"width": 1400, "height": 1000})
                    page.set_default_timeout(30_000)

                    def wait_for(done, what: str, deadline_s: float = DEADLINE_S) -> None:
                        for _ in range(int(deadline_s * 10)):
                            if done():
                                return
                            page.wait_for_timeout(100)
                        raise AssertionError(f"{what}: {dict(calls)}")

                    page.goto(url)
                    wait_for(held.is_set, "the load's Plans list")
                    # The other tabs' loads for the view run beside the held one (each its own event). With one shared
                    # trigger, the page held the whole view change back behind the running Plans load: the Pairs and
                    # Critic queues waited for it.
                    wait_for(lambda: calls["pairs_search"] >= 1 and calls["critic_queue"] >= 1,
                             "the queues' loads, while the Plans list's is held", QUEUES_S)
                    page.get_by_role("tab", name="Plans").click()
                    box = page.locator("#plans-search textarea, #plans-search input").first
                    box.fill("a")
                    box.press("Enter")
                    # The page has handled the key (dispatched or held back the submit) once a script runs after it.
                    page.evaluate("() => new Promise((done) => setTimeout(done, 300))")
                    released.set()
                    # The held load, then the search it held back.
                    wait_for(lambda: calls["plans_search"] >= 2, "the submitted search")
                    page.wait_for_timeout(1500)  # room for a re-dispatched view change's loads to reach the server
                finally:
                    browser.close()
        finally:
            released.set()
            demo.close()
    # The Plans list: its load and the search; before, a third load (the view change dispatched again).
    assert dict(calls) == {"plans_search": 2, "pairs_search": 1, "critic_queue": 1}
