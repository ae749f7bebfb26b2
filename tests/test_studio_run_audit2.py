"""The second browser audit's Run-tab findings, handler-level (no server; the stage messages on the tiny models):

1. *Start a new run* pressed while a job runs is refused before it creates a run (it made an orphan run per press and
   moved the Run picker to it); a job that starts between the check and the submit still gets the old path.
2. A press refused while a job ran settles once that job has ended (it said "already running" above a job box saying
   stopped, and on the page that started the job it had replaced the "Started" line for good); the refusal has no
   nested parentheses.
3. The job box's "Result:" line says what the state does not ("paused" is run_loop's word, "stopped" repeated it).
4. The sample and score stages' progress messages count the iteration's stored rows, as done/total does: after a
   resume they went backwards ("3/6 ... 720 plans", then "4/6 ... 240 plans").
5. The stage table's stage column holds "train_grounder" on one line at the table's minimum width.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from engine.store import Store
from studio.jobs import BUSY_HEAD, JobWorker
from tests._studio import blocking_job


def _page(session: str) -> SimpleNamespace:
    return SimpleNamespace(username=None, session_hash=session)


def _ctx(store: Store, jobs: JobWorker):
    from studio.common import Ctx

    return Ctx(store=store, jobs=jobs, read_only=False, spaces=False, run=None, iteration=None, curator=None)


# -- 1. Start a new run while a job runs ------------------------------------------------------------------------------

def test_start_a_new_run_while_a_job_runs_creates_no_run(tmp_path, monkeypatch):
    import studio.run_jobs
    from engine.config import load_config
    from studio.app import build_app
    from studio.new_run_config import config_toml

    started = threading.Event()
    monkeypatch.setattr(studio.run_jobs, "run_loop", lambda store, run_id, progress, should_stop, **kwargs:
                        blocking_job(started, 1, 4, 3.0, 0.02)(progress, should_stop))
    text = config_toml(load_config("examples/demo.toml", [f"run.workdir={tmp_path / 'runs'}"]))
    with Store(tmp_path / "s.duckdb") as store:
        jobs = JobWorker(store)
        demo = build_app(store, "examples/demo.toml", jobs=jobs, workspace=Path.cwd().anchor)
        try:
            fns = {f.api_name: f.fn for f in demo.fns.values() if f.api_name}
            run_id = fns["run_start_new"](text, "", _page("here"))[1]["value"]
            assert run_id and started.wait(10)
            for _ in range(2):  # each press used to make another run and move the picker to it
                message, picker = fns["run_start_new"](text, "", _page("there"))
                assert message.startswith(BUSY_HEAD) and "(start_new on " in message, message
                assert "Created" not in message and "value" not in picker, (message, picker)
                assert [r["run_id"] for r in store.list_runs()] == [run_id]
            # The race: the worker looked free to the check, but a job holds it at the submit: the old path.
            monkeypatch.setattr(jobs, "busy", lambda session=None: None)
            message, picker = fns["run_start_new"](text, "", _page("there"))
            assert message.startswith("Created") and BUSY_HEAD in message and len(store.list_runs()) == 2, message
            jobs.stop()
            assert jobs.wait(10)
        finally:
            demo.close()


# -- 2. a refused press settles -------------------------------------------------------------------------------------

def test_a_refused_press_settles_once_its_job_has_ended(tmp_path, monkeypatch):
    import studio.jobs
    from studio.run_jobs import settled_message, start_job

    started = threading.Event()
    monkeypatch.setattr(studio.jobs, "loop_job", lambda store, run_id, kind, progress, stop, *rest: blocking_job(
        started, done=1, total=4, eta_s=3.0, poll_s=0.02)(progress, stop))
    here, there = _page("here"), _page("there")
    with Store(tmp_path / "s.duckdb") as store:
        run_id = store.create_run("who", {}, tmp_path / "runs")
        jobs = JobWorker(store)
        ctx = _ctx(store, jobs)
        started_line = start_job(ctx, "next_stage", run_id, "", here)
        assert started.wait(10)
        mine, theirs = (start_job(ctx, "next_iteration", run_id, "", page) for page in (here, there))
        for refusal in (mine, theirs):
            assert refusal.startswith(f"{BUSY_HEAD} (next_stage on {run_id}, "), refusal
            assert settled_message(refusal, jobs.snapshot()) is None  # the job still runs: the refusal holds
        # One pair of parentheses: "(next_stage on run, started by another page, no name given)".
        assert theirs.count("(") == 1 and "started by another page, no name given)" in theirs, theirs
        jobs.stop()
        assert jobs.wait(10)
        snap = jobs.snapshot()
        ended = settled_message(started_line, snap)
        assert ended and ended.startswith(f"The job `next_stage` on `{run_id}` was stopped after"), ended
        for refusal in (mine, theirs):  # the same line as the "Started" one settles to, and that it may go again
            settled = settled_message(refusal, snap)
            assert settled and settled.startswith(ended.rstrip(".")) and "already running" not in settled, settled
            assert settled.endswith("The press it refused can be made again now."), settled
        # A refusal about an older job (the worker has run another since): that one has ended too.
        older = f"{BUSY_HEAD} (start_new on other-run, started from this page). Stop it or wait for it to finish."
        assert settled_message(older, snap) == "The job that refused this press has ended: press again."
        assert settled_message("Refused on Spaces: no.", snap) is None  # another kind of refusal stays


# -- 3. the job box's result line -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("result", "status", "shown"), [
    ("paused", "finished", None), ("done", "finished", None), ("stopped", "stopped", None),
    ("nothing to run", "finished", "Result: nothing was left to run"),
])
def test_the_job_box_says_the_result_in_words_once(tmp_path, result, status, shown):
    from studio.run_jobs import job_markdown

    with Store(tmp_path / "s.duckdb") as store:
        run_id = store.create_run("r", {}, tmp_path / "runs")
        jobs = JobWorker(store)
        assert jobs.submit("next_stage", run_id, lambda progress, stop: result) is None
        assert jobs.wait(10)
        text = job_markdown(jobs)
        head = text.split("\n\n")[0]
        assert f"**{status}**" in head, text
        assert "paused" not in text and text.count("stopped") == (1 if status == "stopped" else 0), text
        result_lines = [line for line in text.split("\n\n") if line.startswith("Result:")]
        assert result_lines == ([shown] if shown else []), text


# -- 4. cumulative plan counts after a resume -----------------------------------------------------------------------

def _counts(events: list[dict], word: str) -> list[int]:
    return [int(m.group(1)) for e in events if (m := re.match(rf"(\d+) {word}$", e.get("message") or ""))]


@pytest.mark.slow
def test_sample_and_score_messages_count_the_stored_rows_after_a_resume(tiny_run, monkeypatch):
    import engine.stages.score as score_stage
    from engine.loop import run_stage
    from engine.stages.context import batches, pending_batches

    # Score's chunks are at least 64 plans (one chunk on the tiny world): cut them to 2 plans to stop between two.
    monkeypatch.setattr(score_stage, "batches", lambda items, size: batches(items, 2))
    monkeypatch.setattr(score_stage, "pending_batches", lambda items, size, done: pending_batches(items, 2, done))
    db, run_id = tiny_run("sample.batch_size=1")
    with Store(db) as store:
        for stage, table, word in (("sample", "plans", "plans"), ("score", "scores", "plans scored")):
            first: list[dict] = []
            assert run_stage(store, run_id, 1, stage, progress=first.append,
                             should_stop=lambda first=first, word=word: bool(_counts(first, word))) == "stopped"
            kept = store.count(table, run_id, 1)
            assert _counts(first, word) == [kept] and kept > 0, first
            resumed: list[dict] = []
            assert run_stage(store, run_id, 1, stage, progress=resumed.append) == "done"
            counts = _counts(resumed, word)
            assert counts and counts[0] > kept, (stage, kept, resumed)  # this job's rows alone were fewer
            assert counts == sorted(counts) and counts[-1] == store.count(table, run_id, 1), (stage, counts)


# -- 5. the stage column's width ------------------------------------------------------------------------------------

def test_the_stage_column_holds_the_longest_stage_name_on_one_line():
    from engine.config import ITERATION_STAGES
    from studio.app import TABLE_CSS
    from studio.tab_run import STAGE_COLUMNS, STAGE_WIDTHS

    assert len(STAGE_WIDTHS) == len(STAGE_COLUMNS) and sum(float(w.rstrip("%")) for w in STAGE_WIDTHS) == 100
    assert re.search(r"#run-stages \.virtual-table-viewport \{ min-width: 1000px;", TABLE_CSS)
    column = STAGE_COLUMNS.index("stage")
    longest = max(len(s) for s in ITERATION_STAGES)  # train_grounder
    # At the table's 1000 px minimum, a monospace character ~8.5 px wide and the cell's padding (~16 px).
    assert 1000 * float(STAGE_WIDTHS[column].rstrip("%")) / 100 >= longest * 8.5 + 16
    # And never broken mid-word (Gradio's wrap=True cells break words): one line, its data-col the stage column.
    rule = re.search(rf'#run-stages td\[data-col="{column}"\][^{{]*\{{([^}}]*)\}}', TABLE_CSS)
    assert rule and "white-space: nowrap" in rule.group(1) and "word-break: keep-all" in rule.group(1), TABLE_CSS
