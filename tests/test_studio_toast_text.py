"""A refusal's text as each caller reads it (``studio.common.toast_text``): the studio's page shows it in a toast,
which Gradio renders as HTML, so the page is sent it escaped; an API client (``gradio_client``, curl) is sent the
same text as the error's message, so it gets it exactly as worded: "R&D", not "R&amp;D". The page's calls are told
apart by the header Gradio's page sends with each (``x-gradio-user: app``).

The refusal used end to end is the Pairs tab's "margin bounds must be numbers, got '...'", which quotes what was typed
in Min margin; on the hand-made world of ``tests/_store_world.py``, served in this process.
"""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr
import pytest
from gradio.utils import error_payload

from engine.store import Store
from tests._store_world import IT, RUN, build_world

TYPED = "R&D <tokenizer> &amp; &lt;1 & <b>x</b>"
REFUSAL = f"margin bounds must be numbers, got {TYPED!r}"


def _request(user: str | None) -> SimpleNamespace:
    return SimpleNamespace(headers={} if user is None else {"x-gradio-user": user})


def test_the_page_is_told_apart_by_the_header_gradios_page_sends():
    from studio.common import asked_by_the_page

    assert asked_by_the_page(_request("app"))
    assert not asked_by_the_page(_request("api"))  # gradio_client
    assert not asked_by_the_page(_request(None))  # curl, any other client
    assert not asked_by_the_page()  # outside an event: no request


@pytest.mark.parametrize("message", [REFUSAL, "a < b && c <= d", "no <tokenizer> template, see </b> and <!-- x -->",
                                     "&amp &#60; &copyright &Dagger; R&D"])
def test_an_api_client_reads_the_message_as_worded_and_the_page_shows_it_as_worded(message):
    """Outside the page (no request, or an API client's) ``user_error`` carries the message unchanged: before, an "&"
    before a reference name or a "<" before a letter reached an API client escaped ("&amp;", "&lt;tokenizer>"). For
    the page the text is escaped as HTML, which the toast shows as the message."""
    from studio.common import quiet_stop, toast_text, user_error
    from tests.test_studio_critic_audit import _shown_as_html

    assert error_payload(user_error(message), False)["error"] == message
    assert toast_text(message, page=False) == message
    assert _shown_as_html(toast_text(message, page=True)) == message
    assert toast_text("`j`/`k` *skip* it", page=True) == "j/k skip it"  # the markdown marks dropped for both
    assert error_payload(quiet_stop(f"`{message}`"), False)["error"] == message


def test_an_info_toast_follows_the_caller_too(monkeypatch):
    """``user_info`` inside an event: escaped for the page's request, as worded for an API client's."""
    from gradio.context import LocalContext

    from studio.common import user_info

    shown: list[str] = []
    monkeypatch.setattr(gr, "Info", lambda message, *a, **k: shown.append(message))
    for user in ("app", "api", None):
        token = LocalContext.request.set(_request(user))
        try:
            user_info("R&D has <b>")
        finally:
            LocalContext.request.reset(token)
    assert shown == ["R&amp;D has &lt;b&gt;", "R&D has <b>", "R&D has <b>"]


@pytest.fixture
def served(tmp_path):
    """(url, demo): the studio on the hand-made world, served in this process."""
    from tests._studio import serve_studio

    with Store(tmp_path / "ws.duckdb") as store:
        build_world(store)
        url, demo = serve_studio(store)
        try:
            yield url, demo
        finally:
            demo.close()


def test_gradio_client_and_a_plain_http_client_get_the_refusal_as_worded(served):
    import json

    import httpx
    from gradio_client import Client

    url, _ = served
    args = [RUN, IT, TYPED, "", "", "any", "any", "any", "task", 1, None]
    client = Client(url, verbose=False, download_files=False)
    with pytest.raises(Exception) as refused:
        client.predict(*args, api_name="/pairs_search")
    assert str(refused.value) == REFUSAL
    # As curl would: no x-gradio-user header.
    with httpx.Client(base_url=url, timeout=60) as http:
        event = http.post("gradio_api/call/pairs_search", json={"data": args}).json()["event_id"]
        stream = http.get(f"gradio_api/call/pairs_search/{event}").text
    errors = [line.removeprefix("data: ") for line in stream.splitlines() if line.startswith("data: ")]
    assert json.loads(errors[-1])["error"] == REFUSAL, stream


@pytest.mark.browser
def test_the_page_shows_the_refusal_as_worded(served):
    """In Chromium: Min margin holding markup-like text, Enter: the toast reads the refusal as worded (the tags shown,
    not applied; "&amp;" shown as typed)."""
    from tests.test_studio_browser import ARGS, CHROMIUM, sync_api

    url, _ = served
    sync_api.expect.set_options(timeout=30_000)
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(30_000)
            page.goto(url)
            sync_api.expect(page.locator("#pick-run input")).to_have_value(RUN)
            page.get_by_role("tab", name="Pairs").click()
            low = page.get_by_label("Min margin")
            low.fill(TYPED)
            low.press("Enter")
            toast = page.get_by_test_id("toast-text").first
            sync_api.expect(toast).to_have_text(REFUSAL)
            assert toast.locator("b").count() == 0  # shown as text, not a tag
        finally:
            browser.close()
