"""The browser audit's Run-tab findings after a stop, handler-level (no server, no models):

* once a job has ended, the job box shows how each stage it worked on stands (stopped at 1/6, done, failed), never
  its last progress line and ETA as if it still ran;
* a stopped stage says "stopped" once (its state), with what it kept and how it goes on, on its card and in the
  stage table;
* a press refused while a job runs says who started that job as far as this page may know: "started from this
  page", the starter's curator name, or "another page, no name given"; never a session id.
"""

from __future__ import annotations

import re
import threading
from html import unescape
from pathlib import Path
from types import SimpleNamespace

import pytest

from engine.store import Store
from studio.jobs import JobWorker
from tests._store_world import IT, RUN, world_store
from tests._studio import blocking_job

STOP_ERROR = "{} stopped at the user's request"  # what engine.loop.run_stage records for a stop


@pytest.fixture
def world(tmp_path):
    yield from world_store(tmp_path)


def _ctx(store: Store, jobs: JobWorker):
    from studio.common import Ctx

    return Ctx(store=store, jobs=jobs, read_only=False, spaces=False, run=None, iteration=None, curator=None)


def _page(session: str, username: str | None = None) -> SimpleNamespace:
    """A request from one browser session (Gradio's ``session_hash``), without a login unless ``username``."""
    return SimpleNamespace(username=username, session_hash=session)


def _stopping_stage(store: Store, run_id: str, iteration: int, stage: str, done: int, total: int,
                    started: threading.Event):
    """A job that runs ``stage`` as engine.loop records it: marked running, one progress row (``done``/``total``, an
    ETA), then polling the stop flag; stopped, the stage is recorded stopped and the job returns "stopped"."""
    def job(progress, should_stop):
        store.set_stage(run_id, iteration, stage, "running")
        progress({"run_id": run_id, "iteration": iteration, "stage": stage, "done": done, "total": total,
                  "eta_s": 65.0, "message": "batch"})
        started.set()
        while not should_stop():
            threading.Event().wait(0.02)
        store.set_stage(run_id, iteration, stage, "stopped", error=STOP_ERROR.format(stage))
        return "stopped"
    return job


# -- 1. the job box once the job has ended ----------------------------------------------------------------------------

def test_the_job_box_shows_how_each_stage_stands_once_the_job_has_stopped(world):
    from studio.run_jobs import job_markdown

    jobs = JobWorker(world)
    started = threading.Event()
    assert jobs.submit("next_stage", RUN, _stopping_stage(world, RUN, IT, "ground", 1, 6, started)) is None
    assert started.wait(10)
    assert f"- iteration {IT} · ground: 1/6, ETA 65s" in job_markdown(jobs)  # while it runs: progress and ETA
    jobs.stop()
    assert jobs.wait(10)
    page = job_markdown(jobs)
    assert "ETA" not in page and "1/6, " not in page, page
    assert f"- iteration {IT} · ground: stopped at 1/6" in page and "— **stopped**" in page


def test_a_finished_or_failed_jobs_box_says_done_and_where_it_failed(world):
    """Stages the store keeps say their stored state; a step it keeps none of (the swap table's) the job's end."""
    from studio.run_jobs import job_markdown

    def finished(progress, should_stop):
        for stage in ("sample", "score"):
            world.set_stage(RUN, IT, stage, "running")
            progress({"iteration": IT, "stage": stage, "done": 3, "total": 3, "eta_s": 0.0})
            world.set_stage(RUN, IT, stage, "done", counts={"rows": 3})
        return "done"

    def failed(progress, should_stop):
        progress({"iteration": IT, "stage": "swap", "done": 2, "total": 5, "eta_s": 9.0})
        raise RuntimeError("the swap table broke")

    jobs = JobWorker(world)
    assert jobs.submit("rest_of_iteration", RUN, finished) is None and jobs.wait(10)
    page = job_markdown(jobs)
    assert f"- iteration {IT} · sample: done (3/3)" in page and f"- iteration {IT} · score: done (3/3)" in page
    assert "ETA" not in page
    assert jobs.submit("swap", RUN, failed) is None and jobs.wait(10)
    page = job_markdown(jobs)
    assert f"- iteration {IT} · swap: failed at 2/5" in page and "ETA" not in page


# -- 2. a stopped stage says it once ----------------------------------------------------------------------------------

def _card_text(page: str, stage: str) -> str:
    cards = {re.match(r' data-stage="([a-z_]+)"', card).group(1): card
             for card in page.split('<div class="moat-stage"')[1:]}  # each card up to the next one
    return unescape(re.sub(r"<[^>]+>", " ", cards[stage].partition(">")[2]))  # what it shows, no attributes


def test_a_stopped_stage_says_stopped_once_with_what_it_kept_and_how_it_goes_on(world):
    from studio.pipeline import pipeline_html
    from studio.tab_run import stage_table

    kept = world.count("groundings", RUN, IT)
    for stage in ("ground", "train_grounder"):
        world.set_stage(RUN, IT, stage, "running")
        world.set_stage(RUN, IT, stage, "stopped", error=STOP_ERROR.format(stage))
    snap = {"run_id": RUN, "running": False, "status": "stopped",
            "events": [{"run_id": RUN, "iteration": IT, "stage": "ground", "done": 1, "total": 4, "eta_s": 30.0}]}
    page = pipeline_html(world, RUN, snap, live=False)
    ground, training = _card_text(page, "ground"), _card_text(page, "train_grounder")
    assert ground.count("stopped") == 1 and "at 1/4" in ground and "ETA" not in ground, ground
    assert f"{kept} groundings kept; Next stage resumes from them" in ground
    assert 'data-stage="ground" data-status="stopped"' in page and 'aria-valuenow="25"' in page
    assert training.count("stopped") == 1 and "nothing kept: Next stage runs it again from the start" in training
    # Another run's job says nothing of this run's stage: no count then, the rest as before.
    elsewhere = _card_text(pipeline_html(world, RUN, {**snap, "run_id": "other"}, live=False), "ground")
    assert "1/4" not in elsewhere and elsewhere.count("stopped") == 1
    table = stage_table(world, RUN).set_index("stage")
    for stage in ("ground", "train_grounder"):
        row = " | ".join(str(v) for v in table.loc[stage])
        assert row.count("stopped") == 1, row  # the status; no summary or error repeating it
    assert table.loc["ground", "summary"] == f"{kept} groundings kept; Next stage resumes from them"


def test_an_interrupted_stage_says_interrupted_once(world):
    from studio.tab_run import stage_table

    world.set_stage(RUN, IT, "sample", "running")  # a killed process left it so
    row = stage_table(world, RUN).set_index("stage").loc["sample"]
    plans = world.count("plans", RUN, IT)
    assert row["status"] == "interrupted" and row["summary"] == f"{plans} plans kept; Next stage resumes from them"


# -- 3. who started the running job ---------------------------------------------------------------------------------

def test_a_refused_press_says_which_page_started_the_running_job(tmp_path, monkeypatch):
    import studio.jobs
    from studio.run_jobs import job_markdown, start_job

    started = threading.Event()
    monkeypatch.setattr(studio.jobs, "loop_job", lambda store, run_id, kind, progress, stop, *rest: blocking_job(
        started, done=1, total=4, eta_s=3.0, poll_s=0.02)(progress, stop))
    here, there = _page("session-here-7f3c"), _page("session-there-91ab")
    with Store(tmp_path / "s.duckdb") as store:
        run_id = store.create_run("who", {}, tmp_path / "runs")
        jobs = JobWorker(store)
        ctx = _ctx(store, jobs)
        assert start_job(ctx, "next_stage", run_id, "", here).startswith(f"Started `next_stage` on `{run_id}`")
        assert started.wait(10)
        mine, theirs = (start_job(ctx, "next_iteration", run_id, "", page) for page in (here, there))
        assert mine.startswith("Refused") and "(next_stage on " in mine and "started from this page)" in mine, mine
        assert "started by another page, no name given)" in theirs, theirs
        for text in (mine, theirs, job_markdown(jobs), str(jobs.snapshot())):
            assert "someone" not in text and "session-" not in text  # never a session id
        jobs.stop()
        assert jobs.wait(10)
        started.clear()
        assert start_job(ctx, "next_stage", run_id, "alice", here).startswith("Started") and started.wait(10)
        assert "started by alice)" in start_job(ctx, "next_stage", run_id, "bob", there)
        assert "started from this page)" in start_job(ctx, "next_stage", run_id, "", here)
        jobs.stop()
        assert jobs.wait(10)
        # A job no page started (the first-visit demo): no page and no name to name.
        started.clear()
        assert jobs.submit("first visit: a demo run", run_id, blocking_job(started, 1, 4, 3.0, 0.02)) is None
        assert started.wait(10)
        assert "started with no name given)" in start_job(ctx, "next_stage", run_id, "", there)
        jobs.stop()
        assert jobs.wait(10)


def test_start_a_new_run_records_the_page_that_started_it(tmp_path, monkeypatch):
    """*Start a new run* through the app's endpoint: its job is this page's, so this page's next press says so."""
    import studio.run_jobs
    from engine.config import load_config
    from studio.app import build_app
    from studio.new_run_config import config_toml

    started = threading.Event()
    monkeypatch.setattr(studio.run_jobs, "run_loop", lambda store, run_id, progress, should_stop, **kwargs:
                        blocking_job(started, 1, 4, 3.0, 0.02)(progress, should_stop))
    text = config_toml(load_config("examples/demo.toml", [f"run.workdir={tmp_path / 'runs'}"]))
    here, there = _page("session-here-7f3c"), _page("session-there-91ab")
    with Store(tmp_path / "s.duckdb") as store:
        jobs = JobWorker(store)
        demo = build_app(store, "examples/demo.toml", jobs=jobs, workspace=Path.cwd().anchor)
        try:
            fns = {f.api_name: f.fn for f in demo.fns.values() if f.api_name}
            run_id = fns["run_start_new"](text, "", here)[1]["value"]
            assert run_id and started.wait(10)
            assert "(start_new on " in fns["run_next_stage"](run_id, "", here)
            assert "started from this page)" in fns["run_next_stage"](run_id, "", here)
            assert "started by another page, no name given)" in fns["run_next_stage"](run_id, "", there)
            jobs.stop()
            assert jobs.wait(10)
        finally:
            demo.close()
