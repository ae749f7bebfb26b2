"""The browser audit's Run-tab and chart findings, handler-level (no server, no models):

* a job button's line names what the job runs (the stage a *Next stage* job runs, always); on a complete run it says
  that the job starts the next iteration and raises ``run.iterations``, and the job does raise it, as the CLI's
  ``run --iterations N`` does (never lowering it);
* *Stop*'s line names the job and settles into how the job ended, as "Started ..." lines do;
* *Start from the picked run's config* moves a ``run.workdir`` outside the workspace inside it, and names the other
  paths outside it instead of rewriting them;
* iteration 0's lone card is not numbered "8 · evaluate"; the config editor has a maximum height;
* a Plans search with no hits says why; the margin histogram has axis titles and says "No pairs" when empty; the
  gap charts say lower is better; the evidence's per-token numbers carry their unit.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest

from engine.loop import STAGES, run_config
from engine.store import Store
from studio.jobs import JobWorker
from tests._store_world import IT, RUN, build_world
from tests._studio import blocking_job


def _run(store: Store, tmp_path: Path, config: dict | None = None) -> str:
    """A run registered straight into the store (no tasks, nothing trained), its directory under ``tmp_path``."""
    return store.create_run("polish", config or {}, tmp_path / "runs")


def _done(store: Store, run_id: str, iteration: int, stages: tuple[str, ...] | list[str]) -> None:
    for stage in stages:
        store.set_stage(run_id, iteration, stage, "running")
        store.set_stage(run_id, iteration, stage, "done", counts={"rows": 1})


def _complete(store: Store, run_id: str, iterations: int) -> None:
    """Every stage of iterations 0..``iterations`` done."""
    _done(store, run_id, 0, ["evaluate"])
    for t in range(1, iterations + 1):
        _done(store, run_id, t, STAGES)


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "polish.duckdb") as s:
        yield s


def _ctx(store: Store, jobs: JobWorker):
    from studio.common import Ctx

    return Ctx(store=store, jobs=jobs, read_only=False, spaces=False, run=None, iteration=None, curator=None)


# -- 1. what a job button's line says, and run.iterations -----------------------------------------------------------

def test_next_stage_on_a_complete_run_says_it_starts_the_next_iteration_and_raises_run_iterations(store, tmp_path):
    from studio.jobs import loop_stages
    from studio.run_jobs import job_plan

    run_id = _run(store, tmp_path, {"run": {"iterations": 1}})
    _complete(store, run_id, 1)
    assert loop_stages(store, run_id, "next_stage") == [(2, "sample")]
    said = job_plan(store, run_id, "next_stage")
    assert said == (". The run is complete (1 of 1 iterations): this starts iteration 2 (stage **sample**) and "
                    "raises **run.iterations** from 1 to 2, as the CLI's `run --iterations 2` does (a later resume "
                    "finishes it).")
    assert job_plan(store, run_id, "next_iteration").startswith(
        ". The run is complete (1 of 1 iterations): this runs iteration 2 (8 stages, from **sample**) and raises "
        "**run.iterations** from 1 to 2")


def test_every_job_line_names_the_stage_it_runs(store, tmp_path):
    from studio.run_jobs import job_plan

    run_id = _run(store, tmp_path, {"run": {"iterations": 2}, "stages": {"grounder_data": "raw"}})
    assert job_plan(store, run_id, "next_stage") == ": stage **evaluate** of iteration 0."
    _done(store, run_id, 0, ["evaluate"])
    _done(store, run_id, 1, ["sample", "score", "pairs", "train_planner", "ground"])
    assert job_plan(store, run_id, "rest_of_iteration") == ": 3 stages of iteration 1, from **critique**."
    assert job_plan(store, run_id, "next_iteration") == ": 11 stages of iterations 1–2, from **critique** of " \
                                                        "iteration 1."
    # a stage the config skips: the press records it skipped, and the line says so
    skipped = job_plan(store, run_id, "next_stage")
    assert skipped.startswith(": stage **critique** of iteration 1, which this run skips (no critic")
    assert skipped.endswith("the job records it skipped.")


def test_start_job_announces_the_plan_and_the_job_raises_run_iterations_as_the_cli_does(store, tmp_path,
                                                                                       monkeypatch):
    import engine.loop
    from studio.run_jobs import start_job

    ran = []

    def fake_stage(store_, run_id_, iteration, stage, **_):  # no models: record the stage done, as run_stage does
        ran.append((iteration, stage))
        _done(store_, run_id_, iteration, [stage])
        return "done"

    monkeypatch.setattr(engine.loop, "preflight", lambda config: [])
    monkeypatch.setattr(engine.loop, "run_stage", fake_stage)
    run_id = _run(store, tmp_path, {"run": {"iterations": 1}})
    _complete(store, run_id, 1)
    jobs = JobWorker(store)
    line = start_job(_ctx(store, jobs), "next_stage", run_id, "ana", None)
    assert line.startswith(f"Started `next_stage` on `{run_id}`. The run is complete (1 of 1 iterations): this "
                           "starts iteration 2 (stage **sample**)")
    assert jobs.wait(30) and jobs.snapshot()["result"] == "paused", jobs.snapshot()
    assert ran == [(2, "sample")]
    # recorded where the CLI's `run --iterations 2` records it: the store's snapshot and the run's config.toml
    assert run_config(store, run_id).run.iterations == 2
    assert re.search(r"(?m)^iterations = 2$", (tmp_path / "runs" / run_id / "config.toml").read_text())
    # within run.iterations nothing is recorded: never lowered to the iteration a job finishes
    assert start_job(_ctx(store, jobs), "rest_of_iteration", run_id, "ana", None) == (
        f"Started `rest_of_iteration` on `{run_id}`: 7 stages of iteration 2, from **score**.")
    assert jobs.wait(30)
    other = _run(store, tmp_path, {"run": {"iterations": 3}})
    _done(store, other, 0, ["evaluate"])
    assert start_job(_ctx(store, jobs), "next_stage", other, "ana", None) == (
        f"Started `next_stage` on `{other}`: stage **sample** of iteration 1.")
    assert jobs.wait(30) and run_config(store, other).run.iterations == 3


# -- 2. the stop line settles -----------------------------------------------------------------------------------------

def test_the_stop_line_names_the_job_and_settles_into_how_it_ended(store, tmp_path):
    from studio.run_jobs import settled_message

    run_id = _run(store, tmp_path)
    jobs = JobWorker(store)
    started = threading.Event()
    assert jobs.submit("next_stage", run_id, blocking_job(started, done=1, total=4, eta_s=3.0, poll_s=0.02)) is None
    assert started.wait(10)
    line = jobs.stop()
    assert line == f"Stop requested: the job `next_stage` on `{run_id}` stops after the batch in flight."
    assert jobs.wait(10)
    settled = settled_message(line, jobs.snapshot())
    assert settled is not None and settled.startswith(f"The job `next_stage` on `{run_id}` was stopped after")
    assert "Stop requested" not in settled
    assert jobs.stop() == "No job is running."


# -- 3. the picked run's config inside the workspace ---------------------------------------------------------------

def test_the_picked_runs_workdir_outside_the_workspace_is_moved_inside_and_other_paths_are_named(store, tmp_path,
                                                                                                monkeypatch):
    from studio.new_run_config import new_run_workdir, picked_config, validate_config

    ws = tmp_path / "ws"
    ws.mkdir()
    monkeypatch.chdir(ws)  # relative paths resolve from here, as the engine opens them
    elsewhere = str(tmp_path / "scratch" / "runs")
    inside_run = _run(store, tmp_path, {"run": {"workdir": elsewhere}})
    toml, message = picked_config(store, inside_run, workspace=ws, default_workdir="runs")
    config, error = validate_config(toml, workspace=ws)
    assert error == "" and config.run.workdir == "runs", error
    assert f"**run.workdir** `{elsewhere}` lies outside the studio's workspace `{ws.resolve()}`: replaced by " \
           "`runs`" in message
    assert "refuse" not in message
    models = _run(store, tmp_path, {"run": {"workdir": elsewhere}, "planner": {"path": "/opt/models/planner"},
                                    "grounder": {"path": "/opt/models/grounder"}})
    toml, message = picked_config(store, models, workspace=ws, default_workdir="runs")
    assert "/opt/models/planner" in toml  # named, never rewritten
    assert re.match(r"\*\*planner\.path, line \d+\*\*: must be inside the workspace",
                    validate_config(toml, workspace=ws)[1])
    assert "replaced by `runs`" in message
    assert ("*Validate* and *Create run* refuse them until they point inside it: **planner.path** "
            "(`/opt/models/planner`), **grounder.path** (`/opt/models/grounder`).") in message
    # a default workdir that is itself outside the workspace is not used: the workdir is named with the others
    toml, message = picked_config(store, inside_run, workspace=ws, default_workdir=str(tmp_path / "other"))
    assert f'workdir = "{elsewhere}"' in toml and f"**run.workdir** (`{elsewhere}`)" in message
    # the studio's --config decides the default; an unreadable file falls back to RunConfig's
    demo = Path(__file__).resolve().parents[1] / "examples" / "demo.toml"
    assert new_run_workdir(demo) == "runs" and new_run_workdir(tmp_path / "no.toml") == "runs"


# -- 4. iteration 0's card; 5. the editor's height --------------------------------------------------------------------

def test_iteration_0s_lone_card_is_not_numbered_as_the_eighth_stage(store, tmp_path):
    from studio.pipeline import pipeline_html

    run_id = _run(store, tmp_path)
    _done(store, run_id, 0, ["evaluate"])
    titles = re.findall(r'<div style="font-weight:600">([^<]*)</div>', pipeline_html(store, run_id, {}, False))
    assert titles == ["evaluate"]
    _done(store, run_id, 1, ["sample"])
    titles = re.findall(r'<div style="font-weight:600">([^<]*)</div>', pipeline_html(store, run_id, {}, False))
    assert titles[0] == "1 · sample plans" and titles[-1] == "8 · evaluate"


@pytest.fixture
def world_app(tmp_path):
    from studio.app import build_app

    with Store(tmp_path / "ws.duckdb") as s:
        build_world(s)
        demo = build_app(s, "examples/demo.toml")
        yield s, demo
        demo.close()


def test_the_config_editor_scrolls_past_a_maximum_height(world_app):
    from studio.tab_run import EDITOR_MAX_LINES

    _, demo = world_app
    editor = next(c for c in demo.config["components"] if c.get("props", {}).get("elem_id") == "run-config")
    assert editor["props"]["max_lines"] == EDITOR_MAX_LINES and EDITOR_MAX_LINES < 60


# -- 6. a Plans search with no hits -----------------------------------------------------------------------------------

def test_a_plans_search_with_no_hits_says_no_task_matches_its_filters(world_app):
    store, demo = world_app
    load = next(fn for fn in demo.fns.values() if fn.api_name == "plans_search").fn
    info, table, _ = load(RUN, IT, "zebra", "qa", "", 1)
    assert info == "0 rows · no task matches the search “zebra”, domain qa: clear the search or set a filter to all " \
                   "to see more" and not len(table)
    info, _, _ = load(RUN, IT, "Ada", "", "", 1)
    assert info.startswith("1 row")
    from studio.tab_plans import no_tasks_reason

    assert no_tasks_reason(RUN, "*bold*") == r"no task matches the search “\*bold\*”: clear the search or set a " \
                                             "filter to all to see more"
    assert no_tasks_reason(None) == "pick a run above" and no_tasks_reason(RUN) == "this run has no tasks"


# -- 7. charts and evidence ---------------------------------------------------------------------------------------

def test_the_margin_histogram_titles_its_axes_and_says_when_there_are_no_pairs(world_app):
    from studio.pairs_charts import length_figure, margin_figure

    store, _ = world_app
    drawn = margin_figure(store, RUN, IT)
    assert drawn.layout.xaxis.title.text == "margin (log-PPL, nats per token)"
    assert drawn.layout.yaxis.title.text == "pairs" and len(drawn.data[0].x) == 3
    for fig in (margin_figure(store, RUN, 4), length_figure(store, RUN, 4)):
        assert [a.text for a in fig.layout.annotations] == ["No pairs in iteration 4 (yet)"]
        assert fig.layout.xaxis.visible is False
    assert "pick a run" in margin_figure(store, None, None).layout.annotations[0].text


def test_the_gap_charts_say_lower_is_better(world_app):
    from studio.metrics_experiment import TITLES
    from studio.tab_metrics import figures

    store, _ = world_app
    figs = figures(store, RUN)
    for key in ("gap_ppl", "gap_logppl"):
        assert figs[key].layout.title.text.endswith("lower is better"), figs[key].layout.title.text
    assert all(title.endswith("lower is better") for key, title in TITLES.items() if "gap" in key)
    assert not figs["accuracy"].layout.title.text.endswith("lower is better")


def test_the_evidence_says_its_numbers_are_nats_more_under_the_rejected_plan():
    from engine.surprisal import PlanSurprisal
    from studio.evidence import _worst_tokens

    chosen = PlanSurprisal(["R1", " =", " *"], [0.5, 0.1, 0.2], 0.27, 0.27, "a", "g")
    rejected = PlanSurprisal(["R1", " =", " *"], [0.5, 0.1, 10.29], 3.6, 3.6, "b", "g")
    line = _worst_tokens(chosen, rejected)
    assert "in nats" in line and "<code>*</code> +10.09 nats" in line


def test_rest_of_iteration_on_a_complete_run_starts_nothing_and_points_at_next_iteration(store, tmp_path):
    """*Rest of iteration* finishes an iteration within ``run.iterations``; on a complete run there is none, so it
    targets nothing (it used to start, train and record iteration N+1), and the button starts no job and says what
    to press instead."""
    from studio.jobs import loop_reach, loop_stages
    from studio.run_jobs import job_plan, start_job

    run_id = _run(store, tmp_path, {"run": {"iterations": 1}})
    _complete(store, run_id, 1)
    assert loop_reach(store, run_id, "rest_of_iteration") is None
    assert loop_stages(store, run_id, "rest_of_iteration") == []
    assert job_plan(store, run_id, "rest_of_iteration") == (
        ": nothing is left to run: the run is complete (1 of 1 iterations). *Next iteration* starts another.")
    jobs = JobWorker(store)
    line = start_job(_ctx(store, jobs), "rest_of_iteration", run_id, "ann", None)
    assert line == (f"Nothing started: `rest_of_iteration` on `{run_id}` would run nothing: the run is complete "
                    "(1 of 1 iterations). *Next iteration* starts another.")
    assert jobs.snapshot()["status"] in (None, "idle")  # no job was submitted
    assert loop_reach(store, run_id, "next_iteration") == 2  # that one goes on
