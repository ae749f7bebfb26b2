"""The run picker's change fires once per page load: in a real browser (Debian's Chromium driven by Playwright) on
the hand-made world of ``tests/_store_world.py`` served in this process, and in the app's wiring (no event on the
server listens to the picker's change beside another trigger).

Why it fired more than once: Gradio's page runs an ``always_last`` event that a second trigger asks for while it is
still running once more when it completes, by dispatching again the whole trigger event the running call was started
for: every listener of it (``studio.relay``). The Run tab's refresh (also on its timer) and the Metrics tab's compare
list, experiments and figures (also on Refresh, the tab shown, the compare box, the live trigger) listened to the
run picker's change themselves, so a timer tick, a click on a tab or on Refresh while one of them ran for a page load
fired the run picker's change again: the iteration pick, the Plans filters and every Metrics view computed twice (a
page CPU-throttled 12x did on most loads: 3 to 5 iteration picks per load). They now listen to a copy of the picker's
change of their own.
"""

from __future__ import annotations

import collections
import functools
import json
import threading

import pytest

from engine.store import Store
from tests._store_world import build_world

DEADLINE_S = 60.0


def _counted(demo, names: tuple[str, ...], calls: collections.Counter) -> None:
    """Count the server's calls of the events ``names`` (each a ``BlockFunction`` of the built app) in ``calls``."""
    for block_fn in demo.fns.values():
        if block_fn.api_name in names:
            real = block_fn.fn

            @functools.wraps(real)  # Gradio reads the signature (gr.Request, gr.EventData) through the wrapper
            def counting(*args, _real=real, _name=block_fn.api_name, **kwargs):
                calls[_name] += 1
                return _real(*args, **kwargs)

            block_fn.fn = counting


def test_no_server_event_shares_the_run_pickers_change_with_another_trigger(tmp_path):
    """An event on the server that has another trigger too listens to a copy of the picker's change of its own
    (``studio.relay``); on the picker's change itself are events with that one trigger (the page fires the change
    again only for one of those: a second change, which it is) and listeners that run in the browser only (never
    held back, so never a cause)."""
    from studio.app import build_app
    from studio.relay import COPY_JS

    with Store(tmp_path / "ws.duckdb") as store:
        build_world(store)
        demo = build_app(store, "examples/demo.toml")
        run = demo.moat_ctx.run
        on_run = [block_fn for block_fn in demo.fns.values() if (run._id, "change") in block_fn.targets]
        shared = [block_fn.api_name for block_fn in on_run if block_fn.fn is not None and len(block_fn.targets) > 1]
        assert not shared, f"{shared} listen to the run picker's change beside another trigger: use studio.relay"
        copies = [block_fn.api_name for block_fn in on_run if block_fn.js == COPY_JS]
        assert sorted(copies) == ["metrics_experiments_on_run", "metrics_figures_on_run", "metrics_runs_on_run",
                                  "run_refresh_on_run"]
        demo.close()


@pytest.mark.browser
def test_a_refresh_clicked_during_a_page_load_does_not_fire_the_run_pickers_change_again(tmp_path, monkeypatch):
    """The load's compare-list listing is held until the page has sent the events of Refresh, clicked meanwhile on
    the Metrics tab (Refresh lists the runs again too: that call waits behind the running one, as on a slow machine);
    once both listings have run, the run picker's listeners have each run once: the iteration pick, the Plans filters.
    Before, the page fired the run picker's change a second time when the held listing completed, and every listener
    of it ran again (CI saw it with a tab clicked during the load, which listed the runs again too)."""
    from studio import tab_metrics
    from tests._studio import serve_studio
    from tests.test_studio_browser import ARGS, CHROMIUM, sync_api

    held, released = threading.Event(), threading.Event()
    listings: list[str | None] = []
    real_choices = tab_metrics.compare_choices

    def held_once(store, run_a):
        if not held.is_set():  # the page load's listing: held until Refresh's events are sent
            held.set()
            released.wait(DEADLINE_S)
        listings.append(run_a)
        return real_choices(store, run_a)

    monkeypatch.setattr(tab_metrics, "compare_choices", held_once)
    calls: collections.Counter = collections.Counter()

    with Store(tmp_path / "ws.duckdb") as store:
        build_world(store)
        url, demo = serve_studio(store)
        _counted(demo, ("studio_pick_run", "plans_filters", "metrics_runs"), calls)
        refresh = next(block._id for block in demo.blocks.values() if block.elem_id == "metrics-refresh")
        experiments = next(index for index, fn in demo.fns.items() if fn.api_name == "metrics_experiments")

        def sent(request) -> None:
            """Refresh's listing of the experiments is sent: the page has dispatched the click, and held back the
            compare listing it asks for too (it is running), before it sends the experiments' one."""
            if "/queue/join" in request.url:
                body = json.loads(request.post_data or "{}")
                if body.get("trigger_id") == refresh and body.get("fn_index") == experiments:
                    released.set()

        try:
            with sync_api.sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
                try:
                    page = browser.new_page(viewport={"width": 1400, "height": 1000})
                    page.set_default_timeout(30_000)
                    page.on("request", sent)

                    def wait_for(done, what: str) -> None:
                        for _ in range(int(DEADLINE_S * 10)):
                            if done():
                                return
                            page.wait_for_timeout(100)
                        raise AssertionError(f"{what}: listings {listings}, {dict(calls)}")

                    page.goto(url)
                    wait_for(held.is_set, "the load's listing")
                    page.get_by_role("tab", name="Metrics").click()
                    page.locator("#metrics-refresh").click()
                    # Both listings done: the load's, then Refresh's it held back.
                    wait_for(lambda: released.is_set() and len(listings) >= 2, "Refresh's listing")
                finally:
                    browser.close()
        finally:
            released.set()
            demo.close()
    assert calls["studio_pick_run"] == 1 and calls["plans_filters"] == 1, dict(calls)
