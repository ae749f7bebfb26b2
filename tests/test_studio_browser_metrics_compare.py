"""The Metrics tab's compare list in a real browser (Debian's Chromium driven by Playwright) on the hand-made world of
``tests/_store_world.py`` served in this process: a run evaluated after the page loaded is offered as run B once the
Metrics tab is shown again, with no reload and no Refresh, and a switch to another tab does not list the runs (one
query of the metrics table and a server call each, for nothing).
"""

from __future__ import annotations

import pytest

from engine.store import Store
from tests._store_world import RUN, build_world

pytestmark = pytest.mark.browser

DEADLINE_S = 60.0
LATE = "late-run"


def test_a_run_evaluated_later_is_offered_when_the_metrics_tab_is_shown_again(tmp_path, monkeypatch):
    from studio import live_views, tab_metrics
    from tests._studio import serve_studio
    from tests.test_studio_browser import ARGS, CHROMIUM, sync_api

    listed: list[str | None] = []
    real_choices = tab_metrics.compare_choices
    monkeypatch.setattr(tab_metrics, "compare_choices", lambda store, run_a: listed.append(run_a)
                        or real_choices(store, run_a))
    checked: list[str] = []  # the tab each tab switch's live check was for (the last listener of the switch)
    real_check = live_views.LiveViews.check
    monkeypatch.setattr(live_views.LiveViews, "check",
                        lambda self, view, tab, request: checked.append(tab) or real_check(self, view, tab, request))

    def wait_for(done, what: str) -> None:
        for _ in range(int(DEADLINE_S * 10)):
            if done():
                return
            page.wait_for_timeout(100)
        raise AssertionError(f"{what}: listed {listed}, checked {checked}")

    def offered() -> list[str]:
        box = page.locator("#metrics-compare input")
        box.click()
        options = page.get_by_role("option")
        options.first.wait_for()
        names = [name.strip() for name in options.all_inner_texts()]
        box.press("Escape")
        return names

    with Store(tmp_path / "ws.duckdb") as store:
        build_world(store)
        url, demo = serve_studio(store)
        try:
            sync_api.expect.set_options(timeout=30_000)
            with sync_api.sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
                try:
                    page = browser.new_page(viewport={"width": 1400, "height": 1000})
                    page.set_default_timeout(30_000)
                    page.goto(url)
                    sync_api.expect(page.locator("#pick-run input")).to_have_value(RUN)
                    page.get_by_role("tab", name="Metrics").click()
                    wait_for(lambda: "metrics" in checked and RUN in listed, "the Metrics tab shown")
                    assert LATE not in offered()
                    store.write("runs", [{"run_id": LATE, "name": LATE, "config_json": {}, "run_dir": "runs/x"}])
                    store.put_metrics(LATE, 0, [{"split": "held_in", "domain": "all", "name": "accuracy",
                                                 "value": 0.5}])
                    before = len(listed)
                    page.get_by_role("tab", name="Plans").click()
                    wait_for(lambda: checked[-1] == "plans", "the switch to Plans")
                    assert len(listed) == before, "a switch to another tab listed the compare runs"
                    page.get_by_role("tab", name="Metrics").click()
                    wait_for(lambda: len(listed) > before, "the Metrics tab shown again")
                    sync_api.expect(page.locator("#metrics-compare")).to_be_visible()
                    for _ in range(int(DEADLINE_S * 10)):  # the update reaches the page after the listing
                        if LATE in offered():
                            break
                        page.wait_for_timeout(100)
                    assert LATE in offered()
                finally:
                    browser.close()
        finally:
            demo.close()
