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

And a returning curator's page load reads each queue once: the saved name, restored on every load, set the curator
State whose change the queues and their leases listened to, so each queue was read twice per load.
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


def test_no_server_event_listens_to_the_curator_states_change(tmp_path):
    """A returning curator's saved name is restored into the curator State on every page load: the queues and their
    leases listen to the name box's own signal of a typed name (``Ctx.renamed``), each through a copy of its own."""
    from studio.app import build_app
    from studio.relay import COPY_JS

    with Store(tmp_path / "ws.duckdb") as store:
        build_world(store)
        demo = build_app(store, "examples/demo.toml")
        ctx = demo.moat_ctx
        on_curator = [fn.api_name for fn in demo.fns.values() if (ctx.curator._id, "change") in fn.targets]
        assert not on_curator, f"{on_curator} listen to the curator State's change"
        copies = sorted(fn.api_name for fn in demo.fns.values()
                        if (ctx.renamed._id, "change") in fn.targets and fn.js == COPY_JS)
        assert copies == ["critic_claim_on_name", "critic_queue_on_name", "pairs_claim_on_name",
                          "pairs_search_on_name"]
        demo.close()


@pytest.mark.browser
def test_a_returning_curators_page_load_reads_each_queue_once(tmp_path):
    """A name typed once is kept in the browser and restored on every load. The restore set the curator State, whose
    change the Pairs and Critic queues listened to: every load of a returning curator read each queue twice (measured:
    2 and 2 on each of three reloads). The name is now restored before the run picker is filled, and the queues follow
    a name typed mid-session only: one read each per load, and one more each when a name is typed."""
    from tests._studio import serve_studio
    from tests.test_studio_browser import ARGS, CHROMIUM, sync_api

    calls: collections.Counter = collections.Counter()
    counts: list[dict] = []
    with Store(tmp_path / "ws.duckdb") as store:
        build_world(store)
        url, demo = serve_studio(store)
        _counted(demo, ("pairs_search", "critic_queue", "studio_curator_name"), calls)
        try:
            with sync_api.sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
                try:
                    page = browser.new_page(viewport={"width": 1400, "height": 1000})
                    page.set_default_timeout(30_000)

                    def settled(done, what: str) -> None:
                        """``done`` holds, then 2 s more for any later read; the counts so far are kept."""
                        for _ in range(int(DEADLINE_S * 10)):
                            if done():
                                break
                            page.wait_for_timeout(100)
                        else:
                            raise AssertionError(f"{what}: {dict(calls)}")
                        page.wait_for_timeout(2000)
                        counts.append(dict(calls))
                        calls.clear()

                    def both() -> bool:
                        return calls["pairs_search"] >= 1 and calls["critic_queue"] >= 1

                    page.goto(url)
                    settled(both, "the first load")
                    box = page.locator("#curator-name textarea, #curator-name input").first
                    box.fill("ann")
                    box.press("Enter")
                    settled(both, "the queues after a name typed")
                    for _ in range(2):
                        page.reload()
                        settled(both, "a reload's queues")
                        page.locator("#curator-who").get_by_text("Curating as ann").wait_for()
                finally:
                    browser.close()
        finally:
            demo.close()
    once = {"pairs_search": 1, "critic_queue": 1}
    assert counts == [once, {**once, "studio_curator_name": 1}, once, once], counts
