"""What the Spaces visitor audit found confusing, fixed: the cap refusals (0 means all only where it does, every
cap exceeded at once, the reference-critic rule before the openai critic's own needs), the page a session without a
saved place opens on (the first-visit demo run on Spaces), the finished welcome's word on what one small iteration
moves, the created-run line saying what the run uses of its tasks, and the cap on how many runs a Space keeps.

Handlers are called directly; no stage is computed (the demo run's stages are marked done in the store)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from engine.config import config_to_dict, field_help, load_config
from engine.loop import create_run, run_config, stages_of
from engine.runtime import pick_eval_tasks, sample_tasks
from engine.store import Store
from studio.new_run_config import config_toml, create_run_from_text, tasks_used, validate_config
from studio.spaces_policy import MAX_SPACES_RUNS, SPACES_CAPS, ZERO_MEANS_ALL, spaces_capped, spaces_runs_full


def line_of(text: str, table: str, key: str) -> int:
    """The 1-based line of ``key = ...`` under ``[table]`` in TOML text, found by hand, not by the studio's scan."""
    lines = text.splitlines()
    start = lines.index(f"[{table}]")
    return next(n for n, line in enumerate(lines[start:], start=start + 1) if line.startswith(f"{key} = "))


def capped_text(tmp_path: Path, *settings: str) -> str:
    """The Spaces editor's starting config (the demo's, capped), its runs under ``tmp_path``, with ``settings``."""
    config = spaces_capped(load_config("examples/demo.toml", [f"run.workdir={tmp_path / 'runs'}"]))
    return config_toml(load_config(None, list(settings), base=config_to_dict(config)))


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory) -> tuple[Path, str]:
    """A store holding the first-visit demo run at the Spaces caps, nothing run yet."""
    path = tmp_path_factory.mktemp("visitor") / "studio.duckdb"
    config = spaces_capped(load_config("examples/demo.toml"))
    config.run.name, config.run.iterations = "demo-first-visit", 1
    config.run.workdir = str(path.parent / "runs")
    with Store(path) as store:
        return path, create_run(store, config)


# -- 1. the cap refusals -------------------------------------------------------------------------------------------

def test_only_the_limits_say_that_zero_means_all(tmp_path):
    """The "(0, meaning all, ...)" note followed every cap, sample.k's and run.iterations' too, where 0 means
    nothing of the kind (each refuses 0 by its own range check). It is said now for the fields whose help says
    "(0: all)"."""
    helps = field_help()
    assert ZERO_MEANS_ALL == {dotted for dotted, _ in SPACES_CAPS if "(0: all)" in helps[dotted]}
    text = capped_text(tmp_path, "sample.k=8")
    assert validate_config(text, spaces=True)[1] == (
        f"**sample.k, line {line_of(text, 'sample', 'k')}**: at most 4 on Spaces")
    text = capped_text(tmp_path, "run.iterations=2")
    assert validate_config(text, spaces=True)[1] == (
        f"**run.iterations, line {line_of(text, 'run', 'iterations')}**: at most 1 on Spaces")
    text = capped_text(tmp_path, "data.eval_limit=0")
    assert validate_config(text, spaces=True)[1] == (
        f"**data.eval_limit, line {line_of(text, 'data', 'eval_limit')}**: at most 20 on Spaces (0, meaning all, is "
        "not allowed either)")


def test_every_cap_exceeded_is_named_in_one_refusal(tmp_path):
    """k = 8 with train_limit = 100 was refused for train_limit alone: the visitor fixed it, pressed again and only
    then heard about k."""
    text = capped_text(tmp_path, "sample.k=8", "data.train_limit=100")
    error = validate_config(text, spaces=True)[1]
    assert error == (f"**data.train_limit, line {line_of(text, 'data', 'train_limit')}**: at most 16 on Spaces (0, "
                     "meaning all, is not allowed either); also sample.k: at most 4 on Spaces"), error
    every = capped_text(tmp_path, "sample.k=8", "data.train_limit=100", "data.eval_limit=0", "run.iterations=3")
    error = validate_config(every, spaces=True)[1]
    plain = re.sub(r", line \d+", "", error.replace("**", ""))  # the first field also names its line
    assert all(f"{dotted}: at most {cap}" in plain for dotted, cap in SPACES_CAPS), error


def test_an_openai_critic_is_refused_on_spaces_before_its_model_is_asked_for(tmp_path):
    """With critic.backend = "openai" Validate asked for critic.model, then critic.base_url, and only then said that
    Spaces runs the reference critic alone. Outside Spaces the openai critic's needs are still asked for."""
    text = capped_text(tmp_path).replace('backend = "reference"', 'backend = "openai"')
    assert 'backend = "openai"' in text
    assert validate_config(text, spaces=True)[1] == (
        f"**critic.backend, line {line_of(text, 'critic', 'backend')}**: only the reference critic is allowed on "
        "Spaces")
    assert validate_config(text)[1].startswith(f"**critic.model, line {line_of(text, 'critic', 'model')}**: required "
                                               "for the openai backend")
    # The QA model likewise: not "set both tools.qa_base_url and tools.qa_model" first.
    qa = capped_text(tmp_path).replace('qa_base_url = ""', 'qa_base_url = "http://198.51.100.7/v1"')
    assert 'qa_base_url = "http://198.51.100.7/v1"' in qa
    assert validate_config(qa, spaces=True)[1].startswith(
        f"**tools.qa_base_url, line {line_of(qa, 'tools', 'qa_base_url')}**: no external QA model on Spaces")


# -- 2. where a session without a saved place opens ----------------------------------------------------------------

def test_a_session_without_a_saved_place_lands_on_the_demo_run_given_as_landing(tmp_path):
    """On Spaces the newest run is often another visitor's experiment under way, while the welcome talks about the
    demo run: a session with no saved place opens on the demo run (``showcase_run``) when the page passes it."""
    from studio.first_visit import SHOWCASE_NAME, showcase_run
    from studio.place import pick_run

    with Store(tmp_path / "s.duckdb") as store:
        assert showcase_run(store.list_runs()) is None
        demo = store.create_run(SHOWCASE_NAME, {}, tmp_path / "runs")
        visitor = store.create_run("someone-else", {}, tmp_path / "runs")
        store.create_run(SHOWCASE_NAME, {}, tmp_path / "runs")  # a visitor's run of the same name, later
        rows = store.list_runs()
    runs = [row["run_id"] for row in rows]
    assert showcase_run(rows) == demo
    assert pick_run(runs, {}, showcase_run(rows)) == demo
    assert pick_run(runs, {"run": visitor}, demo) == visitor  # a saved place still wins
    assert pick_run(runs, {"run": "deleted"}, demo) == demo
    assert pick_run(runs, {}) == runs[-1] and pick_run(runs, {}, None) == runs[-1]  # outside Spaces: the newest
    assert pick_run(runs, {}, "gone") == runs[-1] and pick_run([], {}, demo) is None


# -- 3. the finished welcome -----------------------------------------------------------------------------------------

def test_the_finished_welcome_points_to_the_gap_and_says_accuracy_may_not_move(demo_run):
    """The welcome promised "accuracy before and after", which one iteration at the Spaces sizes often leaves as it
    was (held-in 35% -> 35%) while the capability gap falls a little: it now points to the gap chart and says that
    accuracy on its 40 evaluation tasks may not move yet."""
    from studio.first_visit import welcome
    from studio.jobs import JobWorker

    path, run_id = demo_run
    with Store(path) as store:
        config = run_config(store, run_id)
        for iteration in (0, 1):
            for stage in stages_of(iteration, config):
                store.set_stage(run_id, iteration, stage, "running")
                store.set_stage(run_id, iteration, stage, "done", counts={"rows": 1})
        text, settled = welcome(store, JobWorker(store), run_id)
    assert settled and "accuracy before and after" not in text
    assert "the *capability gap* chart" in text and "is what moves first" in text, text
    assert "accuracy on 40 evaluation tasks may not move yet" in text, text
    assert "over 3 iterations and 5 seeds" in text


# -- 4. what a created run uses --------------------------------------------------------------------------------------

def test_the_created_line_says_what_the_run_trains_and_evaluates_on(tmp_path):
    """The line "Created run `demo-...` (4200 tasks)." counted the task file, while the run trains on 16 per
    iteration and evaluates 20 per split: the line says both, counted as the engine draws them."""
    with Store(tmp_path / "s.duckdb") as store:
        run_id, message = create_run_from_text(store, capped_text(tmp_path), spaces=True)
        total = store.count("tasks", run_id)
        assert message == (f"Created run `{run_id}` ({total} tasks in its data; each iteration trains on 16, "
                           "evaluation uses 40)."), message
        for settings in (("data.train_limit=0", "data.eval_limit=0"), ("data.train_limit=5000",)):
            config = load_config(None, list(settings), base=config_to_dict(run_config(store, run_id)))
            drawn = sample_tasks(store.get_tasks(run_id, split="train"), config.data.train_limit, 1)
            scored = pick_eval_tasks(store.get_tasks(run_id), config.evaluate.splits, config.data.eval_limit,
                                     config.data.eval_seed)
            assert tasks_used(store, run_id, config) == (total, len(drawn), len(scored)), settings
        assert tasks_used(store, run_id, config)[1] < total  # the train split, not every task


# -- 5. how many runs a Space keeps -----------------------------------------------------------------------------------

def test_a_space_refuses_a_new_run_once_it_keeps_the_most_runs(tmp_path):
    """Each visitor's run leaves its checkpoints on the Space's disk and nothing removed them: at ``MAX_SPACES_RUNS``
    *Create run* (and *Start a new run*, which creates through it) refuses, saying why; outside Spaces no cap."""
    assert spaces_runs_full(MAX_SPACES_RUNS - 1) is None and spaces_runs_full(MAX_SPACES_RUNS)
    with Store(tmp_path / "s.duckdb") as store:
        for n in range(MAX_SPACES_RUNS):
            store.create_run(f"visitor-{n}", {}, tmp_path / "runs")
        run_id, message = create_run_from_text(store, capped_text(tmp_path), spaces=True)
        assert run_id is None and message == (
            f"Not created: this Space already keeps {MAX_SPACES_RUNS} runs, the most it holds ({MAX_SPACES_RUNS}): "
            "browse the runs in the run picker, or run MOAT Studio on your own machine to make more."), message
        assert len(store.list_runs()) == MAX_SPACES_RUNS
        run_id, message = create_run_from_text(store, capped_text(tmp_path))  # not a Space: no cap
        assert run_id and message.startswith("Created run"), message


def test_on_spaces_a_session_without_a_saved_place_opens_on_the_demo_run(tmp_path):
    """The page's load (``/studio_load``): on a Space, the first-visit demo run the welcome points to, not the newest
    run (another visitor's); a saved place still wins, and outside Spaces the newest run is the default."""
    from engine.store import Store
    from studio.app import build_app
    from studio.first_visit import SHOWCASE_NAME
    from tests._store_world import app_fns

    with Store(tmp_path / "s.duckdb") as store:
        demo_run = store.create_run(SHOWCASE_NAME, {}, tmp_path / "runs")
        newest = store.create_run("a-visitors-run", {}, tmp_path / "runs")
        on_spaces = app_fns(build_app(store, "examples/demo.toml", spaces=True))["studio_load"].fn
        assert on_spaces({}, None)[0]["value"] == demo_run
        assert on_spaces({"run": newest}, None)[0]["value"] == newest
        assert app_fns(build_app(store, "examples/demo.toml"))["studio_load"].fn({}, None)[0]["value"] == newest
