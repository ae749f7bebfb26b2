"""Who is on the page, as the page shows it (a browser audit with ``--auth`` found both):

* under a login the curator name box stayed editable: "zed" typed there changed the header ("Curating as zed")
  while every decision was recorded under the login ("... by ben"). The box now shows the login, not editable, and
  the header names who really decides; the name box's handler cannot change the curator under a login.
* a viewer (``--viewers``) read "Curating as vic" above enabled write buttons (refused only once pressed). The
  header now says "Viewing as vic (read-only)" and every write control (``Ctx.write_controls``, each write
  endpoint's button) is switched off on load, and a pick never switches one back on. The server-side refusal
  (``check_writable``, tests/test_studio_security.py) stays the guard.

Handlers are called as the page's events call them (``build_app``'s functions by endpoint name, a fake request
``SimpleNamespace(username=...)``) on the hand-made store of ``tests/_store_world.py``; one browser test logs a
viewer and a curator in to the served studio and looks at the page itself."""

from __future__ import annotations

import re
from types import SimpleNamespace

import gradio as gr
import pytest

from tests._store_world import IT, RUN, app_fns, world_store

VIEWER, CURATOR = "vic", "ben"
KEY = "m1|0|0"  # a pair key and a verdict key of the world
PAIR_WRITES = ["pairs-swap", "pairs-exclude", "pairs-tie", "pairs-restore", "pairs-reviewed", "pairs-choose"]
VERDICT_WRITES = ["critic-keep_original", "critic-drop", "critic-restore", "critic-reviewed", "critic-save"]


def _as(user: str | None) -> SimpleNamespace:
    return SimpleNamespace(username=user)


@pytest.fixture
def store(tmp_path):
    yield from world_store(tmp_path)


@pytest.fixture
def demo(store):
    from studio.app import build_app

    app = build_app(store, "examples/demo.toml", viewers=frozenset({VIEWER}))
    yield app
    app.close()


def _by_block(fn, values) -> list[tuple[object, object]]:
    """An event's ``(output component, value)`` pairs."""
    assert len(fn.outputs) == len(values)
    return list(zip(fn.outputs, values))


def _by_id(fn, values) -> dict:
    return {o.elem_id: v for o, v in _by_block(fn, values) if o.elem_id}


# -- the load handler ------------------------------------------------------------------------------------------------


def test_on_load_a_viewer_reads_viewing_as_and_every_write_control_is_switched_off(demo):
    load = app_fns(demo)["studio_load"]
    out = _by_id(load, load.fn({}, _as(VIEWER)))
    assert out["curator-who"] == f"Viewing as **{VIEWER}** (read-only)"
    assert out["curator-name"]["value"] == VIEWER and out["curator-name"]["interactive"] is False
    controls = demo.moat_ctx.write_controls
    offs = [v for o, v in _by_block(load, load.fn({}, _as(VIEWER))) if any(o is c for c in controls)]
    assert len(offs) == len(controls) > 20 and all(v == gr.update(interactive=False) for v in offs)
    for button in ("run-start-new", "run-next_stage", "run-stop", "run-create", "pairs-swap", "pairs-undo",
                   "critic-accept_correction", "critic-save", "metrics-swap-compute", "export-go"):
        assert out[button] == gr.update(interactive=False), button


def test_on_load_a_curators_login_names_them_and_locks_the_name_box_and_leaves_the_buttons(demo):
    load = app_fns(demo)["studio_load"]
    out = _by_id(load, load.fn({}, _as(CURATOR)))
    assert out["curator-who"] == f"Curating as **{CURATOR}**"
    assert out["curator-name"]["value"] == CURATOR and out["curator-name"]["interactive"] is False
    controls = demo.moat_ctx.write_controls
    assert all(v == gr.skip() for o, v in _by_block(load, load.fn({}, _as(CURATOR))) if any(o is c for c in controls))


def test_on_load_without_a_login_leaves_the_name_box_the_header_and_the_buttons_alone(demo):
    """A name typed before the page finished loading must survive the load."""
    load = app_fns(demo)["studio_load"]
    values = load.fn({}, _as(None))
    run, *rest = values
    assert run["choices"] and all(v == gr.skip() for v in rest)


def test_every_write_endpoints_trigger_is_a_registered_write_control(demo):
    """The single mechanism covers every write endpoint: a new write button left unregistered fails here."""
    from tests.test_studio_security import endpoints

    kinds = endpoints(RUN, KEY, KEY, "m1", "")
    registered = {c._id for c in demo.moat_ctx.write_controls}
    writes = [f for f in demo.fns.values() if kinds.get(f.api_name, ("",))[0] == "write"]
    assert len(writes) > 20
    for fn in writes:
        assert fn.targets and all(block in registered for block, _ in fn.targets), fn.api_name


# -- the name box ----------------------------------------------------------------------------------------------------


def test_the_name_box_cannot_change_the_curator_under_a_login(demo):
    """Typed "zed" under ben's login: the header said "Curating as zed", the overrides said "by ben"."""
    from studio.common import curator_of

    name = app_fns(demo)["studio_curator_name"]
    curator, who, saved, renamed = name.fn("zed", _as(CURATOR))
    # The session's name, the browser's kept name and the queues' signal of a typed name (Ctx.renamed) unchanged.
    assert curator == gr.skip() and saved == gr.skip() and renamed == gr.skip()
    assert who == f"Curating as **{CURATOR}**"
    assert name.fn("zed", _as(VIEWER))[1] == f"Viewing as **{VIEWER}** (read-only)"
    assert curator_of("zed", _as(CURATOR)) == CURATOR  # and the decisions are the login's, as they were
    assert name.fn("  zed ", _as(None)) == ("zed", "Curating as **zed**", "zed", "zed")  # without a login it curates
    # A typed or restored name is shown as typed in the header: "*ana*" read as an italic ana, "a_b_c" lost marks.
    assert name.fn("*ana*_b", _as(None))[1] == r"Curating as **\*ana\*\_b**"
    restore = app_fns(demo)["studio_restore_name"]
    assert restore.fn(" *ana* ", _as(None)) == ("*ana*", "*ana*", r"Curating as **\*ana\***")


# -- a pick does not switch a viewer's buttons back on ---------------------------------------------------------------


@pytest.mark.parametrize("endpoint", ["pairs_detail", "pairs_detail_redraw"])
def test_a_picked_pair_keeps_a_viewers_write_buttons_off_and_the_evidence_on(demo, endpoint):
    fn = app_fns(demo)[endpoint]
    args = (RUN, IT, KEY) + ((None,) if endpoint.endswith("redraw") else ())
    viewer, curator = _by_id(fn, fn.fn(*args, _as(VIEWER))), _by_id(fn, fn.fn(*args, _as(CURATOR)))
    assert [viewer[b]["interactive"] for b in PAIR_WRITES] == [False] * len(PAIR_WRITES)
    assert [curator[b]["interactive"] for b in PAIR_WRITES] == [True] * len(PAIR_WRITES)
    assert viewer["pairs-evidence"]["interactive"] is True  # a read: a viewer may look at the evidence


@pytest.mark.parametrize("endpoint", ["critic_detail", "critic_detail_redraw"])
def test_a_picked_verdict_keeps_a_viewers_write_buttons_off_and_the_preview_on(demo, endpoint):
    fn = app_fns(demo)[endpoint]
    args = (RUN, IT, "m2|0|0") + ((None,) if endpoint.endswith("redraw") else ())  # m2: a correction to accept
    viewer, curator = _by_id(fn, fn.fn(*args, _as(VIEWER))), _by_id(fn, fn.fn(*args, _as(CURATOR)))
    writes = [*VERDICT_WRITES, "critic-accept_correction"]
    assert [viewer[b]["interactive"] for b in writes] == [False] * len(writes)
    assert [curator[b]["interactive"] for b in writes] == [True] * len(writes)
    assert viewer["critic-preview"]["interactive"] is True  # a read: a viewer may run an edit too


# -- the page itself -------------------------------------------------------------------------------------------------


@pytest.mark.browser
def test_in_the_page_a_viewer_sees_viewing_as_and_disabled_writes_and_a_curator_their_login(store):
    """In chromium, logged in through the login route as the viewer and as a curator (one browser context each)."""
    from studio.app import HEAD, build_app
    from studio.auth import serve
    from tests._studio import free_port
    from tests.test_studio_browser import ARGS, CHROMIUM, sync_api

    demo = build_app(store, "examples/demo.toml", viewers=frozenset({VIEWER}))
    port = free_port()
    serve(demo, port=port, auth=[(VIEWER, "pw-v"), (CURATOR, "pw-b")], head=HEAD, prevent_thread_lock=True,
          quiet=True)
    url = f"http://127.0.0.1:{port}/"
    expect = sync_api.expect
    expect.set_options(timeout=30_000)
    try:
        with sync_api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            try:
                pages = {}
                for user, password in ((VIEWER, "pw-v"), (CURATOR, "pw-b")):
                    page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
                    page.set_default_timeout(30_000)
                    assert page.request.post(url + "login", form={"username": user, "password": password}).ok
                    page.goto(url)
                    pages[user] = page
                viewer, curator = pages[VIEWER], pages[CURATOR]
                expect(viewer.locator("#curator-who")).to_have_text(f"Viewing as {VIEWER} (read-only)")
                expect(curator.locator("#curator-who")).to_have_text(f"Curating as {CURATOR}")
                for user, page in pages.items():
                    box = page.locator("#curator-name textarea, #curator-name input").first
                    expect(box).to_have_value(user)
                    expect(box).to_be_disabled()
                for button in ("run-start-new", "run-next_stage", "run-stop"):
                    expect(viewer.locator(f"#{button}")).to_be_disabled()
                    expect(curator.locator(f"#{button}")).to_be_enabled()
                viewer.get_by_text("Advanced: config for a new run").click()  # drawn once opened, off all the same
                expect(viewer.locator("#run-create")).to_be_disabled()
                expect(viewer.locator("#run-validate")).to_be_enabled()  # a read
                for page in pages.values():  # a tab mounted after the load: the switch-off reached it too
                    page.get_by_role("tab", name="Pairs").click()
                    expect(page.locator("#pairs-pick input")).to_have_value(re.compile("m1"))
                expect(curator.locator("#pairs-swap")).to_be_enabled()  # the pick's detail has run ...
                for button in PAIR_WRITES + ["pairs-undo"]:
                    expect(viewer.locator(f"#{button}")).to_be_disabled()  # ... and left the viewer's off
                expect(viewer.locator("#pairs-evidence")).to_be_enabled()
                viewer.locator("body").press("s")  # the swap key clicks a disabled button: nothing happens
                viewer.get_by_role("tab", name="Export").click()
                expect(viewer.locator("#export-go")).to_be_disabled()
            finally:
                browser.close()
    finally:
        demo.close()
    assert store.query("SELECT * FROM overrides").empty  # the viewer's key press recorded nothing
