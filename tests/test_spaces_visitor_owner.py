"""On a Space a browser, not a page, owns the runs it started (``studio.run_owners``): the studio keeps a random
visitor key in the browser (a ``gr.BrowserState``) and binds each page to it as the page loads, before the run picker
is filled. Before, ownership was the page's session: a visitor who reloaded found their own run read-only and its job
unstoppable until they started another run.

The bookkeeping is tested directly; the binding through the app's own load handler on the hand-made store of
``tests/_store_world.py`` (no models), as the curation tests of ``tests/test_spaces_curation.py`` call it; and the
key's round trip through a real browser's localStorage (Debian's Chromium driven by Playwright) across a reload."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import gradio as gr
import pytest

from studio.app import build_app
from studio.jobs import JobWorker
from studio.run_owners import MAX_PAGES, VISITOR_KEY, RunOwners, visitor_key_or_new
from tests._store_world import IT, RUN, app_fns, build_world, world_store
from tests._studio import blocking_job
from tests.test_spaces_curation import OWNER, PAIR, VISITOR, _start_new_run_from

RELOADED = SimpleNamespace(session_hash="owner-page-reloaded", username=None)  # the owner's page after a reload


@pytest.fixture
def store(tmp_path):
    yield from world_store(tmp_path)


def test_pages_bound_to_one_visitor_key_are_one_owner():
    owners = RunOwners()
    key, new = visitor_key_or_new("")
    assert new and VISITOR_KEY.fullmatch(key)
    assert visitor_key_or_new(key) == (key, False)
    for forged in ("x", "owner-page", key + "=", 42, None, {"key": key}):
        other, made = visitor_key_or_new(forged)
        assert made and other != key and VISITOR_KEY.fullmatch(other)
    owners.bind("page-1", key)
    owners.record("run-a", "page-1")
    owners.bind("page-2", key)  # a reload, or a second tab, of the same browser
    assert owners.created_by("run-a", "page-2") and owners.same_owner("page-1", "page-2")
    assert not owners.created_by("run-a", "page-3") and not owners.same_owner("page-1", "page-3")
    # An unbound page is its own owner, and a key never passes for a session id that happens to spell it.
    owners.record("run-b", "page-3")
    assert owners.created_by("run-b", "page-3") and not owners.created_by("run-b", "page-1")
    owners.bind("page-4", "page-3")
    assert not owners.created_by("run-b", "page-4")
    assert not owners.created_by("run-a", None) and not owners.same_owner(None, None)


def test_the_oldest_bound_pages_are_forgotten_first(monkeypatch):
    monkeypatch.setattr("studio.run_owners.MAX_PAGES", 2)
    owners = RunOwners()
    owners.bind("page-1", "k" * 22)
    owners.record("run-a", "page-1")
    owners.bind("page-2", "k" * 22)
    owners.bind("page-3", "k" * 22)
    assert not owners.created_by("run-a", "page-1")  # forgotten: its own owner again (the safe side)
    assert owners.created_by("run-a", "page-2") and owners.created_by("run-a", "page-3")
    assert MAX_PAGES >= 1000


def test_on_spaces_a_reloaded_page_still_curates_the_run_its_browser_started(store, monkeypatch):
    """The owner's page loads (a new key is made and kept in its browser), starts a run, reloads: the new page sends
    the kept key and curates the run. Another visitor's page, with a key of its own or a made-up one, is refused."""
    demo = build_app(store, "examples/demo.toml", spaces=True)
    fns = app_fns(demo)
    restore = fns["studio_restore_place"].fn
    try:
        first = restore({}, "", OWNER)
        key = first[-1]
        assert isinstance(key, str) and VISITOR_KEY.fullmatch(key)  # kept in the browser (the BrowserState output)
        _start_new_run_from(fns, OWNER, monkeypatch)
        assert restore({}, key, RELOADED)[-1] == gr.skip()  # the kept key stays as it is
        assert "recorded" in fns["pairs_swap"].fn(RUN, IT, PAIR, "ann", None, None, "", RELOADED)
        for kept in ("", "made-up"):
            assert restore({}, kept, VISITOR)[-1] != key
            with pytest.raises(gr.Error, match="Read-only: this run was not started from this browser"):
                fns["pairs_swap"].fn(RUN, IT, PAIR, "zed", None, None, "", VISITOR)
    finally:
        demo.moat_jobs.wait(10)
        demo.close()


def test_on_spaces_a_reloaded_page_may_stop_the_job_its_browser_started(store):
    jobs = JobWorker(store, own_jobs_only=True)
    key, _ = visitor_key_or_new(None)
    jobs.owners.bind(OWNER.session_hash, key)
    started = threading.Event()
    assert jobs.submit("next stage", RUN, blocking_job(started, 1, 4, 5.0, 0.05), user="",
                       session=OWNER.session_hash) is None
    try:
        assert started.wait(10)
        jobs.owners.bind(RELOADED.session_hash, key)
        assert "started from this page" in jobs.busy(RELOADED.session_hash)
        assert jobs.stop("", VISITOR.session_hash).startswith("Refused")
        assert jobs.stop("", RELOADED.session_hash).startswith("Stop requested")
        assert jobs.wait(10)
        assert jobs.snapshot().get("stopped_by") is None  # the starter's own browser: not "another page"
    finally:
        jobs.stop("", OWNER.session_hash)
        jobs.wait(10)


@pytest.mark.browser
def test_a_reload_in_a_real_browser_binds_the_new_page_to_the_same_visitor_key(tmp_path):
    from engine.store import Store
    from studio.app import HEAD
    from studio.auth import serve
    from tests._studio import free_port
    from tests.test_studio_browser import ARGS, CHROMIUM, sync_api

    with Store(tmp_path / "ws.duckdb") as store:
        build_world(store)
        demo = build_app(store, "examples/demo.toml", spaces=True)
        port = free_port()
        serve(demo, port=port, prevent_thread_lock=True, quiet=True, head=HEAD)
        owners = demo.moat_jobs.owners
        try:
            with sync_api.sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
                try:
                    page = browser.new_page()
                    page.set_default_timeout(30_000)
                    bound: list[dict] = []
                    for _ in range(2):  # the first visit, then a reload
                        page.goto(f"http://127.0.0.1:{port}/") if not bound else page.reload()
                        page.locator("#pick-run").wait_for()
                        for _ in range(300):
                            if len(owners._visitors) > len(bound):
                                break
                            page.wait_for_timeout(100)
                        bound.append(dict(owners._visitors))
                        # The key reaches localStorage after the server has bound it: a reload before then would make
                        # another (the page had nothing to send).
                        page.wait_for_function("() => localStorage.getItem('moat-studio-visitor') !== null")
                    other = browser.new_context().new_page()  # another visitor: a browser profile of its own
                    other.goto(f"http://127.0.0.1:{port}/")
                    other.locator("#pick-run").wait_for()
                    for _ in range(300):
                        if len(owners._visitors) > 2:
                            break
                        other.wait_for_timeout(100)
                finally:
                    browser.close()
        finally:
            demo.close()
    sessions = list(owners._visitors.items())
    assert len(sessions) == 3, sessions
    (first, key), (reloaded, same), (_, another) = sessions
    assert first != reloaded and key == same and another != key
