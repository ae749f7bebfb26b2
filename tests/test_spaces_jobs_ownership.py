"""On a Hugging Face Space a page runs jobs (*Next stage*, *Rest of iteration*, *Next iteration*) only on the runs it
started, as it curates only those (``studio.curation_rights``) and stops only its own job: a job on another visitor's
run would change what that visitor sees and trains on, and its owner could not stop it. A run the page started still
passes the Spaces policy (a run put in the store by other means, recorded as the page's, is refused by it). A team
studio is unchanged.

``studio.run_jobs.start_job`` is called as the Run tab's buttons call it, on the hand-made store of
``tests/_store_world.py`` (no models: the job is refused or announced, never run to an end here)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from studio.common import Ctx
from studio.jobs import JobWorker
from studio.run_jobs import start_job
from tests._store_world import RUN, world_store

OWNER = SimpleNamespace(session_hash="owner-page", username=None)
VISITOR = SimpleNamespace(session_hash="visitor-page", username=None)


@pytest.fixture
def store(tmp_path):
    yield from world_store(tmp_path)


def _ctx(store, spaces: bool) -> Ctx:
    return Ctx(store=store, jobs=JobWorker(store, own_jobs_only=spaces), read_only=False, spaces=spaces, run=None,
               iteration=None, curator=None)


@pytest.mark.parametrize("kind", ["next_stage", "rest_of_iteration", "next_iteration"])
def test_on_spaces_a_page_starts_no_job_on_a_run_it_did_not_start(store, kind):
    ctx = _ctx(store, spaces=True)
    ctx.jobs.owners.record(RUN, OWNER.session_hash)
    for page in (VISITOR, None):  # another visitor's page, and an API call with no session
        line = start_job(ctx, kind, RUN, "ann", page)
        assert line.startswith("Refused on Spaces: this browser did not start this run"), line
        assert "*Start a new run*" in line
    assert ctx.jobs.snapshot()["status"] == "idle"


def test_on_spaces_the_owner_still_meets_the_spaces_policy(store):
    """The world store's run uses agents a Space does not allow: recorded as the page's own, the policy refuses it
    (the ownership rule comes first, the policy still holds after it)."""
    ctx = _ctx(store, spaces=True)
    ctx.jobs.owners.record(RUN, OWNER.session_hash)
    line = start_job(ctx, "next_stage", RUN, "ann", OWNER)
    assert line.startswith("Refused on Spaces: ") and "did not start" not in line, line
    assert ctx.jobs.snapshot()["status"] == "idle"


def test_in_a_team_studio_any_page_is_not_refused_for_ownership(store):
    ctx = _ctx(store, spaces=False)
    line = start_job(ctx, "next_stage", RUN, "ann", VISITOR)
    ctx.jobs.wait(30)  # the job started (and fails on the model-less world): let it end before the store closes
    assert "did not start this run" not in line and line.startswith("Started"), line


def test_on_spaces_create_run_makes_the_run_the_pages_own(store, monkeypatch):
    """*Create run* (without starting it) records its page as the run's creator, as *Start a new run* does: that page
    may then start its jobs and curate it; another page may not."""
    from studio.app import build_app
    from studio.curation_rights import may_curate
    from tests._store_world import app_fns

    demo = build_app(store, "examples/demo.toml", spaces=True)
    fns = app_fns(demo)
    monkeypatch.setattr("studio.tab_run.create_run_from_text", lambda *a: (RUN, f"Created run `{RUN}`."))
    assert fns["run_create"].fn("", OWNER)[0] == f"Created run `{RUN}`."
    assert demo.moat_jobs.owners.created_by(RUN, OWNER.session_hash)
    assert not demo.moat_jobs.owners.created_by(RUN, VISITOR.session_hash)
    ctx = SimpleNamespace(spaces=True, jobs=demo.moat_jobs, read_only=False, viewers=frozenset())
    assert may_curate(ctx, RUN, OWNER) and not may_curate(ctx, RUN, VISITOR)
