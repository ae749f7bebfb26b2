"""What a Spaces visitor meets on the first-visit demo run: the iteration cap holds on the job buttons (server side),
a new browser opens on the iteration that has data, the iteration picker gains a running run's iterations as
they appear (a first visit's page opens before the run has any), the welcome follows the run, the stage table has
its headers before any stage exists, and no page shows the server's paths or a command the visitor cannot run.

No stage is computed here: the demo run's stages are marked in the store, so each test takes seconds."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from engine.config import load_config
from engine.config_checks import apply_settings
from engine.loop import create_run, stages_of
from engine.store import Store
from tests._studio import studio_run_id, studio_store  # noqa: F401  (fixtures: run_id, store)


@pytest.fixture(scope="module")
def studio_db(tmp_path_factory) -> tuple[Path, str]:
    """A store holding one Spaces-capped demo run (demo agents, reference critic) with nothing run yet."""
    from studio.spaces_policy import spaces_capped

    path = tmp_path_factory.mktemp("spaces_ux") / "studio.duckdb"
    config = spaces_capped(load_config("examples/demo.toml"))
    config.run.name, config.run.iterations = "demo-first-visit", 1
    config.run.workdir = str(path.parent / "runs")
    with Store(path) as store:
        return path, create_run(store, config)


def _finish(store: Store, run_id: str, iterations: tuple[int, ...] = (0, 1)) -> None:
    """Mark every stage of ``iterations`` done, as the finished first-visit run leaves them."""
    from engine.loop import run_config

    config = run_config(store, run_id)
    for it in iterations:
        for stage in stages_of(it, config):
            store.set_stage(run_id, it, stage, "running")
            store.set_stage(run_id, it, stage, "done", counts={"rows": 1})


def _endpoint(demo, api_name: str):
    fn = next(f.fn for f in demo.fns.values() if f.api_name == api_name)
    if api_name == "studio_sync_iterations":  # the picker and its state; the timer's pace is test_studio_pace's
        return lambda *args: fn(*args)[:2]
    return fn


def test_spaces_refuses_a_job_past_the_iteration_cap(store, run_id, monkeypatch):
    """On the finished demo run every job button would start iteration 2: on Spaces each is refused, naming the cap,
    and no job or iteration appears; an unfinished iteration 1 may still be finished."""
    import os

    from studio.app import build_app
    from studio.jobs import LOOP_KINDS, loop_job, loop_reach

    monkeypatch.setenv("SPACE_ID", "someone/moat-studio")
    _finish(store, run_id)
    demo = build_app(store, "examples/demo.toml", spaces=bool(os.environ.get("SPACE_ID")))
    page = SimpleNamespace(session_hash="owner-page", username=None)
    demo.moat_jobs.owners.record(run_id, page.session_hash)  # the page that started it (a Space runs no other's jobs)
    for kind in LOOP_KINDS:
        message = _endpoint(demo, f"run_{kind}")(run_id, "ann", page)  # the function the button calls
        if kind == "rest_of_iteration":  # nothing to finish on a complete run: it starts nothing, cap or not
            assert loop_reach(store, run_id, kind) is None
            assert message == (f"Nothing started: `{kind}` on `{run_id}` would run nothing: the run is complete "
                               "(1 of 1 iterations)."), message
            continue
        assert loop_reach(store, run_id, kind) == 2  # what the press would start without the cap
        assert message.startswith("Refused on Spaces") and "**run.iterations** is at most 1" in message, message
        assert "iteration 2" in message
    assert demo.moat_jobs.snapshot()["status"] == "idle" and store.iterations(run_id) == [0, 1]
    # The worker's own check, when the job starts computing (a press checked just before the store moved on).
    refused = loop_job(store, run_id, "next_stage", lambda event: None, lambda: False, max_iteration=1,
                       where="on Spaces")
    assert refused.startswith("Refused on Spaces") and store.iterations(run_id) == [0, 1]
    assert demo.moat_jobs.start_loop("next_iteration", run_id, max_iteration=1).startswith("Refused in this studio")
    store.set_stage(run_id, 1, "evaluate", "pending")  # iteration 1 unfinished: the cap lets it finish
    assert loop_reach(store, run_id, "rest_of_iteration") == 1 and loop_reach(store, run_id, "next_iteration") == 2


def test_a_new_browser_opens_on_the_newest_iteration_with_data(store, run_id):
    """An iteration that has only just started (no stage done) is not the default: its pages are empty."""
    from studio.app import build_app
    from studio.place import done_iterations, pick_iteration

    _finish(store, run_id)
    store.set_stage(run_id, 2, "sample", "running")  # a job put past the cap before it held, or a local run
    its = store.iterations(run_id)
    assert its == [0, 1, 2] and done_iterations(store, run_id, its) == [0, 1]
    assert pick_iteration(its, run_id, {}, done_iterations(store, run_id, its)) == 1
    assert pick_iteration(its, run_id, {"run": run_id, "iteration": 2}, [0, 1]) == 2  # a saved place still wins
    assert pick_iteration([0, 1], run_id, {}, []) == 1  # nothing done yet: the newest training iteration
    update, _, shown, auto, view = _endpoint(build_app(store, "examples/demo.toml"), "studio_pick_run")(run_id, {})
    assert update["value"] == 1 and shown == {"run": run_id, "its": [0, 1, 2], "auto": 1} and auto == 1
    assert view == f"{run_id}\n1"  # the view key every tab's view listens to (studio.common.Ctx.view)


def test_on_spaces_the_welcome_says_the_demo_run_is_shared_and_read_only(store, run_id):
    """On a Space no page may curate or continue the demo run (studio.curation_rights, run_jobs.start_job): the
    welcome says so once it has finished, and when it stopped early it points to a run of one's own instead of to
    *Rest of iteration*, which would be refused. A team studio's welcome is unchanged."""
    from studio.first_visit import FINISHED, SHARED_ON_SPACES, UNFINISHED, UNFINISHED_ON_SPACES, welcome
    from studio.jobs import JobWorker

    space, team = JobWorker(store, own_jobs_only=True), JobWorker(store)
    assert welcome(store, space, run_id) == (UNFINISHED_ON_SPACES.format(run_id=run_id), False)
    assert "Rest of iteration" not in UNFINISHED_ON_SPACES and "*Start a new run*" in UNFINISHED_ON_SPACES
    assert welcome(store, team, run_id) == (UNFINISHED.format(run_id=run_id), False)
    _finish(store, run_id)
    finished = FINISHED.format(run_id=run_id, evaluated=40)
    assert welcome(store, space, run_id) == (finished + SHARED_ON_SPACES, True)
    assert welcome(store, team, run_id) == (finished, True)


def test_the_welcome_follows_the_demo_run(store, run_id, monkeypatch):
    """Preparing while the job runs (how long it usually takes at the Spaces sizes, and which stage is under way),
    where to look once finished (then the page stops asking), how to continue when it stopped early."""
    import studio.app
    from studio.first_visit import CAPPED_DURATION, FINISHED, UNFINISHED, welcome
    from studio.jobs import JobWorker

    jobs = JobWorker(store)
    started, release = threading.Event(), threading.Event()

    def hold(progress, should_stop) -> str:
        started.set()
        release.wait(30)
        return "done"

    assert jobs.submit("first visit: a demo run", run_id, hold) is None and started.wait(10)
    text, settled = welcome(store, jobs, run_id)
    assert not settled and text.startswith("**Welcome.** A demo run is being prepared for you")
    assert f"It usually takes {CAPPED_DURATION}." in text and "*Now:* getting ready · " in text, text
    store.set_stage(run_id, 0, "evaluate", "running")
    assert "*Now:* evaluating the starting planner and grounder · " in welcome(store, jobs, run_id)[0]
    store.set_stage(run_id, 0, "evaluate", "done", counts={"rows": 1})
    for stage in ("sample", "score", "pairs"):
        store.set_stage(run_id, 1, stage, "running")
        store.set_stage(run_id, 1, stage, "done", counts={"rows": 1})
    store.set_stage(run_id, 1, "train_planner", "running")
    now = welcome(store, jobs, run_id)[0].split("*Now:* ")[1]
    assert now.startswith("iteration 1, stage 4 · DPO planner (of 8) · ") and now.endswith(" s so far."), now
    release.set()
    assert jobs.wait(10)
    assert welcome(store, jobs, run_id) == (UNFINISHED.format(run_id=run_id), False)
    _finish(store, run_id)
    text, settled = welcome(store, jobs, run_id)
    assert settled and text == FINISHED.format(run_id=run_id, evaluated=40) and "being prepared" not in text
    assert "**Pairs**" in text and "**Critic**" in text and "**Metrics**" in text
    # The page: rendered from the run's state when built, and again on load / each tick until settled.
    monkeypatch.setattr(studio.app, "start_showcase", lambda *args: run_id)
    demo = studio.app.build_app(store, "examples/demo.toml", jobs=jobs, first_visit=True)
    shown = next(c for c in demo.config["components"] if c.get("props", {}).get("elem_id") == "first-visit")
    assert shown["props"]["value"] == text
    refreshed, timer = _endpoint(demo, "studio_welcome")()
    assert refreshed == text and timer.active is False


def test_the_welcome_says_how_long_only_for_what_was_measured():
    """The demo agents at the Spaces caps or at the demo config's own sizes have a measured duration; other agents,
    another task file or more work than the demo config get none (the live line still shows)."""
    from studio.first_visit import CAPPED_DURATION, FULL_DURATION, expected_duration
    from studio.spaces_policy import spaces_capped

    def demo(*settings: str):
        config = load_config("examples/demo.toml")
        config.run.iterations = 1  # as start_showcase sets it
        return apply_settings(config, list(settings), "test") if settings else config

    assert expected_duration(spaces_capped(demo())) == CAPPED_DURATION
    assert expected_duration(demo()) == FULL_DURATION
    assert expected_duration(demo("data.train_limit=16", "sample.k=4")) == FULL_DURATION  # eval_limit 0: all tasks
    assert expected_duration(demo("sample.k=30")) is None
    assert expected_duration(demo("data.train_limit=500")) is None
    assert expected_duration(demo("run.iterations=3")) is None
    assert expected_duration(demo("planner.path=tests/data/other-planner")) is None
    assert expected_duration(demo("data.tasks=tests/data/samples/gsm8k_test.jsonl")) is None


def test_the_stage_table_has_its_headers_before_any_stage(store, run_id):
    from studio.app import build_app
    from studio.tab_run import STAGE_COLUMNS, stage_table

    demo = build_app(store, "examples/demo.toml")
    table = next(c for c in demo.config["components"] if c.get("props", {}).get("elem_id") == "run-stages")["props"]
    assert table["headers"] == STAGE_COLUMNS and table["value"]["headers"] == STAGE_COLUMNS
    assert list(stage_table(store, run_id).columns) == STAGE_COLUMNS and stage_table(store, run_id).empty


def test_spaces_pages_show_no_server_path_and_no_command_a_visitor_cannot_run(store, run_id, monkeypatch):
    from studio.app import build_app
    from studio.metrics_swaps import swap_markdown

    local = swap_markdown(store, run_id, spaces=False)
    assert f"python -m engine swap --db {store.path} --run {run_id}" in local
    assert "studio stopped" in local and "Compute the swap table" in local  # the CLI cannot open the held store
    monkeypatch.setenv("SPACE_ID", "someone/moat-studio")
    for text in (swap_markdown(store, run_id), swap_markdown(store, run_id, spaces=True)):
        assert str(store.path) not in text and "--db" not in text, text
        assert "local copy" in text and "No swap table stored" in text
    page = json.dumps(build_app(store, "examples/demo.toml", spaces=True).config, default=str)
    assert str(store.path.parent) not in page and "Store `studio.duckdb`" in page
    local_page = json.dumps(build_app(store, "examples/demo.toml").config, default=str)
    assert str(store.path) in local_page  # locally the header keeps the full path


def test_the_iteration_picker_gains_a_running_runs_new_iterations(store, run_id):
    """The picker's choices are sent when the run is picked; an iteration that appears later (the next one started
    from the Run tab) is offered by the timer's sync, which sends nothing while the list is unchanged and keeps the
    curator's pick."""
    import gradio as gr

    from studio.app import build_app

    demo = build_app(store, "examples/demo.toml")
    sync = _endpoint(demo, "studio_sync_iterations")
    assert store.iterations(run_id) == []  # a run just created (a first visit's page opens now): nothing to pick
    filled = {"run": run_id, "its": []}  # what on_run sent when the page picked the run
    assert sync(run_id, None, filled) == (gr.skip(), gr.skip())
    store.set_stage(run_id, 0, "evaluate", "running")  # its first stage starts
    picker, shown = sync(run_id, None, filled)
    assert picker["choices"] == [0] and picker["value"] == 0 and shown == {"run": run_id, "its": [0], "auto": 0}
    assert sync(run_id, 0, shown) == (gr.skip(), gr.skip())
    store.set_stage(run_id, 1, "sample", "running")  # the next iteration starts
    picker, shown = sync(run_id, 0, {**shown, "auto": None})
    assert picker["choices"] == [0, 1] and picker["value"] == 0  # the curator's pick stays
    assert shown == {"run": run_id, "its": [0, 1], "auto": None}
    picker, _ = sync(run_id, None, {"run": run_id, "its": [0]})  # nothing picked: the newest training iteration
    assert picker["value"] == 1
    assert sync(None, None, filled) == (gr.skip(), gr.skip())


def test_the_studios_own_pick_of_iteration_0_moves_to_the_first_trained_iteration(store, run_id):
    """A first visit's picker took iteration 0 (all the demo run had) and sat there after iteration 1 was trained, so
    Pairs and Critic read "0 rows" (fresh-eyes review). The studio's own pick of 0 now moves to the newest training
    iteration with a stage done; a curator's pick and a place restored from the browser stay."""
    import gradio as gr

    from studio.app import build_app

    demo = build_app(store, "examples/demo.toml")
    sync, pick_run = _endpoint(demo, "studio_sync_iterations"), _endpoint(demo, "studio_pick_run")
    store.set_stage(run_id, 0, "evaluate", "done")
    update, _, shown, auto, _ = pick_run(run_id, {}, None)
    assert update["value"] == 0 and shown == {"run": run_id, "its": [0], "auto": 0} and auto == 0
    assert sync(run_id, 0, shown) == (gr.skip(), gr.skip())  # nothing trained yet
    store.set_stage(run_id, 1, "sample", "running")
    picker, shown = sync(run_id, 0, shown)
    assert picker["choices"] == [0, 1] and picker["value"] == 0  # only started: its pages are still empty
    assert sync(run_id, 0, shown) == (gr.skip(), gr.skip())
    store.set_stage(run_id, 1, "sample", "done")
    paced_sync = next(f.fn for f in demo.fns.values() if f.api_name == "studio_sync_iterations")
    assert paced_sync(run_id, 0, shown)[2] == 1  # the page's copy of the studio's pick, for the place's save
    picker, shown = sync(run_id, 0, shown)
    assert picker["value"] == 1 and shown == {"run": run_id, "its": [0, 1], "auto": 1}
    assert sync(run_id, 1, shown) == (gr.skip(), gr.skip())
    assert sync(run_id, 0, shown) == (gr.skip(), gr.skip())  # the curator then picked 0: it stays
    # A reload restores 0: it stays.
    update, _, shown, auto, view = pick_run(run_id, {"run": run_id, "iteration": 0}, None)
    assert update["value"] == 0 and shown["auto"] is None and auto is None and view == f"{run_id}\n0"
    assert sync(run_id, 0, shown) == (gr.skip(), gr.skip())


def test_the_iteration_sync_leaves_the_picker_to_the_run_picker_until_it_has_filled_it(store, run_id):
    """A tick that reaches the server before on_run has filled the picker for this run (a reload restoring a saved
    iteration, a switch to another run) sends nothing: it used to replace a reload's restored iteration 0 by the
    default 1 (CI, test_studio_browser's reload test)."""
    import gradio as gr

    from studio.app import build_app

    _finish(store, run_id)
    assert store.iterations(run_id) == [0, 1]
    sync = _endpoint(build_app(store, "examples/demo.toml"), "studio_sync_iterations")
    assert sync(run_id, None, None) == (gr.skip(), gr.skip())  # the page has not been through on_run yet
    assert sync(run_id, 0, {"run": "another-run", "its": [0]}) == (gr.skip(), gr.skip())  # switching runs
    picker, _ = sync(run_id, 0, {"run": run_id, "its": [0]})  # filled for this run: the sync works
    assert picker["value"] == 0


def test_a_second_change_of_the_run_picker_for_the_same_run_keeps_the_iteration(store, run_id):
    """On a loaded machine the page fired the run picker's change twice for one load: the second call, with the saved
    place already spent, put the iteration back on the default after a reload had restored 0 (CI failure). A change
    to the run the picker was filled for sends nothing; another run is filled as before."""
    import gradio as gr

    from studio.app import build_app

    _finish(store, run_id)
    pick_run = _endpoint(build_app(store, "examples/demo.toml"), "studio_pick_run")
    saved = {"tab": "pairs", "run": run_id, "iteration": 0}
    update, pending, shown, auto, _ = pick_run(run_id, saved, None)  # the first change: the saved iteration
    assert update["value"] == 0 and pending == {} and shown == {"run": run_id, "its": [0, 1], "auto": None}
    assert auto is None
    assert pick_run(run_id, pending, shown) == (gr.skip(),) * 5  # the duplicate
    update, _, shown, auto, _ = pick_run(run_id, {}, {"run": "another-run", "its": [0]})  # switched from another run
    assert update["value"] == 1 and shown == {"run": run_id, "its": [0, 1], "auto": 1} and auto == 1


def test_the_iteration_picker_is_the_run_pickers_first_listener(store):
    """The page dispatches a change's listeners in the order they were registered: the iteration picker must come
    before the tabs' views, which all wait on it (last, it filled the picker seconds after the run on a first load)."""
    from studio.app import build_app

    demo = build_app(store, "examples/demo.toml")
    pick_run = next(f for f in demo.fns.values() if f.api_name == "studio_pick_run")
    run_id = pick_run.targets[0][0]
    listeners = [f.api_name for f in demo.fns.values() if (run_id, "change") in [tuple(t) for t in f.targets]]
    assert listeners[0] == "studio_pick_run" and len(listeners) > 3, listeners


def test_start_a_new_run_runs_through_the_first_moat_iteration(store, run_id, monkeypatch):
    """*Start a new run* once stopped after iteration 0's evaluation (a "next iteration" job on a fresh run), so a
    new run, the newest and so where fresh browsers land, had nothing in Pairs or Critic. Its job runs the loop
    through iteration 1, as the first-visit run does."""
    from studio import run_jobs
    from studio.jobs import JobWorker

    calls = []
    monkeypatch.setattr(run_jobs, "run_loop", lambda store, run, **kw: calls.append((run, kw["iterations"])) or "done")
    jobs = JobWorker(store)
    assert run_jobs.start_first_iteration(store, jobs, run_id, "ann") is None
    jobs._thread.join(timeout=30)
    assert calls == [(run_id, 1)] and jobs.snapshot()["status"] == "finished", jobs.snapshot()


@pytest.mark.browser
def test_a_phone_sees_the_run_tab_stacked_and_its_stage_table_readable(store, run_id):
    """In Chromium at 390x844 (a Spaces visitor's first screen): the job panel sat beside the loss chart (~170 px
    each, the log lines clipped), the stage table squeezed its columns to one letter per line ("i/t/e/r/a/t/i/o/n")
    and the run picker cut its value ("demo-first-visit-20…"). Now the panel is above the chart, each the page's
    width, the table keeps readable columns and scrolls sideways inside its box (the page itself does not), and the
    picker shows the whole run id. At 1400 px the panel and the chart stay side by side. At 1000 px (a laptop) the
    table keeps the same readable columns and scrolls sideways too."""
    from tests._studio import serve_studio
    from tests.test_studio_browser import ARGS, CHROMIUM, sync_api

    _finish(store, run_id)
    url, demo = serve_studio(store)
    box = "e => { const r = e.getBoundingClientRect(); return {x: r.left, y: r.top, w: r.width, h: r.height}; }"
    seen = {}
    try:
        expect = sync_api.expect
        with sync_api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            try:
                for width in (390, 1000, 1400):
                    page = browser.new_page(viewport={"width": width, "height": 844})
                    page.set_default_timeout(30_000)
                    page.goto(url, wait_until="load")
                    expect(page.locator("#pick-run input")).to_have_value(run_id, timeout=30_000)
                    header = page.locator("#run-stages th[data-heading='0']")
                    expect(page.locator("#run-stages [data-testid='cell-0-1']")).to_have_text("evaluate",
                                                                                               timeout=30_000)
                    picker = page.locator("#pick-run input")
                    seen[width] = {
                        "job": page.locator("#run-job").evaluate(box), "loss": page.locator("#run-loss").evaluate(box),
                        "header": header.evaluate(box),
                        # lines of the header "iteration": 1 unless its word is broken
                        "header_lines": header.locator("span").first.evaluate(
                            "e => { const r = document.createRange(); r.selectNodeContents(e); "
                            "return r.getClientRects().length; }"),
                        "picker_cut": picker.evaluate("e => e.scrollWidth > e.clientWidth"),
                        "page_width": page.evaluate("document.documentElement.scrollWidth")}
                    page.close()
            finally:
                browser.close()
    finally:
        demo.close()
    phone, desktop = seen[390], seen[1400]
    job, loss = phone["job"], phone["loss"]
    assert job["w"] >= 300 and loss["w"] >= 300, seen  # each the phone's width, not ~170 px side by side
    assert job["y"] + job["h"] <= loss["y"] + 1, seen  # the job panel above the chart
    assert phone["header"]["w"] > 60 and phone["header_lines"] == 1, seen  # "iteration", not one letter per line
    assert not phone["picker_cut"], seen
    assert phone["page_width"] <= 390, seen  # the table scrolls in its box, the page does not
    job, loss = desktop["job"], desktop["loss"]
    assert loss["x"] >= job["x"] + job["w"] - 1 and abs(loss["y"] - job["y"]) < 5, seen  # side by side
    assert desktop["header_lines"] == 1 and not desktop["picker_cut"] and desktop["page_width"] <= 1400, seen
    laptop = seen[1000]  # Gradio's layout gives the table ~700 px here: its 8% column broke "iter/atio/n" over 3 lines
    assert laptop["header_lines"] == 1 and laptop["header"]["w"] >= 90 and laptop["page_width"] <= 1000, seen
