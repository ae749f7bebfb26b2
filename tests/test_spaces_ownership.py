"""A Spaces visitor's audit: any visitor stopped any job (the first-visit demo's too) and nobody was told who; the
refusal of a second job told visitors to stop the first; with ``HF_TOKEN`` set as a Space secret every anonymous
visitor could push to the Hub with the owner's token. Now a Space's page stops only the job it started, a stop from
another page is named in the job box, and the Hub push is off on Spaces, over the API too."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from studio import run_jobs
from studio.jobs import JobWorker
from tests._store_world import RUN, world_store
from tests._studio import blocking_job


@pytest.fixture
def world(tmp_path):
    yield from world_store(tmp_path)


def _running(jobs: JobWorker, session: str | None, user: str = "") -> None:
    started = threading.Event()
    assert jobs.submit("next_stage", RUN, blocking_job(started, 1, 4, 3.0, 0.02), user=user, session=session) is None
    assert started.wait(10)


def test_on_spaces_a_page_stops_only_the_job_it_started(world):
    jobs = JobWorker(world, own_jobs_only=True)
    _running(jobs, "page-a", user="alice")
    refused = jobs.stop(user="bob", session="page-b")
    assert refused.startswith("Refused: the job `next_stage`") and "started by alice" in refused
    assert jobs.running() and not jobs.snapshot()["stop_requested"]
    busy = jobs.busy("page-b")
    assert busy.endswith("Wait for it to finish.") and "Stop it" not in busy  # not steered to the Stop button
    assert jobs.busy("page-a").endswith("Stop it or wait for it to finish.")
    assert jobs.stop(session="page-a").startswith("Stop requested") and jobs.wait(10)
    assert "stop asked by" not in run_jobs.job_markdown(jobs)  # its own starter: nothing to say


def test_on_spaces_the_first_visit_demo_runs_to_its_end(world):
    jobs = JobWorker(world, own_jobs_only=True)
    _running(jobs, None)  # the studio's own job: no page started it
    assert jobs.stop(session="page-a").startswith("Refused") and jobs.running()
    jobs._stop.set()  # the test's own stop
    assert jobs.wait(10)


def test_in_a_team_studio_anyone_stops_a_job_and_the_job_box_names_them(world):
    jobs = JobWorker(world)
    _running(jobs, "page-a", user="alice")
    assert jobs.stop(user="bob", session="page-b").startswith("Stop requested") and jobs.wait(10)
    page = run_jobs.job_markdown(jobs)
    assert "by alice" in page and "stop asked by bob" in page, page
    _running(jobs, "page-a", user="alice")
    jobs.stop(session="page-c")  # no name given
    assert jobs.wait(10) and "stop asked by another page" in run_jobs.job_markdown(jobs)


def test_the_hub_push_is_off_on_spaces_over_the_api_too(world, monkeypatch):
    from studio.app import build_app
    from tests._store_world import app_fns

    monkeypatch.setenv("HF_TOKEN", "hf_owner_secret")
    fns = app_fns(build_app(world, "examples/demo.toml", spaces=True))
    push = fns["export_push_hub"]
    request = SimpleNamespace(session_hash="visitor", username=None)
    answer = push.fn(RUN, 1, "pairs", "someone/data", "text", request)
    assert answer.startswith("Refused on Spaces") and "token" in answer
    def repo_box_on(fns: dict) -> bool:
        return any(block.interactive for block in fns["export_push_hub"].inputs if "Hub" in (block.label or ""))

    assert not repo_box_on(fns)
    assert repo_box_on(app_fns(build_app(world, "examples/demo.toml")))  # elsewhere the token enables it
