"""On a Hugging Face Space every visitor is anonymous and types any curator name: any visitor could tie, drop or
restore the shared demo run's pairs and accept, edit or drop its verdicts (what every later visitor lands on), or
another visitor's (what a later iteration of that run trains on). Now a Space's page curates only the runs it created
(*Start a new run* records the page: ``studio.run_owners``), as it stops only the job it started; every curation
handler checks it server side (``studio.curation_rights``), the Pairs and Critic tabs say the run is read-only and to
start one's own, and a page that may not curate a run holds no lease in it. A team studio is unchanged.

Handlers are called as the page's events call them (``build_app``'s functions by endpoint name) on the hand-made store
of ``tests/_store_world.py`` (no models); one test makes the raw API calls over HTTP."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import gradio as gr
import pytest

from studio import run_jobs
from studio.app import build_app
from studio.first_visit import SHOWCASE_NAME
from studio.jobs import JobWorker
from tests._store_world import IT, RUN, app_fns, world_store
from tests._studio import blocking_job, free_port

OWNER = SimpleNamespace(session_hash="owner-page", username=None)  # the page that started the run
VISITOR = SimpleNamespace(session_hash="visitor-page", username=None)  # another visitor's page
PAIR, VERDICT = "m1|0|0", "m2|0|0"  # m2's verdict has a correction to accept
EDIT = "R1 = Calculator(10-4); R2 = Calculator(R1*2)"
PAIR_WRITES = ["pairs-swap", "pairs-exclude", "pairs-tie", "pairs-restore", "pairs-reviewed", "pairs-choose"]
VERDICT_WRITES = ["critic-keep_original", "critic-accept_correction", "critic-drop", "critic-restore",
                  "critic-reviewed", "critic-save"]


@pytest.fixture
def store(tmp_path):
    yield from world_store(tmp_path)


@pytest.fixture
def spaces(store):
    """The studio app in Spaces mode on the world store, its event functions by endpoint name."""
    demo = build_app(store, "examples/demo.toml", spaces=True)
    yield app_fns(demo), demo
    demo.moat_jobs.wait(10)


def _writes(fns) -> dict:
    """Every curation endpoint with a call of it: ``name -> (request -> its answer)``, curator "ann" each time."""
    calls = {f"pairs_{action}": (lambda a: lambda r: fns[f"pairs_{a}"].fn(RUN, IT, PAIR, "ann", 1, 0, "why", r))(
        action) for action in ("swap", "exclude", "tie", "restore", "choose", "reviewed")}
    for action in ("keep_original", "accept_correction", "drop", "restore", "reviewed"):
        calls[f"critic_{action}"] = (lambda a: lambda r: fns[f"critic_{a}"].fn(RUN, IT, VERDICT, "ann", "why", r))(
            action)
    calls["critic_save_edit"] = lambda r: fns["critic_save_edit"].fn(RUN, IT, VERDICT, EDIT, "ann", "why", r)
    calls["pairs_undo"] = lambda r: fns["pairs_undo"].fn(RUN, IT, "ann", r)
    calls["critic_undo"] = lambda r: fns["critic_undo"].fn(RUN, IT, "ann", r)
    return calls


def _overrides(store) -> list:
    return store.query("SELECT override_id, action, curator FROM overrides ORDER BY override_id").values.tolist()


def _by_id(fn, values) -> dict:
    return {o.elem_id: v for o, v in zip(fn.outputs, values) if getattr(o, "elem_id", None)}


def _start_new_run_from(fns, request, monkeypatch) -> None:
    """*Start a new run* pressed on ``request``'s page, the run it creates being the world's run and its job doing
    nothing (no models here): the page is recorded as the run's creator as the real press records it."""
    monkeypatch.setattr("studio.tab_run.create_run_from_text", lambda *a: (RUN, f"Created run `{RUN}`."))
    monkeypatch.setattr(run_jobs, "run_loop", lambda *a, **k: "done")
    assert "Created run" in fns["run_start_new"].fn("", "ann", request)[0]


def test_on_spaces_a_page_cannot_curate_a_run_it_did_not_create(store, spaces, monkeypatch):
    """Every curation endpoint (the Pairs actions and undo, the Critic decisions, *Save edit* and undo) refuses a page
    that did not create the run, whatever curator name it sends, the owner's included, and writes nothing."""
    fns, _ = spaces
    _start_new_run_from(fns, OWNER, monkeypatch)
    assert "recorded" in fns["pairs_swap"].fn(RUN, IT, PAIR, "ann", None, None, "", OWNER)  # ann's, to undo
    before = _overrides(store)
    for name, call in _writes(fns).items():
        with pytest.raises(gr.Error) as refused:
            call(VISITOR)
        assert refused.value.message.startswith("Read-only: this run was not started from this browser"), name
        assert "Start a new run on the Run tab" in refused.value.message, name  # what to do instead
    assert _overrides(store) == before


def test_on_spaces_the_page_that_started_a_run_curates_it(store, spaces, monkeypatch):
    fns, _ = spaces
    _start_new_run_from(fns, OWNER, monkeypatch)
    for name, call in _writes(fns).items():
        answer = call(OWNER)
        assert "recorded" in answer or "saved" in answer or answer.startswith("Undid"), (name, answer)
    assert {curator for _, _, curator in _overrides(store)} == {"ann"}


def test_on_spaces_a_run_nobody_started_from_a_page_is_read_only_for_every_page(store, spaces):
    """The first-visit showcase run is created by the studio itself (no page), and a run from before a restart of the
    Space has no page on record: no page curates either; the showcase run is named as the Space's demo run."""
    fns, _ = spaces
    store.write("runs", [{"run_id": "showcase", "name": SHOWCASE_NAME, "config_json": {}, "run_dir": "runs/x"}])
    for run_id, words in ((RUN, "Read-only: this run was not started from this browser"),
                          ("showcase", "Read-only: this is the Space's demo run")):
        for request in (OWNER, VISITOR, None):
            with pytest.raises(gr.Error) as refused:
                fns["pairs_tie"].fn(run_id, IT, PAIR, "ann", None, None, "", request)
            assert refused.value.message.startswith(words)
    assert _overrides(store) == []


def test_start_a_new_run_records_its_page_even_when_its_job_is_refused(store):
    """The run exists once created: a job refused because another runs leaves it to its page's job buttons, and
    still that page's to curate."""
    jobs = JobWorker(store, own_jobs_only=True)
    started = threading.Event()
    assert jobs.submit("next_stage", RUN, blocking_job(started, 1, 4, 3.0, 0.02), session="someone") is None
    assert started.wait(10)
    assert run_jobs.start_first_iteration(store, jobs, RUN, session="owner-page").startswith("Refused")
    assert jobs.owners.created_by(RUN, "owner-page") and not jobs.owners.created_by(RUN, "visitor-page")
    assert not jobs.owners.created_by(RUN, None)
    jobs.stop(session="someone")
    assert jobs.wait(10)


def test_on_spaces_the_tabs_say_a_run_is_read_only_and_keep_its_buttons_off(store, spaces, monkeypatch):
    """Another's run: the write buttons stay off with a pick (the reads, evidence and *Run edit*, stay on) and a line
    under the picker says why and what to do; the owner's page gets the buttons and no line. The line is drawn after
    every load too: a run switch that changes no pick still says it."""
    fns, _ = spaces
    _start_new_run_from(fns, OWNER, monkeypatch)
    for endpoint, args, writes, read, line in (
            ("pairs_detail", (RUN, IT, PAIR), PAIR_WRITES, "pairs-evidence", "pairs-read-only"),
            ("critic_detail", (RUN, IT, VERDICT), VERDICT_WRITES, "critic-preview", "critic-read-only")):
        fn = fns[endpoint]
        visitor, owner = _by_id(fn, fn.fn(*args, VISITOR)), _by_id(fn, fn.fn(*args, OWNER))
        assert [visitor[b]["interactive"] for b in writes] == [False] * len(writes), endpoint
        assert [owner[b]["interactive"] for b in writes] == [True] * len(writes), endpoint
        assert visitor[read]["interactive"] is True
        assert visitor[line].startswith("**Read-only: this run was not started from this browser**")
        assert "*Start a new run* on the **Run** tab" in visitor[line] and owner[line] == ""
        redraw = fns[f"{endpoint}_redraw"]
        drawn = [RUN, IT, args[2]]  # the pick is drawn already: nothing else is sent, but the line is
        out = _by_id(redraw, redraw.fn(*args, drawn, VISITOR))
        assert out[line] == visitor[line] and out[writes[0]] == gr.skip()
        assert _by_id(redraw, redraw.fn(RUN, IT, None, None, OWNER))[line] == ""


def test_on_spaces_a_visitor_walking_anothers_run_holds_nothing_against_its_owner(store, spaces, monkeypatch):
    """Opening a pair or a verdict takes its lease: a visitor walking another's run (j/k) held the items, and the
    owner's decisions on them were refused ("... has this pair open right now")."""
    fns, _ = spaces
    _start_new_run_from(fns, OWNER, monkeypatch)
    assert fns["pairs_claim"].fn(RUN, IT, PAIR, "zed", None, VISITOR) == ("", None)
    assert fns["critic_claim"].fn(RUN, IT, VERDICT, "zed", None, VISITOR) == ("", None)
    assert "recorded" in fns["pairs_swap"].fn(RUN, IT, PAIR, "ann", None, None, "", OWNER)
    assert "recorded" in fns["critic_drop"].fn(RUN, IT, VERDICT, "ann", "", OWNER)
    assert fns["pairs_claim"].fn(RUN, IT, PAIR, "ann", None, OWNER) == ("", "ann")  # the owner's page holds it


def test_in_a_team_studio_any_page_curates_any_run_as_before(store):
    fns = app_fns(build_app(store, "examples/demo.toml"))
    for name, call in _writes(fns).items():
        assert isinstance(call(VISITOR), str), name  # no page created the run: nobody is refused
    detail = fns["pairs_detail"]
    out = _by_id(detail, detail.fn(RUN, IT, PAIR, VISITOR))
    assert out["pairs-swap"]["interactive"] is True and out["pairs-read-only"] == gr.skip()  # no line, nothing sent
    assert fns["pairs_claim"].fn(RUN, IT, "q1|0|0", "zed", None, VISITOR) == ("", "zed")  # a pick holds it


def test_a_raw_api_call_from_another_page_is_refused_over_http(store):
    """The check is the server's: a ``gradio_client`` session (its own page) is refused on a run it did not create,
    and the same calls go through once its page is the creator."""
    from gradio_client import Client

    from studio.auth import serve

    demo = build_app(store, "examples/demo.toml", spaces=True)
    port = free_port()
    serve(demo, port=port, prevent_thread_lock=True, quiet=True)
    try:
        client = Client(f"http://127.0.0.1:{port}/", verbose=False)
        client.predict(api_name="/studio_load")
        client.predict(RUN, api_name="/studio_pick_run")
        client.predict("ann", api_name="/studio_curator_name")
        client.predict(RUN, IT, "", "", "", "any", "any", "any", "task", 1, None, api_name="/pairs_search")
        with pytest.raises(Exception, match="Read-only: this run was not started from this browser"):
            client.predict(RUN, IT, PAIR, 1, 0, "why", api_name="/pairs_swap")
        with pytest.raises(Exception, match="Read-only"):
            client.predict(RUN, IT, api_name="/pairs_undo")
        assert _overrides(store) == []
        demo.moat_jobs.owners.record(RUN, client.session_hash)  # as *Start a new run* from this session records it
        assert "recorded" in client.predict(RUN, IT, PAIR, 1, 0, "why", api_name="/pairs_swap")
        assert [curator for _, _, curator in _overrides(store)] == ["ann"]
    finally:
        demo.close()
